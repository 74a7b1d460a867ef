"""The database seam: one URL, SQLite or Postgres, holding DBOS's tables and remit's."""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import importlib.metadata
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from remit.core.errors import DatabaseError, RowLocked
from remit.core.schema import PARTIAL_INDEXES, SCHEMA_VERSION, meta, metadata
from remit.core.sqlite_file import open_sqlite_file, private_file

if TYPE_CHECKING:
    # DBOS is imported where a client, a serializer or a migration is made: a process that
    # only reads remit's tables (`remit runs`) never loads it.
    from dbos import DBOSClient, DBOSPortableJSONSerializer
    from sqlalchemy.dialects import postgresql, sqlite

    from remit.core.settings import Settings

log = logging.getLogger("remit.store")

T = TypeVar("T")

# Seconds remit rides out a database that is away (a lost connection, a server restarting or
# refusing connections, a SQLite file another process holds locked) on a run's path: each read
# and write there is tried again until it succeeds or this long has passed since its first try.
OUTAGE_BOUND = 90.0

# When the outermost wait of this thread (or task) for the database gives up, if one is waiting.
_outage_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "remit_outage_deadline", default=None
)

# Any fixed 64-bit number: the Postgres advisory lock that serialises `prepare()`.
_PREPARE_LOCK = 0x72656D6974  # "remit"

# How remit's connections name themselves to Postgres (`pg_stat_activity.application_name`),
# so a session that holds a lock others wait for can be told apart from DBOS's and a person's.
APPLICATION_NAME = "remit"
# Postgres's code for a lock not granted within `lock_timeout`.
_LOCK_NOT_AVAILABLE = "55P03"


def portable_serializer() -> DBOSPortableJSONSerializer:
    """JSON for every value DBOS stores, never its default binary Python format."""
    from dbos import DBOSPortableJSONSerializer

    return DBOSPortableJSONSerializer()


def normalize_url(raw: str) -> sa.URL:
    """Parse a database URL, selecting psycopg 3 for Postgres. Raises `DatabaseError`."""
    try:
        url = sa.make_url(raw)
    except sa.exc.ArgumentError:
        raise DatabaseError(
            f"database URL {raw!r} cannot be parsed: use postgresql://user@host:5432/db "
            "or sqlite:////absolute/path.sqlite"
        ) from None
    backend = url.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise DatabaseError(
                f"database URL {raw!r}: remit needs a SQLite file that several processes can "
                "open, not an in-memory database: use sqlite:////path/to/remit.sqlite"
            )
        # Every process must open the same file, whatever its working directory.
        return url.set(database=str(Path(url.database).resolve()))
    raise DatabaseError(
        f"database URL {raw!r} names `{backend}`: remit runs on postgresql:// or sqlite://"
    )


