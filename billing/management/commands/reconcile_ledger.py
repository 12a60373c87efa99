from django.core.management.base import BaseCommand, CommandError

from billing.services import ledger_reconcile


class Command(BaseCommand):
    help = (
        "Check every wallet's balance against the ledger, every ledger transaction's balance and "
        "every running rental's payment; record the result (admin: ledger reconciliations). "
        "Exits 1 on a difference."
    )

    def handle(self, *args, **options):
        run = ledger_reconcile()
        if not run.ok:
            for problem in run.problems:
                self.stderr.write(str(problem))
            raise CommandError(f"Reconciliation {run.pk}: {len(run.problems)} problem(s) in the books.")
        self.stdout.write(f"Reconciliation {run.pk}: the books are exact.")
