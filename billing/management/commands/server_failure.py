from datetime import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing.services import server_failure_report
from sellers.models import Server


class Command(BaseCommand):
    help = (
        "Report a seller's server as failed: withdraw its offer, end its rentals (reason: server "
        "failure) and refund each buyer the unused minutes of the paid hour. Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("server_id", type=int, help="Id of the server that failed.")
        parser.add_argument(
            "--at", default=None,
            help="When it failed, ISO 8601 with a time zone (2026-12-01T10:20:00Z). Default: now.",
        )

    def handle(self, *args, server_id: int, at: str | None, **options):
        when = None
        if at:
            try:
                when = datetime.fromisoformat(at)
            except ValueError as invalid:
                raise CommandError(f"--at is not an ISO 8601 time: {at!r}.") from invalid
            if timezone.is_naive(when):
                raise CommandError("--at needs a time zone, for example 2026-12-01T10:20:00Z.")
        try:
            failure = server_failure_report(server_id=server_id, at=when)
        except Server.DoesNotExist as missing:
            raise CommandError(f"There is no server {server_id}.") from missing
        except ValueError as invalid:
            raise CommandError(str(invalid)) from invalid
        self.stdout.write(
            f"Server {failure.server_id} failed at {failure.at.isoformat()}: "
            f"{len(failure.ended_rental_ids)} rentals ended"
            + (f", offer {failure.withdrawn_offer_id} withdrawn." if failure.withdrawn_offer_id else ".")
        )
        for refund in failure.refunds:
            if refund.transaction is not None:
                self.stdout.write(
                    f"  rental {refund.rental_id}: {refund.unused_minutes} unused minutes, "
                    f"{refund.amount} {refund.currency} refunded (ledger transaction {refund.transaction.pk})"
                )
            else:
                self.stdout.write(f"  rental {refund.rental_id}: nothing to refund")