class Database:
    """An engine on remit's database, and the one-time preparation of its tables.

    On SQLite the file is made private, or checked before anything writes to it, when the
    `Database` is made (see `sqlite_file.py`): a corrupt file raises `DatabaseError` here.
    """

    def __init__(
        self,
        raw_url: str,
        *,
        pool_size: int = 8,
        idle_transaction_timeout: float = 60.0,
        lock_timeout: float = 10.0,
    ) -> None:
        self.url = normalize_url(raw_url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        self.idle_transaction_timeout = idle_transaction_timeout
        self.lock_timeout = lock_timeout
        self._waits_out_outages = False
        if self.is_sqlite:
            assert self.url.database is not None
            open_sqlite_file(Path(self.url.database))
            self.engine = sa.create_engine(self.url, connect_args={"timeout": 30})
            sa.event.listen(self.engine, "connect", _sqlite_connect)
        else:
            # A name the URL gives (`?application_name=`) is kept.
            named = "application_name" in self.url.query
            self.engine = sa.create_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=pool_size,
                pool_pre_ping=True,
                connect_args={} if named else {"application_name": APPLICATION_NAME},
            )
            if self.idle_transaction_timeout > 0 and not _sets_idle_timeout(self.url):
                sa.event.listen(self.engine, "connect", self._bound_idle_transactions)

    def _bound_idle_transactions(self, dbapi_conn: Any, _record: Any) -> None:
        """Set each new Postgres connection's bound on a session left idle inside a transaction
        (`idle_transaction_timeout`, seconds). Such a session holds its locks till it ends,
        blocking every decision on the runs it locked; past the bound Postgres ends it, and its
        transaction with it. Set once the connection is made, not as a startup option: a URL's
        own `options` (a search_path, say) stay as given, and a pooler that refuses startup
        options takes it."""
        ms = max(1, round(self.idle_transaction_timeout * 1000))
        with dbapi_conn.cursor() as cursor:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        dbapi_conn.commit()  # the pool rolls a connection back when it is returned

    @classmethod
    def of(cls, settings: Settings, *, pool_size: int = 8) -> Database:
        """The database `settings` name, with the guards they set."""
        return cls(
            settings.database_url,
            pool_size=pool_size,
            idle_transaction_timeout=settings.idle_transaction_timeout,
            lock_timeout=settings.lock_timeout,
        )

    @property
    def shown_url(self) -> str:
        """The database's URL as a message names it: as a user writes it (no driver), and
        without its password."""
        url = self.url
        return sa.URL.create(
            url.get_backend_name(), url.username, None, url.host, url.port, url.database, url.query
        ).render_as_string()

    @property
    def dbos_url(self) -> str:
        """The same database as DBOS's system database URL."""
        return self.url.render_as_string(hide_password=False)

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A connection in a transaction that commits on leaving (rolls back on an error).

        On SQLite the transaction takes the write lock when it begins (`BEGIN IMMEDIATE`), so
        a read-then-write inside it cannot interleave with another writer: SQLite has no
        `SELECT ... FOR UPDATE`, and the driver would otherwise begin only at the first write.
        """
        with self.engine.connect() as conn, conn.begin():
            if self.is_sqlite:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn

    @contextlib.contextmanager
    def begin_bounded(self, what: str) -> Iterator[sa.Connection]:
        """`begin`, for a transaction that must not wait long for a row lock: a person's answer
        (a decision, a task's answer, a retry), a message sent to a run, or a reconciler's
        move of a run, which would otherwise hang behind a session that holds the run's row
        (one left idle inside a transaction, say). On Postgres each lock it takes waits at
        most `lock_timeout` seconds; past that the transaction rolls back, having written
        nothing, and `RowLocked` names `what` was refused and the session that holds the
        lock. SQLite has one writer at a time and no row locks: there the transaction waits
        for the write lock as any other does, up to its busy timeout (30 s)."""
        if self.is_sqlite or self.lock_timeout <= 0:
            with self.begin() as conn:
                yield conn
            return
        try:
            with self.begin() as conn:
                ms = max(1, round(self.lock_timeout * 1000))
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {ms}")
                yield conn
        except sa.exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise
            raise RowLocked(
                f"{what}: {_locked_what(error)} is locked by {self._holders(error)}, and "
                f"{self.lock_timeout:g} s (REMIT_LOCK_TIMEOUT) passed waiting for it. Nothing "
                "was written: try again in a moment"
            ) from None

    def _holders(self, error: sa.exc.OperationalError) -> str:
        """Who holds the lock `error` waited for, as well as Postgres can tell once the wait
        has ended: the other sessions of this database holding row locks on the table it
        names, oldest transaction first. Sessions of other roles show only to a role that may
        see them (a superuser, or one granted `pg_read_all_stats`). Their last statements
        are logged, not put in the message, which may go to an API caller."""
        table = _locked_table(error)
        query = sa.text(
            "SELECT a.pid, a.application_name, a.state, a.usename,"
            " extract(epoch FROM now() - a.xact_start) AS age, left(a.query, 200) AS query"
            " FROM pg_stat_activity a WHERE a.pid <> pg_backend_pid()"
            " AND a.datname = current_database() AND a.xact_start IS NOT NULL AND a.pid IN"
            " (SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            "  WHERE l.granted AND l.database = (SELECT oid FROM pg_database"
            "   WHERE datname = current_database())"
            "  AND l.mode IN ('RowShareLock', 'RowExclusiveLock', 'ShareRowExclusiveLock',"
            "   'ExclusiveLock', 'AccessExclusiveLock')"
            "  AND (:table = '' OR c.relname = :table))"
            " ORDER BY a.xact_start LIMIT 3"
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(query, {"table": table or ""}).all()
        except sa.exc.SQLAlchemyError:
            rows = []
        if not rows:
            return "another session (gone since, or of a role this one may not see)"
        for row in rows:
            log.warning(
                "session %s (%s, user %s, %s) holds a lock on %s; its last statement: %s",
                row.pid,
                row.application_name,
                row.usename,
                row.state,
                table or "a table",
                " ".join(str(row.query).split()),
            )
        shown = [
            f"session {row.pid} ({row.application_name or 'no application name'}, "
            f"user {row.usename}, {row.state}, its transaction open {row.age:.0f} s)"
            for row in rows
        ]
        return " or ".join(shown)

    def create_if_missing(self) -> bool:
        """Create the Postgres database the URL names, when the server has none of that name;
        whether this call created it. Asked and made from the server's `postgres` database, as
        the URL's user, who needs the right to create databases. Of several processes making
        it at once, one does and the others find it made. SQLite makes its file itself."""
        if self.is_sqlite or not self.url.database:
            return False
        name = self.url.database
        try:
            with self.engine.connect():
                return False
        except sa.exc.OperationalError as error:
            unreachable = error
        server = sa.create_engine(
            self.url.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
        )
        exists = sa.text("SELECT 1 FROM pg_database WHERE datname = :name")
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            with server.connect() as conn:
                if conn.execute(exists, {"name": name}).first() is not None:
                    if self._reachable():
                        return False  # another process made it meanwhile
                    # There, and still not reachable: not a missing database.
                    raise DatabaseError(
                        f"cannot reach the database at {self.shown_url} "
                        f"({one_line(unreachable)}): check REMIT_DATABASE_URL, and that the "
                        "server takes connections there"
                    ) from unreachable
                try:
                    conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
                except sa.exc.DBAPIError as error:
                    if conn.execute(exists, {"name": name}).first() is not None:
                        return False  # another process made it meanwhile
                    raise DatabaseError(
                        f"the database {name} does not exist at {self.shown_url}, and creating "
                        f"it was refused ({one_line(error)}): create it (createdb {name}), or "
                        "give the URL's user the right to (ALTER ROLE ... CREATEDB)"
                    ) from error
        except sa.exc.OperationalError as error:
            raise DatabaseError(
                f"cannot reach the database at {self.shown_url} ({one_line(unreachable)}), nor "
                f"the server's postgres database to see whether it exists ({one_line(error)}): "
                "check REMIT_DATABASE_URL, and that the server is up and takes connections there"
            ) from error
        finally:
            server.dispose()
        return True

    def _reachable(self) -> bool:
        try:
            with self.engine.connect():
                return True
        except sa.exc.OperationalError:
            return False

    def insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT into `table` in this database's dialect, which takes `on_conflict_do_nothing`
        and `on_conflict_do_update` (an upsert) on either."""
        from sqlalchemy.dialects import postgresql, sqlite  # here: a command may need neither

        return sqlite.insert(table) if self.is_sqlite else postgresql.insert(table)

    def execute_one(self, statement: sa.Executable, params: Mapping[str, Any] | None = None) -> int:
        """Run one statement (with `params`) as a transaction of its own and return the rows
        it touched.

        One round trip on Postgres (no BEGIN and COMMIT around it); on SQLite the statement
        takes the write lock itself.
        """
        return self._alone(statement, params, count)

    def execute_first(
        self, statement: sa.Executable, params: Mapping[str, Any] | None = None
    ) -> sa.Row[Any] | None:
        """`execute_one` for a statement that returns rows (`RETURNING`): its first row, or
        None when it returned none."""
        return self._alone(statement, params, lambda result: result.first())

    def _alone(
        self,
        statement: sa.Executable,
        params: Mapping[str, Any] | None,
        read: Callable[[sa.CursorResult[Any]], T],
    ) -> T:
        with self.engine.connect() as conn:
            if not self.is_sqlite:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            answer = read(conn.execute(statement, params))
            conn.commit()
            return answer

    def retrying(self, what: str, fn: Callable[[], T]) -> T:
        """Call `fn` (a read, or one short transaction that is safe to repeat), again on a lost
        connection, a server that refuses connections, or a busy SQLite file.

        Gives up once `OUTAGE_BOUND` seconds have passed since the first try (longer than
        SQLite's 30-second busy timeout) with the last error, so a database that stays away
        fails the caller rather than hanging it. Other errors are raised at once.
        """
        return _within_outage(
            what,
            fn,
            (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError),
            self._transient,
        )

    def read(self, what: str, fn: Callable[[sa.Connection], T]) -> T:
        """`fn` on a connection, as a read a run's path makes: tried again as `retrying` says."""

        def once() -> T:
            with self.engine.connect() as conn:
                return fn(conn)

        return self.retrying(what, once)

    def wait_out_outages(self) -> None:
        """From now on, a connection the Postgres server refuses (it is restarting, or away) is
        tried again for up to `OUTAGE_BOUND` seconds before the error is raised: a read or write
        of this process that needs a new connection then waits out a short outage, those not
        written to retry too (a statement cut mid-flight still fails, unless it retries).

        For a long-running process once it has started (a worker), which connected once
        already: a command that cannot reach the database says so at once, rather than after
        the bound (but for the reads and writes a run's path makes, which retry everywhere).
        SQLite has no connection to refuse."""
        if self.is_sqlite or self._waits_out_outages:
            return
        self._waits_out_outages = True
        sa.event.listen(self.engine, "do_connect", _connect_waiting)

    def dbos_engine(self, *, pool_size: int) -> sa.Engine | None:
        """The engine a worker's DBOS runs on: None (DBOS makes its own) on Postgres.

        On SQLite, DBOS's engine begins a transaction only at its first write, so a worker's
        dequeue reads the queue's running count before it holds the lock, and workers in
        several processes can together pass a global concurrency limit. This engine takes the
        write lock when each transaction begins, so the count and the claim are one step.
        """
        if not self.is_sqlite:
            return None
        engine = sa.create_engine(
            self.url, connect_args={"timeout": 30}, pool_size=pool_size, max_overflow=pool_size
        )
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine

    def client(self, app_name: str, *, pool_size: int = 2, lazy: bool = False) -> DBOSClient:
        """A DBOS client on this database: enqueues and manages runs without a worker. `lazy`:
        it connects on its first use rather than now."""
        from dbos import DBOSClient

        return DBOSClient(
            system_database_url=self.dbos_url,
            serializer=portable_serializer(),
            application_name=app_name,
            system_database_pool_size=pool_size,
            lazy=lazy,
            # Its connections get the bound remit's have (0: the server's setting).
            sys_db_idle_transaction_timeout_sec=self.idle_transaction_timeout or -1.0,
        )

    def prepare(self) -> None:
        """Create or migrate DBOS's tables and remit's. Safe to call from many processes at once:
        one prepares while the others wait, then find the work done."""
        if self._prepared():
            return
        with self._prepare_lock():
            if self._prepared():
                return
            from dbos import DBOS

            try:
                DBOS.migrate(self.dbos_url)
                metadata.create_all(self.engine, checkfirst=True)
                # A table made by an earlier version lacks the indexes added to it since.
                for table in metadata.sorted_tables:
                    for index in table.indexes:
                        index.create(self.engine, checkfirst=True)
                with self.engine.begin() as conn:
                    for statement in PARTIAL_INDEXES:
                        conn.exec_driver_sql(statement)
                with self.begin() as conn:
                    conn.execute(meta.delete())
                    conn.execute(
                        meta.insert(), [{"key": k, "value": v} for k, v in _stamp().items()]
                    )
            except sa.exc.OperationalError as error:
                raise DatabaseError(
                    f"cannot prepare the database at {self.shown_url} ({one_line(error)}): "
                    "check REMIT_DATABASE_URL, and that the server is up and takes connections "
                    "there"
                ) from error

    def _prepared(self) -> bool:
        try:
            with self.engine.connect() as conn:
                stored = {
                    row.key: row.value for row in conn.execute(sa.select(meta.c.key, meta.c.value))
                }
        except sa.exc.ProgrammingError:
            return False
        except sa.exc.OperationalError as error:
            if self.is_sqlite and "no such table" in str(error):
                return False
            raise DatabaseError(
                f"cannot reach the database at {self.shown_url} ({one_line(error)}): check "
                "REMIT_DATABASE_URL, and that the server is up and takes connections there"
            ) from error
        return stored == _stamp()

    @contextlib.contextmanager
    def _prepare_lock(self) -> Iterator[None]:
        if self.is_sqlite:
            assert self.url.database is not None
            with os.fdopen(private_file(f"{self.url.database}.prepare-lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            return
        # Wait by polling outside any transaction: DBOS's migrations build indexes
        # CONCURRENTLY, which wait for every open transaction, including a waiting locker's.
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            deadline = time.monotonic() + 300
            while not conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _PREPARE_LOCK}
            ).scalar():
                if time.monotonic() > deadline:
                    raise DatabaseError(
                        "another process has been preparing the database for 5 minutes"
                    )
                time.sleep(0.1)
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _PREPARE_LOCK})

    def _transient(self, error: sa.exc.DBAPIError | sa.exc.TimeoutError) -> bool:
        """Whether trying again can help: every connection the pool could not give in time; on
        SQLite a busy or locked database (not, say, a missing table); on Postgres any
        operational error (a lost connection, a restart, a serialization failure)."""
        if not self.is_sqlite or isinstance(error, sa.exc.TimeoutError):
            return True
        text = str(error.orig or error).lower()
        return "locked" in text or "busy" in text

    def dispose(self) -> None:
        self.engine.dispose()


