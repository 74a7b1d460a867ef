"""Acme's operations repo (`app.py`), imported as the package `acme`."""
