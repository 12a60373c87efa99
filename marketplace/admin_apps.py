"""Django's admin app with our site as `admin.site` (its own module: an AppConfig module with two
configs would leave Django guessing which one `marketplace` means)."""

from django.contrib.admin.apps import AdminConfig


class EverXCloudAdminConfig(AdminConfig):
    default_site = "marketplace.admin_site.EverXCloudAdminSite"
