from functools import wraps
from urllib.parse import urlencode

from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from billing.selectors import seller_earnings_summary, seller_payouts_pending, seller_revenue_by_rental
from billing.services import server_failure_report
from exchange.charts import utilisation_by_day, utilisation_summary, utilisation_svg
from exchange.exceptions import OfferNotFound, OfferRejected
from exchange.selectors import (
    offer_active_for_server,
    offer_book_place,
    offer_get_for_seller,
    offer_pricing_help,
    rentals_for_seller,
    seller_utilisation,
    server_totals,
    servers_with_offers_for_seller,
)
from exchange.services import (
    offer_post,
    offer_update,
    offer_withdraw,
    price_message,
    price_problem,
    server_edit,
    server_retire,
)
from marketplace import formatting
from marketplace.views_support import own_path

from .exceptions import (
    ApplicationInvalid,
    ApplicationLocked,
    ApplicationNotFound,
    InvitationNotFound,
    MemberInvalid,
    ServerInvalid,
    ServerLocked,
    ServerNotFound,
)
from .forms import (
    SERVER_FORM_FIELDS,
    ApplicationForm,
    InvitationForm,
    OfferForm,
    PricingHelpForm,
    ServerForm,
)
from .models import ServerStatus
from .selectors import (
    agent_state_of,
    application_state_for,
    invitation_open_for_user,
    invitations_open_for_seller,
    is_owner,
    members_for_seller,
    seller_for_member,
    server_agents_for_seller,
    server_get_for_seller,
    server_isolation_checklist,
)
from .services import (
    application_save,
    application_submit,
    invitation_accept,
    member_invite,
    server_register,
)


def sell(request):
    member = request.user.is_authenticated and seller_for_member(user=request.user) is not None
    return render(request, "sellers/sell.html", {
        "fee": formatting.percent(settings.PLATFORM_FEE_PERCENT), "is_member": member,
    })


# The session key of where to come back to once two-factor authentication is on.
TWO_FACTOR_NEXT = "two_factor_next"


def two_factor_url(path: str) -> str:
    return f"{reverse('sellers:two-factor')}?{urlencode({'next': path})}"


@login_required
def two_factor(request):
    """Set up two-factor authentication and come back to `next` (a path of this site) after it:
    the set-up's last page links there. With it already on, straight back."""
    back = own_path(request, request.GET.get("next"))
    if back and is_mfa_enabled(request.user):
        request.session.pop(TWO_FACTOR_NEXT, None)
        return redirect(back)
    if back:
        request.session[TWO_FACTOR_NEXT] = back
    else:
        request.session.pop(TWO_FACTOR_NEXT, None)
    return redirect("mfa_activate_totp")


def terms(request):
    return render(request, "sellers/terms.html", {
        "fee": formatting.percent(settings.PLATFORM_FEE_PERCENT),
    })


@login_required
def apply(request):
    state = application_state_for(applicant=request.user)
    application = state.application
    two_factor_missing = False
    if is_mfa_enabled(request.user):
        request.session.pop(TWO_FACTOR_NEXT, None)  # back from its set-up: the way back is used
    form = ApplicationForm(instance=state.draft)
    if request.method == "POST" and state.editable:
        form = ApplicationForm(request.POST, instance=state.draft)
        if form.is_valid():
            try:
                application = application_save(applicant=request.user, fields=form.service_fields())
                if "submit" in request.POST:
                    application_submit(applicant=request.user)
                    messages.success(
                        request, _("Your application is submitted. We will email you our decision.")
                    )
                else:
                    messages.success(
                        request, _("Your draft is saved. You can come back and finish it later.")
                    )
                return redirect("sellers:apply")
            except ApplicationInvalid as invalid:
                for field, errors in invalid.errors.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            except (ApplicationLocked, ApplicationNotFound) as error:
                form.add_error(None, error.message)
                two_factor_missing = error.code == "two_factor_required"
    country = application.country if application is not None else ""
    return render(request, "sellers/apply.html", {
        "form": form, "application": application, "editable": state.editable,
        "country": formatting.country_name(country) if country else "",
        "two_factor_url": two_factor_url(request.path) if two_factor_missing else "",
    })


