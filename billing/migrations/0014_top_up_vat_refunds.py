"""VAT refunds: a top-up records the VAT ID that VIES had not confirmed when it was made, and the
VAT charged because of it is refunded with a credit note (net zero) once VIES confirms the number.
The operator groups read the new model too (accounts/roles.py)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0013_invoice_number_room_for_credit_notes'),
    ]

    operations = [
        migrations.CreateModel(
            name='TopUpVatRefund',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('currency', models.CharField(max_length=3, verbose_name='currency')),
                ('vat_amount', models.DecimalField(decimal_places=2, max_digits=12, verbose_name='VAT refunded')),
                ('vat_id', models.CharField(max_length=20, verbose_name='VAT ID confirmed')),
                ('confirmed_at', models.DateTimeField(verbose_name='confirmed by VIES at')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='created at')),
            ],
            options={
                'verbose_name': 'VAT refund',
                'verbose_name_plural': 'VAT refunds',
                'ordering': ('-created_at', '-id'),
            },
        ),
        migrations.RemoveConstraint(
            model_name='creditnote',
            name='billing_creditnote_net_positive',
        ),
        migrations.AddField(
            model_name='topup',
            name='unconfirmed_vat_id',
            field=models.CharField(blank=True, max_length=20, verbose_name='VAT ID awaiting VIES'),
        ),
        migrations.AlterField(
            model_name='creditnote',
            name='refund',
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='credit_note', to='billing.topuprefund', verbose_name='top-up refund'),
        ),
        migrations.AddField(
            model_name='topupvatrefund',
            name='ledger_transaction',
            field=models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='top_up_vat_refund', to='billing.ledgertransaction', verbose_name='ledger transaction'),
        ),
        migrations.AddField(
            model_name='topupvatrefund',
            name='top_up',
            field=models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='vat_refund', to='billing.topup', verbose_name='top-up'),
        ),
        migrations.AddField(
            model_name='creditnote',
            name='vat_refund',
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='credit_note', to='billing.topupvatrefund', verbose_name='VAT refund'),
        ),
        migrations.AddConstraint(
            model_name='creditnote',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('refund__isnull', False), ('vat_refund__isnull', True)), models.Q(('refund__isnull', True), ('vat_refund__isnull', False)), _connector='OR'), name='billing_creditnote_one_refund'),
        ),
        migrations.AddConstraint(
            model_name='creditnote',
            constraint=models.CheckConstraint(condition=models.Q(('net__gt', 0), models.Q(('net', 0), ('vat_amount__gt', 0), ('vat_refund__isnull', False)), _connector='OR'), name='billing_creditnote_credits_something'),
        ),
        migrations.AddConstraint(
            model_name='topupvatrefund',
            constraint=models.CheckConstraint(condition=models.Q(('vat_amount__gt', 0)), name='billing_topupvatrefund_vat_positive'),
        ),
        migrations.RunPython(groups_sync, migrations.RunPython.noop),
    ]
