from django.core.management.base import BaseCommand

from exchange.services import bids_expire


class Command(BaseCommand):
    help = "Mark expired every open bid whose expiry has passed."

    def handle(self, *args, **options):
        self.stdout.write(f"{bids_expire()} bid(s) expired.")
