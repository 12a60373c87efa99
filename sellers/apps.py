from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SellersConfig(AppConfig):
    name = "sellers"
    verbose_name = _("Sellers")
