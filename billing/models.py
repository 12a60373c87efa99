"""The double-entry ledger and the FX rates it converts with.

Every movement of money is one `LedgerTransaction` whose `LedgerEntry` rows sum to zero per
currency. Rows are written only by `billing.ledger.ledger_post` and never change afterwards:
on PostgreSQL the database itself refuses unbalanced transactions, transactions with fewer
than two entries, and any UPDATE or DELETE (migration 0002).

Amounts are signed: a positive amount makes the account's balance grow. A top-up of 50.00 EUR
with 23 % VAT is three entries: the wallet +50.00, VAT payable +11.50 and the payment
provider's clearing account -61.50.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext, pgettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _
from djmoney.models.fields import MoneyField

from accounts.models import Currency, Wallet
from marketplace import formatting
from marketplace.money import CURRENCIES
from sellers.models import Seller

HALF_CENT = Decimal("0.005")


def adds_up(total: str, *parts: str) -> Q:
    """`total` equals the sum of `parts`, to the cent. PostgreSQL compares numerics exactly;
    SQLite (the embedded default) adds decimals as floating point, hence the half-cent band,
    which no two amounts on the cent tick can fall inside unless they are equal."""
    summed = F(parts[0])
    for part in parts[1:]:
        summed = summed + F(part)
    return Q(**{f"{total}__gte": summed - HALF_CENT}) & Q(**{f"{total}__lte": summed + HALF_CENT})


class VatKind(models.TextChoices):
    """How VAT applies to a sale (see billing.vat.vat_treatment)."""

    STANDARD = "standard", _("VAT at the standard rate")
    REVERSE_CHARGE = "reverse_charge", _("Reverse charge")
    OUTSIDE_SCOPE = "outside_scope", _("Outside the scope of EU VAT")


class ExchangeRate(models.Model):
    """How many units of `currency` one US dollar buys from `valid_from` on.

    The current rate of a currency is its newest row with `valid_from` in the past. Rows are
    added, not overwritten: a correction is a new row, and every conversion keeps the row it
    used (`LedgerTransaction.fx_rate`). USD -> USD is 1 and needs no row.
    """

    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    rate = models.DecimalField(_("units per US dollar"), max_digits=18, decimal_places=8)
    valid_from = models.DateTimeField(_("valid from"))
    source = models.CharField(_("source"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("currency", "-valid_from", "-id")
        get_latest_by = "valid_from"
        verbose_name = _("exchange rate")
        verbose_name_plural = _("exchange rates")
        constraints = [
            models.CheckConstraint(condition=Q(rate__gt=0), name="billing_exchangerate_rate_positive"),
            models.CheckConstraint(
                condition=Q(currency__in=CURRENCIES), name="billing_exchangerate_currency_known"
            ),
            models.CheckConstraint(
                condition=~Q(currency="USD") | Q(rate=1), name="billing_exchangerate_usd_is_one"
            ),
            models.UniqueConstraint(
                fields=("currency", "valid_from", "rate"), name="billing_exchangerate_unique"
            ),
        ]
        indexes = [
            models.Index(fields=("currency", "-valid_from"), name="billing_fx_currency_valid_idx"),
        ]

    def __str__(self) -> str:
        return gettext("1 USD = %(rate)s %(currency)s from %(valid_from)s") % {
            "rate": formatting.number(self.rate.normalize()), "currency": self.currency,
            "valid_from": formatting.datetime_zone(self.valid_from),
        }


class LedgerAccount(models.Model):
    """One account of the ledger, in one currency. Its balance is the sum of its entries."""

    class Kind(models.TextChoices):
        WALLET = "wallet", _("Buyer wallet")
        SELLER_EARNINGS = "seller_earnings", _("Seller earnings")
        PLATFORM_REVENUE = "platform_revenue", _("Platform revenue")
        VAT_PAYABLE = "vat_payable", _("VAT payable")
        PAYMENT_CLEARING = "payment_clearing", _("Payment clearing")
        ADJUSTMENTS = "adjustments", _("Adjustments")
        FX = "fx", _("Currency exchange")
        PAYOUTS_PENDING = "payouts_pending", _("Payouts pending")

    code = models.CharField(_("code"), max_length=100)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    wallet = models.OneToOneField(
        Wallet,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_account",
        verbose_name=_("wallet"),
    )
    seller = models.ForeignKey(
        Seller,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_accounts",
        verbose_name=_("seller"),
    )
    # The payment provider of a clearing account ("sandbox", "stripe", "bank"); blank otherwise.
    provider = models.CharField(_("payment provider"), max_length=30, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("code",)
        verbose_name = _("ledger account")
        verbose_name_plural = _("ledger accounts")
        constraints = [
            models.UniqueConstraint(fields=("code",), name="billing_ledgeraccount_code_unique"),
            models.CheckConstraint(
                condition=Q(currency__in=CURRENCIES), name="billing_ledgeraccount_currency_known"
            ),
            models.CheckConstraint(
                condition=(Q(kind="wallet") & Q(wallet__isnull=False))
                | (~Q(kind="wallet") & Q(wallet__isnull=True)),
                name="billing_ledgeraccount_wallet_iff_wallet_kind",
            ),
            models.CheckConstraint(
                condition=(Q(kind="seller_earnings") & Q(seller__isnull=False))
                | (~Q(kind="seller_earnings") & Q(seller__isnull=True)),
                name="billing_ledgeraccount_seller_iff_earnings_kind",
            ),
            models.CheckConstraint(
                condition=(Q(kind="payment_clearing") & ~Q(provider=""))
                | (~Q(kind="payment_clearing") & Q(provider="")),
                name="billing_ledgeraccount_provider_iff_clearing_kind",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        """What the account is, in the active language, from what it belongs to (not stored: a
        stored name would stay in the language that was active when the account was opened). A
        wallet's account reads its owner's email, so show them with `wallet__user` selected."""
        currency = self.currency
        if self.kind == self.Kind.WALLET:
            owner = self.wallet.user.email
            return gettext("Wallet of %(owner)s (%(currency)s)") % {"owner": owner, "currency": currency}
        if self.kind == self.Kind.SELLER_EARNINGS:
            seller = self.seller.name
            return gettext("Earnings of %(seller)s (%(currency)s)") % {"seller": seller, "currency": currency}
        if self.kind == self.Kind.PAYMENT_CLEARING:
            known = self.provider in PaymentProvider.values
            provider = PaymentProvider(self.provider).label if known else self.provider
            return gettext("Payment clearing: %(provider)s (%(currency)s)") % {
                "provider": provider, "currency": currency,
            }
        return pgettext("ledger account: its kind, then its currency", "%(kind)s (%(currency)s)") % {
            "kind": self.get_kind_display(), "currency": currency,
        }


class LedgerTransaction(models.Model):
    """One movement of money: its entries sum to zero per currency. Never edited, never deleted."""

    class Kind(models.TextChoices):
        TOP_UP = "top_up", _("Top-up")
        CHARGE = "charge", _("Charge")
        REFUND = "refund", _("Refund")
        PAYOUT = "payout", _("Payout")
        ADJUSTMENT = "adjustment", _("Adjustment")
        FX = "fx", _("Currency exchange")
        REVERSAL = "reversal", _("Reversal")

    # Who asked for the movement, once: a provider's event id, "charge:<rental>:<hour>", ...
    idempotency_key = models.CharField(_("idempotency key"), max_length=200)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    description = models.CharField(_("description"), max_length=300, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_transactions_created",
        verbose_name=_("created by"),
    )
    reverses = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="reversals",
        verbose_name=_("reverses"),
    )
    # The rate used when the amounts were converted from USD.
    fx_rate = models.ForeignKey(
        ExchangeRate,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_transactions",
        verbose_name=_("exchange rate"),
    )

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("ledger transaction")
        verbose_name_plural = _("ledger transactions")
        permissions = [
            ("move_money", _("Can move money: credit, refund, adjust balances, pay out, end rentals")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=("idempotency_key",), name="billing_ledgertransaction_idempotency_key_unique"
            ),
            # A transaction is reversed at most once.
            models.UniqueConstraint(fields=("reverses",), name="billing_ledgertransaction_reversed_once"),
            models.CheckConstraint(
                condition=Q(reverses__isnull=True) | Q(kind="reversal"),
                name="billing_ledgertransaction_reverses_only_reversal",
            ),
            models.CheckConstraint(
                condition=~Q(idempotency_key=""), name="billing_ledgertransaction_idempotency_key_set"
            ),
        ]

    def __str__(self) -> str:
        return gettext("Transaction #%(number)s: %(kind)s (%(key)s)") % {
            "number": self.pk, "kind": self.get_kind_display(), "key": self.idempotency_key,
        }


class LedgerEntry(models.Model):
    """One signed line of a transaction on one account.

    `amount` is django-money's MoneyField with its currency column named `currency`: two plain
    columns, `amount numeric(14, 2)` and `currency varchar(3)`, which the PostgreSQL triggers and
    `Sum("amount")` read as exact decimals. In Python `entry.amount` is a `Money`; its `.amount`
    is the Decimal.
    """

    transaction = models.ForeignKey(
        LedgerTransaction, on_delete=models.PROTECT, related_name="entries", verbose_name=_("transaction")
    )
    account = models.ForeignKey(
        LedgerAccount, on_delete=models.PROTECT, related_name="entries", verbose_name=_("account")
    )
    amount = MoneyField(
        _("amount"),
        max_digits=14,
        decimal_places=2,
        default_currency=None,
        currency_choices=Currency.choices,
        currency_field_name="currency",
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ("transaction", "id")
        verbose_name = _("ledger entry")
        verbose_name_plural = _("ledger entries")
        constraints = [
            models.CheckConstraint(condition=~Q(amount=0), name="billing_ledgerentry_amount_not_zero"),
            models.CheckConstraint(
                condition=Q(currency__in=CURRENCIES), name="billing_ledgerentry_currency_known"
            ),
        ]
        indexes = [
            models.Index(fields=("account", "created_at"), name="billing_entry_account_time_idx"),
        ]

    def __str__(self) -> str:
        return gettext("%(account)s: %(amount)s") % {
            "account": self.account,
            "amount": formatting.money_signed(self.amount.amount, self.currency),
        }


class PaymentProvider(models.TextChoices):
    SANDBOX = "sandbox", _("Test payment (sandbox)")
    STRIPE = "stripe", _("Card (Stripe)")
    BANK = "bank", _("Bank transfer")


# The labels of a status carry a context naming what they qualify, so that French and Portuguese
# can agree with its gender and number (a bid "Annulée", a top-up "Annulé").
class TopUpStatus(models.TextChoices):
    PENDING = "pending", pgettext_lazy("top-up status", "Awaiting payment")
    PAID = "paid", pgettext_lazy("top-up status", "Paid")
    FAILED = "failed", pgettext_lazy("top-up status", "Payment failed")
    CANCELLED = "cancelled", pgettext_lazy("top-up status", "Cancelled")


class TopUp(models.Model):
    """Money a buyer loads into their wallet. `amount` is credited; VAT is added on top."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="top_ups",
        verbose_name=_("user"),
    )
    currency = models.CharField(_("currency"), max_length=3)
    amount = models.DecimalField(_("amount credited"), max_digits=12, decimal_places=2)
    vat_kind = models.CharField(_("VAT treatment"), max_length=16, choices=VatKind.choices)
    vat_rate = models.DecimalField(_("VAT rate (%)"), max_digits=5, decimal_places=2)
    vat_amount = models.DecimalField(_("VAT"), max_digits=12, decimal_places=2)
    total = models.DecimalField(_("total to pay"), max_digits=12, decimal_places=2)
    billing_country = models.CharField(_("billing country"), max_length=2)
    # Why VAT was charged to a business of another member state: VIES had not confirmed this VAT
    # ID yet (no answer, the service down, an expired answer). Once it does, the VAT is refunded
    # (TopUpVatRefund). Blank for every other top-up.
    unconfirmed_vat_id = models.CharField(_("VAT ID awaiting VIES"), max_length=20, blank=True)
    provider = models.CharField(_("payment method"), max_length=10, choices=PaymentProvider.choices)
    status = models.CharField(
        _("status"), max_length=10, choices=TopUpStatus.choices, default=TopUpStatus.PENDING
    )
    # Quoted on bank transfers; unique so an operator can credit a transfer by it.
    reference = models.CharField(_("payment reference"), max_length=20, unique=True)
    # One top-up per submitted form, however often the form is sent.
    form_token = models.UUIDField(_("form token"))
    provider_session_id = models.CharField(_("provider session"), max_length=255, blank=True)
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, null=True, blank=True, related_name="top_up",
        verbose_name=_("ledger transaction"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    paid_at = models.DateTimeField(_("paid at"), null=True, blank=True)
    credited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
        related_name="+", verbose_name=_("credited by"),
    )
    # A bank transfer as the operator found it on the statement: the bank's own reference and, when
    # the buyer sent another sum than the one asked, the quote's figures (`amount`, `vat_amount` and
    # `total` are then what was received, VAT worked out again). Blank/None for other top-ups.
    bank_reference = models.CharField(_("bank reference"), max_length=100, blank=True)
    expected_amount = models.DecimalField(
        _("amount quoted"), max_digits=12, decimal_places=2, null=True, blank=True
    )
    expected_vat_amount = models.DecimalField(
        _("VAT quoted"), max_digits=12, decimal_places=2, null=True, blank=True
    )
    expected_total = models.DecimalField(
        _("total quoted"), max_digits=12, decimal_places=2, null=True, blank=True
    )

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("top-up")
        verbose_name_plural = _("top-ups")
        constraints = [
            models.UniqueConstraint(fields=("user", "form_token"), name="billing_topup_one_per_form"),
            models.UniqueConstraint(
                fields=("provider", "provider_session_id"), condition=~Q(provider_session_id=""),
                name="billing_topup_session_unique",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="billing_topup_amount_positive"),
            models.CheckConstraint(condition=Q(vat_amount__gte=0), name="billing_topup_vat_not_negative"),
            models.CheckConstraint(
                condition=adds_up("total", "amount", "vat_amount"), name="billing_topup_total_adds_up"
            ),
            models.CheckConstraint(
                condition=Q(currency__in=["EUR", "USD", "GBP"]), name="billing_topup_currency_known"
            ),
            models.CheckConstraint(
                condition=~Q(status="paid") | Q(ledger_transaction__isnull=False),
                name="billing_topup_paid_is_posted",
            ),
            models.CheckConstraint(
                condition=(Q(expected_total__isnull=True) & Q(expected_amount__isnull=True)
                           & Q(expected_vat_amount__isnull=True))
                | adds_up("expected_total", "expected_amount", "expected_vat_amount"),
                name="billing_topup_expected_adds_up",
            ),
        ]

    def __str__(self) -> str:
        return gettext("Top-up %(reference)s of %(amount)s (%(status)s)") % {
            "reference": self.reference, "amount": formatting.money(self.amount, self.currency),
            "status": self.get_status_display(),
        }

    @property
    def received_difference(self) -> Decimal | None:
        """What the bank transfer brought beyond (positive) or short of (negative) the total quoted;
        None unless an operator credited a different sum."""
        if self.expected_total is None:
            return None
        return self.total - self.expected_total


