from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from marketplace import formatting

from .exceptions import ApplicationInvalid, ApplicationLocked, ApplicationNotFound
from .forms import ApplicationForm
from .models import OPEN_APPLICATION_STATUSES, SellerApplication
from .services import application_save, application_submit


def sell(request):
    return render(request, "sellers/sell.html", {
        "fee": formatting.percent(settings.PLATFORM_FEE_PERCENT),
    })


def terms(request):
    return render(request, "sellers/terms.html", {
        "fee": formatting.percent(settings.PLATFORM_FEE_PERCENT),
    })


def _latest_application(user) -> SellerApplication | None:
    """The user's open application, or else their latest decided one: never anyone else's."""
    applications = SellerApplication.objects.filter(applicant=user)
    return (
        applications.filter(status__in=OPEN_APPLICATION_STATUSES).first()
        or applications.order_by("-created_at").first()
    )


@login_required
def apply(request):
    application = _latest_application(request.user)
    # A rejected applicant may start a new application; a submitted or approved one is read-only.
    editable = application is None or application.is_editable or application.status == "rejected"
    draft = application if application is not None and application.is_editable else None
    form = ApplicationForm(instance=draft)
    if request.method == "POST" and editable:
        form = ApplicationForm(request.POST, instance=draft)
        if form.is_valid():
            try:
                application = application_save(applicant=request.user, fields=form.service_fields())
                if "submit" in request.POST:
                    application_submit(applicant=request.user)
                    messages.success(
                        request, _("Your application is submitted. We will email you our decision.")
                    )
                else:
                    messages.success(
                        request, _("Your draft is saved. You can come back and finish it later.")
                    )
                return redirect("sellers:apply")
            except ApplicationInvalid as invalid:
                for field, errors in invalid.errors.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            except (ApplicationLocked, ApplicationNotFound) as error:
                form.add_error(None, error.message)
    country = application.country if application is not None else ""
    return render(request, "sellers/apply.html", {
        "form": form, "application": application, "editable": editable,
        "country": formatting.country_name(country) if country else "",
    })
