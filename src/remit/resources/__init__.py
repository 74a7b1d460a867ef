"""Declared resources: the data files, the lockfile, plan, apply and drift."""
