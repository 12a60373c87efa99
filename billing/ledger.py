"""Every write to the ledger: accounts, postings and reversals.

`ledger_post` is the one function that moves money. It owns its database transaction
(`transaction.atomic`, a savepoint when the caller already has one), locks every wallet it
touches in ascending id order, refuses a wallet going below zero, and is idempotent on
`idempotency_key`: the same key again returns the first transaction and moves nothing, also
when two processes post it at the same moment. `ledger_post_many` writes many transactions at
once with the same checks, for the hourly charging run, whose batches post a thousand each: its
rows go in as plain lists (`marketplace.sql.rows_insert`), one statement per table, because
building a thousand transactions' entries as model instances cost more than writing them;
`ledger_post_locked` one new transaction of a wallet its caller holds locked, in one statement
(a rental's first hour, in the transaction of the order that made the rental).
"""

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from djmoney.money import Money

from accounts.models import User, Wallet
from marketplace.money import CURRENCIES, is_rounded
from marketplace.sql import ModelColumns, prepared_cursor, rows_insert
from sellers.models import Seller

from .exceptions import AlreadyReversed, InsufficientBalance, LedgerLineInvalid, UnbalancedTransaction
from .models import ExchangeRate, LedgerAccount, LedgerEntry, LedgerTransaction

Line = tuple[LedgerAccount, Decimal | Money]

SYSTEM_KINDS = frozenset(
    {
        LedgerAccount.Kind.PLATFORM_REVENUE,
        LedgerAccount.Kind.VAT_PAYABLE,
        LedgerAccount.Kind.PAYMENT_CLEARING,
        LedgerAccount.Kind.ADJUSTMENTS,
        LedgerAccount.Kind.FX,
        LedgerAccount.Kind.PAYOUTS_PENDING,
    }
)
KEY_MAX_LENGTH = LedgerTransaction._meta.get_field("idempotency_key").max_length
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,29}")


@dataclass(frozen=True)
class PostResult:
    transaction: LedgerTransaction
    created: bool


# --- accounts -------------------------------------------------------------------------------


_ACCOUNT_COLUMNS = ModelColumns(LedgerAccount, "a")


def _ledger_account_by_code(code: str) -> LedgerAccount | None:
    """The account of `code`, if any: one prepared statement (every charge asks for its seller's)."""
    with prepared_cursor() as cursor:
        cursor.execute(
            f"SELECT {_ACCOUNT_COLUMNS.select()} FROM {LedgerAccount._meta.db_table} a WHERE a.code = %s",  # noqa: S608
            [code],
        )
        row = cursor.fetchone()
    return _ACCOUNT_COLUMNS.instance(row) if row is not None else None


def _ledger_account_get_or_create(*, code: str, defaults: dict) -> LedgerAccount:
    """Race-safe: when another process creates the same account first, return theirs. An account
    that exists (nearly always) costs one query."""
    account = _ledger_account_by_code(code)
    if account is None:
        try:
            with transaction.atomic():
                account, _created = LedgerAccount.objects.get_or_create(code=code, defaults=defaults)
        except IntegrityError:
            account = LedgerAccount.objects.get(code=code)
    for field in ("kind", "currency"):
        if getattr(account, field) != defaults[field]:
            raise ValueError(f"Ledger account {code} exists with another {field}: {getattr(account, field)}.")
    return account


def _currency_check(currency: str) -> None:
    if currency not in CURRENCIES:
        raise ValueError(f"Unknown currency {currency!r}.")


def ledger_account_for_wallet(*, wallet: Wallet) -> LedgerAccount:
    """The ledger account of a buyer's wallet, in the wallet's currency."""
    if wallet.pk is None:
        raise ValueError("Save the wallet before giving it a ledger account.")
    return _ledger_account_get_or_create(
        code=f"wallet:{wallet.pk}",
        defaults={
            "kind": LedgerAccount.Kind.WALLET,
            "currency": wallet.currency,
            "wallet": wallet,
        },
    )