# --- The seller portal ---------------------------------------------------------------------------


def seller_member_required(view):
    """Sellers' members with two-factor authentication on. The view gets `seller` as a keyword.
    Someone invited who has not joined yet is sent to their invitation, to accept it."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        seller = seller_for_member(user=request.user)
        if seller is None:
            invitation = invitation_open_for_user(user=request.user)
            if invitation is not None:
                return redirect("sellers:invitation", invitation_id=invitation.pk)
            messages.info(
                request, _("The seller portal is for the members of a seller. Apply to sell below.")
            )
            return redirect("sellers:sell")
        if not is_mfa_enabled(request.user):
            messages.warning(
                request, _("Turn on two-factor authentication before you open the seller portal.")
            )
            # A form sent is not sent again after the set-up: back to the portal's first page then.
            back = request.get_full_path() if request.method == "GET" else reverse("sellers:portal")
            return redirect(two_factor_url(back))
        request.session.pop(TWO_FACTOR_NEXT, None)  # back from its set-up: the way back is used
        return view(request, *args, seller=seller, **kwargs)

    return wrapped


def _form_errors(form, error) -> None:
    """Put a domain error on the form: per field when it names fields, else on the whole form."""
    errors = getattr(error, "errors", None) or {None: [error.message]}
    for field, messages_ in errors.items():
        for message in messages_:
            form.add_error(field if field in form.fields else None, message)


@login_required
def invitation(request, invitation_id):
    """The invitation the email links to: the signed-in user whose verified address it was sent to
    accepts it (a POST) and joins the seller. Anyone else finds nothing here."""
    found = invitation_open_for_user(user=request.user, invitation_id=invitation_id)
    if request.method == "POST":
        try:
            membership = invitation_accept(user=request.user, invitation_id=invitation_id)
        except InvitationNotFound:
            found = None
        else:
            messages.success(request, _("You have joined %(name)s as a member.") % {
                "name": membership.seller.name
            })
            return redirect("sellers:portal")
    return render(
        request, "sellers/invitation.html", {"invitation": found}, status=200 if found is not None else 404
    )


@seller_member_required
def portal_dashboard(request, *, seller):
    totals = server_totals(seller_id=seller.pk)
    utilisation = seller_utilisation(seller_id=seller.pk, gpus=totals.gpus)
    earnings = seller_earnings_summary(seller_id=seller.pk)
    return render(request, "sellers/portal/dashboard.html", {
        "seller": seller, "totals": totals, "this_month": earnings.this_month,
        "total": earnings.total, "utilisation": utilisation,
        "utilisation_svg": utilisation_svg(utilisation), "utilisation_days": utilisation_by_day(utilisation),
        "utilisation_summary": utilisation_summary(utilisation),
        "pending_payouts": seller_payouts_pending(seller_id=seller.pk),
    })


@seller_member_required
def portal_servers(request, *, seller):
    servers = list(servers_with_offers_for_seller(seller_id=seller.pk))
    agents, now = server_agents_for_seller(seller_id=seller.pk), timezone.now()
    for server in servers:
        agent = agents.get(server.pk)
        server.agent_state = agent_state_of(agent=agent, now=now)
        server.agent_mismatch = bool(agent and agent.mismatch)
    return render(request, "sellers/portal/servers.html", {"seller": seller, "servers": servers})


@seller_member_required
def portal_server_register(request, *, seller):
    form = ServerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            server = server_register(seller=seller, **form.service_fields())
        except ServerInvalid as error:
            _form_errors(form, error)
        else:
            messages.success(request, _("Your server is registered. We will verify it before it goes live."))
            return redirect("sellers:portal-server", server_id=server.pk)
    return render(
        request, "sellers/portal/server_form.html", {"seller": seller, "form": form, "server": None}
    )


def _server_or_404(seller, server_id):
    server = server_get_for_seller(seller=seller, server_id=server_id)
    if server is None:
        raise Http404
    return server


@seller_member_required
def portal_server_edit(request, server_id, *, seller):
    server = _server_or_404(seller, server_id)
    initial = {name: getattr(server, name) for name in SERVER_FORM_FIELDS}
    initial["gpu_model"] = server.gpu_model_id
    form = ServerForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            saved = server_edit(seller=seller, server_id=server.pk, **form.service_fields())
        except (ServerInvalid, ServerLocked, ServerNotFound) as error:
            _form_errors(form, error)
        else:
            if saved.status != server.status:
                messages.warning(request, _(
                    "The server is saved. Its connection, region or GPU model changed, so it is pending "
                    "verification again: its offer is withdrawn until our operators activate it."
                ))
            else:
                messages.success(request, _("The server is saved."))
            return redirect("sellers:portal-server", server_id=server.pk)
    return render(
        request, "sellers/portal/server_form.html", {"seller": seller, "form": form, "server": server}
    )


@seller_member_required
def portal_server(request, server_id, *, seller):
    """One server: its offer, the offer's place in the book, and the forms to change it."""
    server = _server_or_404(seller, server_id)
    offer = offer_active_for_server(seller_id=seller.pk, server_id=server.pk)
    form = OfferForm(initial={"gpus": offer.gpus_offered, "price_usd": offer.price_usd} if offer else None)
    return _server_page(request, seller=seller, server=server, offer=offer, form=form)


