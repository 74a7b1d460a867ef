"""The `remit` command line."""
