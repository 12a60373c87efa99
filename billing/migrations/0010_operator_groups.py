"""The operator groups "support" and "finance" (see accounts/roles.py for what each may do).

Permissions are normally created after all migrations have run; this migration creates them
first, for every app it depends on, so that the groups can be given theirs."""

from django.db import migrations

from accounts.roles import ROLE_PERMISSIONS, operator_groups_migrate


def groups_create(apps, schema_editor):
    operator_groups_migrate(apps)


def groups_delete(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("accounts", "0005_audit_log_append_only"),
        ("catalog", "0001_initial"),
        ("sellers", "0006_seller_suspension"),
        ("exchange", "0004_operate_market_permission"),
        ("billing", "0009_top_up_refunds"),
    ]

    operations = [migrations.RunPython(groups_create, groups_delete)]
