"""The ledger's guarantees checked once per statement instead of once per row (issue 17).

The same refusals as 0002, whoever writes: an unbalanced transaction and one with fewer than two
entries at commit, an entry in another currency than its account at once. What changes is the
cost: the charging run inserts a thousand transactions and four thousand entries in two
statements, and these triggers now run two set-based checks for them instead of five thousand.

- After each INSERT statement on the entries (and on the transactions), a statement-level trigger
  reads the rows it inserted (a transition table) and records the ledger transactions they touch
  in one row of `billing_ledger_check`.
- That row carries a deferred constraint trigger: at commit, it checks those transactions in one
  query each for the balance per currency and the count of entries, then deletes its row. A
  transaction whose entries come in several statements (raw SQL, entries added later) is checked
  at commit like any other, over all of its entries.
- The currency of each inserted entry is compared with its account's in one query at the end of
  the statement.

On SQLite nothing happens, as in 0002.
"""

from django.db import migrations

FORWARD = """
DROP TRIGGER IF EXISTS billing_ledgerentry_balanced ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledgerentry_check_balanced();
DROP TRIGGER IF EXISTS billing_ledgertransaction_has_entries ON billing_ledgertransaction;
DROP FUNCTION IF EXISTS billing_ledgertransaction_check_entries();
DROP TRIGGER IF EXISTS billing_ledgerentry_currency_of_account ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledgerentry_check_currency();

-- One row per INSERT statement on the ledger, until its transaction commits: what to check then.
CREATE TABLE billing_ledger_check (
    id bigserial CONSTRAINT billing_ledger_check_pkey PRIMARY KEY,
    transaction_ids bigint[] NOT NULL
);

CREATE OR REPLACE FUNCTION billing_ledger_check_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    off record;
    lonely record;
BEGIN
    SELECT transaction_id, currency, SUM(amount) AS total INTO off
      FROM billing_ledgerentry
     WHERE transaction_id = ANY (NEW.transaction_ids)
     GROUP BY transaction_id, currency
    HAVING SUM(amount) <> 0
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance: its % entries sum to %',
            off.transaction_id, off.currency, off.total
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT checked.id, count(entry.id) AS entries INTO lonely
      FROM unnest(NEW.transaction_ids) AS checked (id)
      JOIN billing_ledgertransaction posted ON posted.id = checked.id
      LEFT JOIN billing_ledgerentry entry ON entry.transaction_id = checked.id
     GROUP BY checked.id
    HAVING count(entry.id) < 2
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % has % entries; at least two are required',
            lonely.id, lonely.entries
            USING ERRCODE = 'check_violation';
    END IF;
    DELETE FROM billing_ledger_check WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER billing_ledger_check_at_commit
    AFTER INSERT ON billing_ledger_check
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_check_at_commit();

CREATE OR REPLACE FUNCTION billing_ledgerentry_checks_per_statement() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wrong record;
BEGIN
    SELECT added.currency, added.account_id INTO wrong
      FROM added_entries added
      LEFT JOIN billing_ledgeraccount account ON account.id = added.account_id
     WHERE account.id IS NULL OR account.currency <> added.currency
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger entry in % on account % of another currency',
            wrong.currency, wrong.account_id
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO billing_ledger_check (transaction_ids)
    SELECT array_agg(DISTINCT transaction_id) FROM added_entries HAVING count(*) > 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER billing_ledgerentry_checks_per_statement
    AFTER INSERT ON billing_ledgerentry
    REFERENCING NEW TABLE AS added_entries
    FOR EACH STATEMENT EXECUTE FUNCTION billing_ledgerentry_checks_per_statement();

CREATE OR REPLACE FUNCTION billing_ledgertransaction_checks_per_statement() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO billing_ledger_check (transaction_ids)
    SELECT array_agg(id) FROM added_transactions HAVING count(*) > 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER billing_ledgertransaction_checks_per_statement
    AFTER INSERT ON billing_ledgertransaction
    REFERENCING NEW TABLE AS added_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION billing_ledgertransaction_checks_per_statement();
"""

# Back to 0002's triggers, one check per row.
REVERSE = """
DROP TRIGGER IF EXISTS billing_ledgertransaction_checks_per_statement ON billing_ledgertransaction;
DROP FUNCTION IF EXISTS billing_ledgertransaction_checks_per_statement();
DROP TRIGGER IF EXISTS billing_ledgerentry_checks_per_statement ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledgerentry_checks_per_statement();
DROP TABLE IF EXISTS billing_ledger_check;
DROP FUNCTION IF EXISTS billing_ledger_check_at_commit();

CREATE OR REPLACE FUNCTION billing_ledgerentry_check_balanced() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    off record;
BEGIN
    SELECT currency, SUM(amount) AS total INTO off
      FROM billing_ledgerentry WHERE transaction_id = NEW.transaction_id
     GROUP BY currency HAVING SUM(amount) <> 0 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance: its % entries sum to %',
            NEW.transaction_id, off.currency, off.total USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER billing_ledgerentry_balanced AFTER INSERT ON billing_ledgerentry
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_ledgerentry_check_balanced();

CREATE OR REPLACE FUNCTION billing_ledgertransaction_check_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    entry_count integer;
BEGIN
    SELECT count(*) INTO entry_count FROM billing_ledgerentry WHERE transaction_id = NEW.id;
    IF entry_count < 2 THEN
        RAISE EXCEPTION 'ledger transaction % has % entries; at least two are required',
            NEW.id, entry_count USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER billing_ledgertransaction_has_entries AFTER INSERT ON billing_ledgertransaction
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_ledgertransaction_check_entries();

CREATE OR REPLACE FUNCTION billing_ledgerentry_check_currency() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM billing_ledgeraccount WHERE id = NEW.account_id AND currency = NEW.currency
    ) THEN
        RAISE EXCEPTION 'ledger entry in % on account % of another currency',
            NEW.currency, NEW.account_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER billing_ledgerentry_currency_of_account BEFORE INSERT ON billing_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledgerentry_check_currency();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0014_top_up_vat_refunds")]

    operations = [migrations.RunPython(install, uninstall, elidable=False)]
