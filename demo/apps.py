from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Seeding for the local demo database (`make run`) and the tests. Only the embedded and test
    settings install it; its commands refuse to run unless `settings.DEMO_DATA_ALLOWED`."""

    name = "demo"
    verbose_name = "Demo data"

    def ready(self) -> None:
        # The demo servers have no machine behind them: their simulated agents send heartbeats
        # from the beat of `make run` (demo.tasks). Only where this app is installed.
        from marketplace.celery import app

        from .tasks import DEMO_AGENTS_EVERY_SECONDS

        app.conf.beat_schedule["demo-agents-heartbeat"] = {
            "task": "demo.agents_heartbeat", "schedule": DEMO_AGENTS_EVERY_SECONDS,
            "options": {"expires": DEMO_AGENTS_EVERY_SECONDS * 2},
        }
