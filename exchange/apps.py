from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ExchangeConfig(AppConfig):
    name = "exchange"
    verbose_name = _("Exchange")
