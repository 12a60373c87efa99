from django.core.management.base import BaseCommand

from billing.services import rentals_charge_due


class Command(BaseCommand):
    help = "Charge every rental hour that is due now. Safe to run again, and alongside the beat task."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=None, help="Look at most at this many rentals.")

    def handle(self, *args, limit: int | None, **options):
        counts = rentals_charge_due(limit=limit)
        self.stdout.write(", ".join(f"{status}: {count}" for status, count in counts.items()))
