from marketplace.errors import DomainError


class ProfileRejected(DomainError):
    code = "profile_rejected"


class OperatorNotAllowed(DomainError):
    """The operator's role does not include this action. Nothing was changed."""

    code = "operator_not_allowed"


class ReasonRequired(DomainError):
    """An operator action that needs a written reason was given none. Nothing was changed."""

    code = "reason_required"


class ApiTokenRejected(DomainError):
    """A token that cannot be created as asked. Codes: `name_required`, `name_too_long`,
    `scopes_required`, `scope_unknown`, `seller_required`, `expiry_in_past`, `tokens_too_many`."""

    code = "api_token_rejected"


class ApiTokenNotFound(DomainError):
    code = "api_token_not_found"
