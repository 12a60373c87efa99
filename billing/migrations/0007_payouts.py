# Payouts and the payouts-pending ledger account kind.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_sums_to_the_cent'),
        ('sellers', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='ledgeraccount',
            name='kind',
            field=models.CharField(choices=[('wallet', 'Buyer wallet'), ('seller_earnings', 'Seller earnings'), ('platform_revenue', 'Platform revenue'), ('vat_payable', 'VAT payable'), ('payment_clearing', 'Payment clearing'), ('adjustments', 'Adjustments'), ('fx', 'Currency exchange'), ('payouts_pending', 'Payouts pending')], max_length=20, verbose_name='kind'),
        ),
        migrations.CreateModel(
            name='Payout',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('amount', models.DecimalField(decimal_places=2, max_digits=12, verbose_name='amount (USD)')),
                ('currency', models.CharField(default='USD', editable=False, max_length=3, verbose_name='currency')),
                ('status', models.CharField(choices=[('requested', 'Requested'), ('paid', 'Paid'), ('rejected', 'Rejected')], default='requested', max_length=10, verbose_name='status')),
                ('requested_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='requested at')),
                ('decided_at', models.DateTimeField(blank=True, null=True, verbose_name='decided at')),
                ('rejection_reason', models.TextField(blank=True, verbose_name='reason for rejection')),
                ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='decided by')),
                ('requested_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='requested by')),
                ('reservation', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='payout_reserved', to='billing.ledgertransaction', verbose_name='reservation')),
                ('seller', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='payouts', to='sellers.seller', verbose_name='seller')),
                ('settlement', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='payout_settled', to='billing.ledgertransaction', verbose_name='payment or release')),
            ],
            options={
                'verbose_name': 'payout',
                'verbose_name_plural': 'payouts',
                'ordering': ('-requested_at', '-id'),
                'constraints': [models.CheckConstraint(condition=models.Q(('amount__gt', 0)), name='billing_payout_amount_positive'), models.CheckConstraint(condition=models.Q(('currency', 'USD')), name='billing_payout_currency_usd'), models.CheckConstraint(condition=models.Q(models.Q(('status', 'rejected'), _negated=True), models.Q(('rejection_reason', ''), _negated=True), _connector='OR'), name='billing_payout_rejected_has_reason'), models.CheckConstraint(condition=models.Q(models.Q(('status', 'requested'), ('decided_by__isnull', True), ('decided_at__isnull', True)), models.Q(models.Q(('status', 'requested'), _negated=True), ('decided_by__isnull', False), ('decided_at__isnull', False)), _connector='OR'), name='billing_payout_decided_has_who_and_when'), models.CheckConstraint(condition=models.Q(('status', 'requested'), ('settlement__isnull', False), _connector='OR'), name='billing_payout_decided_is_posted')],
            },
        ),
    ]
