from django.contrib import admin

from .models import Bid, Market, Offer, Rental


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


@admin.register(Bid)
class BidAdmin(admin.ModelAdmin):
    list_display = (
        "id", "buyer", "gpu_model", "gpus", "max_price_usd", "time_in_force", "state", "created_at",
    )
    list_filter = ("state", "time_in_force", "gpu_model")
    search_fields = ("buyer__email",)
    list_select_related = ("buyer", "gpu_model")
    readonly_fields = [field.name for field in Bid._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Rental)
class RentalAdmin(admin.ModelAdmin):
    list_display = ("id", "buyer", "gpu_model", "gpus", "price_usd", "state", "started_at", "paid_through")
    list_filter = ("state", "end_reason", "gpu_model")
    search_fields = ("buyer__email", "server__name")
    list_select_related = ("buyer", "gpu_model")
    readonly_fields = [field.name for field in Rental._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
