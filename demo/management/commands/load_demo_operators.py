from django.core.management.base import BaseCommand

from demo.seed import DEMO_OPERATORS, DEMO_PASSWORD, demo_operators_load


class Command(BaseCommand):
    help = (
        "Create the demo operators (superuser, support, finance) with two-factor authentication on, "
        "a bank transfer to credit and a seller application to review. Local demo database only."
    )

    def handle(self, *args, **options):
        created = demo_operators_load()
        self.stdout.write(f"Demo operators: {len(created)} created.")
        for email, role in DEMO_OPERATORS.items():
            self.stdout.write(f"  {email} / {DEMO_PASSWORD} ({role or 'superuser'})")
        self.stdout.write("  Two-factor code: .venv/bin/python manage.py demo_totp_code <email>")
