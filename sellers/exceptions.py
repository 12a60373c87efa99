"""Domain errors of seller onboarding. Each has a stable `code` and a translated `message`."""

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
