import json

from allauth.mfa.models import Authenticator
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext, pgettext
from django.utils.translation import gettext_lazy as _

from billing.services import wallet_adjust
from marketplace.admin_tools import (
    AmountReasonForm,
    OperatorPermissions,
    ReadOnlyAdminMixin,
    action_run,
    action_with_form,
    money_display,
    yes_no_display,
)

from .forms import UserAdminForm, UserPasswordAdminForm
from .models import ApiToken, AuditEntry, Profile, TwoFactorAuthenticator, User, Wallet
from .services import api_token_revoke, user_access_snapshot, user_change_record, user_password_set_record

# Django stores a model's permissions with English names ("Can add user") when it migrates; the
# permission widgets name them again in the page's language.
PERMISSION_ACTIONS = {
    "add": _("Can add %(name)s"),
    "change": _("Can change %(name)s"),
    "delete": _("Can delete %(name)s"),
    "view": _("Can view %(name)s"),
}


def permission_label(permission: Permission) -> str:
    """`<app> | <model> | <what it allows>`, as Django writes it, each part in the page's language."""
    model = permission.content_type.model_class()
    name = permission.name
    if model is not None:
        action, _sep, model_name = permission.codename.partition("_")
        declared = dict(model._meta.permissions)
        if permission.codename in declared:
            name = declared[permission.codename]
        elif action in PERMISSION_ACTIONS and model_name == model._meta.model_name:
            name = PERMISSION_ACTIONS[action] % {"name": model._meta.verbose_name}
    return f"{permission.content_type} | {name}"


class PermissionLabels:
    """The permission widgets of a user's or a group's form, with the permissions' translated names."""

    PERMISSION_FIELDS = ("permissions", "user_permissions")

    def formfield_for_manytomany(self, db_field, request=None, **kwargs):
        field = super().formfield_for_manytomany(db_field, request, **kwargs)
        if field is not None and db_field.name in self.PERMISSION_FIELDS:
            field.label_from_instance = permission_label
        return field


admin.site.unregister(Group)


@admin.register(Group)
class GroupAdmin(PermissionLabels, BaseGroupAdmin):
    pass


