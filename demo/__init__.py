"""Demo data for `make run` and the tests: never installed by the production settings."""