class TopUpRefund(models.Model):
    """Part or all of a paid top-up given back by an operator: the top-up's ledger lines reversed in
    proportion (wallet, VAT, payment clearing). Refunds of one top-up never exceed its amount."""

    top_up = models.ForeignKey(
        TopUp, on_delete=models.PROTECT, related_name="refunds", verbose_name=_("top-up")
    )
    currency = models.CharField(_("currency"), max_length=3)
    amount = models.DecimalField(_("amount taken from the wallet"), max_digits=12, decimal_places=2)
    vat_amount = models.DecimalField(_("VAT"), max_digits=12, decimal_places=2)
    total = models.DecimalField(_("total refunded"), max_digits=12, decimal_places=2)
    reason = models.TextField(_("reason"))
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, related_name="top_up_refund",
        verbose_name=_("ledger transaction"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("refunded by")
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("top-up refund")
        verbose_name_plural = _("top-up refunds")
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="billing_topuprefund_amount_positive"),
            models.CheckConstraint(
                condition=Q(vat_amount__gte=0), name="billing_topuprefund_vat_not_negative"
            ),
            models.CheckConstraint(
                condition=adds_up("total", "amount", "vat_amount"), name="billing_topuprefund_total_adds_up"
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="billing_topuprefund_has_reason"),
        ]

    def __str__(self) -> str:
        return gettext("Refund of %(amount)s on top-up %(reference)s") % {
            "amount": formatting.money(self.amount, self.currency), "reference": self.top_up.reference,
        }


