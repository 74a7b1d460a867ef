"""The console's routes, put on the HTTP API's app by `install(api, client)`: every page under
`/console/`, its static files under `/console/static/`, and `/` sending a browser to the runs.

A page asked for without a session redirects to the sign-in page; a form posted without its
CSRF token is refused (403) before anything acts; an act the client refuses shows its reason on
an error page with the client's status (403 for the policies' refusal). Any other error on a
console path (a query that does not parse, a page not found, the database down) is the API's
answer (`fallback`) in a page: the same status and words. Errors elsewhere keep the API's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from remit.client import Client
from remit.console.errors import reasons_of, status_of
from remit.console.pages import (
    ask,
    budgets,
    changes,
    inbox,
    ledger,
    operations,
    run,
    runs,
    search,
    signin,
    start,
    tasks,
)
from remit.console.pages import resources as resource_pages
from remit.console.render import Page
from remit.console.session import CsrfRefused, Sessions, SignInNeeded, sign_in_url
from remit.core.errors import RemitError

# The title of a page that failed, by the class of its status.
FAILURE_TITLES = {400: "Not done", 500: "The server failed"}

# What a person is told for an address that is not a page (the API's words name its routes).
PAGE_MISSES = {
    404: "There is no page at {path}: the menu above has every page.",
    405: "{path} is where a form is sent, not a page to open: go back to the page with the form.",
}

Handler = Callable[[Request, Exception], Awaitable[Response]]

# What every console answer says to the browser: run only the console's own scripts, show it in
# no frame (clickjacking), and send no referrer (a sign-in link's code stays out of logs).
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def install(api: FastAPI, client: Client, *, secure_cookies: bool, fallback: Handler) -> None:
    """Add the console to `api`. `secure_cookies`: mark the session cookie Secure (the console
    is served over TLS, perhaps behind a proxy that ends it)."""
    sessions = Sessions(client, secure_cookies=secure_cookies)
    page = Page(client, sessions)
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def home() -> RedirectResponse:
        return RedirectResponse("/console/runs", status_code=303)

    @router.get("/console")
    def console_home() -> RedirectResponse:
        return RedirectResponse("/console/runs", status_code=303)

    # Each page module adds its routes: `add(router, client, page)`.
    for module in (
        signin,
        runs,
        run,
        search,
        start,
        inbox,
        tasks,
        ledger,
        budgets,
        operations,
        resource_pages,
        changes,
        ask,
    ):
        module.add(router, client, page)
    api.include_router(router)
    static = resources.files("remit.console") / "static"
    api.mount("/console/static", StaticFiles(directory=str(static)), name="console-static")

    @api.middleware("http")
    async def console_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        if _is_console(request):
            for name, value in HEADERS.items():
                response.headers.setdefault(name, value)
            if not request.url.path.startswith("/console/static/"):
                response.headers.setdefault("Cache-Control", "no-store")
        return response

    async def signed_out(request: Request, error: Exception) -> Response:
        assert isinstance(error, SignInNeeded)
        if request.headers.get("HX-Request"):
            # htmx follows a redirect inside the page; ask it to load the sign-in page whole.
            return Response(status_code=204, headers={"HX-Redirect": sign_in_url(error.next_url)})
        # Why the session stopped working (signed out, expired), shown on the sign-in page.
        return page.redirect(sign_in_url(error.next_url), flash=error.reason)

    async def csrf_refused(request: Request, error: Exception) -> Response:
        return page.render(
            request,
            "error.html",
            None,
            status=403,
            title="Refused",
            reasons=[
                "This form has no valid CSRF token, so nothing was done. Reload the page and "
                "send the form again."
            ],
        )

    async def refused(request: Request, error: Exception) -> Response:
        if not _is_console(request) or not isinstance(error, RemitError):
            return await failed(request, error)
        status = status_of(error)
        try:
            viewer = sessions.viewer(request)
        except SignInNeeded:
            viewer = None
        return page.render(
            request,
            "error.html",
            viewer,
            status=status,
            title="Refused by the policies" if status == 403 else "Not done",
            reasons=reasons_of(error),
        )

    async def failed(request: Request, error: Exception) -> Response:
        # Anything else on a page (a query that does not parse, a page that is not there, the
        # database down, a failure): the API's answer, its status and words, as a page.
        answer = await fallback(request, error)
        if not _is_console(request) or request.url.path.startswith("/console/static/"):
            return answer
        said = json.loads(bytes(answer.body))
        reasons = [each["reason"] for each in said.get("reasons", [])] or [said["error"]]
        if isinstance(error, StarletteHTTPException) and error.status_code in PAGE_MISSES:
            reasons = [PAGE_MISSES[error.status_code].format(path=request.url.path)]
        try:
            viewer = sessions.viewer(request)
        except SignInNeeded:
            viewer = None
        shown = page.render(
            request,
            "error.html",
            viewer,
            status=answer.status_code,
            title=FAILURE_TITLES.get(answer.status_code // 100 * 100, "Not done"),
            reasons=reasons,
        )
        if "Retry-After" in answer.headers:
            shown.headers["Retry-After"] = answer.headers["Retry-After"]
        return shown

    api.add_exception_handler(SignInNeeded, signed_out)
    api.add_exception_handler(CsrfRefused, csrf_refused)
    api.add_exception_handler(RemitError, refused)
    # Each class the API answers for itself (`serve/api.py`), so that a page's error finds this.
    for error in (
        RequestValidationError,
        StarletteHTTPException,
        sa.exc.OperationalError,
        sa.exc.InterfaceError,
        sa.exc.TimeoutError,
        Exception,
    ):
        api.add_exception_handler(error, failed)


def _is_console(request: Request) -> bool:
    path = request.url.path
    return path == "/" or path == "/console" or path.startswith("/console/")
