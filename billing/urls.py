from django.urls import path, register_converter

from . import views
from .months import month_parse, month_slug


class StatementMonthConverter:
    """"2026-12" <-> date(2026, 12, 1). A month that does not exist ("2026-13") is no match: 404."""

    regex = "[0-9]{4}-[0-9]{2}"

    def to_python(self, value: str):
        return month_parse(value)

    def to_url(self, value) -> str:
        return value if isinstance(value, str) else month_slug(value)


register_converter(StatementMonthConverter, "statement_month")

app_name = "billing"

urlpatterns = [
    path("top-up/", views.top_up, name="top-up"),
    path("top-ups/<int:pk>/", views.top_up_detail, name="top-up-detail"),
    path("top-ups/<int:pk>/pay/", views.top_up_pay, name="top-up-pay"),
    path("invoices/<str:number>/", views.invoice_view, name="invoice"),
    path("invoices/<str:number>/pdf/", views.invoice_pdf, name="invoice-pdf"),
    path("credit-notes/<str:number>/", views.credit_note_view, name="credit-note"),
    path("credit-notes/<str:number>/pdf/", views.credit_note_pdf, name="credit-note-pdf"),
    path("statements/<statement_month:month>/", views.statement_view, name="statement"),
    path("statements/<statement_month:month>.csv", views.statement_csv_view, name="statement-csv"),
]