def ledger_account_for_seller(*, seller: Seller, currency: str) -> LedgerAccount:
    """What the platform owes a seller in one currency."""
    _currency_check(currency)
    return _ledger_account_get_or_create(
        code=f"seller_earnings:{seller.pk}:{currency}",
        defaults={
            "kind": LedgerAccount.Kind.SELLER_EARNINGS,
            "currency": currency,
            "seller": seller,
        },
    )


def ledger_account_system(*, kind: str, currency: str, provider: str = "") -> LedgerAccount:
    """One of the platform's own accounts: revenue, VAT payable, a provider's clearing account,
    adjustments or FX, in one currency. Clearing accounts need the provider ("stripe", "bank")."""
    _currency_check(currency)
    if kind not in SYSTEM_KINDS:
        raise ValueError(f"{kind!r} is not a system account kind.")
    kind = LedgerAccount.Kind(kind)
    if kind == LedgerAccount.Kind.PAYMENT_CLEARING:
        if not _PROVIDER.fullmatch(provider):
            raise ValueError(f"A clearing account needs a provider name such as 'stripe', not {provider!r}.")
        code = f"clearing:{provider}:{currency}"
    else:
        if provider:
            raise ValueError("Only clearing accounts have a provider.")
        code = f"{kind.value}:{currency}"
    return _ledger_account_get_or_create(
        code=code, defaults={"kind": kind, "currency": currency, "provider": provider}
    )


# --- posting --------------------------------------------------------------------------------


def _lines_checked(lines: Sequence[Line]) -> list[tuple[LedgerAccount, Decimal]]:
    """The lines as (account, Decimal), or an error: nothing here touches the database."""
    if len(lines) < 2:
        raise LedgerLineInvalid(_("A ledger transaction needs at least two lines."), code="too_few_lines")
    checked = []
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for account, amount in lines:
        if not isinstance(account, LedgerAccount) or account.pk is None:
            raise LedgerLineInvalid(_("Every line needs a saved ledger account."), code="account_unsaved")
        if isinstance(amount, Money):
            if str(amount.currency) != account.currency:
                raise LedgerLineInvalid(
                    _("A line's currency must be its account's currency."), code="currency_mismatch"
                )
            amount = amount.amount
        if not isinstance(amount, Decimal):
            raise LedgerLineInvalid(_("Ledger amounts are Decimal."), code="amount_not_decimal")
        if not is_rounded(amount, account.currency):
            raise LedgerLineInvalid(
                _("Ledger amounts are rounded to the currency's minor unit before posting."),
                code="amount_not_rounded",
            )
        if amount == 0:
            raise LedgerLineInvalid(_("A ledger line cannot be zero."), code="amount_zero")
        if account.kind == LedgerAccount.Kind.WALLET and account.wallet_id is None:
            raise LedgerLineInvalid(_("Every line needs a saved ledger account."), code="account_unsaved")
        totals[account.currency] += amount
        checked.append((account, amount))
    if any(total != 0 for total in totals.values()):
        raise UnbalancedTransaction(totals=dict(totals))
    return checked


@dataclass(frozen=True)
class _Locked:
    """The wallets a posting moves, locked, with the change of each; and the transactions already
    written under the posting's keys (then nothing was checked: the caller writes nothing)."""

    wallets: list[Wallet]
    changes: dict[int, Decimal]
    posted: list[LedgerTransaction]


def _wallets_lock_and_check(
    *, lines: Sequence[tuple[LedgerAccount, Decimal]], keys: Sequence[str]
) -> _Locked:
    """Lock every wallet the checked `lines` touch, in ascending id order, so that two postings
    touching the same wallets queue up instead of deadlocking; then look for transactions already
    written under `keys` (a second posting with the same key waits for the first one's lock and
    then finds its transaction here). When none is found, refuse a wallet going below zero
    (`InsufficientBalance`): the locked balances are current. Call it inside the posting's
    transaction, before anything is written."""
    changes: dict[int, Decimal] = defaultdict(Decimal)
    for account, amount in lines:
        if account.wallet_id is not None:
            changes[account.wallet_id] += amount
    wallets = list(Wallet.objects.select_for_update().filter(pk__in=changes).order_by("pk"))
    # Sorted here, not by the database: with ORDER BY id LIMIT, PostgreSQL walks the whole table
    # in id order looking for keys that are nearly never there (the charging run's profile at
    # 400,000 rentals), where the unique index on the key answers each at once.
    found = LedgerTransaction.objects.filter(idempotency_key__in=keys)
    posted = sorted(found, key=lambda posting: posting.pk)[:5]
    if not posted:
        for wallet in wallets:
            if wallet.balance + changes[wallet.pk] < 0:
                raise InsufficientBalance(
                    wallet_id=wallet.pk, balance=wallet.balance, change=changes[wallet.pk],
                    currency=wallet.currency,
                )
    return _Locked(wallets=wallets, changes=dict(changes), posted=posted)


