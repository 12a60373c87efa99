#!/usr/bin/env python
"""Django's command-line entry point. Without DJANGO_SETTINGS_MODULE it runs the embedded default."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings.embedded")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