class TopUpVatRefund(models.Model):
    """The VAT of a top-up given back once VIES confirmed the VAT ID it had not confirmed when the
    top-up was made (`TopUp.unconfirmed_vat_id`): the supply is reverse-charged after all, so the VAT
    still held on it moves from VAT payable to the buyer's wallet, with a credit note. At most one
    per top-up."""

    top_up = models.OneToOneField(
        TopUp, on_delete=models.PROTECT, related_name="vat_refund", verbose_name=_("top-up")
    )
    currency = models.CharField(_("currency"), max_length=3)
    vat_amount = models.DecimalField(_("VAT refunded"), max_digits=12, decimal_places=2)
    vat_id = models.CharField(_("VAT ID confirmed"), max_length=20)
    confirmed_at = models.DateTimeField(_("confirmed by VIES at"))
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, related_name="top_up_vat_refund",
        verbose_name=_("ledger transaction"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("VAT refund")
        verbose_name_plural = _("VAT refunds")
        constraints = [
            models.CheckConstraint(condition=Q(vat_amount__gt=0), name="billing_topupvatrefund_vat_positive"),
        ]

    def __str__(self) -> str:
        return gettext("VAT refund of %(amount)s on top-up %(reference)s") % {
            "amount": formatting.money(self.vat_amount, self.currency), "reference": self.top_up.reference,
        }


class InvoiceSequence(models.Model):
    """The last invoice number of a year, locked while the next one is issued: no gaps."""

    year = models.PositiveSmallIntegerField(_("year"), primary_key=True)
    last_number = models.PositiveIntegerField(_("last number"), default=0)

    class Meta:
        verbose_name = _("invoice sequence")
        verbose_name_plural = _("invoice sequences")

    def __str__(self) -> str:
        # The year and the number are identifiers: no grouping separator (not "2,026").
        return gettext("Invoices of %(year)s: last number %(number)s") % {
            "year": self.year, "number": self.last_number,
        }


class TaxDocument(models.Model):
    """What an invoice and a credit note both state: their number in a gapless yearly series, the
    parties as they were when it was issued, and the amounts with their VAT."""

    number = models.CharField(_("number"), max_length=24, unique=True)
    year = models.PositiveSmallIntegerField(_("year"))
    sequence = models.PositiveIntegerField(_("sequence"))
    issued_at = models.DateTimeField(_("issued at"))
    seller = models.JSONField(_("issuer details"))
    buyer = models.JSONField(_("buyer details"))
    currency = models.CharField(_("currency"), max_length=3)
    net = models.DecimalField(_("amount excluding VAT"), max_digits=12, decimal_places=2)
    vat_kind = models.CharField(_("VAT treatment"), max_length=16, choices=VatKind.choices)
    vat_rate = models.DecimalField(_("VAT rate (%)"), max_digits=5, decimal_places=2)
    vat_amount = models.DecimalField(_("VAT"), max_digits=12, decimal_places=2)
    total = models.DecimalField(_("total"), max_digits=12, decimal_places=2)

    class Meta:
        abstract = True
        ordering = ("-year", "-sequence")

    def __str__(self) -> str:
        return self.number


class Invoice(TaxDocument):
    top_up = models.OneToOneField(
        TopUp, on_delete=models.PROTECT, related_name="invoice", verbose_name=_("top-up")
    )

    class Meta(TaxDocument.Meta):
        verbose_name = _("invoice")
        verbose_name_plural = _("invoices")
        constraints = [
            models.UniqueConstraint(fields=("year", "sequence"), name="billing_invoice_year_sequence_unique"),
            models.CheckConstraint(
                condition=adds_up("total", "net", "vat_amount"), name="billing_invoice_total_adds_up"
            ),
        ]


class CreditNoteSequence(models.Model):
    """The last credit note number of a year: credit notes are numbered in their own gapless series."""

    year = models.PositiveSmallIntegerField(_("year"), primary_key=True)
    last_number = models.PositiveIntegerField(_("last number"), default=0)

    class Meta:
        verbose_name = _("credit note sequence")
        verbose_name_plural = _("credit note sequences")

    def __str__(self) -> str:
        return gettext("Credit notes of %(year)s: last number %(number)s") % {
            "year": self.year, "number": self.last_number,
        }


class CreditNote(TaxDocument):
    """The document of a top-up refund (`refund`): it corrects the top-up's invoice by the amount
    refunded and the VAT on it (positive figures, credited to the buyer); or of a VAT refund
    (`vat_refund`): the VAT alone, the net being zero. Numbered EXC-CN-<year>-<6 digits>."""

    invoice = models.ForeignKey(
        Invoice, on_delete=models.PROTECT, related_name="credit_notes", verbose_name=_("invoice corrected")
    )
    refund = models.OneToOneField(
        TopUpRefund, on_delete=models.PROTECT, null=True, blank=True, related_name="credit_note",
        verbose_name=_("top-up refund"),
    )
    vat_refund = models.OneToOneField(
        TopUpVatRefund, on_delete=models.PROTECT, null=True, blank=True, related_name="credit_note",
        verbose_name=_("VAT refund"),
    )

    class Meta(TaxDocument.Meta):
        verbose_name = _("credit note")
        verbose_name_plural = _("credit notes")
        constraints = [
            models.UniqueConstraint(
                fields=("year", "sequence"), name="billing_creditnote_year_sequence_unique"
            ),
            models.CheckConstraint(
                condition=adds_up("total", "net", "vat_amount"), name="billing_creditnote_total_adds_up"
            ),
            models.CheckConstraint(
                condition=Q(refund__isnull=False, vat_refund__isnull=True)
                | Q(refund__isnull=True, vat_refund__isnull=False),
                name="billing_creditnote_one_refund",
            ),
            # A refund credits part of the net; a VAT refund the VAT alone.
            models.CheckConstraint(
                condition=Q(net__gt=0) | Q(vat_refund__isnull=False, net=0, vat_amount__gt=0),
                name="billing_creditnote_credits_something",
            ),
        ]


class ProviderEvent(models.Model):
    """Each event a payment provider sends, recorded once: a repeat delivery changes nothing."""

    provider = models.CharField(_("provider"), max_length=10, choices=PaymentProvider.choices)
    event_id = models.CharField(_("event id"), max_length=255)
    event_type = models.CharField(_("type"), max_length=100)
    payload = models.JSONField(_("payload"))
    received_at = models.DateTimeField(_("received at"), auto_now_add=True)

    class Meta:
        ordering = ("-received_at",)
        verbose_name = _("payment provider event")
        verbose_name_plural = _("payment provider events")
        constraints = [
            models.UniqueConstraint(fields=("provider", "event_id"), name="billing_provider_event_once"),
        ]

    def __str__(self) -> str:
        return gettext("%(provider)s: event %(type)s (%(id)s)") % {
            "provider": self.get_provider_display(), "type": self.event_type, "id": self.event_id,
        }


class RentalCharge(models.Model):
    """One hour of one rental, charged once: the buyer's wallet paid `amount` (its currency) for
    `cost_usd` = price x GPUs, of which the seller earns `seller_earnings_usd` and the platform
    keeps `fee_usd`. Written by `billing.services.charging.rental_charge_next_hour` only.

    The unique (rental, period_start) pair backs the ledger's idempotency key
    "rental:<id>:hour:<start>": an hour is never charged twice.
    """

    rental = models.ForeignKey(
        "exchange.Rental", on_delete=models.PROTECT, related_name="charges", verbose_name=_("rental")
    )
    period_start = models.DateTimeField(_("hour from"))
    period_end = models.DateTimeField(_("hour to"))
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, related_name="rental_charge",
        verbose_name=_("ledger transaction"),
    )
    cost_usd = models.DecimalField(_("cost (USD)"), max_digits=12, decimal_places=2)
    amount = models.DecimalField(_("amount charged"), max_digits=12, decimal_places=2)
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    # The rate the cost was converted at; none when the wallet is in US dollars.
    fx_rate = models.ForeignKey(
        ExchangeRate, on_delete=models.PROTECT, null=True, blank=True, related_name="rental_charges",
        verbose_name=_("exchange rate"),
    )
    seller_earnings_usd = models.DecimalField(_("seller earnings (USD)"), max_digits=12, decimal_places=2)
    fee_usd = models.DecimalField(_("platform fee (USD)"), max_digits=12, decimal_places=2)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ("rental", "period_start")
        verbose_name = _("rental charge")
        verbose_name_plural = _("rental charges")
        constraints = [
            models.UniqueConstraint(
                fields=("rental", "period_start"), name="billing_rentalcharge_one_per_hour"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="billing_rentalcharge_amount_positive"),
            models.CheckConstraint(
                condition=adds_up("cost_usd", "seller_earnings_usd", "fee_usd"),
                name="billing_rentalcharge_cost_splits",
            ),
            models.CheckConstraint(
                condition=Q(fee_usd__gte=0) & Q(seller_earnings_usd__gte=0),
                name="billing_rentalcharge_split_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="billing_rentalcharge_period_forward"
            ),
            models.CheckConstraint(
                condition=Q(currency__in=CURRENCIES), name="billing_rentalcharge_currency_known"
            ),
            models.CheckConstraint(
                condition=(Q(currency="USD") & Q(fx_rate__isnull=True))
                | (~Q(currency="USD") & Q(fx_rate__isnull=False)),
                name="billing_rentalcharge_rate_iff_converted",
            ),
        ]

    def __str__(self) -> str:
        return gettext("Rental #%(number)s, hour from %(start)s: %(amount)s") % {
            "number": self.rental_id, "start": formatting.datetime_zone(self.period_start),
            "amount": formatting.money(self.amount, self.currency),
        }


