"""How a console page is rendered: the Jinja2 templates of `templates/`, autoescaped, with what
every page shows (who is signed in, the navigation, the CSRF token its forms carry, the message
left by the act before), and the filters the templates format values with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from remit.client import Client
from remit.console.session import Sessions, Viewer

# The cookie that carries a message from an act to the page its redirect shows.
FLASH_COOKIE = "remit_flash"

# (path, label) of the navigation, in order.
NAV = (
    ("/console/runs", "Runs"),
    ("/console/start", "Start a run"),
    ("/console/inbox", "Inbox"),
    ("/console/tasks", "Tasks"),
    ("/console/ledger", "Ledger"),
    ("/console/budgets", "Budgets"),
    ("/console/operations", "Operations"),
    ("/console/resources", "Resources"),
    ("/console/changes", "Changes"),
)


def span(delta: timedelta) -> str:
    """A duration as a person reads it, to two units: `3 h 20 min`, `12 s`, `4 d 2 h`."""
    seconds = int(abs(delta.total_seconds()))
    parts: list[str] = []
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def ago(at: datetime | None, now: datetime | None = None) -> str:
    """`5 min ago`, or `in 2 h` for a time still to come."""
    if at is None:
        return ""
    delta = (now or datetime.now(UTC)) - at
    return f"{span(delta)} ago" if delta >= timedelta(0) else f"in {span(delta)}"


def when(at: datetime | None) -> str:
    """A timestamp in UTC, to the second."""
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def as_json(value: Any, indent: int | None = 2) -> str:
    """A value as indented JSON, for a `<pre>`; on one line with `indent=None`."""
    return json.dumps(value, indent=indent, sort_keys=True, default=str, ensure_ascii=False)


def money(value: Decimal | float | int | str | None) -> str:
    """An amount to two places: `1234.5` is `1,234.50`."""
    if value is None:
        return ""
    return f"{Decimal(str(value)):,.2f}"


def countdown(at: datetime | None, now: datetime | None = None) -> str:
    """`expires in 3 h 20 min`, `expired 5 min ago`, or `no expiry`."""
    if at is None:
        return "no expiry"
    delta = at - (now or datetime.now(UTC))
    return f"expires in {span(delta)}" if delta > timedelta(0) else f"expired {span(delta)} ago"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("remit.console", "templates"),
        autoescape=select_autoescape(("html", "svg")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ago=ago, when=when, json=as_json, money=money, countdown=countdown, span=span
    )
    env.globals["nav"] = NAV
    return env


class Page:
    """Renders the console's templates for one app's client."""

    def __init__(self, client: Client, sessions: Sessions) -> None:
        self.client = client
        # `Depends(page.sessions.viewer)` on a page, `Depends(page.sessions.acting)` on a post.
        self.sessions = sessions
        self.env = _environment()

    def render(
        self,
        request: Request,
        template: str,
        viewer: Viewer | None,
        *,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """The page `template` for `viewer` (None: signed out), with the flash message the act
        before left, which it then clears."""
        kept = request.cookies.get(FLASH_COOKIE)
        flash = None if kept is None else unquote(kept)
        body = self.env.get_template(template).render(
            request=request,
            viewer=viewer,
            app_name=self.client.app.name,
            path=request.url.path,
            flash=flash,
            now=datetime.now(UTC),
            **context,
        )
        response = HTMLResponse(body, status_code=status)
        if kept is not None:
            response.delete_cookie(FLASH_COOKIE, path="/console")
        return response

    def fragment(self, template: str, **context: Any) -> HTMLResponse:
        """A part of a page (`templates/parts/`), as htmx swaps it in."""
        body = self.env.get_template(template).render(now=datetime.now(UTC), **context)
        return HTMLResponse(body)

    def redirect(self, url: str, *, flash: str | None = None) -> RedirectResponse:
        """Post/Redirect/Get: a 303 to `url`, leaving `flash` for the page it shows (a cookie
        marked Secure, as the session's is, when the console is served over TLS)."""
        response = RedirectResponse(url, status_code=303)
        if flash is not None:
            response.set_cookie(
                FLASH_COOKIE,
                quote(flash)[:1000],
                path="/console",
                httponly=True,
                samesite="lax",
                secure=self.sessions.secure_cookies,
            )
        return response


def query(params: Mapping[str, str | None], **changes: str | None) -> str:
    """`?a=1&b=2` of `params` with `changes`, leaving out empty values: the link to the same list
    with one filter or page changed."""
    merged = {**params, **changes}
    kept = [f"{quote(k)}={quote(v)}" for k, v in merged.items() if v]
    return "?" + "&".join(kept) if kept else "?"
