"""The operator groups read the outbox too (accounts/roles.py): after billing's last sync, so that
whichever runs last gives them every view permission."""

from django.db import migrations

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("marketplace", "0001_outbox_email"),
        ("billing", "0013_invoice_number_room_for_credit_notes"),
    ]

    operations = [migrations.RunPython(groups_sync, migrations.RunPython.noop)]
