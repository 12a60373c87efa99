from django.urls import path

from . import views

app_name = "billing"

urlpatterns = [
    path("top-up/", views.top_up, name="top-up"),
    path("top-ups/<int:pk>/", views.top_up_detail, name="top-up-detail"),
    path("top-ups/<int:pk>/pay/", views.top_up_pay, name="top-up-pay"),
    path("invoices/<str:number>/", views.invoice_view, name="invoice"),
    path("invoices/<str:number>/pdf/", views.invoice_pdf, name="invoice-pdf"),
]
