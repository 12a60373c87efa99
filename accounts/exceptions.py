from marketplace.errors import DomainError


class ProfileRejected(DomainError):
    code = "profile_rejected"


class OperatorNotAllowed(DomainError):
    """The operator's role does not include this action. Nothing was changed."""

    code = "operator_not_allowed"


class ReasonRequired(DomainError):
    """An operator action that needs a written reason was given none. Nothing was changed."""

    code = "reason_required"
