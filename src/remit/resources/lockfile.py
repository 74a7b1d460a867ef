"""The lockfile, `remit.lock`: which vendor object each declaration is bound to.

It sits beside the data files and is reviewed in git with them. JSON, keys sorted, two-space
indents and a final newline, so one binding added is one small diff:

    {
      "lockfile": 1,
      "resources": {
        "www": {"id": "rec_8f2k", "type": "dns.record"}
      }
    }

Apply writes it as each resource is bound (and imports add to it), each write a whole new file
renamed into place under a lock, so a crash mid-apply leaves the bindings made so far and never
half a file. It holds ids only: no state, and so no value of a write-only field. The app's
database holds the same bindings (`bindings.py`), which is what a plan reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from remit.core.errors import AppError

FILE = "remit.lock"
VERSION = 1


@dataclass(frozen=True)
class Binding:
    """A declaration bound to the vendor's object `id` of type `type`."""

    type: str
    id: str


class Lockfile:
    """The lockfile at `path` (it need not exist yet: no bindings)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def kept_at(self, path: Path) -> Iterator[None]:
        """Read and write the lockfile at `path` instead until the block ends: a demo's or a
        scenario's own, whose vendors are fakes, while the app folder's binds the real ones."""
        kept = self.path
        self.path = path
        try:
            yield
        finally:
            self.path = kept

    def read(self) -> dict[str, Binding]:
        """The bindings by declaration name; `AppError` naming the file when it cannot be read
        as a lockfile (it is left as it is)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise AppError(f"{self.path}: cannot read the lockfile ({error})") from None
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise AppError(
                f"{self.path} is not a lockfile ({error}): restore it from git, or remove it "
                "and `remit import` each resource again"
            ) from None
        entries = raw.get("resources") if isinstance(raw, dict) else None
        if not isinstance(entries, dict) or raw.get("lockfile") != VERSION:
            raise AppError(
                f"{self.path} is not a lockfile of this remit (it needs "
                f'"lockfile": {VERSION} and "resources"): restore it from git'
            )
        bindings: dict[str, Binding] = {}
        for name, entry in entries.items():
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("type"), str)
                and isinstance(entry.get("id"), str)
            ):
                raise AppError(
                    f"{self.path}: the binding of `{name}` needs a type and an id; restore the "
                    "file from git"
                )
            bindings[name] = Binding(type=entry["type"], id=entry["id"])
        return bindings

    def bind(self, name: str, binding: Binding) -> None:
        """Bind `name` to `binding`, keeping every other binding."""
        with self.held():
            bindings = self.read()
            if bindings.get(name) == binding:
                return
            bindings[name] = binding
            self._write(bindings)

    def unbind(self, name: str) -> None:
        with self.held():
            bindings = self.read()
            if bindings.pop(name, None) is not None:
                self._write(bindings)

    def write(self, bindings: Mapping[str, Binding]) -> None:
        """Replace the file's bindings with `bindings` (under `held()`)."""
        self._write(bindings)

    def _write(self, bindings: Mapping[str, Binding]) -> None:
        text = render(bindings)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with temporary.open("w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        with contextlib.suppress(OSError):
            folder = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)  # the rename itself, durable
            finally:
                os.close(folder)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lockfile's write lock: a bind or unbind elsewhere waits for it."""
        # The folder is locked, not the file: the file is replaced on every write, and a lock
        # file of its own would be one more file beside the data files.
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            yield
        finally:
            os.close(folder)


def render(bindings: Mapping[str, Binding]) -> str:
    """The lockfile's text for `bindings`: the same bindings give the same bytes."""
    entries = {name: {"id": b.id, "type": b.type} for name, b in sorted(bindings.items())}
    return json.dumps({"lockfile": VERSION, "resources": entries}, indent=2, sort_keys=True) + "\n"
