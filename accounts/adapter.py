from allauth.account.adapter import DefaultAccountAdapter
from django.utils import translation

from .services import profile_ensure


class AccountAdapter(DefaultAccountAdapter):
    def save_user(self, request, user, form, commit=True):
        user = super().save_user(request, user, form, commit=commit)
        if commit:
            profile_ensure(user=user, language=translation.get_language())
        return user