def _server_page(request, *, seller, server, offer, form, status=200):
    agent = getattr(server, "agent", None)  # the reverse one-to-one raises when there is none
    if server.status == ServerStatus.RETIRED:  # no offer form, no help
        pricing = {}
    elif form.is_bound:  # sent back: the help for the price entered
        pricing = _pricing_help(server=server, offer=offer, data=form.data)
    else:  # the help for the offer's price, or the market alone for a new offer
        pricing = _pricing_help(server=server, offer=offer, price_usd=offer.price_usd if offer else None,
                                gpus=offer.gpus_offered if offer else None)
    return render(request, "sellers/portal/server.html", {
        "seller": seller, "server": server, "offer": offer, "form": form,
        "agent_state": agent_state_of(agent=agent, now=timezone.now()),
        "agent_mismatch": bool(agent and agent.mismatch),
        "place": offer_book_place(seller_id=seller.pk, offer_id=offer.pk) if offer is not None else None,
        "isolation": server_isolation_checklist(seller=seller, server_id=server.pk),
    } | pricing, status=status)


def _pricing_help(*, server, offer, data=None, price_usd=None, gpus=None) -> dict:
    """The context of the pricing help: the market of the server's GPU model, and where the price
    (typed in `data`, else `price_usd`) would stand. A price the exchange would refuse gets its
    refusal as a hint, and the market alone."""
    errors: list[str] = []
    if data is not None:
        form = PricingHelpForm(data)
        if form.is_valid():
            price_usd, gpus = form.cleaned_data["price_usd"], form.cleaned_data["gpus"]
        else:
            errors = list(form.errors.get("price_usd", []))
            price_usd = form.cleaned_data.get("price_usd")
            gpus = form.cleaned_data.get("gpus")
    if price_usd is not None and (problem := price_problem(price_usd)):
        errors, price_usd = [price_message(problem)], None
    if gpus is not None and not 1 <= gpus <= server.gpu_count:
        gpus = None  # the offer form says what is wrong with it; the help reads the whole server
    return {
        "pricing": offer_pricing_help(server=server, price_usd=price_usd, gpus=gpus, offer=offer),
        "pricing_errors": errors,
    }


@seller_member_required
@require_GET
def portal_pricing_help(request, server_id, *, seller):
    """The pricing help alone, for the price being typed in the offer form (htmx asks for it)."""
    server = _server_or_404(seller, server_id)
    offer = offer_active_for_server(seller_id=seller.pk, server_id=server.pk)
    return render(request, "sellers/portal/_pricing_help.html", {"server": server} | _pricing_help(
        server=server, offer=offer, data=request.GET
    ))


