"""Twelve aliases, `alias_00` to `alias_11`, each pointing at the URL of its box."""

from __future__ import annotations

from tests.resource_support import alias

from remit import ref

COUNT = 12

# The loader reads module-level variables, so each declaration is made one.
for _index in range(COUNT):
    globals()[f"alias_{_index:02d}"] = alias(
        name=f"alias-{_index:02d}", target=ref(f"box_{_index:02d}", "url")
    )
