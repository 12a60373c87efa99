"""Every write to sellers, their members, seller applications and the registry of their servers.
What changes a server and the book together (activating, retiring, suspending a seller) is the
exchange's (`exchange.services`)."""

import ipaddress
import re
import secrets
from dataclasses import dataclass

from allauth.mfa.utils import is_mfa_enabled
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _
from stdnum import iban as stdnum_iban
from stdnum.exceptions import ValidationError as StdnumError

from accounts.models import ApiToken, ApiTokenScope, AuditAction, User
from accounts.roles import DECIDE_SELLER
from accounts.services import api_token_create, audit_record, operator_require
from accounts.tokens import PREFIX_LENGTH, token_secret_hash
from accounts.vat_ids import VatIdInvalid, vat_id_validate
from catalog.models import GpuModel
from marketplace import formatting
from marketplace.emails import absolute_url, email_send

from .exceptions import (
    ApplicationInvalid,
    ApplicationLocked,
    ApplicationNotFound,
    InvitationNotFound,
    MemberInvalid,
    PayoutDetailsInvalid,
    ServerInvalid,
    ServerLocked,
    ServerNotFound,
)
from .models import (
    OPEN_APPLICATION_STATUSES,
    AgentToken,
    ApplicationStatus,
    MemberRole,
    Region,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
    ServerEvent,
    ServerEventKind,
    ServerStatus,
)
from .selectors import invitations_for_user, seller_for_api_token_user


@transaction.atomic
def seller_ensure(*, slug: str, name: str, country: str) -> Seller:
    seller, _created = Seller.objects.get_or_create(
        slug=slug, defaults={"name": name, "country": country}
    )
    return seller


@transaction.atomic
def server_ensure(
    *, seller: Seller, name: str, gpu_model: GpuModel, gpu_count: int, region: str,
    host: str = "", status: str = ServerStatus.PENDING,
) -> Server:
    server, _created = Server.objects.get_or_create(
        seller=seller,
        name=name,
        defaults={
            "gpu_model": gpu_model, "gpu_count": gpu_count, "region": region, "host": host,
            "status": status,
        },
    )
    return server


# --- Seller applications -------------------------------------------------------------------------

APPLICATION_TEXT_FIELDS = (
    "legal_name", "country", "registration_number", "vat_id", "address", "contact_name",
    "contact_phone", "website", "datacentre_locations", "planned_inventory", "iban", "account_holder",
)
# Everything but the website is needed before an application can be submitted.
APPLICATION_REQUIRED_FIELDS = tuple(name for name in APPLICATION_TEXT_FIELDS if name != "website")

IBAN_EXAMPLES = {
    "PT": "PT50 0000 0000 0000 0000 0000 0", "FR": "FR76 0000 0000 0000 0000 0000 000",
    "DE": "DE89 0000 0000 0000 0000 00", "ES": "ES91 0000 0000 0000 0000 0000",
    "GB": "GB29 XXXX 0000 0000 0000 00", "NL": "NL91 XXXX 0000 0000 00",
    "BE": "BE68 0000 0000 0000", "IT": "IT60 X000 0000 0000 0000 0000 000",
    "IE": "IE29 XXXX 0000 0000 0000 00", "LU": "LU28 0000 0000 0000 0000",
}


def _vat_id_error(invalid: VatIdInvalid) -> str:
    name = formatting.country_name(invalid.country)
    if invalid.wrong_country:
        return _("This VAT ID belongs to another country than %(country)s, the country of the company.") % {
            "country": name
        }
    if invalid.pattern:
        return _(
            "This is not a valid VAT ID for %(country)s. Expected format: %(pattern)s "
            "(9 stands for a digit, X for a letter or a digit)."
        ) % {"country": name, "pattern": invalid.pattern}
    return _("This is not a valid VAT ID for %(country)s.") % {"country": name}