@seller_member_required
@require_POST
def portal_offer_post(request, server_id, *, seller):
    server = _server_or_404(seller, server_id)
    form = OfferForm(request.POST)
    if form.is_valid():
        try:
            offer_post(
                server=server, gpus=form.cleaned_data["gpus"], price_usd=form.cleaned_data["price_usd"]
            )
        except OfferRejected as error:
            _form_errors(form, error)
        else:
            messages.success(request, _("Your offer is in the book."))
            return redirect("sellers:portal-server", server_id=server.pk)
    return _server_page(request, seller=seller, server=server, offer=None, form=form, status=400)


def _offer_or_404(seller, offer_id):
    offer = offer_get_for_seller(seller_id=seller.pk, offer_id=offer_id)
    if offer is None:
        raise Http404
    return offer


@seller_member_required
@require_POST
def portal_offer_update(request, offer_id, *, seller):
    offer = _offer_or_404(seller, offer_id)
    form = OfferForm(request.POST)
    if form.is_valid():
        try:
            offer_update(
                offer_id=offer.pk, gpus=form.cleaned_data["gpus"], price_usd=form.cleaned_data["price_usd"]
            )
        except (OfferRejected, OfferNotFound) as error:
            _form_errors(form, error)
        else:
            messages.success(request, _("Your offer is changed. Running rentals keep their price."))
            return redirect("sellers:portal-server", server_id=offer.server_id)
    server = _server_or_404(seller, offer.server_id)
    offer.server = server
    return _server_page(request, seller=seller, server=server, offer=offer, form=form, status=400)


@seller_member_required
@require_POST
def portal_offer_withdraw(request, offer_id, *, seller):
    offer = _offer_or_404(seller, offer_id)
    offer_withdraw(offer_id=offer.pk)
    messages.success(request, _("Your offer is withdrawn. Running rentals go on at their price."))
    return redirect("sellers:portal-server", server_id=offer.server_id)


@seller_member_required
@require_POST
def portal_server_retire(request, server_id, *, seller):
    server = _server_or_404(seller, server_id)
    try:
        server_retire(seller_id=seller.pk, server_id=server.pk)
    except (ServerLocked, ServerNotFound) as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The server is retired."))
    return redirect("sellers:portal-server", server_id=server.pk)


@seller_member_required
@require_POST
def portal_server_failure(request, server_id, *, seller):
    server = _server_or_404(seller, server_id)
    failure = server_failure_report(server_id=server.pk, reported_by=request.user)
    count = len(failure.ended_rental_ids)
    messages.success(request, ngettext(
        "The failure is reported: %(count)s rental ended and its buyer is refunded the unused minutes.",
        "The failure is reported: %(count)s rentals ended and their buyers are refunded the unused minutes.",
        count,
    ) % {"count": count})
    return redirect("sellers:portal-server", server_id=server.pk)


@seller_member_required
def portal_rentals(request, *, seller):
    """Rentals on the seller's servers (the exchange's) with what each has earned (billing's)."""
    running, past = rentals_for_seller(seller_id=seller.pk)
    revenue = seller_revenue_by_rental(rental_ids=[rental.pk for rental in running + past])
    for rental in running + past:
        rental.revenue_usd = revenue.get(rental.pk)
    return render(
        request, "sellers/portal/rentals.html", {"seller": seller, "running": running, "past": past}
    )


@seller_member_required
def portal_members(request, *, seller):
    """The seller's members and open invitations; owners invite by email."""
    owner = is_owner(seller=seller, user=request.user)
    form = InvitationForm(request.POST or None) if owner else None
    status = 200
    if request.method == "POST":
        if not owner:
            return HttpResponseForbidden()
        if form.is_valid():
            try:
                member_invite(seller=seller, invited_by=request.user, email=form.cleaned_data["email"])
            except MemberInvalid as error:
                form.add_error("email", error.message)
            else:
                messages.success(request, _("The invitation is sent."))
                return redirect("sellers:portal-members")
        status = 400
    return render(request, "sellers/portal/members.html", {
        "seller": seller, "owner": owner, "form": form, "members": members_for_seller(seller=seller),
        "invitations": invitations_open_for_seller(seller=seller),
    }, status=status)
