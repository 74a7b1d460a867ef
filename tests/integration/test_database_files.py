"""The files under remit's data: a SQLite file private to its owner, in a folder that exists,
refused when it is damaged (with nothing written to it); a key file named, with the secret being
read, when it cannot be used."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit import Client
from remit.connectors.credentials import SecretError, SecretKey, Secrets
from remit.core.database import Database
from remit.core.errors import DatabaseError
from remit.core.sqlite_file import first_problem
from remit.testing import Harness
from tests.integration.test_secrets import (
    APP,
    TOKEN,
    UnlistedVaultDriver,
    VaultDriver,
    vault_app,
)
from tests.support import make_app


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def build_database(path: Path, *, runs: int) -> None:
    """A real remit database at `path`: prepared, holding `runs` started runs, in WAL mode with
    everything checkpointed into the file itself."""
    with Client.connect(make_app(), f"sqlite:///{path}") as client:
        for n in range(runs):
            client.runs.start("purchase", {"sku": f"sku-{n:05d}", "quantity": 1})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with 150 runs, made once for the module; each test damages its own copy."""
    path = tmp_path_factory.mktemp("built") / "remit.sqlite"
    build_database(path, runs=150)
    return path


def garbage(path: Path) -> None:
    path.write_bytes(b"these are not the bytes of a database\n" * 2000)


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flipped_page(path: Path) -> None:
    """Invert the rows of the middle page of remit's runs table, keeping the page's header and
    its list of where each row starts."""
    conn = sqlite3.connect(path)
    leaves = [
        row[0]
        for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'remit_runs' AND pagetype = 'leaf' "
            "ORDER BY pageno"
        )
    ]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert len(leaves) >= 3, leaves  # a page in the middle, between others
    data = bytearray(path.read_bytes())
    start = (leaves[len(leaves) // 2] - 1) * size
    content = int.from_bytes(data[start + 5 : start + 7], "big")  # where its rows begin
    for i in range(start + content, start + size):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (garbage, "it is not a usable SQLite database (file is not a database)"),
    "truncated": (
        truncated,
        "it is not a usable SQLite database (database disk image is malformed)",
    ),
    "flipped page": (flipped_page, "it fails its integrity check ("),
}


def damaged(built: Path, folder: Path, damage: str) -> Path:
    path = folder / "remit.sqlite"
    shutil.copyfile(built, path)
    path.chmod(0o600)
    DAMAGES[damage][0](path)
    return path


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_sqlite_file_is_refused_in_one_line_and_left_as_it_was(
    built: Path, tmp_path: Path, damage: str
) -> None:
    """SQLite only: a damaged file is refused by `Database` and `Client.connect` alike, saying
    what is wrong and how to restore it, and its bytes are unchanged."""
    path = damaged(built, tmp_path, damage)
    before = sha256(path)

    for opening in (
        lambda: Database(f"sqlite:///{path}"),
        lambda: Client.connect(make_app(), f"sqlite:///{path}"),
    ):
        with pytest.raises(DatabaseError) as refused:
            opening()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"the SQLite database {path} cannot be used: ")
        assert DAMAGES[damage][1] in message
        assert f"restore {path} from a backup" in message
        assert "remit has written nothing to it" in message

    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if "prepare-lock" in p.name) == []


def test_a_flipped_page_is_named_by_the_first_problem_sqlite_reports(
    built: Path, tmp_path: Path
) -> None:
    """SQLite only: the message carries SQLite's first finding, not the whole list."""
    path = damaged(built, tmp_path, "flipped page")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    answer = conn.execute("PRAGMA quick_check").fetchone()[0]
    conn.close()
    first = first_problem(answer)
    assert first is not None
    assert first in answer
    assert "\n" not in first

    with pytest.raises(DatabaseError) as refused:
        Database(f"sqlite:///{path}")
    assert f"it fails its integrity check ({first})" in str(refused.value)


def test_a_healthy_database_opens_after_its_check_and_keeps_its_runs(
    built: Path, tmp_path: Path
) -> None:
    """SQLite only: the check passes a sound file, which then takes new runs as before."""
    path = tmp_path / "remit.sqlite"
    shutil.copyfile(built, path)
    with Client.connect(make_app(), f"sqlite:///{path}") as client:
        assert len(client.runs.list(limit=500)) == 150
        client.runs.start("purchase", {"sku": "sku-new", "quantity": 1})
        assert len(client.runs.list(limit=500)) == 151


