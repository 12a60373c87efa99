"""PostgreSQL refuses, by itself, what the ledger service never writes.

- an unbalanced transaction: its entries must sum to zero per currency, checked at commit
  by a deferred constraint trigger (so rows inserted by hand with raw SQL are refused too);
- a transaction with fewer than two entries, checked at commit as well;
- an entry whose currency is not its account's currency;
- any UPDATE or DELETE of an entry or a transaction: the ledger is append-only (TRUNCATE,
  which the test runner uses to empty tables, is not a row operation and still works).

A negative wallet is refused by the CHECK on accounts_wallet.balance (accounts migrations).
On SQLite (the embedded default) nothing happens: there the service's checks are the guard.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION billing_ledgerentry_check_balanced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    off record;
BEGIN
    SELECT currency, SUM(amount) AS total INTO off
      FROM billing_ledgerentry
     WHERE transaction_id = NEW.transaction_id
     GROUP BY currency
    HAVING SUM(amount) <> 0
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance: its % entries sum to %',
            NEW.transaction_id, off.currency, off.total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER billing_ledgerentry_balanced
    AFTER INSERT ON billing_ledgerentry
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION billing_ledgerentry_check_balanced();

CREATE OR REPLACE FUNCTION billing_ledgertransaction_check_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    entry_count integer;
BEGIN
    SELECT count(*) INTO entry_count FROM billing_ledgerentry WHERE transaction_id = NEW.id;
    IF entry_count < 2 THEN
        RAISE EXCEPTION 'ledger transaction % has % entries; at least two are required',
            NEW.id, entry_count
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER billing_ledgertransaction_has_entries
    AFTER INSERT ON billing_ledgertransaction
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION billing_ledgertransaction_check_entries();

CREATE OR REPLACE FUNCTION billing_ledgerentry_check_currency() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM billing_ledgeraccount
         WHERE id = NEW.account_id AND currency = NEW.currency
    ) THEN
        RAISE EXCEPTION 'ledger entry in % on account % of another currency',
            NEW.currency, NEW.account_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER billing_ledgerentry_currency_of_account
    BEFORE INSERT ON billing_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledgerentry_check_currency();

CREATE OR REPLACE FUNCTION billing_ledger_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused; post a reversing transaction instead',
        TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER billing_ledgerentry_append_only
    BEFORE UPDATE OR DELETE ON billing_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_refuse_change();

CREATE TRIGGER billing_ledgertransaction_append_only
    BEFORE UPDATE OR DELETE ON billing_ledgertransaction
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_refuse_change();
"""

REVERSE = """
DROP TRIGGER IF EXISTS billing_ledgertransaction_append_only ON billing_ledgertransaction;
DROP TRIGGER IF EXISTS billing_ledgerentry_append_only ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledger_refuse_change();
DROP TRIGGER IF EXISTS billing_ledgerentry_currency_of_account ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledgerentry_check_currency();
DROP TRIGGER IF EXISTS billing_ledgertransaction_has_entries ON billing_ledgertransaction;
DROP FUNCTION IF EXISTS billing_ledgertransaction_check_entries();
DROP TRIGGER IF EXISTS billing_ledgerentry_balanced ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledgerentry_check_balanced();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(install, uninstall, elidable=False)]
