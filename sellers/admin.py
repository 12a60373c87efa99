from django.contrib import admin

from .models import Seller, Server


class ServerInline(admin.TabularInline):
    model = Server
    extra = 0
    fields = ("name", "gpu_model", "gpu_count", "gpus_rented", "region")
    readonly_fields = ("gpus_rented",)


@admin.register(Seller)
class SellerAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "country", "created_at")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    inlines = (ServerInline,)


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ("name", "seller", "gpu_model", "gpu_count", "gpus_rented", "region")
    list_filter = ("gpu_model", "region")
    search_fields = ("name", "seller__name")
    list_select_related = ("seller", "gpu_model")
    readonly_fields = ("gpus_rented",)
