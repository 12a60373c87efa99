"""The base of every domain error: a stable code for programs and a translated message for people."""


class DomainError(Exception):
    code: str = "error"

    def __init__(self, message, *, code: str | None = None):
        super().__init__(str(message))
        self.message = message
        if code is not None:
            self.code = code