def _iban_error(country: str) -> str:
    example = IBAN_EXAMPLES.get(country)
    if example:
        return _("This is not a valid IBAN. Expected format, for example: %(example)s.") % {
            "example": example
        }
    return _(
        "This is not a valid IBAN. Expected format: two letters, two digits, then up to 30 letters or digits."
    )


def iban_clean(value: str, *, country: str = "") -> str:
    """The IBAN validated and compacted (no spaces, upper case); raise ValueError with the message
    that names the expected format (the country's example when known)."""
    try:
        return stdnum_iban.compact(stdnum_iban.validate(value))
    except StdnumError:
        raise ValueError(_iban_error(country.upper())) from None


def application_fields_clean(*, fields: dict, required: bool = False) -> dict:
    """The application's fields stripped and normalised (VAT ID, IBAN); raise ApplicationInvalid
    with every error at once. With `required`, empty required fields are errors too."""
    cleaned = {
        name: str(fields.get(name) or "").strip() for name in APPLICATION_TEXT_FIELDS if name in fields
    }
    errors: dict[str, list[str]] = {}
    country = cleaned.get("country", "").upper()
    if "country" in cleaned:
        cleaned["country"] = country
        if country and country not in dict(formatting.country_choices()):
            errors["country"] = [_("Choose a country from the list.")]
    if cleaned.get("vat_id"):
        if not country:
            errors["vat_id"] = [_("Choose the country of the company first.")]
        elif "country" not in errors:
            try:
                cleaned["vat_id"] = vat_id_validate(country=country, number=cleaned["vat_id"]).number
            except VatIdInvalid as invalid:
                errors["vat_id"] = [_vat_id_error(invalid)]
    if cleaned.get("iban"):
        try:
            cleaned["iban"] = iban_clean(cleaned["iban"], country=country)
        except ValueError as invalid:
            errors["iban"] = [str(invalid)]
    for name, limit in (("legal_name", 200), ("registration_number", 50), ("contact_name", 200),
                        ("contact_phone", 40), ("account_holder", 200), ("website", 200)):
        if len(cleaned.get(name, "")) > limit:
            errors[name] = [_("Use at most %(limit)s characters.") % {"limit": limit}]
    if cleaned.get("website") and not cleaned["website"].startswith(("https://", "http://")):
        errors["website"] = [_("Enter the full address of the website, starting with https://.")]
    if required:
        for name in APPLICATION_REQUIRED_FIELDS:
            if not cleaned.get(name) and name not in errors:
                errors[name] = [_("This field is needed before you submit.")]
    if errors:
        raise ApplicationInvalid(_("Please correct the errors below."), errors=errors)
    return cleaned


def _open_application_locked(applicant: User) -> SellerApplication | None:
    return (
        SellerApplication.objects.select_for_update()
        .filter(applicant=applicant, status__in=OPEN_APPLICATION_STATUSES)
        .first()
    )


@transaction.atomic
def application_save(*, applicant: User, fields: dict) -> SellerApplication:
    """Create or update the applicant's draft (or the application an operator asked about).
    `fields` holds any of APPLICATION_TEXT_FIELDS and `accept_terms` (bool)."""
    cleaned = application_fields_clean(fields=fields)
    application = _open_application_locked(applicant)
    if application is None:
        if Seller.objects.filter(memberships__user=applicant, memberships__role=MemberRole.OWNER).exists():
            raise ApplicationLocked(_("You already own a seller account."), code="application_not_open")
        application = SellerApplication(applicant=applicant)
    elif not application.is_editable:
        raise ApplicationLocked(
            _("Your application is submitted and can no longer be changed."), code="application_locked"
        )
    for name, value in cleaned.items():
        setattr(application, name, value)
    if "accept_terms" in fields:
        if not fields["accept_terms"]:
            application.terms_accepted_at = None
        elif application.terms_accepted_at is None:
            application.terms_accepted_at = timezone.now()
    try:
        with transaction.atomic():
            application.save()
    except IntegrityError as error:  # two first saves at once: the other one created the draft
        raise ApplicationLocked(_("Your application changed meanwhile. Please try again."),
                                code="application_conflict") from error
    return application


