from django.contrib import admin

from .models import GpuModel


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = (
        "name", "architecture", "memory_gb", "memory_type", "bandwidth_gb_s",
        "bf16_dense_tflops", "fp64_tflops", "position",
    )
    list_filter = ("architecture", "memory_type", "ray_tracing_cores")
    search_fields = ("name", "slug", "architecture")
    prepopulated_fields = {"slug": ("name",)}
    list_editable = ("position",)
