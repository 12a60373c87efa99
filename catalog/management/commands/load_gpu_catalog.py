from django.core.management.base import BaseCommand

from catalog.services import gpu_catalog_load, gpu_catalog_read


class Command(BaseCommand):
    help = "Load the GPU catalog from catalog/data/gpu_models.json. Safe to run again."

    def add_arguments(self, parser):
        parser.add_argument(
            "--overwrite", action="store_true",
            help="Also reset existing GPU models to the figures of the data file.",
        )

    def handle(self, *args, overwrite: bool, **options):
        result = gpu_catalog_load(entries=gpu_catalog_read(), overwrite=overwrite)
        self.stdout.write(
            f"GPU catalog: {result.created} created, {result.updated} updated, "
            f"{result.unchanged} unchanged."
        )
