"""Benchmarks of the public pages, the matching engine and the hourly charging, each against a
physical limit measured in the same run (BENCHMARKS.md). `make bench` runs them."""
