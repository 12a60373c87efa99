from django.core.management.base import BaseCommand

from demo.seed import DEMO_EMAIL, DEMO_PASSWORD, demo_buyer_load


class Command(BaseCommand):
    help = "Create the demo buyer (wallet, one running rental); local demo database only. Safe to rerun."

    def handle(self, *args, **options):
        created = demo_buyer_load()
        state = "created" if created else "already there"
        self.stdout.write(f"Demo buyer {state}: sign in as {DEMO_EMAIL} / {DEMO_PASSWORD}")
