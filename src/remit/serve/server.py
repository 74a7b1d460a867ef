"""Running the HTTP API: `serve` listens until SIGTERM or Ctrl-C and lets open requests finish;
`check_exposure` refuses plain HTTP on an address other machines reach."""

from __future__ import annotations

import ipaddress
import math
import signal
import socket
from collections.abc import Callable
from pathlib import Path as FilePath
from types import FrameType

import uvicorn
from fastapi import FastAPI

from remit.core.errors import (
    RemitError,
)


class _Stopped(Exception):
    """SIGTERM or Ctrl-C reached the server: it has finished its requests and stops."""


def check_exposure(
    host: str, *, cert: FilePath | None, key: FilePath | None, behind_proxy: bool
) -> tuple[FilePath, FilePath] | None:
    """The certificate and key to serve HTTPS with, or None for plain HTTP; `RemitError` for
    plain HTTP on an address other machines reach, unless a proxy in front terminates TLS.
    Tokens and decisions must not cross a network in the clear."""
    if (cert is None) != (key is None):
        raise RemitError("give both --tls-cert and --tls-key, or neither")
    if cert is not None and key is not None:
        for given, flag in ((cert, "--tls-cert"), (key, "--tls-key")):
            if not given.is_file():
                raise RemitError(f"{flag} {given}: no such file")
        return cert, key
    if behind_proxy or _loopback(host):
        return None
    raise RemitError(
        f"--host {host} is reached from other machines, and API tokens would cross the network "
        "in plain HTTP: give --tls-cert and --tls-key, or serve behind a proxy that terminates "
        "TLS and pass --behind-proxy (or listen on 127.0.0.1)"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    api: FastAPI,
    *,
    host: str,
    port: int,
    drain_timeout: float = 30.0,
    tls: tuple[FilePath, FilePath] | None = None,
    listening: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve `api` on `host:port` (port 0: a free one) until SIGTERM or Ctrl-C, then return.
    Call it from the main thread, where signals arrive.

    `listening` is called with the URL once the socket is bound. On a signal the server stops
    taking connections and lets open requests finish for up to `drain_timeout` seconds. Raises
    `RemitError` if the address cannot be listened on.
    """
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        api,
        log_config=None,
        lifespan="off",
        timeout_graceful_shutdown=math.ceil(drain_timeout),
        ssl_certfile=None if tls is None else str(tls[0]),
        ssl_keyfile=None if tls is None else str(tls[1]),
    )
    server = uvicorn.Server(config)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # uvicorn handles the signal, shuts down, then raises it again to the handler it found:
        # this one, so the process ends by returning rather than dying of the signal.
        for sig in previous:
            signal.signal(sig, _stop)
        listening(f"http://{shown}:{bound_port}")
        server.run(sockets=[sock])
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        sock.close()


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port`, or a `RemitError` naming the setting to change."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise RemitError(
            f"cannot listen on {host!r} ({error.strerror}): pass --host or set REMIT_HTTP_HOST "
            "to an address of this machine, e.g. 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise RemitError(
            f"cannot listen on {host}:{port} ({error.strerror}): pass another --port or set "
            "REMIT_HTTP_PORT (0 picks a free port)"
        ) from None
    # Listening from here, so that a client told the URL (`listening`) is queued until uvicorn
    # accepts, rather than refused while it starts.
    sock.listen(2048)
    return sock
