from marketplace.errors import DomainError


class OfferRejected(DomainError):
    code = "offer_rejected"
