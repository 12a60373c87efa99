"""Card top-ups with Stripe Checkout: one Checkout Session per top-up, and the webhook that
credits the wallet once Stripe says the money is there."""

import logging
from decimal import Decimal

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction

from ..exceptions import WebhookRejected
from ..models import PaymentProvider, ProviderEvent, TopUp, TopUpStatus
from .top_ups import top_up_mark_failed, top_up_mark_paid

logger = logging.getLogger(__name__)

PAID_EVENTS = {"checkout.session.completed", "checkout.session.async_payment_succeeded"}
FAILED_EVENTS = {"checkout.session.async_payment_failed", "checkout.session.expired"}


def _minor_units(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value())


def stripe_checkout_start(*, top_up: TopUp, success_url: str, cancel_url: str) -> str:
    """Open a Checkout Session for the top-up's total and return the address to send the buyer to."""
    session = stripe.checkout.Session.create(
        api_key=settings.STRIPE_SECRET_KEY,
        mode="payment",
        customer_email=top_up.user.email,
        client_reference_id=str(top_up.pk),
        metadata={"top_up_id": str(top_up.pk), "reference": top_up.reference},
        line_items=[{
            "quantity": 1,
            "price_data": {
                "currency": top_up.currency.lower(),
                "unit_amount": _minor_units(top_up.total),
                "product_data": {"name": f"EverXCloud top-up {top_up.reference}"},
            },
        }],
        success_url=success_url,
        cancel_url=cancel_url,
        idempotency_key=f"checkout-{top_up.pk}",
    )
    TopUp.objects.filter(pk=top_up.pk).update(provider_session_id=session.id)
    return session.url


def _top_up_for(session: dict) -> TopUp | None:
    top_up_id = (session.get("metadata") or {}).get("top_up_id") or session.get("client_reference_id")
    if not top_up_id or not str(top_up_id).isdigit():
        return None
    return TopUp.objects.filter(pk=int(top_up_id), provider=PaymentProvider.STRIPE).first()


def _amount_matches(top_up: TopUp, session: dict) -> bool:
    return (
        session.get("amount_total") == _minor_units(top_up.total)
        and (session.get("currency") or "").upper() == top_up.currency
    )


def stripe_webhook_handle(*, payload: bytes, signature: str | None) -> str:
    """Verify, record once, act. Returns what happened, for the log and the tests."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret or not signature:
        raise WebhookRejected("missing signature")
    try:
        event = stripe.Webhook.construct_event(payload, signature, secret)
    except (ValueError, stripe.SignatureVerificationError) as error:
        raise WebhookRejected(str(error)) from error
    with transaction.atomic():
        try:
            with transaction.atomic():
                ProviderEvent.objects.create(
                    provider=PaymentProvider.STRIPE, event_id=event["id"],
                    event_type=event["type"], payload=event.to_dict(),
                )
        except IntegrityError:
            return "duplicate"
        return _dispatch(event["type"], event["data"]["object"].to_dict())


def _dispatch(event_type: str, session: dict) -> str:
    if event_type not in PAID_EVENTS | FAILED_EVENTS:
        return "ignored"
    top_up = _top_up_for(session)
    if top_up is None:
        logger.warning("Stripe %s for an unknown top-up", event_type)
        return "unknown top-up"
    if event_type in FAILED_EVENTS:
        top_up_mark_failed(top_up_id=top_up.pk)
        return "failed"
    if session.get("payment_status") != "paid":
        return "awaiting payment"  # e.g. a bank debit: async_payment_succeeded follows
    if not _amount_matches(top_up, session):
        logger.error("Stripe session %s pays another amount than top-up %s", session.get("id"), top_up.pk)
        return "amount mismatch"
    if top_up.status == TopUpStatus.PAID:
        return "already paid"
    top_up_mark_paid(top_up_id=top_up.pk)
    return "credited"
