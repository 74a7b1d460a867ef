"""`remit` on a database file it cannot use, or under a key file others may read: one line on
stderr saying what is wrong and what to do, exit 1, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli_support import ACME, Cli
from tests.e2e.test_cli_secrets import TOKEN, Remit, vault_app
from tests.integration.test_database_files import DAMAGES, build_database, damaged, sha256

__all__ = ["vault_app"]  # the fixture, used by name


def remit_runs(url: str) -> subprocess.CompletedProcess[str]:
    """`remit runs` on AR desk with REMIT_DATABASE_URL set to `url`."""
    env = {**os.environ, "REMIT_DATABASE_URL": url, "REMIT_FAKES": "1"}
    return subprocess.run(
        [sys.executable, "-m", "remit", "--app", str(ACME), "runs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("built") / "remit.sqlite"
    build_database(path, runs=150)
    return path


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_remit_runs_on_a_damaged_sqlite_file_says_so_in_one_line_and_exits_1(
    built: Path, tmp_path: Path, damage: str
) -> None:
    """SQLite only: garbage, a truncated file and a flipped page each give one line on stderr,
    exit 1, no traceback, and the file's bytes are unchanged."""
    path = damaged(built, tmp_path, damage)
    before = sha256(path)

    done = remit_runs(f"sqlite:///{path}")

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: the SQLite database {path} cannot be used: ")
    assert DAMAGES[damage][1] in lines[0]
    assert f"restore {path} from a backup" in lines[0]
    assert sha256(path) == before


def test_remit_runs_on_a_url_whose_folder_does_not_exist_exits_1_naming_it(
    tmp_path: Path,
) -> None:
    """SQLite only: a mistyped folder is refused, named, and not made."""
    path = tmp_path / "nonexistent" / "dir" / "x.sqlite"

    done = remit_runs(f"sqlite:///{path}")

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"error: the SQLite database {path} is in {path.parent}, which does not exist: correct "
        f"REMIT_DATABASE_URL, or make the folder first (mkdir -p {path.parent}; chmod 700 "
        f"{path.parent})"
    ]
    assert "no runs" not in done.stdout
    assert not (tmp_path / "nonexistent").exists()


def test_remit_runs_with_the_default_url_makes_the_apps_private_folder(tmp_path: Path) -> None:
    """SQLite only: with no REMIT_DATABASE_URL, the app's `.remit` folder is made, 0700, and
    the database in it 0600, under a umask of 022."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "app.py").write_text("from remit import App\n\napp = App(name='empty')\n")
    env = {k: v for k, v in os.environ.items() if k != "REMIT_DATABASE_URL"}

    done = subprocess.run(
        ["sh", "-c", f'umask 022 && exec "{sys.executable}" -m remit --app "{app}" runs'],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "no runs" in done.stdout
    assert (app / ".remit").stat().st_mode & 0o777 == 0o700
    assert (app / ".remit" / "remit.sqlite").stat().st_mode & 0o777 == 0o600


def test_a_key_file_others_may_read_is_named_by_remit_secrets_and_by_a_run(
    cli: Cli, vault_app: Path
) -> None:
    """Both databases: `remit secrets set` and a run whose driver reads the secret each name
    the secret and the key file, with the chmod that fixes it; nothing is stored or printed."""
    remit = Remit(cli, vault_app)
    remit("secrets", "set", "SHOP_TOKEN", stdin=TOKEN)
    key_file = vault_app / ".remit" / "secret.key"
    key_file.chmod(0o644)
    expected = (
        f"the key file {key_file} has mode 0644; it must be readable only by its owner: "
        f"chmod 600 {key_file}"
    )

    refused = remit("secrets", "set", "MAIL_TOKEN", stdin="mail-value", code=1)
    assert refused.stderr.splitlines() == [f"error: secret `MAIL_TOKEN`: {expected}"]
    assert "MAIL_TOKEN" not in remit("secrets", "list").stdout

    failed = remit("run", "check-token", "--input", '{"account": "a"}', code=1)
    shown = failed.stdout + failed.stderr
    assert "cannot read the credential `SHOP_TOKEN`" in shown
    assert expected in shown
    assert "`None`" not in shown
    assert "\n".join(remit.printed).count(TOKEN) == 0
