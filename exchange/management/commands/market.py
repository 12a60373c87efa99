from django.core.management.base import BaseCommand

from exchange.selectors import market_is_open
from exchange.services import market_close, market_open


class Command(BaseCommand):
    help = "Open the market (and run one matching pass per GPU model), close it, or show its state."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["open", "close", "status"])

    def handle(self, *args, action: str, **options):
        if action == "open":
            rentals = market_open(by="manage.py market open")
            self.stdout.write(f"Market open; the opening pass matched {len(rentals)} bid(s).")
        elif action == "close":
            market_close(by="manage.py market close")
            self.stdout.write("Market closed.")
        else:
            self.stdout.write("Market open." if market_is_open() else "Market closed.")
