"""`remit worker` and `remit serve`: the command line's long-running processes, each until
SIGTERM or Ctrl-C. A worker serves the app's queues; `serve` serves the HTTP API and the web
console, and with `--worker` supervises a worker beside it."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import logging
import os
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from remit.cli.base import (
    AppDir,
    BehindProxy,
    TlsCert,
    TlsKey,
    cli,
    err,
    here_only,
    load,
    local_client,
)
from remit.cli.base import exit_now as _exit_now

if TYPE_CHECKING:
    from fastapi import FastAPI

    from remit.app import App
    from remit.client import Client
    from remit.core.settings import Settings
    from remit.serve.supervisor import Supervisor
    from remit.serve.worker import Worker


@cli.command()
def worker(
    executor_id: Annotated[
        str | None, typer.Option(help="Executor id (default: a free slot on this host).")
    ] = None,
    exit_when_idle: Annotated[
        bool,
        typer.Option(
            "--exit-when-idle",
            help="Register the next deadline with the wakeup service and exit 0 once idle "
            "(for a host that stops the machine and boots it on the next request).",
        ),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Serve the app's queues until SIGTERM or Ctrl-C, then drain running work."""
    from remit.serve.worker import Worker

    here_only("worker")

    app, settings = load(app_dir, create_database=True)
    _notices_in_the_log()
    if executor_id:
        settings = _replace(settings, executor_id=executor_id)
    if exit_when_idle:
        _exit_when_idle(app, settings)
        return
    running = Worker(app, settings)
    running.start()
    running.serve(
        ready=lambda: err.print(
            f"worker [bold]{running.executor_id}[/] serving [bold]{app.name}[/] "
            f"(version {running.runtime.version}, {len(app.workflows)} workflows, "
            f"queues: {', '.join(sorted(app.queues))})"
        )
    )
    err.print(f"worker {running.executor_id} stopped")
    _exit_now(0)


