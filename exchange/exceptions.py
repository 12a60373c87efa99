"""Domain errors of the exchange. Each has a stable `code` and a translated `message`.

Views turn `...NotFound` into 404 responses and the others into form errors or messages.
"""

from marketplace.errors import DomainError


class OfferRejected(DomainError):
    """An offer (ask) that cannot be posted or changed as asked. Codes: `gpus_out_of_range`,
    `price_out_of_range`, `price_off_tick`, `whole_server_all_gpus`, `seller_suspended`,
    `server_retired`, `offer_exists`, `offer_not_active`. Nothing is written when it is raised."""

    code = "offer_rejected"


class OfferNotFound(DomainError):
    code = "offer_not_found"


class BidRejected(DomainError):
    """A bid that cannot be placed. Codes: `price_out_of_range`, `price_off_tick`, `gpus_not_allowed`,
    `gpus_unavailable`, `hours_invalid`, `expiry_in_past`, `expiry_not_allowed`, `gpu_model_unknown`,
    `region_unknown`, `min_reliability_invalid`, `isolation_levels_invalid`, `time_in_force_unknown`,
    `market_closed`, `insufficient_balance` and the codes of `SshKeyInvalid`. Nothing is written
    when it is raised."""

    code = "bid_rejected"


class BidNotFound(DomainError):
    """No such bid, or not the caller's: views answer 404 either way."""

    code = "bid_not_found"


class BidNotOpen(DomainError):
    """The buyer's own bid, but already filled, cancelled or expired."""

    code = "bid_not_open"


class RentalNotFound(DomainError):
    """No such rental, not the caller's, or already ended: views answer 404."""

    code = "rental_not_found"


class RentalEnded(DomainError):
    code = "rental_ended"


class ServiceTokenUnavailable(DomainError):
    """The buyer's own live rental, but no service token to show: its template takes none
    (`service_token_none`) or it was shown already (`service_token_shown`). The API answers 409."""

    code = "service_token_unavailable"
    status = 409


class SshKeyInvalid(DomainError):
    """Not one acceptable SSH public key. Codes: `ssh_key_invalid`, `ssh_key_type`, `ssh_key_too_weak`,
    `ssh_key_too_long`, `ssh_key_several`."""

    code = "ssh_key_invalid"


class SshKeyRejected(DomainError):
    """A key that cannot be saved. Codes: `name_required`, `name_too_long`, `ssh_key_duplicate`,
    `ssh_keys_too_many` and those of `SshKeyInvalid`. Nothing is written."""

    code = "ssh_key_rejected"


class SshKeyNotFound(DomainError):
    """No such saved key, or not the caller's: 404 either way."""

    code = "ssh_key_not_found"


# --- the host agent's heartbeat (exchange.services.agents) --------------------------------------


class AgentTokenInvalid(DomainError):
    """No live agent token has this secret (unknown, revoked, or not an agent token): 401."""

    code = "token_invalid"


class AgentServerRetired(DomainError):
    """The token's server is retired: its agent has nothing left to do (403)."""

    code = "server_retired"


class HeartbeatInvalid(DomainError):
    """A heartbeat that does not hold what the protocol says (docs/agent.md): a value of the wrong
    kind or out of range. `errors`: `[{field, code, detail}]`, the field as `gpus.3.index` (422)."""

    code = "invalid_input"

    def __init__(self, message, *, errors: list[dict]):
        super().__init__(message)
        self.field_errors = errors


class IsolationInvalid(HeartbeatInvalid):
    """A heartbeat whose isolation report does not hold (sellers.isolation.isolation_report_check):
    refused as a whole, and its server sold as a whole server until a sound report (422)."""

    code = "isolation_invalid"


class DevicesNotHeld(DomainError):
    """An operator trusts the device locks of a server whose locks were not held
    (`exchange.services.server_devices_trust`). Nothing is written."""

    code = "devices_not_held"


# --- price alerts (exchange.services.alerts) ------------------------------------------------------


class PriceAlertRejected(DomainError):
    """An alert that cannot be set. Codes: `price_out_of_range`, `price_off_tick`, `gpus_not_allowed`,
    `gpu_model_unknown`, `alert_duplicate`, `alerts_too_many`. Nothing is written."""

    code = "price_alert_rejected"


class PriceAlertNotFound(DomainError):
    """No such alert, or not the caller's (or an unknown unsubscribe token): 404 either way."""

    code = "price_alert_not_found"
