"""Every server's heartbeat rewrites its agent's row every 30 s. PostgreSQL can do that in place,
without touching any index (a heartbeat-only tuple, HOT), when no indexed column changes and the
row's page has room for the new version: so `last_heartbeat_at` loses its index, and the table
keeps half of each page free. On SQLite (the embedded default) only the index goes."""

from django.db import migrations, models

TABLE = "sellers_serveragent"


def pages_with_room(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = 50)", params=None)


def pages_full(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)", params=None)


class Migration(migrations.Migration):
    dependencies = [("sellers", "0009_operator_groups_host_agent")]

    operations = [
        migrations.AlterField(
            model_name="serveragent",
            name="last_heartbeat_at",
            field=models.DateTimeField(verbose_name="last heartbeat at"),
        ),
        migrations.RunPython(pages_with_room, pages_full, elidable=False),
    ]
