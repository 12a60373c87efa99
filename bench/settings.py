"""The production settings, as the benchmarks run them.

Everything comes from `marketplace.settings.production` and the environment the bench sets
(`bench.run`); two things differ, neither on the measured paths: the collected static files go
to the bench's temporary folder instead of the checkout's `staticfiles/`, and no email leaves
the machine.
"""

import os
from pathlib import Path

from marketplace.settings.production import *  # noqa: F403

STATIC_ROOT = Path(os.environ["BENCH_STATIC_ROOT"])
EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
