from marketplace.errors import DomainError


class ProfileRejected(DomainError):
    code = "profile_rejected"
