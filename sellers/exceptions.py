"""Domain errors of sellers: onboarding, members, servers and their state. Each has a stable `code`
and a translated `message`."""

from marketplace.errors import DomainError


class ApplicationInvalid(DomainError):
    """Some fields of an application are not valid; `errors` maps each field to its messages.
    Nothing is written when it is raised."""

    code = "application_invalid"

    def __init__(self, message, *, errors: dict[str, list[str]], code: str | None = None):
        super().__init__(message, code=code)
        self.errors = errors


class ApplicationLocked(DomainError):
    """The application is submitted or decided: the applicant cannot change it. Codes:
    `application_locked`, `two_factor_required`, `application_not_open`."""

    code = "application_locked"


class ApplicationNotFound(DomainError):
    code = "application_not_found"


class ServerInvalid(DomainError):
    """A server's fields are not valid; `errors` maps each field to its messages. Codes:
    `server_invalid`, `gpu_count_below_rented`, `gpu_model_rented`. Nothing is written when it is
    raised."""

    code = "server_invalid"

    def __init__(self, message, *, errors: dict[str, list[str]], code: str | None = None):
        super().__init__(message, code=code)
        self.errors = errors


class ServerNotFound(DomainError):
    """No such server, or it belongs to another seller."""

    code = "server_not_found"


class ServerLocked(DomainError):
    """The server cannot change state now. Codes: `server_has_rentals`, `server_retired`,
    `server_not_pending`."""

    code = "server_locked"


class MemberInvalid(DomainError):
    """An invitation cannot be made. Codes: `not_owner`, `email_invalid`, `already_member`,
    `already_invited`. Nothing is written when it is raised."""

    code = "member_invalid"


class InvitationNotFound(DomainError):
    """No such invitation for this user: unknown, or sent to an address they have not confirmed
    (views answer 404). Nothing is written when it is raised."""

    code = "invitation_not_found"


class PayoutDetailsInvalid(DomainError):
    """Payout details cannot be changed. Codes: `not_owner`, `payout_details_invalid` (with
    `errors` per field). Nothing is written when it is raised."""

    code = "payout_details_invalid"

    def __init__(self, message, *, errors: dict[str, list[str]] | None = None, code: str | None = None):
        super().__init__(message, code=code)
        self.errors = errors or {}


class SellerStateInvalid(DomainError):
    """An operator asked for a change the seller's state does not allow (raised by
    `exchange.services.seller_suspend` and `seller_reinstate`). Codes: `already_suspended`,
    `not_suspended`. Nothing is written."""

    code = "seller_state_invalid"
