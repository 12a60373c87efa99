from django.contrib import admin

from .models import Market, Offer


@admin.register(Offer)
class OfferAdmin(admin.ModelAdmin):
    list_display = ("server", "gpus_offered", "price_usd", "state", "created_at")
    list_filter = ("state", "server__gpu_model")
    search_fields = ("server__name", "server__seller__name")
    list_select_related = ("server__seller", "server__gpu_model")


@admin.register(Market)
class MarketAdmin(admin.ModelAdmin):
    list_display = ("__str__", "is_open", "changed_at")

    def has_add_permission(self, request):
        return not Market.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False
