"""The first answers of the API's writes sent with an Idempotency-Key, kept a day; the operator
groups may read them (after the API tokens' migration, so that whichever runs last gives them
every view permission)."""

import django.utils.timezone
from django.db import migrations, models

from accounts.roles import operator_groups_migrate


def groups_sync(apps, schema_editor):
    operator_groups_migrate(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('marketplace', '0002_operator_groups_outbox'),
        ('accounts', '0007_api_tokens'),
    ]

    operations = [
        migrations.CreateModel(
            name='IdempotencyRecord',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token_id', models.BigIntegerField(verbose_name='API token')),
                ('key', models.CharField(max_length=255, verbose_name='idempotency key')),
                ('method', models.CharField(max_length=10, verbose_name='method')),
                ('path', models.TextField(verbose_name='path')),
                ('body_sha256', models.CharField(max_length=64, verbose_name='body SHA-256')),
                ('completed', models.BooleanField(default=False, verbose_name='completed')),
                ('status', models.PositiveSmallIntegerField(blank=True, null=True, verbose_name='status')),
                ('content_type', models.CharField(blank=True, max_length=200, verbose_name='content type')),
                ('response_body', models.BinaryField(default=b'', verbose_name='response body')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='created at')),
            ],
            options={
                'verbose_name': 'idempotency record',
                'verbose_name_plural': 'idempotency records',
                'indexes': [models.Index(fields=['created_at'], name='marketplace_idem_age_idx')],
                'constraints': [models.UniqueConstraint(fields=('token_id', 'key'), name='marketplace_idempotency_token_key_unique'), models.CheckConstraint(condition=models.Q(('key', ''), _negated=True), name='marketplace_idempotency_key_not_empty'), models.CheckConstraint(condition=models.Q(('completed', False), ('status__isnull', False), _connector='OR'), name='marketplace_idempotency_completed_has_status')],
            },
        ),
        migrations.RunPython(groups_sync, migrations.RunPython.noop),
    ]
