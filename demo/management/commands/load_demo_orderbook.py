from django.core.management.base import BaseCommand

from demo.seed import demo_orderbook_load


class Command(BaseCommand):
    help = "Load the demo sellers, servers and asks; local demo database only. Safe to run again."

    def handle(self, *args, **options):
        posted = demo_orderbook_load()
        self.stdout.write(f"Demo order book: {posted} asks posted.")
