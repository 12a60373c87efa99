from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from billing.services import fx_rates_load, fx_rates_read


class Command(BaseCommand):
    help = "Load exchange rates (units per US dollar) from a JSON file. Safe to run again."

    def add_arguments(self, parser):
        parser.add_argument(
            "path", nargs="?", type=Path,
            help="Rates file; required unless the settings name a default (the local demo's rates).",
        )

    def handle(self, *args, path: Path | None, **options):
        path = path or settings.FX_RATES_DEFAULT_FILE
        if path is None:
            raise CommandError(
                "Give the rates file to load: manage.py load_fx_rates <file>. "
                "Only the local demo database has default rates."
            )
        try:
            rates = fx_rates_read(path=Path(path))
        except (OSError, KeyError, TypeError, ValueError) as error:
            raise CommandError(f"Cannot read exchange rates from {path}: {error}") from error
        added = fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)
        self.stdout.write(
            f"Exchange rates valid from {rates.valid_from.isoformat()}: {added} added, "
            f"{len([c for c in rates.rates if c != 'USD']) - added} already present."
        )
