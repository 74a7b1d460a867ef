"""Databases for tests: every database test runs on SQLite and on Postgres.

Postgres comes from REMIT_TEST_POSTGRES_URL (default: the local server). Each test gets a fresh
database, copied from a prepared template so DBOS's migrations run once per session. Under
CI=true a Postgres that cannot be reached fails the test; elsewhere it is skipped with a reason.
"""

from __future__ import annotations

import compileall
import os
import py_compile
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

from remit.core.database import Database
from tests.instances import WakeupService
from tests.pgcluster import Cluster, throwaway_cluster

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

# A property test checks what happens, not how fast: an example that runs past Hypothesis's
# default deadline (200 ms) on a loaded machine is not a failure. Durations are the
# benchmarks' (bench/).
settings.register_profile("remit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("remit")

ROOT = Path(__file__).resolve().parent.parent


def _compile_sources() -> None:
    """Compile remit's sources and the apps the tests load, once, beside them.

    The suite starts about a thousand Python processes (workers, `remit` commands, servers).
    Where PYTHONDONTWRITEBYTECODE is set, as on these machines, each compiled remit's sources
    again, half a second of CPU apiece; they read bytecode that is there all the same. It is
    checked against a hash of its source at every import, never its time: a test that rewrites
    a module of an app within the same second gets the new code, whatever the file's size.
    """
    for folder in ("src/remit", "examples", "tests/apps"):
        compileall.compile_dir(
            ROOT / folder,
            quiet=1,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )


if "PYTEST_XDIST_WORKER" not in os.environ:
    _compile_sources()
_template: dict[str, str] = {}


def _backends() -> list[str]:
    """The databases the tests run on: REMIT_TEST_BACKENDS, a comma-separated list of `sqlite`
    and `postgres` (default: both). `make check` runs on SQLite alone."""
    given = os.environ.get("REMIT_TEST_BACKENDS", "sqlite,postgres")
    named = [name.strip() for name in given.split(",") if name.strip()]
    unknown = sorted(set(named) - {"sqlite", "postgres"})
    if unknown or not named:
        raise pytest.UsageError(
            f"REMIT_TEST_BACKENDS={given!r} names {', '.join(unknown) or 'no database'}: "
            "give `sqlite`, `postgres` or `sqlite,postgres`"
        )
    return named


BACKENDS = _backends()


def postgres_admin_url() -> sa.URL:
    return sa.make_url(os.environ.get("REMIT_TEST_POSTGRES_URL") or DEFAULT_POSTGRES).set(
        drivername="postgresql+psycopg"
    )


def _admin() -> sa.Engine:
    return sa.create_engine(postgres_admin_url(), isolation_level="AUTOCOMMIT")


def _postgres_or_fail() -> sa.Engine:
    engine = _admin()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as error:
        engine.dispose()
        message = (
            f"Postgres at {postgres_admin_url().render_as_string()} is unreachable: {error.orig}"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: the Postgres tests must run)")
        pytest.skip(message)
    return engine


def _template_name(engine: sa.Engine) -> str:
    if "name" not in _template:
        name = f"remit_tmpl_{uuid.uuid4().hex[:10]}"
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        db = Database(postgres_admin_url().set(database=name).render_as_string(hide_password=False))
        db.prepare()
        db.dispose()
        _template["name"] = name
    return _template["name"]


def new_postgres_database(*, prepared: bool = True) -> str:
    """A fresh Postgres database, prepared unless asked otherwise; returns its URL."""
    engine = _postgres_or_fail()
    try:
        name = f"remit_t_{uuid.uuid4().hex[:12]}"
        copy = f' TEMPLATE "{_template_name(engine)}"' if prepared else ""
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{copy}'))
    finally:
        engine.dispose()
    return postgres_admin_url().set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    name = sa.make_url(url).database
    engine = _admin()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


# Postgres takes a checkpoint to drop a database: a test's database is dropped on a thread of
# its own while the next test runs, and the session waits for every drop before it ends.
_dropper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remit-test-drop")
_drops: list[Future[None]] = []


def _drop_later(url: str) -> None:
    _drops.append(_dropper.submit(drop_postgres_database, url))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for drop in _drops:
        drop.result()
    _dropper.shutdown()
    if "name" in _template:
        drop_postgres_database(
            postgres_admin_url().set(database=_template["name"]).render_as_string()
        )


# Where each folder of tests comes in the run: the longest first. `make test` hands the tests to
# its processes in this order, each as one becomes free (`--dist loadgroup`), so the run does
# not end with one process working through a minute-long test that started last.
_ORDER = {"e2e": 0, "browser": 1, "integration": 2, "apps": 3, "hostile": 3, "unit": 4}


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.config.pluginmanager.has_plugin("xdist") and _shares_a_fixture(item):
        # One process runs the module, so what its tests share is made once. (Marked as each
        # test is collected: pytest-xdist reads the groups before other hooks sort the tests.)
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> tuple[int, int]:
        folder = item.nodeid.split("/")[1] if item.nodeid.startswith("tests/") else ""
        slow = item.get_closest_marker("slow") or item.get_closest_marker("crash")
        return (0 if slow else 1, _ORDER.get(folder, 2))

    items.sort(key=place)  # stable: within a place, the order pytest collected them in


def _shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once for its module (a server, a desk)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        each.scope in ("module", "package", "class")
        for defs in info.name2fixturedefs.values()
        for each in defs
    )


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL, once for SQLite and once for Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'remit.sqlite'}"
        return
    url = new_postgres_database()
    try:
        yield url
    finally:
        _drop_later(url)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """The database at `database_url`, prepared (DBOS's tables and remit's)."""
    database = Database(database_url)
    database.prepare()
    yield database
    database.dispose()


@pytest.fixture(params=BACKENDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nothing has prepared yet, once for SQLite and once for Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite'}"
        return
    url = new_postgres_database(prepared=False)
    try:
        yield url
    finally:
        _drop_later(url)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A Postgres server of the test's own (`tests/pgcluster.py`), which it may stop."""
    yield from throwaway_cluster(tmp_path)


@pytest.fixture(scope="module")
def wakeup_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WakeupService]:
    """`remit wakeup serve` in a subprocess on a SQLite file of its own, for a module's tests;
    each test makes accounts of its own on it."""
    running = WakeupService(tmp_path_factory.mktemp("wakeup"))
    try:
        running.start()
        yield running
    finally:
        running.stop()