def ledger_post(
    *,
    idempotency_key: str,
    kind: str,
    description: str,
    lines: Sequence[Line],
    created_by: User | None = None,
    fx_rate: ExchangeRate | None = None,
    reverses: LedgerTransaction | None = None,
) -> PostResult:
    """Write one balanced transaction and move the wallets it touches, once per key.

    Each line is (account, amount) with a signed Decimal already rounded to the currency's
    minor unit (or a `Money` in the account's currency). Raises `LedgerLineInvalid` or
    `UnbalancedTransaction` before touching the database, and `InsufficientBalance` (nothing
    written) when a wallet would go below zero.

    A key already used returns the first transaction with `created=False`, whatever the lines
    given this time: the key names the event, and an event moves money once.
    """
    if not idempotency_key or len(idempotency_key) > KEY_MAX_LENGTH:
        raise ValueError(f"An idempotency key has 1 to {KEY_MAX_LENGTH} characters.")
    if kind not in LedgerTransaction.Kind.values:
        raise ValueError(f"Unknown ledger transaction kind {kind!r}.")
    if (reverses is not None) != (kind == LedgerTransaction.Kind.REVERSAL):
        raise ValueError("A reversal says which transaction it reverses, and only a reversal does.")
    checked = _lines_checked(lines)

    with transaction.atomic():
        locked = _wallets_lock_and_check(lines=checked, keys=[idempotency_key])
        if locked.posted:
            return PostResult(transaction=locked.posted[0], created=False)

        now = timezone.now()
        try:
            # A savepoint: when a concurrent posting with the same key commits first, the
            # unique index makes this insert wait for it and then fail; return its transaction.
            with transaction.atomic():
                posted = LedgerTransaction.objects.create(
                    idempotency_key=idempotency_key,
                    kind=kind,
                    description=description,
                    created_at=now,
                    created_by=created_by,
                    fx_rate=fx_rate,
                    reverses=reverses,
                )
        except IntegrityError:
            existing = LedgerTransaction.objects.filter(idempotency_key=idempotency_key).first()
            if existing is not None:
                return PostResult(transaction=existing, created=False)
            if reverses is not None and LedgerTransaction.objects.filter(reverses=reverses).exists():
                raise AlreadyReversed(transaction_id=reverses.pk) from None
            raise

        LedgerEntry.objects.bulk_create(
            LedgerEntry(transaction=posted, account=account, amount=amount, currency=account.currency,
                        created_at=now)
            for account, amount in checked
        )
        for wallet in locked.wallets:
            Wallet.objects.filter(pk=wallet.pk).update(
                balance=F("balance") + locked.changes[wallet.pk], updated_at=now
            )
    return PostResult(transaction=posted, created=True)


@dataclass(frozen=True)
class Posting:
    """One transaction for `ledger_post_many`, with the arguments `ledger_post` would take."""

    idempotency_key: str
    kind: str
    description: str
    lines: Sequence[Line]
    fx_rate: ExchangeRate | None = None


class KeysAlreadyPosted(RuntimeError):
    """`ledger_post_many` was given keys of transactions written before."""