class ReconciliationRun(models.Model):
    """One check of the books (`billing.services.reconciliation.ledger_reconcile`, daily): each wallet's
    cached balance against its ledger entries, each ledger transaction balanced per currency,
    each running rental paid through the current hour. `problems` lists every difference found
    (empty when `ok`); a run that never finished has no `finished_at`."""

    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    ok = models.BooleanField(_("books exact"), default=False)
    problems = models.JSONField(_("problems"), default=list, blank=True)

    class Meta:
        ordering = ("-started_at", "-id")
        get_latest_by = "started_at"
        verbose_name = _("ledger reconciliation")
        verbose_name_plural = _("ledger reconciliations")

    def __str__(self) -> str:
        values = {"start": formatting.datetime_zone(self.started_at)}
        if self.ok:
            return gettext("Reconciliation of %(start)s: the books are exact") % values
        return gettext("Reconciliation of %(start)s: problems found") % values


class PayoutStatus(models.TextChoices):
    REQUESTED = "requested", pgettext_lazy("payout status", "Requested")
    PAID = "paid", pgettext_lazy("payout status", "Paid")
    REJECTED = "rejected", pgettext_lazy("payout status", "Rejected")


class Payout(models.Model):
    """A seller's request to be paid `amount` US dollars of its earnings (`billing.services.payouts`).

    The request reserves the amount at once (`reservation`: seller earnings -> payouts pending);
    an operator then marks it paid (`settlement`: payouts pending -> the bank's clearing account)
    or rejects it with a reason (`settlement`: payouts pending -> back to the seller's earnings).
    `reservation` is set in the same database transaction that creates the row (the ledger key
    names the payout's id, so the row comes first)."""

    seller = models.ForeignKey(
        Seller, on_delete=models.PROTECT, related_name="payouts", verbose_name=_("seller")
    )
    amount = models.DecimalField(_("amount (USD)"), max_digits=12, decimal_places=2)
    currency = models.CharField(_("currency"), max_length=3, default="USD", editable=False)
    status = models.CharField(
        _("status"), max_length=10, choices=PayoutStatus.choices, default=PayoutStatus.REQUESTED
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("requested by")
    )
    requested_at = models.DateTimeField(_("requested at"), default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("decided by"),
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    rejection_reason = models.TextField(_("reason for rejection"), blank=True)
    # The reference of the bank transfer that paid the seller (required to mark it paid).
    bank_reference = models.CharField(_("bank transfer reference"), max_length=100, blank=True)
    reservation = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, null=True, blank=True, related_name="payout_reserved",
        verbose_name=_("reservation"),
    )
    settlement = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, null=True, blank=True, related_name="payout_settled",
        verbose_name=_("payment or release"),
    )

    class Meta:
        ordering = ("-requested_at", "-id")
        verbose_name = _("payout")
        verbose_name_plural = _("payouts")
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="billing_payout_amount_positive"),
            models.CheckConstraint(condition=Q(currency="USD"), name="billing_payout_currency_usd"),
            models.CheckConstraint(
                condition=~Q(status="rejected") | ~Q(rejection_reason=""),
                name="billing_payout_rejected_has_reason",
            ),
            models.CheckConstraint(
                condition=(Q(status="requested") & Q(decided_by__isnull=True) & Q(decided_at__isnull=True))
                | (~Q(status="requested") & Q(decided_by__isnull=False) & Q(decided_at__isnull=False)),
                name="billing_payout_decided_has_who_and_when",
            ),
            models.CheckConstraint(
                condition=Q(status="requested") | Q(settlement__isnull=False),
                name="billing_payout_decided_is_posted",
            ),
        ]

    def __str__(self) -> str:
        return gettext("Payout #%(number)s · %(amount)s (%(status)s)") % {
            "number": self.pk, "amount": formatting.money(self.amount, self.currency),
            "status": self.get_status_display(),
        }
