from django.urls import path

from . import views

app_name = "sellers"

urlpatterns = [
    path("sell/", views.sell, name="sell"),
    path("sell/terms/", views.terms, name="terms"),
    path("sell/apply/", views.apply, name="apply"),
]