def ledger_post_many(*, postings: Sequence[Posting]) -> list[LedgerTransaction]:
    """Write many balanced transactions at once, all or none, with a constant number of statements;
    returns them in the order given.

    Each posting is checked as `ledger_post` checks it, before the database is touched; the
    wallets they touch are locked in ascending id order and one that would go below zero raises
    `InsufficientBalance` with nothing written. Unlike `ledger_post`, every key must be new: a key
    already used raises `KeysAlreadyPosted` (nothing written), for the caller knows what its keys
    mean and what to do then. No reversals here: `ledger_reverse` posts those one at a time.
    """
    checked = []
    kinds = set(LedgerTransaction.Kind.values) - {LedgerTransaction.Kind.REVERSAL}
    for posting in postings:
        if not posting.idempotency_key or len(posting.idempotency_key) > KEY_MAX_LENGTH:
            raise ValueError(f"An idempotency key has 1 to {KEY_MAX_LENGTH} characters.")
        if posting.kind not in kinds:
            raise ValueError(f"ledger_post_many does not post {posting.kind!r} transactions.")
        checked.append(_lines_checked(posting.lines))
    keys = [posting.idempotency_key for posting in postings]
    if len(set(keys)) != len(keys):
        raise ValueError("Each posting of ledger_post_many has a key of its own.")
    if not postings:
        return []

    with transaction.atomic():
        locked = _wallets_lock_and_check(lines=[line for lines in checked for line in lines], keys=keys)
        if locked.posted:
            taken = ", ".join(posted.idempotency_key for posted in locked.posted)
            raise KeysAlreadyPosted(f"Ledger keys already posted: {taken}")
        now = timezone.now()
        posted = _transactions_insert(postings=postings, now=now)
        _entries_insert(transactions=posted, lines=checked, now=now)
        _wallets_move(locked=locked, now=now)
    return posted


def _transactions_insert(*, postings: Sequence[Posting], now) -> list[LedgerTransaction]:
    """The postings' transaction rows in one statement; returned in the order given, each as the
    ORM would have read it back."""
    written = rows_insert(
        LedgerTransaction,
        columns={
            "idempotency_key": [posting.idempotency_key for posting in postings],
            "kind": [posting.kind for posting in postings],
            "description": [posting.description for posting in postings],
            "fx_rate_id": [posting.fx_rate.pk if posting.fx_rate else None for posting in postings],
        },
        constants={"created_at": now, "created_by_id": None, "reverses_id": None},
        returning=("idempotency_key", "id"),
    )
    ids = dict(written)
    posted = []
    for posting in postings:
        row = LedgerTransaction(
            id=ids[posting.idempotency_key], idempotency_key=posting.idempotency_key, kind=posting.kind,
            description=posting.description, created_at=now, fx_rate=posting.fx_rate,
        )
        row._state.adding, row._state.db = False, connection.alias
        posted.append(row)
    return posted


def _entries_insert(*, transactions: Sequence[LedgerTransaction], lines: Sequence[Sequence], now) -> None:
    """Every line of every transaction in one statement, from plain lists: no `LedgerEntry` is
    built (django-money's field proxy made that the costliest part of a charging batch)."""
    transaction_ids, account_ids, amounts, currencies = [], [], [], []
    for row, checked in zip(transactions, lines, strict=True):
        for account, amount in checked:
            transaction_ids.append(row.pk)
            account_ids.append(account.pk)
            amounts.append(amount)
            currencies.append(account.currency)
    rows_insert(
        LedgerEntry,
        columns={"transaction_id": transaction_ids, "account_id": account_ids, "amount": amounts,
                 "currency": currencies},
        constants={"created_at": now},
    )


def _wallets_move(*, locked: _Locked, now) -> None:
    """Add each change to its wallet's balance, in one statement. The wallets are locked: the
    balances read with them are current, and the database's CHECK still refuses one below zero."""
    if not locked.wallets:
        return
    if connection.vendor != "postgresql":
        for wallet in locked.wallets:
            wallet.balance += locked.changes[wallet.pk]
            wallet.updated_at = now
        Wallet.objects.bulk_update(locked.wallets, ["balance", "updated_at"])
        return
    with prepared_cursor() as cursor:
        cursor.execute(
            "UPDATE accounts_wallet AS wallet SET balance = wallet.balance + moved.change, updated_at = %s "
            "FROM unnest(%s::bigint[], %s::numeric[]) AS moved (id, change) WHERE wallet.id = moved.id",
            [now, [wallet.pk for wallet in locked.wallets],
             [locked.changes[wallet.pk] for wallet in locked.wallets]],
        )


