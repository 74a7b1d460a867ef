"""Twelve boxes, `box_00` to `box_11`, each with the write-only password `BOX_PW`."""

from __future__ import annotations

from tests.resource_support import box

from remit import secret

COUNT = 12

# The loader reads module-level variables, so each declaration is made one.
for _index in range(COUNT):
    globals()[f"box_{_index:02d}"] = box(
        name=f"box-{_index:02d}", size=1 + _index % 3, password=secret("BOX_PW")
    )
