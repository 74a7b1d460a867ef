"""Ids as people type them: a whole id, or an unambiguous prefix of one (`run_3f9`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.errors import RemitError

_SHOWN = 5


def full_id(
    db: Database,
    column: sa.Column[Any],
    given: str,
    *,
    what: str,
    only: sa.ColumnElement[bool] | None = None,
) -> str:
    """The id `given` names in `column`: itself when an id is exactly that, else the one id that
    begins with it. An unknown id is returned as given, for the caller's lookup to refuse in its
    own words; a prefix of several is refused, naming them. `only`: a prefix matches only the
    rows meeting it (those a principal may read), so a prefix names no id they may not read."""
    if "\x00" in given:
        return given  # no id holds a NUL character: the lookup refuses it
    with db.engine.connect() as conn:
        if conn.execute(sa.select(column).where(column == given).limit(1)).first():
            return given
        escaped = given.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found = list(
            conn.execute(
                sa.select(column)
                .where(column.like(f"{escaped}%", escape="\\"), *([] if only is None else [only]))
                .order_by(column)
                .limit(_SHOWN + 1)
            ).scalars()
        )
    if len(found) == 1:
        return str(found[0])
    if not found:
        return given
    more = " and more" if len(found) > _SHOWN else ""
    raise RemitError(
        f"{what} `{given}` is ambiguous: {', '.join(found[:_SHOWN])}{more} begin with it; "
        "give more of the id"
    )
