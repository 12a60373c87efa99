"""The seller portal's money pages: the payout details (owners change them) and the ledger of the
seller's earnings."""

from django.contrib import messages
from django.http import HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from billing.selectors import seller_earnings_entries, seller_earnings_summary

from .exceptions import PayoutDetailsInvalid
from .forms import PayoutDetailsForm
from .selectors import is_owner
from .services import seller_payout_details_update
from .views import _form_errors, seller_member_required


@seller_member_required
def portal_payout_details(request, *, seller):
    """Members see the payout account (IBAN masked); owners change it."""
    owner = is_owner(seller=seller, user=request.user)
    status = 200
    form = None
    if owner:
        form = PayoutDetailsForm(request.POST or None, initial={
            "account_holder": seller.payout_account_holder,
        })
    if request.method == "POST":
        if not owner:
            return HttpResponseForbidden()
        if form.is_valid():
            try:
                seller_payout_details_update(
                    seller=seller, user=request.user, iban=form.cleaned_data["iban"],
                    account_holder=form.cleaned_data["account_holder"],
                )
            except PayoutDetailsInvalid as error:
                if error.code == "not_owner":
                    return HttpResponseForbidden()
                _form_errors(form, error)
            else:
                messages.success(request, _("Your payout details are saved."))
                return redirect("sellers:portal-payout-details")
        status = 400
    return render(request, "sellers/portal/payout_details.html", {
        "seller": seller, "owner": owner, "form": form,
    }, status=status)


@seller_member_required
def portal_earnings(request, *, seller):
    """The latest entries of the seller's earnings account and the earnings per month."""
    earnings = seller_earnings_summary(seller_id=seller.pk)
    return render(request, "sellers/portal/earnings.html", {
        "seller": seller,
        "entries": seller_earnings_entries(seller_id=seller.pk),
        "months": earnings.months,
        "total": earnings.total,
    })
