"""`python -m everx_agent run`: what the systemd unit starts."""

from .main import main

raise SystemExit(main())
