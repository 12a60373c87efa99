"""The seller portal's host agent pages: one server's agent (its state, the GPUs it sees, how it
compares with the registration, events and reliability), its token (created or rotated, and revoked,
each after a confirmation) and the agent's own package, which a seller's server downloads."""

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from .agent_package import agent_package_read, agent_wheel_build
from .agent_texts import agent_enroll_command, agent_install_commands, mismatch_sentences, uptime_words
from .exceptions import ServerLocked, ServerNotFound
from .selectors import agent_token_live, server_agent_view
from .services import agent_token_create, agent_token_revoke
from .views import _server_or_404, seller_member_required


def _site_url(request) -> str:
    return settings.SITE_URL or request.build_absolute_uri("/").rstrip("/")


def _install(request, *, secret: str | None = None) -> dict:
    """The commands a seller runs on the server: none while the exchange has no agent package."""
    package = agent_package_read()
    site = _site_url(request)
    return {
        "install_commands": (
            agent_install_commands(site_url=site, wheel_filename=package.wheel_filename) if package else []
        ),
        "enroll_command": agent_enroll_command(site_url=site, secret=secret),
    }


@seller_member_required
@require_GET
def portal_server_agent(request, server_id, *, seller):
    view = server_agent_view(seller=seller, server_id=server_id, now=timezone.now())
    if view is None:
        raise Http404
    agent = view.agent
    return render(request, "sellers/portal/server_agent.html", {
        "seller": seller, "server": view.server, "view": view, "agent": agent,
        "mismatch": mismatch_sentences(mismatch=agent.mismatch) if agent else [],
        "uptime": uptime_words(seconds=agent.uptime_seconds) if agent else "",
        "skew": abs(agent.clock_skew_seconds) if agent else 0,
        **_install(request),
    })


@seller_member_required
@require_http_methods(["GET", "POST"])
def portal_agent_token(request, server_id, *, seller):
    """Create the server's agent token, or rotate it: the form says which token it replaces, so a
    second submission (or a colleague's rotation meanwhile) asks again rather than revoking the
    secret just shown. The secret is shown once, on the answer to the form."""
    server = _server_or_404(seller, server_id)
    live = agent_token_live(server_id=server.pk)
    replaces = request.POST.get("replaces", "")
    if request.method == "POST" and replaces == (str(live.pk) if live else ""):
        try:
            created = agent_token_create(seller=seller, server_id=server.pk, user=request.user)
        except (ServerLocked, ServerNotFound) as error:
            messages.error(request, error.message)
            return redirect("sellers:portal-server-agent", server_id=server.pk)
        return render(request, "sellers/portal/agent_token_created.html", {
            "seller": seller, "server": server, "token": created.token, "secret": created.secret,
            "rotated": live is not None, **_install(request, secret=created.secret),
        })
    return render(request, "sellers/portal/agent_token.html", {
        "seller": seller, "server": server, "live": live, "changed": request.method == "POST",
    })


@seller_member_required
@require_http_methods(["GET", "POST"])
def portal_agent_token_revoke(request, server_id, *, seller):
    """Revoking asks once more (the agent is refused from its next heartbeat on), then revokes."""
    server = _server_or_404(seller, server_id)
    if request.method == "POST":
        try:
            revoked = agent_token_revoke(seller=seller, server_id=server.pk)
        except ServerNotFound as missing:
            raise Http404 from missing
        if revoked:
            messages.success(request, _("The agent token is revoked: the agent is refused from now on."))
        else:
            messages.info(request, _("This server has no agent token to revoke."))
        return redirect("sellers:portal-server-agent", server_id=server.pk)
    return render(request, "sellers/portal/agent_token_revoke.html", {
        "seller": seller, "server": server, "live": agent_token_live(server_id=server.pk),
    })


@require_GET
def agent_download(request, filename):
    """The agent's wheel, for `pip install` on a seller's server: public, as the agent holds no
    secret (its token is given at enrolment). Only the current version's file name answers."""
    package = agent_package_read()
    if package is None or filename != package.wheel_filename:
        raise Http404
    response = HttpResponse(agent_wheel_build(package=package), content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{package.wheel_filename}"'
    return response
