"""The operator roles: which permissions the "support" and "finance" groups carry.

Support reads everything and decides on sellers; finance reads everything and moves money. Only
superusers open and close the market and edit the GPU catalog. The groups are created by a
migration (billing 0010; billing 0012 and marketplace 0002 again for the models added since) with
`operator_groups_migrate`, and kept in step by `operator_groups_sync`; both take an app registry,
so that a migration can pass its historical one.
"""

from django.contrib.auth.management import create_permissions

# "Everything" operators read: every model of these apps (marketplace: the outbox of emails).
OPERATOR_APPS = ("marketplace", "accounts", "catalog", "sellers", "exchange", "billing")

SUPPORT = "support"
FINANCE = "finance"

DECIDE_SELLER = "sellers.decide_seller"
MOVE_MONEY = "billing.move_money"
OPERATE_MARKET = "exchange.operate_market"

ROLE_PERMISSIONS = {
    SUPPORT: (DECIDE_SELLER,),
    FINANCE: (MOVE_MONEY, "billing.add_exchangerate", "billing.change_exchangerate"),
}


def operator_groups_migrate(apps) -> None:
    """For a migration: create the permissions of our apps now (Django would only after the last
    migration), then sync the groups. A migration that adds a model runs it again."""
    for app_config in apps.get_app_configs():
        if app_config.label in OPERATOR_APPS:
            app_config.models_module = True
            create_permissions(app_config, apps=apps, verbosity=0)
            app_config.models_module = None
    operator_groups_sync(apps)


def operator_groups_sync(apps) -> None:
    """Create the groups (once) and give each every view permission of our apps plus its own."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    views = list(
        Permission.objects.filter(
            content_type__app_label__in=OPERATOR_APPS, codename__startswith="view_"
        )
    )
    for name, extra in ROLE_PERMISSIONS.items():
        group, _created = Group.objects.get_or_create(name=name)
        own = []
        for label in extra:
            app_label, codename = label.split(".")
            own.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(views + own)
