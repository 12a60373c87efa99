"""The seller portal's payouts page: the seller's requests and their states, the available
earnings, and (for owners) the form that requests a payout."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing.exceptions import PayoutRefused
from billing.selectors import payout_available, payout_minimum, payouts_for_seller
from billing.services import payout_request

from .selectors import is_owner
from .views import seller_member_required


def _page(request, seller, *, amount="", error=None, status=200):
    return render(request, "sellers/portal/payouts.html", {
        "seller": seller,
        "payouts": payouts_for_seller(seller=seller).select_related("requested_by"),
        "available": payout_available(seller=seller),
        "minimum": payout_minimum(),
        "is_owner": is_owner(seller=seller, user=request.user),
        "amount": amount,
        "error": error,
    }, status=status)


@seller_member_required
def portal_payouts(request, *, seller):
    return _page(request, seller)


@require_POST
@seller_member_required
def portal_payout_request(request, *, seller):
    amount = request.POST.get("amount", "")
    try:
        payout_request(seller_id=seller.pk, requested_by=request.user, amount_text=amount)
    except PayoutRefused as refused:
        return _page(request, seller, amount=amount, error=refused.message, status=400)
    messages.success(request, _("Your payout request is recorded; the amount is reserved."))
    return redirect("sellers:portal-payouts")