@cli.command()
def serve(
    host: Annotated[
        str | None,
        typer.Option(help="The address to listen on (default REMIT_HTTP_HOST, 127.0.0.1)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="The port (default REMIT_HTTP_PORT, 8700; 0: a free one)."
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A name clients call this server by (its Host header); repeat for more. "
            "Always: localhost, 127.0.0.1, ::1 and --host.",
        ),
    ] = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    behind_proxy: BehindProxy = False,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--worker", help="Run a worker in this process too, serving the app's queues."
        ),
    ] = False,
    stop_when_idle: Annotated[
        bool | None,
        typer.Option(
            "--stop-when-idle/--no-stop-when-idle",
            help="With --worker: stop the worker when idle, having registered its next "
            "deadline with the wakeup; GET /wake and any write start it again. Default: "
            "only when the data files declare a wakeup.",
            show_default=False,
        ),
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Serve the HTTP API until SIGTERM or Ctrl-C; every route but /health, /wake and the
    forge's webhook (signed with its secret) needs an API token.

    Without --worker it runs no worker: a decision's run resumes on a worker that serves its
    queue. With --worker it runs one beside the API, as a container on a host that scales to
    zero does; --stop-when-idle, or a wakeup declared in the data files, lets that worker
    stop when idle (see README, "Scale to zero").
    """
    from remit.serve.api import LOCAL_NAMES, create_api
    from remit.serve.server import check_exposure
    from remit.serve.server import serve as serve_http

    if stop_when_idle and not with_worker:
        from remit.core.errors import RemitError

        raise RemitError("--stop-when-idle stops the worker of --worker: give both")
    # As many connections as requests it answers at once, up to 16 (each waits on one).
    with local_client(
        app_dir, pool_size=16, command="serve", serving=True, create_database=True
    ) as remit:
        app, settings = remit.app, remit.settings
        address = host or settings.http_host
        tls = check_exposure(address, cert=tls_cert, key=tls_key, behind_proxy=behind_proxy)
        names = [*LOCAL_NAMES, address, *(allowed_host or [])]
        scheme = "https" if tls else "http"
        stops = with_worker and _stops_when_idle(app, stop_when_idle)
        # What turned it on, for the refusal when nothing could start the worker again.
        why = "--stop-when-idle" if stop_when_idle else "the wakeup the data files declare"
        supervisor = _supervisor(remit, stop_when_idle=stops, why=why) if with_worker else None
        if supervisor is not None:
            _notices_in_the_log()
        api = create_api(
            remit,
            allowed_hosts=names,
            wake=None if supervisor is None else supervisor.wake,
            around=None
            if supervisor is None
            else (supervisor.before_request, supervisor.after_request),
            # Served over TLS, here or by the proxy in front: the console's cookie says so.
            secure_cookies=bool(tls) or behind_proxy,
        )
        if settings.telegram_api is not None:
            _take_telegram_taps(api, remit, settings.telegram_api)
        try:
            serve_http(
                api,
                host=address,
                port=settings.http_port if port is None else port,
                drain_timeout=settings.drain_timeout,
                tls=tls,
                listening=lambda url: err.print(
                    f"serving the API of [bold]{app.name}[/] on "
                    f"{scheme}{url.removeprefix('http')} (its spec at /openapi.json; send "
                    "`Authorization: Bearer <token>`, from `remit tokens create`), and its "
                    "web console at / (`remit login-link --for user:<name>` signs in)"
                    + ("" if supervisor is None else _worker_line(supervisor, stops))
                ),
            )
        finally:
            if supervisor is not None:
                supervisor.close()
    err.print("serve stopped")
    if supervisor is not None:
        _exit_now(0)


def _notices_in_the_log() -> None:
    """A serving worker's log is where the `log` notifier says that a gate waits, at INFO:
    unless `REMIT_LOG_LEVEL` sets the level, the worker shows those lines (a command that only
    sets a run off, `remit start`, does not)."""
    if "REMIT_LOG_LEVEL" not in os.environ:
        logging.getLogger("remit.notify").setLevel(logging.INFO)


def _supervisor(
    remit: "Client", *, stop_when_idle: bool, why: str = "--stop-when-idle"
) -> "Supervisor":
    """The worker of `remit serve --worker`, started: each write through the API wakes it."""
    from remit.serve.supervisor import Supervisor
    from remit.serve.worker import Worker

    app, settings = remit.app, remit.settings
    if stop_when_idle:
        _check_wakeup(app, settings, why)
    first = Worker(app, settings)
    made = [first]

    def make_worker() -> "Worker":
        if made:
            return made.pop()
        # A new DBOS instance on the same connectors (one fake per vendor for the process).
        return Worker(app, settings, implementations=first.implementations)

    supervisor = Supervisor(
        make_worker,
        remit,
        stop_when_idle=stop_when_idle,
        on_stranded=lambda _left: _exit_now(70),
        tell=lambda line: err.print(line),
    )
    remit.use_implementations(first.implementations)
    remit.on_write = supervisor.wake
    supervisor.start()
    return supervisor


def _worker_line(supervisor: "Supervisor", stop_when_idle: bool) -> str:
    worker = supervisor.worker
    name = "-" if worker is None else worker.executor_id
    when = "; it stops when idle and GET /wake starts it" if stop_when_idle else ""
    return f"\nworker [bold]{name}[/] serving its queues{when}"


def _stops_when_idle(app: "App", asked: bool | None) -> bool:
    """Whether the worker of `serve --worker` stops when idle: as the flag says, else when
    the data files declare a wakeup (a contradiction of the two is refused)."""
    from remit.resources.wakeups import declarations_of, stops_when_idle

    return stops_when_idle(declarations_of(app), asked, flag="--no-stop-when-idle")


def _check_wakeup(app: "App", settings: "Settings", flag: str) -> None:
    """Refuse to stop when idle with no wakeup service to start the worker again: remit's
    own (`REMIT_WAKEUP_URL`), unless the data files declare a wakeup that registers through an
    op of its own vendor."""
    from remit.core.errors import RemitError
    from remit.resources.wakeups import declarations_of, needs_wakeup_service

    # The worker registers its wakes with the instance's token alone (`remit wakeup connect`
    # stores it); the account's token is needed only to connect.
    if needs_wakeup_service(declarations_of(app)) and not settings.wakeup_url:
        raise RemitError(
            f"{flag} needs a wakeup service to start the worker again at its next deadline: "
            "set REMIT_WAKEUP_URL, and run `remit wakeup connect URL` once (see README, Scale "
            "to zero)"
        )


def _exit_when_idle(app: "App", settings: "Settings") -> None:
    """`remit worker --exit-when-idle`: serve until idle, register, exit 0."""
    import threading

    from remit.client import Client
    from remit.core.text import describe_seconds
    from remit.serve.supervisor import Supervisor
    from remit.serve.worker import Worker

    _check_wakeup(app, settings, "--exit-when-idle")
    idle = threading.Event()
    remit = Client(app, settings, pool_size=2)
    remit.on_write = None
    supervisor = Supervisor(
        lambda: Worker(app, settings),
        remit,
        stop_when_idle=True,
        on_idle=idle.set,
        on_stranded=lambda _left: _exit_now(70),
        tell=lambda line: err.print(line),
    )
    worker = supervisor.start()
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stopping.set()
        idle.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    # Said once the signals are handled, so that a SIGTERM sent on reading it drains the worker.
    err.print(
        f"worker [bold]{worker.executor_id}[/] serving [bold]{app.name}[/] until idle "
        f"(version {worker.runtime.version})"
    )
    idle.wait()
    if stopping.is_set():
        supervisor.close()
        err.print(f"worker {worker.executor_id} stopped")
        _exit_now(0)
    row = supervisor.state.get()
    at = None if row is None else row.at
    shown = (
        "nothing is due"
        if at is None
        else f"the wakeup service calls {describe_seconds(supervisor.lead())} before its "
        f"deadline at {at.isoformat()}"
    )
    err.print(f"worker {worker.executor_id} is idle and exits ({shown})")
    _exit_now(0)


def _take_telegram_taps(api: "FastAPI", remit: "Client", telegram_api: str) -> None:
    """Mount Telegram's webhook on `api`, if `remit telegram set-webhook` stored its secret."""
    from remit.connectors.credentials import Credentials
    from remit.people.telegram import WEBHOOK_SECRET, TelegramBot, stored_token
    from remit.serve.telegram import WEBHOOK_PATH, add_telegram_routes

    secret = Credentials(remit.services.secrets, os.environ).get(WEBHOOK_SECRET)
    if not secret:
        err.print(
            f"[yellow]Telegram taps are not taken:[/] no {WEBHOOK_SECRET} is stored; run `remit "
            f"telegram set-webhook https://<host>{WEBHOOK_PATH}`"
        )
        return
    bot = TelegramBot(
        stored_token(remit.services.secrets, environ=os.environ), api_base=telegram_api
    )
    add_telegram_routes(api, remit, secret_token=secret, bot=bot)


def _replace(settings: "Settings", **changes: Any) -> "Settings":
    from dataclasses import replace

    return replace(settings, **changes)