@transaction.atomic
def application_submit(*, applicant: User) -> SellerApplication:
    """Lock the applicant's draft for review: two-factor authentication on, terms accepted and
    every required field valid."""
    application = _open_application_locked(applicant)
    if application is None:
        raise ApplicationNotFound(_("You have no application to submit."))
    if not application.is_editable:
        raise ApplicationLocked(_("Your application is already submitted."), code="application_locked")
    if not is_mfa_enabled(applicant):
        raise ApplicationLocked(
            _("Turn on two-factor authentication before you submit your application."),
            code="two_factor_required",
        )
    cleaned = application_fields_clean(
        fields={name: getattr(application, name) for name in APPLICATION_TEXT_FIELDS}, required=True
    )
    if application.terms_accepted_at is None:
        raise ApplicationInvalid(
            _("Please correct the errors below."),
            errors={"accept_terms": [_("Accept the seller terms to submit your application.")]},
        )
    for name, value in cleaned.items():
        setattr(application, name, value)
    application.status = ApplicationStatus.SUBMITTED
    application.submitted_at = timezone.now()
    application.save()
    return application


def _submitted_application_locked(application_id: int) -> SellerApplication:
    application = SellerApplication.objects.select_for_update().filter(pk=application_id).first()
    if application is None:
        raise ApplicationNotFound(_("No such application."))
    if application.status != ApplicationStatus.SUBMITTED:
        raise ApplicationLocked(
            _("Only a submitted application can be decided."), code="application_not_submitted"
        )
    return application


def _decision_record(
    application: SellerApplication, *, operator: User, status: str, action: str, reason: str = ""
) -> None:
    before = application.status
    application.status = status
    application.decided_by = operator
    application.decided_at = timezone.now()
    application.save()
    audit_record(
        actor=operator, action=action, target=application, reason=reason,
        before={"status": before}, after={"status": status},
    )
    _decision_email(application=application)


def _unique_slug(name: str) -> str:
    base = slugify(name)[:70].strip("-") or "seller"
    slug, n = base, 1
    while Seller.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def application_approve(*, application_id: int, operator: User) -> Seller:
    """Create the seller with the applicant as owner. Operators with the "decide_seller" permission
    only (`OperatorNotAllowed` otherwise, nothing changed)."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    application = _submitted_application_locked(application_id)
    seller = Seller.objects.create(
        name=application.legal_name, slug=_unique_slug(application.legal_name), country=application.country,
        payout_iban=application.iban, payout_account_holder=application.account_holder,
    )
    SellerMembership.objects.create(seller=seller, user=application.applicant, role=MemberRole.OWNER)
    _decision_record(
        application, operator=operator, status=ApplicationStatus.APPROVED,
        action=AuditAction.APPLICATION_APPROVE,
    )
    return seller


@transaction.atomic
def application_reject(*, application_id: int, operator: User, reason: str) -> SellerApplication:
    operator_require(operator=operator, permission=DECIDE_SELLER)
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationInvalid(_("Give the reason for the rejection."),
                                 errors={"rejection_reason": [_("Give the reason for the rejection.")]})
    application = _submitted_application_locked(application_id)
    application.rejection_reason = reason
    _decision_record(
        application, operator=operator, status=ApplicationStatus.REJECTED,
        action=AuditAction.APPLICATION_REJECT, reason=reason,
    )
    return application


@transaction.atomic
def application_ask_info(*, application_id: int, operator: User, question: str) -> SellerApplication:
    """Send the application back to the applicant with a question; they edit and resubmit."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    question = (question or "").strip()
    if not question:
        raise ApplicationInvalid(_("Write the question for the applicant."),
                                 errors={"operator_question": [_("Write the question for the applicant.")]})
    application = _submitted_application_locked(application_id)
    application.operator_question = question
    _decision_record(
        application, operator=operator, status=ApplicationStatus.NEEDS_INFO,
        action=AuditAction.APPLICATION_ASK_INFO, reason=question,
    )
    return application


