from decimal import Decimal

from django.utils.translation import gettext_lazy as _

from marketplace.errors import DomainError


class LedgerLineInvalid(DomainError):
    """A line given to `ledger_post` that no ledger may hold (a programming error, refused early)."""

    code = "ledger_line_invalid"


class UnbalancedTransaction(DomainError):
    """Lines that do not sum to zero in each currency. Refused before anything is written."""

    code = "unbalanced_transaction"

    def __init__(self, *, totals: dict[str, Decimal]):
        super().__init__(_("The lines of a ledger transaction must sum to zero in each currency."))
        self.totals = totals


class InsufficientBalance(DomainError):
    """The movement would take a wallet below zero. Nothing was written."""

    code = "insufficient_balance"

    def __init__(self, *, wallet_id: int, balance: Decimal, change: Decimal, currency: str):
        super().__init__(_("Your balance is too low for this payment."))
        self.wallet_id = wallet_id
        self.balance = balance
        self.change = change
        self.currency = currency

    @property
    def shortfall(self) -> Decimal:
        return -(self.balance + self.change)


class AlreadyReversed(DomainError):
    code = "already_reversed"

    def __init__(self, *, transaction_id: int):
        super().__init__(_("This ledger transaction has already been reversed."))
        self.transaction_id = transaction_id


class RateMissing(DomainError):
    """No exchange rate is known for the currency (yet)."""

    code = "fx_rate_missing"

    def __init__(self, *, currency: str):
        super().__init__(
            _("No exchange rate is available for %(currency)s at the moment. Please try again later.")
            % {"currency": currency}
        )
        self.currency = currency


class VatCountryInvalid(DomainError):
    code = "vat_country_invalid"

    def __init__(self, *, country: str):
        super().__init__(_("Enter your billing country as a two-letter code, for example PT."))
        self.country = country


class TopUpRejected(DomainError):
    """A top-up that cannot be created or paid as asked. Nothing was written."""

    code = "top_up_rejected"


class CorrectionRefused(DomainError):
    """An operator's refund or balance adjustment that cannot be made. Codes: `amount_invalid`,
    `amount_not_positive`, `amount_zero`, `refund_exceeds_top_up`, `top_up_not_paid`,
    `balance_too_low`, `request_key_missing`. Nothing was written."""

    code = "correction_refused"


class PayoutRefused(DomainError):
    """A payout request or decision that cannot be made. Nothing was written."""

    code = "payout_refused"


class RatesFileInvalid(DomainError):
    """An uploaded rates file that cannot be read as one. Nothing was loaded."""

    code = "rates_file_invalid"


class WebhookRejected(Exception):
    """The request is not a genuine Stripe event: answer 400, change nothing. Not a domain error:
    no person reads it, only the log."""
