from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = _("Billing")

    def ready(self) -> None:
        # The exchange matches a bid only if its buyer's balance covers the first hour; balances
        # belong to billing, so billing tells the exchange how to check (the exchange never
        # imports billing). Imported here, not at the top: these modules import models, which
        # the app registry loads only after every app config.
        from accounts.vies import vat_id_confirmation_hook_register
        from exchange.payments import first_hour_check_register

        from .selectors import rental_first_hour_payable
        from .services import top_ups_vat_refund_confirmed

        first_hour_check_register(rental_first_hour_payable)
        # Likewise accounts, which records VIES's answers, announces a confirmed VAT ID here, and
        # billing refunds the VAT it charged while the number was awaiting VIES.
        vat_id_confirmation_hook_register(top_ups_vat_refund_confirmed)
