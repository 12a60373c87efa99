from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("profile/", views.profile_edit, name="profile"),
    path("api-tokens/", views.api_tokens, name="api-tokens"),
    path("api-tokens/<int:pk>/revoke/", views.api_token_revoke_confirm, name="api-token-revoke"),
]
