"""Signing in and out: by a one-time link (`remit login-link --for user:ann`), or by a password
where one was set (`remit passwords set`).

Opening a link shows a page with one button; the code is used up by the post it sends, not by
the visit, so a mail scanner or a chat preview fetching the link does not spend it."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from typing import Annotated

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from remit.client import Client
from remit.console.render import Page
from remit.console.session import SESSION_COOKIE, Viewer, new_signin_csrf
from remit.core.errors import Unauthenticated
from remit.policy.signin import CHECKS_AT_ONCE

HOME = "/console/runs"
# Password checks wait for their turn here, on the event loop, not in the threads every route
# shares: a crowd of posts holds two threads, never the whole pool.
_PASSWORD_CHECKS = CapacityLimiter(CHECKS_AT_ONCE)


def add(router: APIRouter, client: Client, page: Page) -> None:
    sessions = page.sessions

    def sign_in_page(request: Request, *, status: int = 200, error: str | None = None) -> Response:
        csrf = new_signin_csrf()
        code = request.query_params.get("code") or ""
        nxt = _local(request.query_params.get("next"))
        response = page.render(
            request,
            "sign_in.html",
            None,
            status=status,
            code=code,
            next_url=nxt,
            signin_csrf=csrf,
            error=error,
        )
        sessions.keep_signin_csrf(response, request, csrf)
        return response

    @router.get("/console/sign-in")
    def show(request: Request) -> Response:
        return sign_in_page(request)

    @router.post("/console/sign-in")
    async def by_link(
        request: Request,
        code: Annotated[str, Form()] = "",
        next_url: Annotated[str, Form(alias="next")] = HOME,
    ) -> Response:
        await sessions.check_signin_csrf(request)
        try:  # its database work in a thread: the event loop serves every other request
            _, token = await run_in_threadpool(client.sessions.sign_in_with_link, code.strip())
        except Unauthenticated as error:
            return sign_in_page(request, status=401, error=str(error))
        response = page.redirect(_local(next_url))
        sessions.keep(response, request, token)
        return response

    @router.post("/console/sign-in/password")
    async def by_password(
        request: Request,
        principal: Annotated[str, Form()] = "",
        password: Annotated[str, Form()] = "",
        next_url: Annotated[str, Form(alias="next")] = HOME,
    ) -> Response:
        await sessions.check_signin_csrf(request)
        address = request.client.host if request.client else ""
        try:  # argon2 and the database in a thread: the event loop serves every other request
            _, token = await to_thread.run_sync(
                lambda: client.sessions.sign_in_with_password(
                    principal.strip(), password, address=address
                ),
                limiter=_PASSWORD_CHECKS,
            )
        except Unauthenticated as error:
            return sign_in_page(request, status=401, error=str(error))
        response = page.redirect(_local(next_url))
        sessions.keep(response, request, token)
        return response

    @router.post("/console/sign-out")
    def sign_out(request: Request, viewer: Annotated[Viewer, Depends(sessions.acting)]) -> Response:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            client.sessions.sign_out(token)
        response = page.redirect("/console/sign-in", flash=f"{viewer.principal} signed out.")
        sessions.forget(response)
        return response


def _local(url: str | None) -> str:
    """`url` if it is a path of the console, else the runs page: a sign-in never sends its
    person to another site (`//evil.example` is another site)."""
    if url and url.startswith("/console/") and not url.startswith("//") and "\\" not in url:
        return url
    return HOME