def _decision_email(*, application: SellerApplication) -> None:
    """Email the applicant the operator's decision, in the applicant's language, in the decision's
    transaction; one per decision (an application asked about can be decided again)."""
    email_send(
        template="sellers/email/decision", user=application.applicant,
        key=f"application-decision:{application.pk}:{application.decided_at.isoformat()}",
        context=lambda: {
            "application": application, "application_url": absolute_url(reverse("sellers:apply")),
            "portal_url": absolute_url(reverse("sellers:portal")),
        },
    )


# --- The registry of a seller's servers (the seller portal) -------------------------------------


# One label of a DNS name in ASCII (after IDNA): letters, digits and inner hyphens, 63 at most.
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)


def host_clean(text: str) -> str:
    """The host buyers connect to, as ssh will read it: an IP address (in its compact form) or a
    DNS name of two labels or more, checked after IDNA encoding (returned in ASCII, lower case).
    Anything else raises ValueError: a shell command, an ssh option (`-oProxyCommand=...`), a
    port or a user in the host, a name whose last label is all digits (`1.2.3`, which ssh would
    read as an address)."""
    host = str(text or "").strip()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if "%" in host:  # an IPv6 zone names an interface of the buyer's machine
            raise ValueError(host)
        return address.compressed
    try:
        name = host.encode("idna").decode("ascii").lower().removesuffix(".")
    except UnicodeError:
        raise ValueError(host) from None
    labels = name.split(".")
    if (
        len(name) > 253 or len(labels) < 2 or labels[-1].isdigit()
        or not all(_DNS_LABEL.fullmatch(label) for label in labels)
    ):
        raise ValueError(host)
    return name


SERVER_DETAIL_NUMBERS = ("cpu_cores", "ram_gb", "disk_gb", "network_gbps")
SERVER_DETAIL_LIMITS = {"cpu_cores": 32767, "ram_gb": 2**31 - 1, "disk_gb": 2**31 - 1, "network_gbps": 32767}


def _server_details_clean(details: dict, errors: dict) -> dict:
    """The optional details (city, CPU cores, RAM, disk, network): numbers positive when given."""
    cleaned: dict = {}
    city = str(details.get("city") or "").strip()
    if len(city) > 100:
        errors["city"] = [_("Use at most %(limit)s characters.") % {"limit": 100}]
    cleaned["city"] = city
    for field in SERVER_DETAIL_NUMBERS:
        value = details.get(field)
        if value in (None, ""):
            cleaned[field] = None
        elif (isinstance(value, bool) or not isinstance(value, int)
              or not 1 <= value <= SERVER_DETAIL_LIMITS[field]):
            errors[field] = [_("Enter a whole number above zero, or leave the field empty.")]
        else:
            cleaned[field] = value
    return cleaned


def _server_fields_clean(
    *, name: str, gpu_count: int, region: str, host: str, ssh_port: int, details: dict | None = None
) -> dict:
    """The server's fields stripped and checked; raise ServerInvalid with every error at once."""
    errors: dict[str, list[str]] = {}
    cleaned_details = _server_details_clean(details or {}, errors)
    name, host = str(name or "").strip(), str(host or "").strip()
    if not name:
        errors["name"] = [_("Give the server a name.")]
    elif len(name) > 100:
        errors["name"] = [_("Use at most %(limit)s characters.") % {"limit": 100}]
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 1 <= gpu_count <= Server.MAX_GPUS:
        errors["gpu_count"] = [
            _("A server has from 1 to %(max)s GPUs.") % {"max": Server.MAX_GPUS}
        ]
    if region not in Region.values:
        errors["region"] = [_("Choose one of the regions listed.")]
    if not host:
        errors["host"] = [_("Give the host name or IP address buyers connect to.")]
    else:
        try:
            host = host_clean(host)
        except ValueError:
            errors["host"] = [_(
                "Enter a host name such as gpu1.example.com or an IP address such as 203.0.113.10, "
                "without a user, a port or spaces."
            )]
    if isinstance(ssh_port, bool) or not isinstance(ssh_port, int) or not 1 <= ssh_port <= 65535:
        errors["ssh_port"] = [_("The SSH port is a number from 1 to 65535.")]
    if errors:
        raise ServerInvalid(_("Please correct the errors below."), errors=errors)
    return {
        "name": name, "gpu_count": gpu_count, "region": region, "host": host, "ssh_port": ssh_port,
        **cleaned_details,
    }


