"""Settings from the environment, with the defaults a user gets when they set nothing."""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

from remit.core.errors import AppError, SettingsError

N = TypeVar("N", int, float)

DATA_DIR = ".remit"


@dataclass(frozen=True)
class Settings:
    """How a remit process reaches its database and runs its work.

    - `database_url`: `REMIT_DATABASE_URL`; default a SQLite file `.remit/remit.sqlite` in the
      app's folder. `postgresql://user@host/db` selects Postgres.
    - `fakes`: `REMIT_FAKES=1` runs every connector on its fake instead of its driver.
    - `executor_id`: `REMIT_EXECUTOR_ID`; default a per-host slot (see `worker.py`).
    - `threads`: `REMIT_WORKER_THREADS`, the bound on a worker's executor threads (default 64).
    - `poll_interval`: `REMIT_POLL_INTERVAL`, seconds between queue polls (default 0.1).
    - `drain_timeout`: `REMIT_DRAIN_TIMEOUT`, seconds a worker waits on SIGTERM (default 30).
    - `actor`: `REMIT_AS` (or its older name `REMIT_ACTOR`), who the CLI and a client act as
      (default `user:<login name>`; set but empty is refused).
    - `reconcile_interval`: `REMIT_RECONCILE_INTERVAL`, seconds between reconciler passes (60).
    - `heartbeat_interval`: `REMIT_HEARTBEAT_INTERVAL`, seconds between heartbeats (5).
    - `dead_after`: `REMIT_DEAD_AFTER`, seconds without a heartbeat before a worker is dead (30).
    - `sweep_interval`: `REMIT_SWEEP_INTERVAL`, seconds between a worker's sweeps: approvals
      past their expiry, notifications to retry, resumes left in the outbox (default 5).
    - `suspend_after`: `REMIT_SUSPEND_AFTER`, seconds: a longer `ctx.sleep` suspends the run
      (default 60).
    - `admins`: `REMIT_ADMINS`, comma-separated actors who may decide a gate assigned to
      someone else.
    - `webhook_url`, `webhook_secret`: `REMIT_WEBHOOK_URL` (a waiting gate is POSTed there) and
      `REMIT_WEBHOOK_SECRET` (signs the body).
    - `http_host`, `http_port`: `REMIT_HTTP_HOST` (127.0.0.1) and `REMIT_HTTP_PORT` (8700), where
      `remit serve` listens.
    - `telegram_api`: `REMIT_TELEGRAM_API`, the Telegram Bot API's address: set, workers send
      each gate's recipients Approve and Reject buttons there and `remit serve` takes their taps
      at `/telegram/webhook` (`people/telegram.py`). `https://api.telegram.org` is Telegram's.
    - `secret_key`: `REMIT_SECRET_KEY`, the key that encrypts the app's stored credentials (see
      `connectors/credentials.py`); kept out of the settings' repr.
    - `secret_key_file`: `REMIT_SECRET_KEY_FILE`, where the key is kept when `REMIT_SECRET_KEY` is
      not set (default `.remit/secret.key` in the app's folder, made by the first
      `remit secrets set`).
    - `otlp_endpoint`: the OTLP/HTTP URL a worker exports traces to (see `telemetry.py`):
      `REMIT_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, a collector's address to which
      `/v1/traces` is added, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given. Default none:
      nothing is exported.
    - `log_format`: `REMIT_LOG_FORMAT`, `text` (default) or `json` (one JSON object a line).
    - `max_input_bytes`, `max_output_bytes`, `max_op_bytes`, `max_draft_bytes`,
      `max_body_bytes`: `REMIT_MAX_INPUT_BYTES` (a run's input, 2 MiB), `REMIT_MAX_OUTPUT_BYTES`
      (a step's or a run's output, 2 MiB), `REMIT_MAX_OP_BYTES` (an op call's input or output,
      2 MiB), `REMIT_MAX_DRAFT_BYTES` (an approval's draft or its edits, 256 KiB),
      `REMIT_MAX_BODY_BYTES` (an HTTP request body, 4 MiB): each the UTF-8 bytes of the compact
      JSON (see `limits.py`); `max_reason_chars`: `REMIT_MAX_REASON_CHARS`, the longest reason
      or note a person sends (4000 characters); `max_json_depth`: `REMIT_MAX_JSON_DEPTH`, how
      deeply any JSON value remit takes may nest (100 levels, at most 150).
    - `version`: `REMIT_VERSION`, the application version workers run under (a build's SHA, say)
      in place of the hash of the workflows' code (default).
    - `op_timeout`: `REMIT_OP_TIMEOUT`, seconds one try of an op call may take unless the op
      says otherwise (`op(..., timeout=...)`; default 120).
    - `max_recoveries`: `REMIT_MAX_RECOVERIES`, how many recoveries in a row that get no
      further an attempt whose worker died under it is given before its run fails (default 5).
    - `wakeup_url`, `wakeup_account_token`: `REMIT_WAKEUP_URL` (the wakeup service a worker
      that stops when idle registers its next deadline with) and `REMIT_WAKEUP_ACCOUNT_TOKEN`
      (an account's token there, `rwa_…`, which registers and deletes instances); kept out of
      the settings' repr. The instance's own token is the stored secret `REMIT_WAKEUP_TOKEN`.
    - `idle_check_interval`: `REMIT_IDLE_CHECK_INTERVAL`, seconds between the checks of a
      worker that stops when idle (default 2).
    - `idle_horizon`: `REMIT_IDLE_HORIZON`, seconds: a worker whose next deadline is nearer
      than this is not idle, since it would stop only to start again (default 60).
    - `idle_transaction_timeout`: `REMIT_IDLE_TRANSACTION_TIMEOUT`, seconds a Postgres session
      of remit's (or of a worker's DBOS) may sit idle inside a transaction before the server
      ends it, letting go of its locks (default 60; 0 leaves the server's setting).
    - `lock_timeout`: `REMIT_LOCK_TIMEOUT`, seconds a person's answer, a retry, a message
      sent to a run or a reconciler's move of a run waits for a row lock on Postgres before
      it is refused with `RowLocked`, naming who holds it (default 10; 0 waits as long as it
      takes).
    """

    database_url: str
    fakes: bool = False
    executor_id: str | None = None
    threads: int = 64
    poll_interval: float = 0.1
    drain_timeout: float = 30.0
    actor: str = "user:unknown"
    log_level: str = "WARNING"
    reconcile_interval: float = 60.0
    heartbeat_interval: float = 5.0
    dead_after: float = 30.0
    sweep_interval: float = 5.0
    suspend_after: float = 60.0
    admins: frozenset[str] = frozenset()
    webhook_url: str | None = None
    webhook_secret: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = 8700
    telegram_api: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    secret_key_file: Path = Path(DATA_DIR, "secret.key")
    otlp_endpoint: str | None = None
    log_format: str = "text"
    version: str | None = None
    op_timeout: float = 120.0
    max_recoveries: int = 5
    max_input_bytes: int = 2 * 1024 * 1024
    max_output_bytes: int = 2 * 1024 * 1024
    max_op_bytes: int = 2 * 1024 * 1024
    max_draft_bytes: int = 256 * 1024
    max_reason_chars: int = 4000
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 100
    wakeup_url: str | None = None
    wakeup_account_token: str | None = field(default=None, repr=False)
    idle_check_interval: float = 2.0
    idle_horizon: float = 60.0
    idle_transaction_timeout: float = 60.0
    lock_timeout: float = 10.0

    @classmethod
    def from_env(cls, app_dir: Path | str, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        url = env.get("REMIT_DATABASE_URL") or default_database_url(Path(app_dir))
        heartbeat = _number(env, "REMIT_HEARTBEAT_INTERVAL", 5.0, float)
        dead_after = _number(env, "REMIT_DEAD_AFTER", 30.0, float)
        if heartbeat * 2 > dead_after:
            raise SettingsError(
                f"REMIT_HEARTBEAT_INTERVAL={heartbeat:g} must be at most half of "
                f"REMIT_DEAD_AFTER={dead_after:g}, or live workers would look dead"
            )
        return cls(
            database_url=url,
            fakes=env.get("REMIT_FAKES", "").lower() in ("1", "true", "yes"),
            executor_id=env.get("REMIT_EXECUTOR_ID") or None,
            threads=_number(env, "REMIT_WORKER_THREADS", 64, int),
            poll_interval=_number(env, "REMIT_POLL_INTERVAL", 0.1, float),
            drain_timeout=_number(env, "REMIT_DRAIN_TIMEOUT", 30.0, float, zero=True),
            actor=_actor(env),
            log_level=_log_level(env),
            reconcile_interval=_number(env, "REMIT_RECONCILE_INTERVAL", 60.0, float),
            heartbeat_interval=heartbeat,
            dead_after=dead_after,
            sweep_interval=_number(env, "REMIT_SWEEP_INTERVAL", 5.0, float),
            suspend_after=_number(env, "REMIT_SUSPEND_AFTER", 60.0, float, zero=True),
            admins=frozenset(
                actor.strip() for actor in env.get("REMIT_ADMINS", "").split(",") if actor.strip()
            ),
            webhook_url=_url(env, "REMIT_WEBHOOK_URL"),
            webhook_secret=env.get("REMIT_WEBHOOK_SECRET") or None,
            http_host=env.get("REMIT_HTTP_HOST") or "127.0.0.1",
            http_port=_number(env, "REMIT_HTTP_PORT", 8700, int),
            telegram_api=_url(env, "REMIT_TELEGRAM_API"),
            secret_key=env.get("REMIT_SECRET_KEY") or None,
            secret_key_file=Path(
                env.get("REMIT_SECRET_KEY_FILE") or Path(app_dir) / DATA_DIR / "secret.key"
            ).resolve(),
            otlp_endpoint=_otlp_endpoint(env),
            log_format=_log_format(env),
            version=_version(env),
            op_timeout=_number(env, "REMIT_OP_TIMEOUT", 120.0, float),
            max_recoveries=_number(env, "REMIT_MAX_RECOVERIES", 5, int, zero=True),
            max_input_bytes=_number(env, "REMIT_MAX_INPUT_BYTES", 2 * 1024 * 1024, int),
            max_output_bytes=_number(env, "REMIT_MAX_OUTPUT_BYTES", 2 * 1024 * 1024, int),
            max_op_bytes=_number(env, "REMIT_MAX_OP_BYTES", 2 * 1024 * 1024, int),
            max_draft_bytes=_number(env, "REMIT_MAX_DRAFT_BYTES", 256 * 1024, int),
            max_reason_chars=_number(env, "REMIT_MAX_REASON_CHARS", 4000, int),
            max_body_bytes=_number(env, "REMIT_MAX_BODY_BYTES", 4 * 1024 * 1024, int),
            max_json_depth=_json_depth(env),
            wakeup_url=_url(env, "REMIT_WAKEUP_URL"),
            wakeup_account_token=_account_token(env),
            idle_check_interval=_number(env, "REMIT_IDLE_CHECK_INTERVAL", 2.0, float),
            idle_horizon=_number(env, "REMIT_IDLE_HORIZON", 60.0, float, zero=True),
            idle_transaction_timeout=_number(
                env, "REMIT_IDLE_TRANSACTION_TIMEOUT", 60.0, float, zero=True
            ),
            lock_timeout=_number(env, "REMIT_LOCK_TIMEOUT", 10.0, float, zero=True),
        )


def _account_token(env: Mapping[str, str]) -> str | None:
    raw = env.get("REMIT_WAKEUP_ACCOUNT_TOKEN") or None
    if raw is not None and not raw.startswith("rwa_"):
        raise SettingsError(
            "REMIT_WAKEUP_ACCOUNT_TOKEN must be a wakeup account's token, which starts rwa_ "
            "(`remit wakeup accounts create LABEL` prints one)"
        )
    return raw


def _version(env: Mapping[str, str]) -> str | None:
    raw = env.get("REMIT_VERSION")
    if not raw:
        return None
    if not _VERSION.fullmatch(raw):
        raise SettingsError(
            f"REMIT_VERSION={raw!r} must be 1 to 64 letters, digits, dots, dashes or underscores, "
            "e.g. a build's git SHA"
        )
    return raw


_VERSION = re.compile(r"[A-Za-z0-9._-]{1,64}")


def default_database_url(app_dir: Path) -> str:
    return f"sqlite:///{(app_dir.resolve() / DATA_DIR / 'remit.sqlite')}"


def _actor(env: Mapping[str, str]) -> str:
    """`REMIT_AS` (else `REMIT_ACTOR`), else `user:<login>`. Set but empty is refused: a
    variable meant to name someone that came out empty must not act as the login."""
    for name in ("REMIT_AS", "REMIT_ACTOR"):
        if name in env:
            if not env[name].strip():
                raise SettingsError(
                    f"{name} is set but empty: set it to user:<name> or agent:<name>, or unset "
                    "it to act as user:<login>"
                )
            return env[name]
    return f"user:{env.get('USER') or env.get('LOGNAME') or _login()}"


def _number(
    env: Mapping[str, str], name: str, default: N, kind: type[N], *, zero: bool = False
) -> N:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    what = "a whole number" if kind is int else "a number"
    bound = "0 or more" if zero else "greater than 0"
    try:
        value = kind(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} must be {what} {bound}, e.g. {default}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise SettingsError(f"{name}={raw!r} must be {what} {bound}, e.g. {default}")
    return value


def _json_depth(env: Mapping[str, str]) -> int:
    # pydantic's JSON parser gives up at about 200 levels (Python's at about 1,000), and its
    # serializer soon after: the cap stays under both, with room for a request's own fields.
    depth = _number(env, "REMIT_MAX_JSON_DEPTH", 100, int)
    if depth > 150:
        raise SettingsError(
            f"REMIT_MAX_JSON_DEPTH={depth} is deeper than remit can parse: give at most 150"
        )
    return depth


def _url(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name) or None
    if raw is not None and not raw.startswith(("http://", "https://")):
        raise SettingsError(f"{name}={raw!r} must be an http:// or https:// URL")
    return raw


# Where traces go, by the first of these set: each with whether it is a collector's address, to
# which the traces path is added (as OpenTelemetry's own variables are read), or the traces URL.
_OTLP_VARIABLES = (
    ("REMIT_OTLP_ENDPOINT", True),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", False),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", True),
)


