from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from billing.demo import demo_totp_code


class Command(BaseCommand):
    help = "Print the current two-factor code of a demo operator (embedded default only)."

    def add_arguments(self, parser):
        parser.add_argument("email")

    def handle(self, *args, email: str, **options):
        if not settings.PAYMENT_SANDBOX_ENABLED:
            raise CommandError("Demo operators exist only on the embedded default, never in production.")
        try:
            self.stdout.write(demo_totp_code(email=email))
        except ValueError as error:
            raise CommandError(str(error)) from error