def _name_taken_error() -> ServerInvalid:
    return ServerInvalid(
        _("Please correct the errors below."),
        errors={"name": [_("You already have a server with this name.")]},
    )


@transaction.atomic
def server_register(
    *, seller: Seller, gpu_model_id: int, name: str, gpu_count: int, region: str, host: str,
    ssh_port: int = 22, **details,
) -> Server:
    """Register a server of the seller. It starts pending verification: an operator activates it
    (`exchange.services.server_activate`) before its offers reach buyers. `details`: city,
    cpu_cores, ram_gb, disk_gb, network_gbps (optional). Raises ServerInvalid."""
    fields = _server_fields_clean(
        name=name, gpu_count=gpu_count, region=region, host=host, ssh_port=ssh_port, details=details
    )
    _gpu_model_check(gpu_model_id)
    if Server.objects.filter(seller=seller, name=fields["name"]).exists():
        raise _name_taken_error()
    try:
        with transaction.atomic():
            return Server.objects.create(
                seller=seller, gpu_model_id=gpu_model_id, status=ServerStatus.PENDING, **fields
            )
    except IntegrityError:
        raise _name_taken_error() from None


def _server_locked(*, server_id: int, seller: Seller | None = None) -> Server:
    servers = Server.objects.select_for_update().filter(pk=server_id)
    if seller is not None:
        servers = servers.filter(seller=seller)
    server = servers.first()
    if server is None:
        raise ServerNotFound(_("We could not find this server."))
    return server


def _gpu_model_check(gpu_model_id: int) -> None:
    if not GpuModel.objects.filter(pk=gpu_model_id).exists():
        raise ServerInvalid(
            _("Please correct the errors below."), errors={"gpu_model": [_("Choose a GPU from the list.")]}
        )


@transaction.atomic
def server_update(
    *, seller: Seller, server_id: int, name: str, gpu_count: int, region: str, host: str, ssh_port: int,
    gpu_model_id: int | None = None, **details,
) -> Server:
    """Change a server of the seller (its GPU model too, when `gpu_model_id` is given, and only
    while none of its GPUs is rented). The GPU count cannot drop below the GPUs rented now.
    Details left out are cleared. Raises ServerNotFound, ServerLocked (retired), ServerInvalid.

    This is the registry alone: the seller portal changes a server through
    `exchange.services.server_edit`, which sends an active server whose connection, region or GPU
    model changes back to review, its offers withdrawn."""
    fields = _server_fields_clean(
        name=name, gpu_count=gpu_count, region=region, host=host, ssh_port=ssh_port, details=details
    )
    server = _server_locked(server_id=server_id, seller=seller)
    if server.status == ServerStatus.RETIRED:
        raise ServerLocked(_("This server is retired and can no longer be changed."), code="server_retired")
    if gpu_model_id is not None and gpu_model_id != server.gpu_model_id:
        _gpu_model_check(gpu_model_id)
        if server.gpus_rented:
            raise ServerInvalid(
                _("Please correct the errors below."),
                errors={"gpu_model": [_(
                    "GPUs of this server are rented now: its GPU model can change once those "
                    "rentals have ended."
                )]},
                code="gpu_model_rented",
            )
        fields["gpu_model_id"] = gpu_model_id
    if fields["gpu_count"] < server.gpus_rented:
        raise ServerInvalid(
            _("Please correct the errors below."),
            errors={"gpu_count": [
                _("%(rented)s GPUs of this server are rented now: the GPU count cannot be lower.")
                % {"rented": server.gpus_rented}
            ]},
            code="gpu_count_below_rented",
        )
    if Server.objects.filter(seller=seller, name=fields["name"]).exclude(pk=server.pk).exists():
        raise _name_taken_error()
    for field, value in fields.items():
        setattr(server, field, value)
    server.save(update_fields=list(fields))
    return server


