from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Seeding for the local demo database (`make run`) and the tests. Only the embedded and test
    settings install it; its commands refuse to run unless `settings.DEMO_DATA_ALLOWED`."""

    name = "demo"
    verbose_name = "Demo data"
