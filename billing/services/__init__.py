"""Every write of billing, one module per subject. Callers import from here.

- `top_ups`: top-ups, from their creation to their payment, and the receipt email
- `invoices`: invoices and credit notes, numbered without gaps
- `charging`: the hourly charge of rentals, one rental or the charging run
- `orders`: placing an order from the site and charging its first hour at once
- `first_hour`: that first hour, in the order's transaction, from the wallet row the order locked
- `refunds`: a server's failure, one rental's failure and an operator ending a rental, with the
  unused time refunded
- `agents`: the watch over host agents (servers unreachable, GPUs failed, logins not delivered)
- `corrections`: operators refunding a top-up and adjusting a balance
- `vat_refunds`: the VAT charged while VIES had not confirmed a VAT ID, refunded once it does
- `payouts`: sellers' payout requests and operators' decisions
- `fx`: operators' exchange rates, one by one or from a rates file
- `warnings`: the low-balance warning emails
- `reconciliation`: the daily check of the books against the ledger
- `stripe`: card top-ups with Stripe Checkout and its webhook

Posting to the ledger itself is `billing.ledger`; reads are `billing.selectors`.
"""

from .agents import AgentsChecked, agents_check, not_delivered_reversal_key, rental_not_delivered_end
from .charging import (
    ChargeOutcome,
    ChargeStatus,
    rental_charge_next_hour,
    rentals_charge_due,
)
from .corrections import (
    Adjustment,
    operator_amount_parse,
    top_up_refund,
    wallet_adjust,
)
from .fx import (
    RatesFile,
    exchange_rate_save,
    exchange_rates_load_by_operator,
    fx_rates_load,
    fx_rates_parse,
    fx_rates_read,
)
from .invoices import credit_note_issue, credit_note_issue_for_vat_refund, invoice_issue
from .orders import OrderPlaced, order_place
from .payouts import ledger_account_payouts_pending, payout_mark_paid, payout_reject, payout_request
from .reconciliation import ledger_reconcile
from .refunds import (
    RentalRefund,
    ServerFailure,
    operator_refund_idempotency_key,
    refund_idempotency_key,
    rental_end_by_operator,
    rental_fail,
    rental_refund_compute,
    server_failure_report,
)
from .stripe import stripe_checkout_start, stripe_webhook_handle
from .top_ups import (
    TopUpQuote,
    top_up_amount_parse,
    top_up_bank_transfer_credit,
    top_up_create,
    top_up_credit_bank_transfer,
    top_up_mark_failed,
    top_up_mark_paid,
    top_up_pay_sandbox,
    top_up_providers,
    top_up_quote,
    wallet_open,
)
from .vat_refunds import (
    top_up_vat_refund,
    top_ups_vat_refund_confirmed,
    vat_refund_idempotency_key,
)
from .warnings import low_balance_warnings_send

__all__ = [
    "Adjustment",
    "AgentsChecked",
    "agents_check",
    "not_delivered_reversal_key",
    "rental_fail",
    "rental_not_delivered_end",
    "ChargeOutcome",
    "ChargeStatus",
    "OrderPlaced",
    "RatesFile",
    "RentalRefund",
    "ServerFailure",
    "TopUpQuote",
    "credit_note_issue",
    "credit_note_issue_for_vat_refund",
    "exchange_rate_save",
    "exchange_rates_load_by_operator",
    "fx_rates_load",
    "fx_rates_parse",
    "fx_rates_read",
    "invoice_issue",
    "ledger_account_payouts_pending",
    "ledger_reconcile",
    "low_balance_warnings_send",
    "operator_amount_parse",
    "operator_refund_idempotency_key",
    "order_place",
    "payout_mark_paid",
    "payout_reject",
    "payout_request",
    "refund_idempotency_key",
    "rental_charge_next_hour",
    "rental_end_by_operator",
    "rental_refund_compute",
    "rentals_charge_due",
    "server_failure_report",
    "stripe_checkout_start",
    "stripe_webhook_handle",
    "top_up_amount_parse",
    "top_up_create",
    "top_up_bank_transfer_credit",
    "top_up_credit_bank_transfer",
    "top_up_mark_failed",
    "top_up_mark_paid",
    "top_up_pay_sandbox",
    "top_up_providers",
    "top_up_quote",
    "top_up_refund",
    "top_up_vat_refund",
    "top_ups_vat_refund_confirmed",
    "vat_refund_idempotency_key",
    "wallet_adjust",
    "wallet_open",
]
