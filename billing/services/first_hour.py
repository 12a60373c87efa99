"""The first hour of a buyer's own order, charged in the transaction that matched it.

`order_place` locks the buyer's wallet first (`payer_lock`: the wallet, the current rate of its
currency and the ledger accounts a charge posts to, in one statement), the exchange checks the
first hour against that row while it validates and matches the bid, and `rental_charge_first_hour`
then charges the new rental from the same rows: nothing is read twice and nothing read back. The
money rules stay in `charging._next_hour_charge`, which decides this hour as it decides every other.

Lock order, the charging run's (see `billing.services.charging`): the wallet is locked before the
exchange takes the market lock of the GPU model; the rental is the order's own, new row.
"""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.utils import timezone

from accounts.models import Wallet
from exchange.models import Rental
from exchange.services import rentals_mark_paid
from marketplace.sql import ModelColumns, instance_insert, prepared_cursor, row_split

from ..ledger import ledger_account_for_seller, ledger_post_locked
from ..models import ExchangeRate, LedgerAccount
from ..selectors import wallet_covers_first_hour
from ..selectors.fx import BASE_CURRENCY
from .charging import ChargeOutcome, _Books, _ending_apply, _next_hour_charge, _now

_WALLET = ModelColumns(Wallet, "w")
_RATE = ModelColumns(ExchangeRate, "r")
_ACCOUNT = ModelColumns(LedgerAccount, "a")

# The wallet (locked on PostgreSQL), its currency's current rate and the ledger accounts a first
# hour posts to (the wallet's, the FX accounts of its currency and of dollars, the platform's
# revenue): one row per account found, the wallet and the rate repeated on each.
_PAYER = f"""
    SELECT {_WALLET.select()}, {_RATE.select()}, {_ACCOUNT.select()}
    FROM accounts_wallet w
    LEFT JOIN billing_exchangerate r ON r.id = (
        SELECT newest.id FROM billing_exchangerate newest
        WHERE newest.currency = w.currency AND newest.valid_from <= %s
        ORDER BY newest.valid_from DESC, newest.id DESC LIMIT 1
    )
    LEFT JOIN billing_ledgeraccount a
        ON a.wallet_id = w.id OR a.code = %s || w.currency OR a.code IN (%s, %s)
    WHERE w.user_id = %s
"""  # noqa: S608 (columns from the models, values as parameters)


@dataclass
class Payer:
    """A buyer's wallet, locked in the order's transaction, with what charging its first hour needs:
    the current rate of its currency and the ledger accounts found. `wallet` is None when the buyer
    has none (then nothing is payable)."""

    wallet: Wallet | None
    rates: dict[str, ExchangeRate] = field(default_factory=dict)
    accounts: list[LedgerAccount] = field(default_factory=list)

    def payable(self, *, price_usd: Decimal, gpus: int) -> bool:
        """Whether the locked balance covers the first hour (`exchange.payments`' check, without a
        query)."""
        return wallet_covers_first_hour(wallet=self.wallet, price_usd=price_usd, gpus=gpus, rates=self.rates)


def payer_lock(*, buyer_id: int) -> Payer:
    """Lock the buyer's wallet and read what its first hour needs, in one statement (see `Payer`).
    Call it inside the order's transaction, before the market lock."""
    Kind = LedgerAccount.Kind
    sql = _PAYER + (" FOR UPDATE OF w" if connection.features.has_select_for_update_of else "")
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with prepared_cursor() as cursor:
        cursor.execute(sql, [
            now, f"{Kind.FX.value}:", f"{Kind.FX.value}:{BASE_CURRENCY}",
            f"{Kind.PLATFORM_REVENUE.value}:{BASE_CURRENCY}", buyer_id,
        ])
        rows = [row_split(row, [_WALLET, _RATE, _ACCOUNT]) for row in cursor.fetchall()]
    if not rows:
        return Payer(wallet=None)
    wallet, rate, _account = rows[0]
    return Payer(
        wallet=wallet, rates={rate.currency: rate} if rate is not None else {},
        accounts=[account for _wallet, _rate, account in rows if account is not None],
    )


class _FirstHourBooks(_Books):
    """The books of a new rental's first hour, made from the order's `Payer` without a query: the
    rental was made in this transaction, so no hour of it was charged, and its buyer's wallet was
    locked before the match. Written with one ledger statement (`ledger_post_locked`)."""

    def __init__(self, *, rental: Rental, payer: Payer):  # not `_Books.__init__`, which reads the rows
        # What the batch path reads as two annotated columns, from the instances the match holds.
        rental.server_seller_id, rental.gpu_model_name = rental.server.seller_id, rental.gpu_model.name
        self.rentals = {rental.pk: rental}
        wallet = payer.wallet
        self.wallets = {wallet.user_id: wallet} if wallet is not None else {}
        self.balances = {wallet.pk: wallet.balance} if wallet is not None else {}
        self.rates = payer.rates
        self._wallet_accounts, self._seller_accounts, self._system_accounts = {}, {}, {}
        for account in payer.accounts:
            if account.wallet_id is not None:
                self._wallet_accounts[account.wallet_id] = account
            else:
                self._system_accounts[account.kind, account.currency] = account
        self.payer = payer
        self.charged = {}
        self.charges = []

    def seller_account(self, seller_id: int) -> LedgerAccount:
        if seller_id not in self._seller_accounts:
            # The seller came with the offer the match read: no query for it.
            servers = (rental.server for rental in self.rentals.values())
            seller = next(server.seller for server in servers if server.seller_id == seller_id)
            account = ledger_account_for_seller(seller=seller, currency=BASE_CURRENCY)
            self._seller_accounts[seller_id] = account
        return self._seller_accounts[seller_id]

    def write(self) -> None:
        charges, self.charges = self.charges, []
        for charge in charges:
            posted = ledger_post_locked(posting=charge.posting, wallet=self.payer.wallet)
            rentals_mark_paid(hours={charge.rental.pk: 1}, savepoint=False)
            charge.row.ledger_transaction = posted
            charge.row.created_at = posted.created_at
            instance_insert(charge.row)


def rental_charge_first_hour(*, rental: Rental, payer: Payer, now: datetime | None = None) -> ChargeOutcome:
    """Charge the first hour of `rental`, which the buyer's own order has just made in the current
    transaction, from the order's `payer` (its wallet locked before the match). The same rules and
    outcomes as `rental_charge_next_hour`: a wallet that cannot pay ends the rental (payment failed)
    and writes the buyer's email; an unexpected error rolls back the whole order."""
    now = _now(now)
    books = _FirstHourBooks(rental=rental, payer=payer)
    outcome, ending = _next_hour_charge(books=books, rental_id=rental.pk, now=now)
    books.write()
    if ending is not None:
        _ending_apply(rental_id=rental.pk, ending=ending)
    return outcome
