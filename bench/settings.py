"""The production settings, as the benchmarks run them.

Everything comes from `marketplace.settings.production` and the environment the bench sets
(`bench.run`); three things differ: the collected static files go to the bench's temporary
folder instead of the checkout's `staticfiles/`, no email leaves the machine, and the API's rate
limits are set too high to refuse a request (the limiter still runs on every one).
"""

import os
from pathlib import Path

from marketplace.settings.production import *  # noqa: F403

STATIC_ROOT = Path(os.environ["BENCH_STATIC_ROOT"])
EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
# The API benchmark sends thousands of requests a minute from a few tokens.
API_RATE_LIMIT_PER_MINUTE = 10**9
API_WRITE_RATE_LIMIT_PER_MINUTE = 10**9
# The heartbeat benchmark posts as each agent far more often than once every 30 s.
AGENT_RATE_LIMIT_PER_MINUTE = 10**9