def test_quick_check_runs_once_per_database_not_per_connection(tmp_path: Path) -> None:
    """SQLite only: pooled connections open without checking again: a file damaged after its
    `Database` was made is not checked by it again (the next process is the one that refuses)."""
    path = tmp_path / "remit.sqlite"
    db = Database(f"sqlite:///{path}")
    db.prepare()
    with db.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    db.dispose()  # every pooled connection closed
    with open(path, "r+b") as handle:  # damage the header's page size: unreadable
        handle.seek(16)
        handle.write(b"\x00\x03")
    # A new pooled connection opens with no check: SQLite's own error.
    with pytest.raises(sa.exc.DatabaseError), db.engine.connect() as conn:
        conn.execute(sa.text("SELECT count(*) FROM remit_meta"))
    with pytest.raises(DatabaseError, match="cannot be used"):
        Database(f"sqlite:///{path}")


def test_a_new_database_file_and_its_folder_are_private(tmp_path: Path, umask_022: None) -> None:
    """SQLite only: under a umask of 022, remit makes the app's `.remit` folder 0700 and the
    file, its WAL and shared-memory files, and its prepare lock 0600."""
    app = tmp_path / "app"
    app.mkdir()
    path = app / ".remit" / "remit.sqlite"
    db = Database(f"sqlite:///{path}")
    try:
        db.prepare()
        with db.begin() as conn:  # a connection held open: the WAL files exist
            conn.execute(sa.text("SELECT 1"))
            companions = {p.name: mode(p) for p in path.parent.iterdir()}
    finally:
        db.dispose()

    assert mode(path.parent) == 0o700
    assert companions == {
        "remit.sqlite": 0o600,
        "remit.sqlite-wal": 0o600,
        "remit.sqlite-shm": 0o600,
        "remit.sqlite.prepare-lock": 0o600,
    }


def test_a_folder_the_user_made_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    """SQLite only: remit makes the file private but leaves a folder it did not make alone."""
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    db = Database(f"sqlite:///{folder / 'remit.sqlite'}")
    db.prepare()
    db.dispose()
    assert mode(folder) == 0o755
    assert mode(folder / "remit.sqlite") == 0o600


@pytest.mark.parametrize("given", [0o644, 0o640, 0o600])
def test_an_existing_file_keeps_its_mode_and_one_everyone_can_read_is_named(
    built: Path, tmp_path: Path, given: int, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite only: remit never changes an existing file's mode (a group may share it on
    purpose); a file every local user can read gets a warning with the `chmod` to fix it."""
    path = tmp_path / "remit.sqlite"
    shutil.copyfile(built, path)
    path.chmod(given)
    with caplog.at_level(logging.WARNING, logger="remit.store"):
        db = Database(f"sqlite:///{path}")
        db.prepare()
        db.dispose()
    assert mode(path) == given
    warned = [r.getMessage() for r in caplog.records if "chmod 600" in r.getMessage()]
    if given & 0o004:
        assert warned == [
            f"the SQLite database {path} has mode 0644: every local user can read its runs' "
            f"inputs and outputs; make it private with `chmod 600 {path}`"
        ]
    else:
        assert warned == []


@pytest.mark.parametrize(
    "relative", ["nowhere/remit.sqlite", "nowhere/deeper/remit.sqlite", "nowhere/.remit/x.sqlite"]
)
def test_a_url_whose_folder_does_not_exist_is_refused_and_makes_no_folder(
    tmp_path: Path, relative: str
) -> None:
    """SQLite only: a mistyped folder is named, with what to do; nothing is made. An app's
    `.remit` folder is made only inside a folder that exists."""
    path = tmp_path / relative
    with pytest.raises(DatabaseError) as refused:
        Database(f"sqlite:///{path}")
    message = str(refused.value)
    assert f"the SQLite database {path} is in {path.parent}, which does not exist" in message
    assert "correct REMIT_DATABASE_URL" in message
    assert f"mkdir -p {path.parent}" in message
    assert list(tmp_path.iterdir()) == []


def test_a_url_naming_a_folder_or_a_file_in_a_file_is_refused(tmp_path: Path) -> None:
    """SQLite only: the database path must be a file in a folder."""
    (tmp_path / "plain").write_text("")
    with pytest.raises(DatabaseError, match="which is not a folder"):
        Database(f"sqlite:///{tmp_path / 'plain' / 'remit.sqlite'}")
    with pytest.raises(DatabaseError, match="is a folder, not a file"):
        Database(f"sqlite:///{tmp_path}")


def test_the_default_database_of_an_app_is_made_in_its_remit_folder(
    tmp_path: Path, umask_022: None
) -> None:
    """SQLite only: with no REMIT_DATABASE_URL the app's `.remit` folder is made, private."""
    with Client.connect(make_app(), environ={}) as client:
        assert client.runs.list() == []
    folder = Path(".remit").resolve()
    assert folder.is_dir()  # the working directory is the app's folder here
    assert mode(folder) == 0o700
    assert mode(folder / "remit.sqlite") == 0o600


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The harness and `Client.connect(App)` take the working directory as the app's folder.
    monkeypatch.chdir(tmp_path)


