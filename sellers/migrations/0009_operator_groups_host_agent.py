# The operator groups read every model of our apps: give them the host agent's (agent tokens,
# server agents, heartbeats, events, availability, the monitor, and the exchange's GPU slots).

from django.db import migrations

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('sellers', '0008_host_agent'),
        ('exchange', '0008_host_agent'),
    ]

    operations = [
        migrations.RunPython(groups_sync, migrations.RunPython.noop),
    ]