_POST_NEW_POSTGRESQL = """
    WITH posted AS (
        INSERT INTO billing_ledgertransaction
            (idempotency_key, kind, description, created_at, created_by_id, reverses_id, fx_rate_id)
        VALUES (%s, %s, %s, %s, NULL, NULL, %s)
        RETURNING id
    ), entries AS (
        INSERT INTO billing_ledgerentry (transaction_id, account_id, currency, amount, created_at)
        SELECT posted.id, line.account_id, line.currency, line.amount, %s
        FROM posted, unnest(%s::bigint[], %s::varchar[], %s::numeric[]) AS line(account_id, currency, amount)
    ), moved AS (
        UPDATE accounts_wallet SET balance = balance + %s, updated_at = %s WHERE id = %s
    )
    SELECT id FROM posted
"""


def ledger_post_locked(*, posting: Posting, wallet: Wallet) -> LedgerTransaction:
    """Write one new balanced transaction that moves `wallet` alone, for a caller that holds the
    wallet's row lock in its transaction and read it there (a rental's first hour, charged in the
    transaction that matched it): one statement on PostgreSQL, the transaction, its entries and
    the wallet's balance, where `ledger_post_many` locks and reads again. Checked as
    `ledger_post_many` checks (`InsufficientBalance` against the locked balance, nothing written);
    a key used before fails on its unique constraint. Updates `wallet.balance`."""
    if posting.kind not in set(LedgerTransaction.Kind.values) - {LedgerTransaction.Kind.REVERSAL}:
        raise ValueError(f"ledger_post_locked does not post {posting.kind!r} transactions.")
    if not posting.idempotency_key or len(posting.idempotency_key) > KEY_MAX_LENGTH:
        raise ValueError(f"An idempotency key has 1 to {KEY_MAX_LENGTH} characters.")
    lines = _lines_checked(posting.lines)
    if {account.wallet_id for account, _amount in lines} - {None} != {wallet.pk}:
        raise ValueError("ledger_post_locked moves the one wallet it is given.")
    change = sum((amount for account, amount in lines if account.wallet_id == wallet.pk), Decimal(0))
    if wallet.balance + change < 0:
        raise InsufficientBalance(
            wallet_id=wallet.pk, balance=wallet.balance, change=change, currency=wallet.currency
        )
    if connection.vendor != "postgresql":
        posted = ledger_post_many(postings=[posting])[0]
    else:
        posted = LedgerTransaction(
            idempotency_key=posting.idempotency_key, kind=posting.kind, description=posting.description,
            created_at=timezone.now(), fx_rate=posting.fx_rate,
        )
        with prepared_cursor() as cursor:
            cursor.execute(_POST_NEW_POSTGRESQL, [
                posted.idempotency_key, posted.kind, posted.description, posted.created_at, posted.fx_rate_id,
                posted.created_at, [account.pk for account, _amount in lines],
                [account.currency for account, _amount in lines], [amount for _account, amount in lines],
                change, posted.created_at, wallet.pk,
            ])
            posted.pk = cursor.fetchone()[0]
        posted._state.adding = False
    wallet.balance += change
    return posted


def ledger_reverse(
    *, transaction: LedgerTransaction, idempotency_key: str, description: str, created_by: User | None = None
) -> PostResult:
    """Undo a transaction by posting its lines negated; the original is never touched.

    A transaction is reversed at most once (`AlreadyReversed` for a second key). A wallet that
    has spent the money meanwhile makes the reversal fail with `InsufficientBalance`.
    """
    original = transaction
    previous = LedgerTransaction.objects.filter(reverses=original).first()
    if previous is not None:
        if previous.idempotency_key == idempotency_key:
            return PostResult(transaction=previous, created=False)
        raise AlreadyReversed(transaction_id=original.pk)
    entries = list(original.entries.select_related("account").order_by("id"))
    return ledger_post(
        idempotency_key=idempotency_key,
        kind=LedgerTransaction.Kind.REVERSAL,
        description=description,
        lines=[(entry.account, -entry.amount.amount) for entry in entries],
        created_by=created_by,
        fx_rate=original.fx_rate,
        reverses=original,
    )