# --- Payout details of a seller --------------------------------------------------------------------


@transaction.atomic
def seller_payout_details_update(*, seller: Seller, user: User, iban: str, account_holder: str) -> Seller:
    """An owner changes the bank account payouts go to. Raises PayoutDetailsInvalid (not an owner,
    invalid IBAN or account holder); nothing is written then."""
    if not SellerMembership.objects.filter(seller=seller, user=user, role=MemberRole.OWNER).exists():
        raise PayoutDetailsInvalid(
            _("Only the owners of the seller can change the payout details."), code="not_owner"
        )
    iban = str(iban or "").strip()
    account_holder = str(account_holder or "").strip()
    errors: dict[str, list[str]] = {}
    if not iban:
        errors["iban"] = [_("Enter the IBAN of the account.")]
    else:
        try:
            iban = iban_clean(iban, country=seller.country)
        except ValueError as invalid:
            errors["iban"] = [str(invalid)]
    if not account_holder:
        errors["account_holder"] = [_("Enter the name of the account holder.")]
    elif len(account_holder) > 200:
        errors["account_holder"] = [_("Use at most %(limit)s characters.") % {"limit": 200}]
    if errors:
        raise PayoutDetailsInvalid(_("Please correct the errors below."), errors=errors)
    locked = Seller.objects.select_for_update().get(pk=seller.pk)
    locked.payout_iban = iban
    locked.payout_account_holder = account_holder
    locked.save(update_fields=["payout_iban", "payout_account_holder"])
    seller.payout_iban, seller.payout_account_holder = iban, account_holder
    return locked


# --- Members of a seller --------------------------------------------------------------------------


@transaction.atomic
def member_invite(*, seller: Seller, invited_by: User, email: str) -> SellerInvitation:
    """An owner invites someone by email; they join by accepting the invitation (`invitation_accept`)
    once signed in with a verified address of it. Raises MemberInvalid (not an owner, bad email,
    already a member, already invited); nothing is written then."""
    if not SellerMembership.objects.filter(seller=seller, user=invited_by, role=MemberRole.OWNER).exists():
        raise MemberInvalid(_("Only the owners of the seller can invite members."), code="not_owner")
    email = str(email or "").strip()
    try:
        validate_email(email)
    except ValidationError:
        raise MemberInvalid(_("Enter a valid email address."), code="email_invalid") from None
    Seller.objects.select_for_update().filter(pk=seller.pk).first()  # one invitation at a time
    if SellerMembership.objects.filter(seller=seller, user__email__iexact=email).exists():
        raise MemberInvalid(_("This person is already a member of the seller."), code="already_member")
    if SellerInvitation.objects.filter(seller=seller, email__iexact=email, accepted_at__isnull=True).exists():
        raise MemberInvalid(
            _("This email is already invited and has not joined yet."), code="already_invited"
        )
    invitation = SellerInvitation.objects.create(seller=seller, email=email, invited_by=invited_by)
    _invitation_email(invitation=invitation)
    return invitation


