"""`manage.py api_schema_export`: write the served OpenAPI document to docs/openapi.json, the
committed copy of the API's contract (tests/marketplace/test_api_schema.py compares the two)."""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from marketplace.api import api

COMMITTED = Path(settings.BASE_DIR) / "docs" / "openapi.json"


def openapi_text() -> str:
    """The document /api/v1/openapi.json serves, as the committed file holds it."""
    schema = api.get_openapi_schema(path_params={})
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class Command(BaseCommand):
    help = "Write the API's OpenAPI document to docs/openapi.json (or --check that it is current)."

    def add_arguments(self, parser):
        parser.add_argument("--output", type=Path, default=COMMITTED, help="where to write it")
        parser.add_argument("--check", action="store_true", help="only fail when the file differs")

    def handle(self, *args, output: Path, check: bool, **options):
        text = openapi_text()
        if check:
            current = output.read_text(encoding="utf-8") if output.exists() else ""
            if current != text:
                raise CommandError(f"{output} is out of date: run `python manage.py api_schema_export`.")
            return
        output.write_text(text, encoding="utf-8")
        self.stdout.write(f"Wrote {output}.")
