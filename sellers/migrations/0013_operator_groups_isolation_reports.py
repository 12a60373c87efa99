# The operator groups read every model of our apps: give them the servers' isolation reports.

from django.db import migrations

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('sellers', '0012_serveragent_ssh_host_key'),
        ('exchange', '0012_rental_ssh_port'),
    ]

    operations = [
        migrations.RunPython(groups_sync, migrations.RunPython.noop),
    ]
