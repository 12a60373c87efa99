from marketplace.errors import DomainError


class OfferRejected(DomainError):
    code = "offer_rejected"


class RentalEnded(DomainError):
    code = "rental_ended"
