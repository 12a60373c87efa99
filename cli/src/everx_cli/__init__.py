"""The `everx` command line of EverXCloud, and its API client (`everx_cli.client`)."""

__version__ = "0.1.0"
