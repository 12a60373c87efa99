"""`python -m everx_cli` runs the command line, as the `everx` script does."""

from .main import main

main()
