"""The bindings of an app's declared resources: kept in its database, written to `remit.lock`.

Apply runs on whichever worker takes it, so what it binds goes to the database, in the step
that binds it: no binding is lost to a crash, or to a worker whose folder is not the one the
apply was asked from. The same step writes the worker's `remit.lock`, and `remit apply` and
`remit import` write the folder's own once they are done, so the file beside the data files,
reviewed in git, says what the database does.

A database with no bindings for the app yet adopts its `remit.lock`'s: the file is how bindings
made before, or on another database, come in.
"""

from __future__ import annotations

import logging
from datetime import datetime

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import bindings
from remit.resources.lockfile import Binding, Lockfile

log = logging.getLogger("remit.resources")


class Bindings:
    """App `app`'s bindings in `db`, mirrored to `lockfile`."""

    def __init__(
        self, db: Database, app: str, lockfile: Lockfile, *, clock: Clock | None = None
    ) -> None:
        self.db = db
        self.app = app
        self.lockfile = lockfile
        self.clock = clock or SystemClock()

    def read(self) -> dict[str, Binding]:
        """The bindings by name: the database's, or the lockfile's when the database has none
        (adopted then). A lockfile that cannot be read is refused, naming it."""
        in_file = self.lockfile.read()
        held = self._rows()
        if held or not in_file:
            return held
        now = self.clock.now()

        def adopt() -> None:
            with self.db.begin() as conn:
                if self._rows(conn):
                    return  # another process adopted them first
                conn.execute(
                    bindings.insert(),
                    [
                        self._values(name, binding, now, "remit:lockfile")
                        for name, binding in in_file.items()
                    ],
                )

        self.db.retrying(f"app {self.app}: adopting {self.lockfile.path}", adopt)
        log.info(
            "app %s: adopted the %d bindings of %s", self.app, len(in_file), self.lockfile.path
        )
        return self._rows()

    def differences(self) -> list[str]:
        """Where `remit.lock` says other than the database, one line per name."""
        in_file, held = self.lockfile.read(), self._rows()
        found: list[str] = []
        for name in sorted(set(in_file) | set(held)):
            was, now = in_file.get(name), held.get(name)
            if was != now:
                found.append(f"{name}: remit.lock has {_shown(was)}, the database {_shown(now)}")
        return found

    def bind(self, name: str, binding: Binding, *, by: str) -> None:
        """Bind `name` in the database, then in the lockfile."""
        now = self.clock.now()

        def write() -> None:
            with self.db.begin() as conn:
                done = conn.execute(
                    bindings.update()
                    .where(bindings.c.app == self.app, bindings.c.name == name)
                    .values(type=binding.type, vendor_id=binding.id, bound_at=now, bound_by=by)
                ).rowcount
                if not done:
                    conn.execute(bindings.insert().values(**self._values(name, binding, now, by)))

        self.db.retrying(f"app {self.app}: binding {name}", write)
        self.lockfile.bind(name, binding)

    def unbind(self, name: str) -> None:
        def write() -> None:
            with self.db.begin() as conn:
                conn.execute(
                    bindings.delete().where(bindings.c.app == self.app, bindings.c.name == name)
                )

        self.db.retrying(f"app {self.app}: unbinding {name}", write)
        self.lockfile.unbind(name)

    def export(self) -> bool:
        """Write `remit.lock` from the database; True when it changed."""
        held = self._rows()
        with self.lockfile.held():
            if self.lockfile.read() == held:
                return False
            self.lockfile.write(held)
        return True

    def _rows(self, conn: sa.Connection | None = None) -> dict[str, Binding]:
        query = sa.select(bindings.c.name, bindings.c.type, bindings.c.vendor_id).where(
            bindings.c.app == self.app
        )
        if conn is None:
            rows = self.db.read(f"app {self.app}: bindings", lambda own: own.execute(query).all())
        else:
            rows = conn.execute(query).all()
        return {row.name: Binding(type=row.type, id=row.vendor_id) for row in rows}

    def _values(self, name: str, binding: Binding, at: datetime, by: str) -> dict[str, object]:
        return {
            "app": self.app,
            "name": name,
            "type": binding.type,
            "vendor_id": binding.id,
            "bound_at": at,
            "bound_by": by,
        }


def _shown(binding: Binding | None) -> str:
    return "unbound" if binding is None else f"{binding.type} {binding.id}"
