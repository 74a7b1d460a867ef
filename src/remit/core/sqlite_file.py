"""The SQLite file under a database URL: private to its owner, in a folder that exists, and
checked before remit writes to it.

- A new file is made 0600 (and the app's `.remit` folder, when remit makes it, 0700). SQLite
  gives its `-wal` and `-shm` files the mode of the database file, so they are private too. An
  existing file's mode is left as it is: its owner may share it with a group on purpose. A file
  every local user can read is named in a warning, with the `chmod` that makes it private.
- A file whose folder does not exist is refused (a mistyped URL would otherwise start an empty
  database), except an app's own `.remit` folder, which remit makes.
- An existing file is checked with `PRAGMA quick_check` on a read-only connection before
  anything else opens it: a file that is not a SQLite database, or fails the check, is refused
  with one line naming it and the first problem SQLite found, and nothing is written to it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from remit.core.errors import DatabaseError
from remit.core.settings import DATA_DIR

log = logging.getLogger("remit.store")

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def open_sqlite_file(path: Path) -> None:
    """Make the SQLite file at `path` ready to open: its folder exists, a new file is private,
    an existing one passes its check. Raises `DatabaseError`, having written nothing."""
    _ensure_folder(path.parent, path)
    if path.is_dir():
        raise DatabaseError(
            f"the SQLite database {path} is a folder, not a file: point REMIT_DATABASE_URL at a "
            f"file in it, e.g. sqlite:///{path / 'remit.sqlite'}"
        )
    if _create_private(path):
        return
    if path.stat().st_size == 0:
        return  # an empty file is a new database to SQLite
    check_sqlite_file(path)
    _warn_if_public(path)


def private_file(path: str | Path) -> int:
    """Open (making it if needed) a file only its owner may read, e.g. a lock file beside the
    database; returns the file descriptor."""
    return os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)


def check_sqlite_file(path: Path) -> None:
    """Raise `DatabaseError` unless the file at `path` opens as a SQLite database and passes
    `PRAGMA quick_check`. Reads only: the connection is read-only."""
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30)
    except sqlite3.Error as error:
        raise _unopenable(path, error) from None
    try:
        first = conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.OperationalError as error:
        raise _unopenable(path, error) from None
    except sqlite3.DatabaseError as error:
        raise _corrupt(path, f"it is not a usable SQLite database ({error})") from None
    finally:
        conn.close()
    problem = first_problem(first[0] if first else "no answer to its integrity check")
    if problem is not None:
        raise _corrupt(path, f"it fails its integrity check ({problem})")


def first_problem(answer: str) -> str | None:
    """The first problem in `PRAGMA quick_check`'s answer; None when it says `ok`."""
    if answer == "ok":
        return None
    lines = [line for line in answer.splitlines() if line and not line.startswith("***")]
    return lines[0] if lines else answer


def _ensure_folder(folder: Path, path: Path) -> None:
    if folder.is_dir():
        return
    if folder.name == DATA_DIR and folder.parent.is_dir():
        try:
            folder.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            pass
        except OSError as error:
            raise DatabaseError(
                f"cannot make the folder {folder} for the SQLite database {path}: "
                f"{error.strerror}. Make {folder.parent} writable, or point REMIT_DATABASE_URL "
                "elsewhere"
            ) from None
        else:
            os.chmod(folder, FOLDER_MODE)  # whatever the umask
        if folder.is_dir():
            return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise DatabaseError(
        f"the SQLite database {path} is in {folder}, which {what}: correct REMIT_DATABASE_URL, "
        f"or make the folder first (mkdir -p {folder}; chmod 700 {folder})"
    )


def _create_private(path: Path) -> bool:
    """Make an empty file at `path`, mode 0600, unless one is there; True if made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    except OSError as error:
        raise DatabaseError(
            f"cannot make the SQLite database {path}: {error.strerror}. Make {path.parent} "
            "writable, or point REMIT_DATABASE_URL elsewhere"
        ) from None
    try:
        os.fchmod(fd, FILE_MODE)  # whatever the umask
    finally:
        os.close(fd)
    return True


def _warn_if_public(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o004:
        log.warning(
            "the SQLite database %s has mode %04o: every local user can read its runs' inputs "
            "and outputs; make it private with `chmod 600 %s`",
            path,
            mode,
            path,
        )


def _corrupt(path: Path, what: str) -> DatabaseError:
    return DatabaseError(
        f"the SQLite database {path} cannot be used: {what}. remit has written nothing to it: "
        f"stop remit's processes, move the damaged file aside and restore {path} from a backup "
        "(README, Databases), or point REMIT_DATABASE_URL at another file"
    )


def _unopenable(path: Path, error: sqlite3.Error) -> DatabaseError:
    return DatabaseError(
        f"cannot open the SQLite database {path}: {error}. Check that this user may read and "
        "write the file and its folder"
    )
