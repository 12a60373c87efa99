"""The operator groups read the market books too (accounts/roles.py)."""

from django.db import migrations

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("exchange", "0005_market_versions"),
        ("billing", "0014_top_up_vat_refunds"),
    ]

    operations = [migrations.RunPython(groups_sync, migrations.RunPython.noop)]