@transaction.atomic
def invitation_accept(*, user: User, invitation_id: int) -> SellerMembership:
    """The user accepts an invitation sent to one of their verified email addresses and becomes a
    member of the seller. Accepting again returns the same membership. Raises InvitationNotFound
    (unknown, or sent to an address the user has not confirmed); nothing is written then."""
    invitation = (
        invitations_for_user(user=user).select_for_update(of=("self",)).filter(pk=invitation_id).first()
    )
    if invitation is None:
        raise InvitationNotFound(_("We could not find this invitation for your account."))
    if invitation.accepted_at is not None:
        membership = SellerMembership.objects.filter(seller_id=invitation.seller_id, user=user).first()
        if membership is None:
            raise InvitationNotFound(_("We could not find this invitation for your account."))
        return membership
    membership, _created = SellerMembership.objects.get_or_create(
        seller_id=invitation.seller_id, user=user, defaults={"role": MemberRole.MEMBER}
    )
    invitation.accepted_at = timezone.now()
    invitation.save(update_fields=["accepted_at"])
    return membership


def _invitation_email(*, invitation: SellerInvitation) -> None:
    """Email the invitation, with the link to accept it, in the invitee's language if they have an
    account, else the site's."""
    email_send(
        template="sellers/email/invitation", email=invitation.email, key=f"invitation:{invitation.pk}",
        context=lambda: {
            "invitation": invitation,
            "invitation_url": absolute_url(reverse("sellers:invitation", args=[invitation.pk])),
        },
    )


def seller_api_token_create(
    *, user: User, name: str, scopes, expires_at=None
) -> tuple[ApiToken, str]:
    """Create the user's API token (see `accounts.services.api_token_create`). With the `sell`
    scope it acts for the user's seller, which needs membership and two-factor authentication."""
    seller = seller_for_api_token_user(user=user) if ApiTokenScope.SELL in set(scopes) else None
    return api_token_create(
        user=user, name=name, scopes=scopes, expires_at=expires_at, seller_id=seller.pk if seller else None
    )


# --- the host agent's token -----------------------------------------------------------------------

AGENT_TOKEN_START = "evxa_"  # noqa: S105 (the visible start of every agent token, not a secret)


@dataclass(frozen=True)
class AgentTokenCreated:
    token: AgentToken
    secret: str  # shown to the seller once, never stored


@transaction.atomic
def agent_token_create(*, seller: Seller, server_id: int, user: User) -> AgentTokenCreated:
    """A new agent token for one of the seller's servers (not retired); the server's previous
    token, if any, is revoked in the same transaction (rotation: one live token per server).
    Raises ServerNotFound (also for another seller's server), ServerLocked (retired)."""
    server = _server_locked(server_id=server_id, seller=seller)
    if server.status == ServerStatus.RETIRED:
        raise ServerLocked(_("This server is retired."), code="server_retired")
    now = timezone.now()
    revoked = AgentToken.objects.filter(server=server, revoked_at__isnull=True).update(revoked_at=now)
    if revoked:
        ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.TOKEN_REVOKED)
    secret = AGENT_TOKEN_START + secrets.token_urlsafe(30)
    token = AgentToken.objects.create(
        server=server, key_hash=token_secret_hash(secret), prefix=secret[:PREFIX_LENGTH], created_by=user
    )
    ServerEvent.objects.create(
        server=server, at=now, kind=ServerEventKind.TOKEN_CREATED, detail={"prefix": token.prefix}
    )
    return AgentTokenCreated(token=token, secret=secret)


@transaction.atomic
def agent_token_revoke(*, seller: Seller, server_id: int) -> int:
    """Revoke the live agent token of one of the seller's servers: its agent is refused from its
    next heartbeat on. Returns how many were revoked (0 or 1). Raises ServerNotFound."""
    server = _server_locked(server_id=server_id, seller=seller)
    now = timezone.now()
    revoked = AgentToken.objects.filter(server=server, revoked_at__isnull=True).update(revoked_at=now)
    if revoked:
        ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.TOKEN_REVOKED)
    return revoked
