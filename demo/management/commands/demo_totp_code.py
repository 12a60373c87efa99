from django.core.management.base import BaseCommand

from demo.seed import demo_totp_code


class Command(BaseCommand):
    help = "Print the current two-factor code of a demo operator (local demo database only)."

    def add_arguments(self, parser):
        parser.add_argument("email")

    def handle(self, *args, email: str, **options):
        self.stdout.write(demo_totp_code(email=email))