def test_a_key_file_others_may_read_is_named_with_the_secret(db: Database, tmp_path: Path) -> None:
    """Both databases: reading or setting a secret under a 0644 key file names both."""
    key_file = tmp_path / "app" / ".remit" / "secret.key"
    Secrets(db, APP, SecretKey(file=key_file)).set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.chmod(0o644)

    expected = (
        f"the key file {key_file} has mode 0644; it must be readable only by its owner: "
        f"chmod 600 {key_file}"
    )
    with pytest.raises(SecretError) as read:
        Secrets(db, APP, SecretKey(file=key_file)).get("SHOP_TOKEN")
    assert str(read.value) == f"secret `SHOP_TOKEN`: {expected}"
    assert read.value.name == "SHOP_TOKEN"
    with pytest.raises(SecretError) as written:
        Secrets(db, APP, SecretKey(file=key_file)).set("MAIL_TOKEN", "m", by="user:ann")
    assert str(written.value) == f"secret `MAIL_TOKEN`: {expected}"
    assert [info.name for info in Secrets(db, APP, SecretKey(file=key_file)).list()] == [
        "SHOP_TOKEN"
    ]


def test_a_key_file_this_user_cannot_read_is_named_with_the_secret(
    db: Database, tmp_path: Path
) -> None:
    """Both databases: a key file with no read permission for its owner is named too."""
    if os.geteuid() == 0:
        pytest.skip("root reads every file whatever its mode")
    key_file = tmp_path / "app" / ".remit" / "secret.key"
    Secrets(db, APP, SecretKey(file=key_file)).set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.chmod(0o000)
    with pytest.raises(SecretError) as read:
        Secrets(db, APP, SecretKey(file=key_file)).get("SHOP_TOKEN")
    assert str(read.value).startswith(f"secret `SHOP_TOKEN`: cannot read the key file {key_file}")


@pytest.mark.parametrize("driver_class", [VaultDriver, UnlistedVaultDriver])
def test_a_run_whose_key_file_others_may_read_fails_naming_the_secret_and_the_file(
    database_url: str, db: Database, driver_class: type[VaultDriver]
) -> None:
    """Both databases: a driver's credential read under a 0644 key file fails the call naming
    the secret and the key file, whether remit checks the credential first or the driver
    reads it unlisted."""
    harness = Harness(
        vault_app(), database_url=database_url, implementations={"vault": driver_class()}
    )
    key_file = harness.worker.settings.secret_key_file
    Secrets(db, APP, SecretKey(file=key_file)).set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.chmod(0o644)
    with harness:
        run = harness.run("check-token", {"account": "acct-1"})
    error = run.error or ""
    assert run.status == "failed"
    assert "cannot read the credential `SHOP_TOKEN`" in error
    assert f"the key file {key_file} has mode 0644" in error
    assert f"chmod 600 {key_file}" in error
    assert "`None`" not in error
    assert TOKEN not in error
