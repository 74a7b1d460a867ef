"""Settings from an explicit environment, and the database URLs remit accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from remit import DatabaseError, Settings, SettingsError
from remit.core.database import normalize_url


def test_defaults(tmp_path: Path) -> None:
    settings = Settings.from_env(tmp_path, environ={})

    expected = tmp_path.resolve() / ".remit" / "remit.sqlite"
    assert settings.database_url == f"sqlite:///{expected}"
    assert settings.database_url.startswith("sqlite:////")
    assert settings.fakes is False
    assert settings.executor_id is None
    assert settings.threads == 64
    assert settings.poll_interval == 0.1
    assert settings.drain_timeout == 30.0
    assert settings.actor.startswith("user:")
    assert settings.log_level == "WARNING"
    assert normalize_url(settings.database_url).database == str(expected)


def test_the_default_database_is_under_the_app_folder_given_as_a_string(tmp_path: Path) -> None:
    app = tmp_path / "ar_desk"

    settings = Settings.from_env(str(app), environ={})

    assert settings.database_url == f"sqlite:///{app.resolve()}/.remit/remit.sqlite"


def test_an_empty_database_url_keeps_the_default(tmp_path: Path) -> None:
    settings = Settings.from_env(tmp_path, environ={"REMIT_DATABASE_URL": ""})

    assert settings.database_url.endswith("/.remit/remit.sqlite")


def test_database_url(tmp_path: Path) -> None:
    url = "postgresql://remit@db.internal:5432/remit"

    settings = Settings.from_env(tmp_path, environ={"REMIT_DATABASE_URL": url})

    assert settings.database_url == url


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("Yes", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("", False),
    ],
)
def test_fakes(tmp_path: Path, raw: str, expected: bool) -> None:
    assert Settings.from_env(tmp_path, environ={"REMIT_FAKES": raw}).fakes is expected


def test_every_variable(tmp_path: Path) -> None:
    settings = Settings.from_env(
        tmp_path,
        environ={
            "REMIT_EXECUTOR_ID": "worker-7",
            "REMIT_WORKER_THREADS": "8",
            "REMIT_POLL_INTERVAL": "0.5",
            "REMIT_DRAIN_TIMEOUT": "12",
            "REMIT_ACTOR": "agent:collections",
            "REMIT_LOG_LEVEL": "debug",
        },
    )

    assert settings.executor_id == "worker-7"
    assert settings.threads == 8
    assert isinstance(settings.threads, int)
    assert settings.poll_interval == 0.5
    assert settings.drain_timeout == 12.0
    assert settings.actor == "agent:collections"
    assert settings.log_level == "DEBUG"


@pytest.mark.parametrize(
    "environ",
    [
        {"REMIT_AS": ""},
        {"REMIT_AS": "  "},
        {"REMIT_ACTOR": ""},
        {"REMIT_AS": "", "REMIT_ACTOR": "user:x"},
    ],
)
def test_a_principal_set_but_empty_is_refused_not_the_login(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(tmp_path, environ={**environ, "USER": "ann"})
    assert "is set but empty: set it to user:<name> or agent:<name>, or unset it" in str(
        raised.value
    )


def test_remit_as_comes_before_remit_actor_and_the_login_last(tmp_path: Path) -> None:
    both = {"REMIT_AS": "agent:bot", "REMIT_ACTOR": "user:x", "USER": "ann"}
    assert Settings.from_env(tmp_path, environ=both).actor == "agent:bot"
    assert Settings.from_env(tmp_path, environ={"USER": "ann"}).actor == "user:ann"


def test_an_empty_number_keeps_the_default(tmp_path: Path) -> None:
    assert Settings.from_env(tmp_path, environ={"REMIT_WORKER_THREADS": ""}).threads == 64


@pytest.mark.parametrize("raw", ["many", "1.5", "8 threads"])
def test_a_worker_threads_that_is_not_a_number(tmp_path: Path, raw: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(tmp_path, environ={"REMIT_WORKER_THREADS": raw})

    message = str(raised.value)
    assert f"REMIT_WORKER_THREADS={raw!r} must be a whole number greater than 0" in message
    assert "e.g. 64" in message


@pytest.mark.parametrize("raw", ["0", "-4"])
def test_a_worker_threads_that_is_not_positive(tmp_path: Path, raw: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(tmp_path, environ={"REMIT_WORKER_THREADS": raw})

    assert str(raised.value).startswith(
        f"REMIT_WORKER_THREADS={raw!r} must be a whole number greater than 0"
    )


@pytest.mark.parametrize("name", ["REMIT_POLL_INTERVAL", "REMIT_DRAIN_TIMEOUT"])
def test_a_bad_interval_names_its_variable(tmp_path: Path, name: str) -> None:
    with pytest.raises(SettingsError, match=f"^{name}='soon' must be a number"):
        Settings.from_env(tmp_path, environ={name: "soon"})


def test_a_drain_timeout_of_zero_means_do_not_wait(tmp_path: Path) -> None:
    assert Settings.from_env(tmp_path, environ={"REMIT_DRAIN_TIMEOUT": "0"}).drain_timeout == 0
    with pytest.raises(SettingsError, match="0 or more"):
        Settings.from_env(tmp_path, environ={"REMIT_DRAIN_TIMEOUT": "-1"})


def test_an_unknown_log_level_lists_the_levels(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(tmp_path, environ={"REMIT_LOG_LEVEL": "verbose"})
    assert "REMIT_LOG_LEVEL='verbose'" in str(raised.value)
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in str(raised.value)


def test_a_poll_interval_that_is_not_a_number_at_all(tmp_path: Path) -> None:
    # float("nan") parses, and `nan <= 0` is False, so NaN must be refused explicitly.
    with pytest.raises(SettingsError, match="REMIT_POLL_INTERVAL"):
        Settings.from_env(tmp_path, environ={"REMIT_POLL_INTERVAL": "nan"})


# --- normalize_url --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "postgresql://remit:secret@db.internal:5432/remit",
        "postgres://remit:secret@db.internal:5432/remit",
        "postgresql+psycopg2://remit:secret@db.internal:5432/remit",
    ],
)
def test_postgres_urls_select_psycopg_3(raw: str) -> None:
    url = normalize_url(raw)

    assert isinstance(url, sa.URL)
    assert url.drivername == "postgresql+psycopg"
    assert url.username == "remit"
    assert url.password == "secret"
    assert url.host == "db.internal"
    assert url.port == 5432
    assert url.database == "remit"


def test_a_sqlite_file_is_kept(tmp_path: Path) -> None:
    raw = f"sqlite:///{tmp_path}/remit.sqlite"

    url = normalize_url(raw)

    assert url.drivername == "sqlite"
    assert url.database == f"{tmp_path}/remit.sqlite"


@pytest.mark.parametrize("raw", ["sqlite:///:memory:", "sqlite://"])
def test_an_in_memory_sqlite_is_refused(raw: str) -> None:
    with pytest.raises(DatabaseError) as raised:
        normalize_url(raw)

    message = str(raised.value)
    assert repr(raw) in message
    assert "not an in-memory database" in message
    assert "sqlite:////path/to/remit.sqlite" in message


def test_mysql_is_refused() -> None:
    with pytest.raises(DatabaseError) as raised:
        normalize_url("mysql://remit@db.internal/remit")

    assert str(raised.value) == (
        "database URL 'mysql://remit@db.internal/remit' names `mysql`: "
        "remit runs on postgresql:// or sqlite://"
    )


def test_an_unparseable_url_is_refused() -> None:
    with pytest.raises(DatabaseError) as raised:
        normalize_url("not a url")

    assert "database URL 'not a url' cannot be parsed" in str(raised.value)


def test_a_build_version_names_the_version(tmp_path: Path) -> None:
    assert Settings.from_env(tmp_path, environ={}).version is None
    given = Settings.from_env(tmp_path, environ={"REMIT_VERSION": "9f2c1e0-build.14"})
    assert given.version == "9f2c1e0-build.14"
    with pytest.raises(SettingsError, match="REMIT_VERSION='build 14' must be 1 to 64 letters"):
        Settings.from_env(tmp_path, environ={"REMIT_VERSION": "build 14"})
