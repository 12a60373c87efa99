"""The market side of the exchange's watch over the host agents (billing's `agents_check` drives it
once a minute, and moves the money): the watch's own clock, a server judged unreachable, a GPU
found failed.

The watch's clock (`agent_monitor_tick`): `AgentMonitor.up_since` is when the watch last started
running without a gap. Heartbeats cannot arrive while the exchange is down, so after an outage no
server is judged silent before the threshold has passed again since then.

Lock order of a server judged unreachable: its agent's row first (the judgement's claim, taken by
a conditional update: of two runs at once, the second finds it taken; a heartbeat, which takes
the same row first, either comes before and the server is not silent, or waits and then clears
the mark), then the usual order: rental rows, wallets, market lock, server rows.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.urls import reverse

from marketplace import formatting
from marketplace.emails import absolute_url, email_send
from sellers.models import AgentMonitor, Server, ServerAgent, ServerEvent, ServerEventKind
from sellers.selectors import seller_owners

# A gap longer than this between two runs of the watch (every minute) is an outage of the exchange.
MONITOR_GAP = timedelta(seconds=120)


@transaction.atomic
def agent_monitor_tick(*, now: datetime) -> datetime:
    """Record a run of the watch at `now` and return since when it has run without a gap: `now`
    after a gap longer than MONITOR_GAP (or the first time). Two runs at once queue on the row and
    the second sees the first's time, so it keeps the same `up_since`."""
    monitor, _ = AgentMonitor.objects.select_for_update().get_or_create(pk=AgentMonitor.SINGLETON_ID)
    last = monitor.last_run_at
    if last is None or monitor.up_since is None or now - last > MONITOR_GAP:
        monitor.up_since = now
    if last is None or now > last:
        monitor.last_run_at = now
    monitor.save(update_fields=["last_run_at", "up_since"])
    return monitor.up_since


def server_unreachable_claim(*, server_id: int, heard_before: datetime, now: datetime) -> bool:
    """Mark the server's agent unreachable since `now` if it is still silent (last heard before
    `heard_before`) and not marked yet: True when this call marked it. Call it first in the
    transaction that ends the server's rentals (see the module's lock order); a server never heard
    has no agent row and nothing to claim (False)."""
    return bool(
        ServerAgent.objects.filter(
            server_id=server_id, unreachable_since__isnull=True, last_heartbeat_at__lt=heard_before
        ).update(unreachable_since=now)
    )


def server_unreachable_record(
    *, server_id: int, last_heard_at: datetime | None, now: datetime, ended_rental_ids: list[int]
) -> ServerEvent:
    """What follows a server judged unreachable, once its rentals have ended: it is no longer
    verified (not listable until its agent reports again), the event is written, and each owner of
    its seller is emailed. Inside the caller's transaction, after its rentals (server row last)."""
    Server.objects.filter(pk=server_id).update(agent_verified_at=None)
    event = ServerEvent.objects.create(
        server_id=server_id, at=now, kind=ServerEventKind.UNREACHABLE,
        detail={
            "last_heard_at": last_heard_at.isoformat() if last_heard_at else None,
            "ended_rental_ids": ended_rental_ids,
        },
    )
    server = Server.objects.select_related("seller").get(pk=server_id)
    for owner in seller_owners(seller_id=server.seller_id):
        email_send(
            template="exchange/email/server_unreachable", user=owner,
            key=f"server-unreachable:{server_id}:{event.pk}:{owner.pk}",
            context=lambda: {
                "server": server.name,
                "seller": server.seller.name,
                "last_heard": formatting.datetime_long(last_heard_at) if last_heard_at else "",
                "rentals": len(ended_rental_ids),
                "url": absolute_url(reverse("sellers:portal-server", args=[server_id])),
            },
        )
    return event


def rental_gpu_failed_record(
    *, server_id: int, rental_id: int, reasons: dict[int, str], reported_at: datetime, now: datetime
) -> ServerEvent:
    """The event of GPUs found failed under a rental (`reasons`: index -> "missing" or "ecc"), in
    the caller's transaction that ends the rental."""
    return ServerEvent.objects.create(
        server_id=server_id, at=now, kind=ServerEventKind.GPU_FAILED,
        detail={
            "rental_id": rental_id,
            "gpus": {str(index): reason for index, reason in sorted(reasons.items())},
            "reported_at": reported_at.isoformat(),
        },
    )
