"""PostgreSQL refuses any UPDATE or DELETE of an audit entry: the log is append-only, whoever
asks (TRUNCATE, which the test runner uses to empty tables, is not a row operation and still
works). On SQLite (the embedded default) the admin's read-only views are the guard."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION accounts_auditentry_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER accounts_auditentry_append_only
    BEFORE UPDATE OR DELETE ON accounts_auditentry
    FOR EACH ROW EXECUTE FUNCTION accounts_auditentry_refuse_change();
"""

REVERSE = """
DROP TRIGGER IF EXISTS accounts_auditentry_append_only ON accounts_auditentry;
DROP FUNCTION IF EXISTS accounts_auditentry_refuse_change();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REVERSE, params=None)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0004_audit_log")]

    operations = [migrations.RunPython(install, uninstall, elidable=False)]