def _connect_waiting(
    dialect: sa.Dialect, _record: Any, cargs: tuple[Any, ...], cparams: dict[str, Any]
) -> Any:
    """A new DBAPI connection, tried again while the server refuses it (see
    `Database.wait_out_outages`)."""
    return _within_outage(
        "connecting to the database",
        lambda: dialect.connect(*cargs, **cparams),
        dialect.loaded_dbapi.OperationalError,
        lambda _error: True,
    )


def _within_outage(
    what: str,
    fn: Callable[[], T],
    errors: type[Exception] | tuple[type[Exception], ...],
    transient: Callable[[Any], bool],
) -> T:
    """`fn()`, called again after each of `errors` that is `transient`, waiting longer each
    time (up to 2 s), until `OUTAGE_BOUND` seconds have passed since the first call. A wait
    inside another (a connection `retrying` asks for) ends with the outer one's bound, so
    waits never add up past it."""
    outer = _outage_deadline.get()
    deadline = outer if outer is not None else time.monotonic() + OUTAGE_BOUND
    token = _outage_deadline.set(deadline)
    delay = 0.05
    try:
        while True:
            try:
                return fn()
            except errors as error:
                if not transient(error) or time.monotonic() + delay > deadline:
                    raise
                said = getattr(error, "orig", None) or error
                log.warning("%s: %s; trying again in %.2fs", what, said, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
    finally:
        _outage_deadline.reset(token)


def one_line(error: sa.exc.DBAPIError | sa.exc.SQLAlchemyError) -> str:
    """What the database's driver said, on one line: its lines (psycopg writes a hint on a
    line of its own, indented) joined with `; `."""
    said = str(getattr(error, "orig", None) or error)
    return "; ".join(line.strip() for line in said.splitlines() if line.strip())


def _sets_idle_timeout(url: sa.URL) -> bool:
    """Whether the URL sets the idle-in-transaction bound itself (`?options=-c ...`)."""
    return "idle_in_transaction_session_timeout" in str(url.query.get("options", ""))


def _locked_table(error: sa.exc.OperationalError) -> str | None:
    """The table whose row a lock timeout waited for, from Postgres's context line (`while
    locking tuple (0,5) in relation "remit_runs"`), if it gave one."""
    said = str(error.orig)
    marker = 'in relation "'
    if marker not in said:
        return None
    return said.split(marker, 1)[1].split('"', 1)[0]


def _locked_what(error: sa.exc.OperationalError) -> str:
    table = _locked_table(error)
    return {
        "remit_runs": "the run",
        "remit_approvals": "the approval",
        "remit_tasks": "the task",
    }.get(table or "", f"a row of {table}" if table else "a row it needs")


def count(result: sa.CursorResult[Any]) -> int:
    """The rows a statement touched: those it returns, if it returns any, else its row count."""
    return len(result.all()) if result.returns_rows else int(result.rowcount)


def _sqlite_begin(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _stamp() -> dict[str, str]:
    """What a prepared database records: remit's schema and the DBOS whose migrations ran."""
    return {"schema": SCHEMA_VERSION, "dbos": importlib.metadata.version("dbos")}


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # The driver begins no transactions of its own: `Database.begin` issues BEGIN IMMEDIATE,
    # and a plain read runs on its own. A writer waits on the busy timeout for the lock.
    dbapi_conn.isolation_level = None
    dbapi_conn.execute("PRAGMA busy_timeout=30000")
    dbapi_conn.execute("PRAGMA foreign_keys=ON")
    dbapi_conn.execute("PRAGMA journal_mode=WAL")
