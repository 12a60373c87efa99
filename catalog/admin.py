from django.contrib import admin

from .models import GpuModel
from .services import gpu_model_save


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

    def save_model(self, request, obj, form, change):
        # Through the service: the edit and its audit entry (before and after) commit together.
        gpu_model_save(operator=request.user, gpu_model=obj, changed=form.changed_data)

    def has_delete_permission(self, request, obj=None):
        return False  # offers, bids and rentals refer to it; retire a GPU by editing, never delete
