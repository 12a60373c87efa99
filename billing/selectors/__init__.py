"""Every non-trivial read of billing, one module per subject. Callers import from here.

- `wallets`: a buyer's wallet, its movements, its runway, whether it covers a first hour
- `balances`: balances as the ledger holds them and the checks that the books sum up
- `top_ups`: top-ups, invoices and credit notes as their owner reads them
- `statements`: a buyer's monthly statement (page and CSV)
- `quotes`: what an order will cost before it is placed
- `rentals`: what rentals cost their buyers and earned their sellers
- `earnings`: a seller's earnings account and earnings per month
- `payouts`: a seller's payouts as the portal shows them
- `operations`: the operators' operations page
- `fx`: the current exchange rates and conversions from US dollars
"""

from .balances import ledger_account_balance, ledger_unbalanced_transactions, wallet_ledger_balance
from .earnings import (
    EarningsTotal,
    SellerEarnings,
    SellerEarningsEntry,
    SellerMonth,
    seller_earnings_by_month,
    seller_earnings_entries,
    seller_earnings_summary,
)
from .fx import BASE_CURRENCY, Conversion, fx_convert_from_usd, fx_rate_current, fx_rates_current
from .operations import CurrencyPosition, OperationsSummary, TradingWindow, operations_summary
from .payouts import (
    PendingPayouts,
    payout_available,
    payout_minimum,
    payouts_for_seller,
    seller_payouts_pending,
)
from .quotes import CostPreview, SpendPreview, order_cost_preview, order_spend_preview, wallet_price_convert
from .rentals import rental_costs, seller_revenue_by_rental
from .statements import (
    LineKind,
    RentalGroup,
    Statement,
    StatementLine,
    statement_csv,
    statement_for_user,
    wallet_statement,
)
from .top_ups import (
    CREDIT_NOTE,
    INVOICE,
    DocumentPlace,
    credit_note_get_for_user,
    invoice_get_for_user,
    tax_document_place,
    tax_documents_for_user,
    top_up_get_for_user,
)
from .wallets import (
    AccountOverview,
    EntryLine,
    Runway,
    account_overview,
    ledger_movement_description,
    rental_first_hour_payable,
    wallet_covers_first_hour,
    wallet_entries,
    wallet_for_user,
    wallet_movements,
    wallet_runway,
    wallets_runway,
)

__all__ = [
    "BASE_CURRENCY",
    "CREDIT_NOTE",
    "INVOICE",
    "DocumentPlace",
    "AccountOverview",
    "Conversion",
    "CostPreview",
    "CurrencyPosition",
    "EarningsTotal",
    "EntryLine",
    "LineKind",
    "OperationsSummary",
    "PendingPayouts",
    "RentalGroup",
    "Runway",
    "SellerEarnings",
    "SellerEarningsEntry",
    "SellerMonth",
    "Statement",
    "StatementLine",
    "TradingWindow",
    "account_overview",
    "credit_note_get_for_user",
    "fx_convert_from_usd",
    "fx_rate_current",
    "fx_rates_current",
    "invoice_get_for_user",
    "ledger_account_balance",
    "ledger_movement_description",
    "ledger_unbalanced_transactions",
    "operations_summary",
    "order_cost_preview",
    "order_spend_preview",
    "wallet_price_convert",
    "SpendPreview",
    "payout_available",
    "payout_minimum",
    "payouts_for_seller",
    "rental_costs",
    "rental_first_hour_payable",
    "seller_earnings_by_month",
    "seller_earnings_entries",
    "seller_earnings_summary",
    "seller_payouts_pending",
    "seller_revenue_by_rental",
    "statement_csv",
    "statement_for_user",
    "tax_document_place",
    "tax_documents_for_user",
    "top_up_get_for_user",
    "wallet_entries",
    "wallet_for_user",
    "wallet_ledger_balance",
    "wallet_movements",
    "wallet_runway",
    "wallet_statement",
    "wallet_covers_first_hour",
    "wallets_runway",
]
