"""Every write to the order book, the market, the market side of servers and sellers, and the life
of a rental, one module per subject:

- `offers`: sellers' asks, and the price rules asks and bids share;
- `bids`: buyers' bids and their expiry;
- `market`: the matching pass every change runs (and the email when it cancels a bid), opening
  and closing the market, the preview;
- `servers`: what changes a server or a seller and the book together (activate, edit, retire,
  suspend, reinstate, the market side of a failure);
- `rentals`: the life of a rental, as billing drives it;
- `ssh_keys`: buyers' saved SSH public keys;
- `alerts`: buyers' price alerts and the check that emails them;
- `agents`: the host agent's heartbeat (verification of a server's GPUs, delivery of logins, the
  desired state it answers);
- `isolation`: the agents' isolation reports, the level each server is sold at and what a change
  of it does to the book, device drifts and operators trusting a server's device locks again;
- `agent_watch`: the market side of the watch over host agents (its clock, a server unreachable, a
  GPU failed), which billing's `agents_check` drives;
- `reliability`: the minutes each server was listed and heard, and the reliability scores.

Each service owns its transaction and takes the market lock of the GPU model before touching
servers, offers or bids (lock order in `exchange.matching`). Matching runs after every change
that can make a trade possible: a bid placed, an offer posted, grown or made cheaper, GPUs freed
by a rental that ends, a server activated, the market opening. Callers import the names from
here.
"""

from .agent_watch import (
    agent_monitor_tick,
    rental_gpu_failed_record,
    server_unreachable_claim,
    server_unreachable_record,
)
from .agents import (
    DesiredLogin,
    DesiredState,
    DriftReport,
    GpuReport,
    HeartbeatReport,
    LoginReport,
    agent_heartbeat_receive,
    agent_heartbeat_refuse,
    agent_token_check,
    heartbeat_report_check,
    rental_deliver,
    rental_login_probe,
)
from .alerts import (
    MAX_PRICE_ALERTS,
    AlertsChecked,
    price_alert_set,
    price_alert_stop,
    price_alert_stop_by_token,
    price_alerts_check,
)
from .bids import (
    MAX_BID_HOURS,
    BidPlaced,
    bid_cancel,
    bid_place,
    bid_placed_for_form,
    bid_terms_check,
    bids_expire,
    container_template_choose,
    isolation_filter_parse,
    isolation_levels_message,
    isolation_levels_parse,
    min_reliability_check,
    min_reliability_message,
    min_reliability_parse,
    order_terms_check,
)
from .isolation import DevicesTrusted, container_templates_held_refresh, level_is_lower, server_devices_trust
from .market import (
    OpeningPreview,
    OpeningTrade,
    market_close,
    market_match_notify,
    market_open,
    market_open_preview,
    market_reliability_changed,
)
from .offers import (
    PRICE_CAP_USD,
    PRICE_TICK_USD,
    offer_post,
    offer_update,
    offer_withdraw,
    price_message,
    price_problem,
)
from .reliability import (
    ReliabilityRefreshed,
    Score,
    availability_count,
    reliability_refresh,
    reliability_score,
)
from .rentals import (
    rental_end,
    rental_hours_used,
    rental_mark_paid,
    rental_service_token_reveal,
    rental_stop,
    rentals_due,
    rentals_mark_paid,
)
from .servers import (
    ServerFailed,
    seller_reinstate,
    seller_suspend,
    server_activate,
    server_edit,
    server_failure_apply,
    server_retire,
    server_retire_by_operator,
)
from .ssh_keys import MAX_SSH_KEYS, ssh_key_add, ssh_key_delete, ssh_key_name_clean

__all__ = [
    "DesiredLogin", "DesiredState", "DriftReport", "GpuReport", "HeartbeatReport", "LoginReport",
    "agent_heartbeat_receive", "agent_heartbeat_refuse", "agent_token_check", "heartbeat_report_check",
    "rental_deliver", "rental_login_probe",
    "DevicesTrusted", "container_templates_held_refresh", "level_is_lower", "server_devices_trust",
    "ReliabilityRefreshed", "Score",
    "agent_monitor_tick", "availability_count", "reliability_refresh", "reliability_score",
    "rental_gpu_failed_record", "server_unreachable_claim", "server_unreachable_record",
    "MAX_BID_HOURS", "MAX_SSH_KEYS", "PRICE_CAP_USD", "PRICE_TICK_USD",
    "BidPlaced", "OpeningPreview", "OpeningTrade", "ServerFailed",
    "bid_cancel", "bid_place", "bid_placed_for_form", "bid_terms_check", "bids_expire",
    "container_template_choose", "isolation_filter_parse", "isolation_levels_message",
    "isolation_levels_parse", "min_reliability_check", "min_reliability_message",
    "min_reliability_parse", "order_terms_check",
    "market_close", "market_match_notify", "market_open", "market_open_preview", "market_reliability_changed",
    "offer_post", "offer_update", "offer_withdraw", "price_message", "price_problem",
    "rental_end", "rental_hours_used", "rental_mark_paid", "rental_service_token_reveal",
    "rental_stop", "rentals_due", "rentals_mark_paid",
    "seller_reinstate", "seller_suspend",
    "server_activate", "server_edit", "server_failure_apply", "server_retire", "server_retire_by_operator",
    "ssh_key_add", "ssh_key_delete", "ssh_key_name_clean",
    "MAX_PRICE_ALERTS", "AlertsChecked",
    "price_alert_set", "price_alert_stop", "price_alert_stop_by_token", "price_alerts_check",
]
