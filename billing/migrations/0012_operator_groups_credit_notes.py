"""The operator groups read credit notes too (accounts/roles.py)."""

from django.db import migrations

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):
    dependencies = [("billing", "0011_credit_notes")]

    operations = [migrations.RunPython(groups_sync, migrations.RunPython.noop)]
