"""The Celery application. Queues and the beat schedule are declared here, in code."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings.embedded")

app = Celery("marketplace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
