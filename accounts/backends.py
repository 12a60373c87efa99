"""The authentication backends of settings.AUTHENTICATION_BACKENDS, loading the signed-in user with
their profile in the same query: the time zone middleware and the pages read it for free."""

from allauth.account.auth_backends import AuthenticationBackend
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend


def _user_with_profile(backend, user_id):
    user_model = get_user_model()
    try:
        user = user_model._default_manager.select_related("profile").get(pk=user_id)
    except user_model.DoesNotExist:
        return None
    return user if backend.user_can_authenticate(user) else None


class ProfileModelBackend(ModelBackend):
    def get_user(self, user_id):
        return _user_with_profile(self, user_id)


class ProfileAuthenticationBackend(AuthenticationBackend):
    def get_user(self, user_id):
        return _user_with_profile(self, user_id)
