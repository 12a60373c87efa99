from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("profile/", views.profile_edit, name="profile"),
]
