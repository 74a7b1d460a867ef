"""The wakeup service's HTTP routes. Every answer but a 204 is JSON; an error is
`{"error": "..."}`. Tokens come as `Authorization: Bearer <token>`: an account's (`rwa_…`) to
register, read and delete instances, an instance's own (`rwi_…`) to set its wake.

- `GET /health` → 200 `{"ok": true}`
- `POST /wakeup/instances {"url", "token"}` → 201 `{"id"}` for a new instance, 200 `{"id"}`
  for one this account registered already (its URL now the given one; a new URL forgets its
  wake), 409 for one another account registered, 400 for a bad body or URL
- `GET /wakeup/instances/{id}` → 200 `{"id", "url", "at", "called_at", "attempts", "last_error"}`
- `DELETE /wakeup/instances/{id}` → 204
- `PUT /wakeup/wake {"at"}` with the instance's token → 204, its wake replaced, the loop poked

401 without a token or with an unknown one, 403 for another account's instance, 404 for an
unknown instance or path, 405 for a method a path does not take, 413 for a body over 16 KiB.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from remit.core.wakeup_tokens import ACCOUNT_PREFIX, INSTANCE_PREFIX
from remit.wakeup.store import Conflict, Instance, WakeupStore
from remit.wakeup.urls import UrlRefused, instance_url, target

MAX_BODY_BYTES = 16 * 1024


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def wakeup_api(
    store: WakeupStore, *, poke: Callable[[], None], allow_private: bool = False
) -> FastAPI:
    """The service's routes on `store`; `poke` wakes the loop after a wake is set."""
    api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def register(request: Request) -> Response:
        account = await _account(store, request)
        given = await _body(request)
        token = given.get("token")
        if not isinstance(token, str) or not token.startswith(INSTANCE_PREFIX) or len(token) > 200:
            raise _Refused(
                400, f"token must be the instance's own token, which starts {INSTANCE_PREFIX}"
            )
        try:
            url = instance_url(given.get("url"))
            await run_in_threadpool(target, url, allow_private=allow_private)
        except UrlRefused as refused:
            raise _Refused(400, str(refused)) from None
        try:
            instance_id, new = await run_in_threadpool(store.register, account, url, token)
        except Conflict:
            raise _Refused(409, "this instance token is registered by another account") from None
        return JSONResponse({"id": instance_id}, status_code=201 if new else 200)

    async def show(request: Request) -> Response:
        instance = await _own_instance(store, request)
        return JSONResponse(instance.shown())

    async def delete(request: Request) -> Response:
        instance = await _own_instance(store, request)
        await run_in_threadpool(store.delete, instance.id)
        return Response(status_code=204)

    async def wake(request: Request) -> Response:
        token = _bearer(request)
        if token is None or not token.startswith(INSTANCE_PREFIX):
            raise _Refused(
                401,
                f"send the instance's own token (it starts {INSTANCE_PREFIX}) as Authorization: Bearer",
            )
        given = await _body(request)
        at = _moment(given.get("at"))
        if not await run_in_threadpool(store.set_wake, token, at):
            raise _Refused(401, "no instance is registered with this token")
        poke()
        return Response(status_code=204)

    api.add_route("/health", health, methods=["GET"])
    api.add_route("/wakeup/instances", register, methods=["POST"])
    api.add_route("/wakeup/instances/{instance_id}", show, methods=["GET"])
    api.add_route("/wakeup/instances/{instance_id}", delete, methods=["DELETE"])
    api.add_route("/wakeup/wake", wake, methods=["PUT"])
    api.add_exception_handler(_Refused, _refused)
    api.add_exception_handler(HTTPException, _http_error)
    api.add_exception_handler(Exception, _internal)
    return api


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def _account(store: WakeupStore, request: Request) -> str:
    token = _bearer(request)
    if token is None or not token.startswith(ACCOUNT_PREFIX):
        raise _Refused(
            401,
            f"send an account token (it starts {ACCOUNT_PREFIX}; `remit wakeup accounts create` "
            "prints one) as Authorization: Bearer",
        )
    account = await run_in_threadpool(store.account_of, token)
    if account is None:
        raise _Refused(401, "no account has this token")
    return account


async def _own_instance(store: WakeupStore, request: Request) -> Instance:
    account = await _account(store, request)
    instance = await run_in_threadpool(store.instance, request.path_params["instance_id"])
    if instance is None:
        raise _Refused(404, "no instance has this id")
    if instance.account_id != account:
        raise _Refused(403, "this instance is registered by another account")
    return instance


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read no further than `MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _Refused(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _Refused(413, f"the request body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    try:
        given = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise _Refused(400, "the request body must be a JSON object") from None
    if not isinstance(given, dict):
        raise _Refused(400, "the request body must be a JSON object")
    return given


def _moment(value: object) -> datetime:
    shape = "at must be an ISO 8601 date-time with an offset, e.g. 2030-01-31T09:00:00Z"
    if not isinstance(value, str) or len(value) > 64 or "T" not in value.upper():
        raise _Refused(400, shape)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _Refused(400, shape) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise _Refused(400, shape)
    return moment


async def _refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, _Refused)
    return JSONResponse({"error": error.message}, status_code=error.status)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = {404: "no such path", 405: f"{request.method} is not taken here"}.get(
        error.status_code, str(error.detail)
    )
    return JSONResponse({"error": message}, status_code=error.status_code, headers=error.headers)


async def _internal(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": "the wakeup service failed; see its log"}, status_code=500)
