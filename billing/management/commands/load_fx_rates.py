from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.services import DEMO_RATES_PATH, fx_rates_load, fx_rates_read


class Command(BaseCommand):
    help = "Load exchange rates (units per US dollar) from a JSON file. Safe to run again."

    def add_arguments(self, parser):
        parser.add_argument(
            "path", nargs="?", type=Path, default=DEMO_RATES_PATH,
            help="Rates file; billing/data/demo_fx_rates.json by default.",
        )

    def handle(self, *args, path: Path, **options):
        try:
            rates = fx_rates_read(path=path)
        except (OSError, KeyError, TypeError, ValueError) as error:
            raise CommandError(f"Cannot read exchange rates from {path}: {error}") from error
        added = fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)
        self.stdout.write(
            f"Exchange rates valid from {rates.valid_from.isoformat()}: {added} added, "
            f"{len([c for c in rates.rates if c != 'USD']) - added} already present."
        )