@admin.register(User)
class UserAdmin(PermissionLabels, BaseUserAdmin):
    form = UserAdminForm
    change_password_form = UserPasswordAdminForm
    ordering = ("email",)
    list_display = ("email", "first_name", "last_name", yes_no_display(User, "is_staff"),
                    yes_no_display(User, "is_active"), "date_joined")
    list_filter = ("is_staff", "is_superuser", "is_active", "groups")
    search_fields = ("email", "first_name", "last_name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        (_("Personal info"), {"fields": ("first_name", "last_name")}),
        (
            _("Permissions"),
            {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")},
        ),
        (_("Important dates"), {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)

    # The admin saves the user, then its groups and permissions, in one transaction; the audit
    # entry compares what the user could do before with what it can do after.
    def save_model(self, request, obj, form, change):
        stored = User.objects.filter(pk=obj.pk).first() if change else None
        request.audit_user_before = user_access_snapshot(stored) if stored is not None else None
        super().save_model(request, obj, form, change)

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:  # the form was valid and saved
                user_password_set_record(operator=request.user, user=User.objects.get(pk=id))
        return response

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        user_change_record(
            operator=request.user, user=form.instance, before=getattr(request, "audit_user_before", None)
        )


@admin.register(Profile)
class ProfileAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Buyers keep their own billing identity (it is on their invoices); operators read it."""

    list_display = ("user", "name", "billing_type", "billing_country", "vat_id", "vat_id_status",
                    "preferred_language")
    list_filter = ("billing_type", "vat_id_status", "preferred_language", "billing_country")
    search_fields = ("user__email", "name", "company_name", "vat_id")
    list_select_related = ("user",)


wallet_balance = money_display(Wallet, "balance")


@admin.register(Wallet)
class WalletAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Balances move through the ledger only: the "adjust" action posts a balanced adjustment."""

    list_display = ("user", "currency", wallet_balance, "updated_at", "low_balance_warned_at")
    list_filter = ("currency",)
    search_fields = ("user__email",)
    list_select_related = ("user",)
    fields = ("user", "currency", wallet_balance, "created_at", "updated_at", "low_balance_warned_at")
    readonly_fields = fields
    actions = ("adjust",)

    @admin.action(description=_("Adjust the balance of the selected wallet (with a reason)"),
                  permissions=["move_money"])
    def adjust(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=AmountReasonForm, single=True, refusal_field="amount",
            title=gettext("Adjust a balance"),
            intro=gettext(
                "Enter the amount in the wallet's currency: positive to add, negative (for example "
                "-12.50) to take. It is posted against the adjustments account; a balance never "
                "goes below zero."
            ),
            perform=lambda wallet, data: wallet_adjust(
                wallet_id=wallet.pk, operator=request.user, amount_text=data["amount"],
                reason=data["reason"], request_key=data["request_key"],
            ),
            done_message=lambda count: gettext("The balance was adjusted."),
        )


def _json(value) -> str:
    if value is None:
        return "—"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every operator action, never editable (PostgreSQL refuses UPDATE and DELETE as well)."""

    list_display = ("created_at", "actor", "action", "target_type", "target_repr", "reason")
    list_filter = ("action", "target_type", ("actor", admin.RelatedOnlyFieldListFilter), "created_at")
    search_fields = ("target_repr", "target_id", "reason", "actor__email")
    list_select_related = ("actor", "target_type")
    date_hierarchy = "created_at"
    fields = ("created_at", "actor", "action", "target_type", "target_id", "target_repr", "reason",
              "before_pretty", "after_pretty")
    readonly_fields = fields
    show_full_result_count = False

    @admin.display(description=_("before"))
    def before_pretty(self, entry: AuditEntry) -> str:
        return _json(entry.before)

    @admin.display(description=_("after"))
    def after_pretty(self, entry: AuditEntry) -> str:
        return _json(entry.after)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Users create their tokens on their API tokens page; operators read them and may revoke
    one (a leaked token, a user who asks). The secret is never stored, so never shown."""

    list_display = ("name", "user", "prefix", "scopes_text", "seller", "created_at", "expires_at",
                    "last_used_at", "last_used_address", "state_text")
    list_filter = ("can_read", "can_trade", "can_sell", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "prefix", "user__email", "seller__name")
    list_select_related = ("user", "seller")
    ordering = ("-created_at", "-pk")
    fields = ("name", "user", "prefix", "scopes_text", "seller", "created_at", "expires_at", "revoked_at",
              "last_used_at", "last_used_address")
    readonly_fields = fields
    actions = ("revoke",)

    @admin.display(description=_("scopes"))
    def scopes_text(self, token: ApiToken) -> str:
        return ", ".join(token.scopes)

    @admin.display(description=_("state"))
    def state_text(self, token: ApiToken) -> str:
        labels = {"active": pgettext("API token state", "Active"),
                  "expired": pgettext("API token state", "Expired"),
                  "revoked": pgettext("API token state", "Revoked")}
        return labels[token.state(timezone.now())]

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("accounts.change_apitoken")

    @admin.action(description=_("Revoke the selected tokens"), permissions=["revoke"])
    def revoke(self, request, queryset):
        action_run(
            self, request, queryset.select_related("user"),
            perform=lambda token: api_token_revoke(user=token.user, token_id=token.pk),
            done_message=lambda count: ngettext(
                "%(count)d token was revoked.", "%(count)d tokens were revoked.", count
            ) % {"count": count},
        )


class AuthenticatorTypeFilter(admin.SimpleListFilter):
    title = _("type")
    parameter_name = "type"

    def lookups(self, request, model_admin):
        return Authenticator.Type.choices

    def queryset(self, request, queryset):
        return queryset.filter(type=self.value()) if self.value() else queryset


# allauth registers its own admin of the model, with English column names: ours replaces it. An
# operator sees who has which second factor and can delete one (a user who lost their phone), never
# its secret.
admin.site.unregister(Authenticator)


@admin.register(TwoFactorAuthenticator)
class TwoFactorAuthenticatorAdmin(admin.ModelAdmin):
    list_display = ("owner", "kind", "added", "last_used")
    list_filter = (AuthenticatorTypeFilter,)
    list_select_related = ("user",)
    search_fields = ("user__email",)
    fields = readonly_fields = ("owner", "kind", "added", "last_used")
    ordering = ("-created_at",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=_("user"), ordering="user__email")
    def owner(self, authenticator):
        return authenticator.user.email

    @admin.display(description=_("type"), ordering="type")
    def kind(self, authenticator):
        return authenticator.get_type_display()

    @admin.display(description=_("created at"), ordering="created_at")
    def added(self, authenticator):
        return authenticator.created_at

    @admin.display(description=_("last used at"), ordering="last_used_at")
    def last_used(self, authenticator):
        return authenticator.last_used_at or self.get_empty_value_display()