def _otlp_endpoint(env: Mapping[str, str]) -> str | None:
    given = [(name, address) for name, address in _OTLP_VARIABLES if env.get(name, "").strip()]
    if not given:
        return None
    name, address = given[0]
    raw = env[name].strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or not _port_ok(parts):
        raise SettingsError(
            f"{name}={raw!r} is not the URL of an OTLP/HTTP collector: give http:// or https://, "
            "a host and a port, e.g. http://localhost:4318 (traces go to its /v1/traces)"
        )
    if address and not parts.path.rstrip("/").endswith("/v1/traces"):
        return raw.rstrip("/") + "/v1/traces"
    return raw


def _port_ok(parts: SplitResult) -> bool:
    try:
        return parts.port is None or parts.port > 0
    except ValueError:  # not a number, or out of range
        return False


_LOG_FORMATS = ("text", "json")


def _log_format(env: Mapping[str, str]) -> str:
    raw = env.get("REMIT_LOG_FORMAT", "")
    chosen = raw.strip().lower() or "text"
    if chosen not in _LOG_FORMATS:
        raise SettingsError(
            f"REMIT_LOG_FORMAT={raw!r} is not a log format: use text (the default) or json"
        )
    return chosen


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(env: Mapping[str, str]) -> str:
    level = env.get("REMIT_LOG_LEVEL", "WARNING").upper()
    if level not in _LEVELS:
        raise SettingsError(
            f"REMIT_LOG_LEVEL={env['REMIT_LOG_LEVEL']!r} is not a log level: use one of {', '.join(_LEVELS)}"
        )
    return level


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def app_folder(path: str | Path) -> Path:
    """The app folder `path` names, resolved; `AppError` if there is no such folder."""
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise AppError(f"--app {path}: no such folder; point --app at the folder of your app")
    return folder


@contextlib.contextmanager
def environment_set(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in this process's environment for the block, and put back as they were
    after (unset where they were unset)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
