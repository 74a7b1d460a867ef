"""Who is signed in to the console, and the CSRF check of every form they post.

A session is the sign-in store's (`policy/signin.py`): an unguessable token, of which the
database keeps only a hash, that ends when its person signs out or it expires. The browser
holds it in the cookie `remit_session`: HttpOnly (no script reads it), SameSite=Lax (another
site's form posts go without it) and Secure when the console is served over TLS (`remit serve`
with a certificate or `--behind-proxy`, or a request that arrived as https).

Each form carries a CSRF token: an HMAC of a fixed label keyed by the session's token, so it
is the session's own, needs no storage, and tells nothing of the token. A post without it, or
with another session's, is refused (403) before anything acts. The sign-in forms, posted before
there is a session, carry instead a random value that must match the cookie
`remit_signin_csrf` the sign-in page set (a double-submit cookie).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response

from remit.client import Client
from remit.core.errors import Unauthenticated

SESSION_COOKIE = "remit_session"
SIGNIN_CSRF_COOKIE = "remit_signin_csrf"
CSRF_FIELD = "csrf"


@dataclass(frozen=True)
class Viewer:
    """Who is signed in: their principal (`user:ann`), and the CSRF token their forms carry."""

    principal: str
    csrf: str


class SignInNeeded(Exception):
    """A page was asked for without a session that works: the answer is a redirect to the
    sign-in page, which then returns to `next`."""

    def __init__(self, next_url: str, reason: str | None = None) -> None:
        super().__init__(next_url)
        self.next_url = next_url
        self.reason = reason


class CsrfRefused(Exception):
    """A form was posted without its CSRF token, or with another session's: nothing acts."""


def csrf_of(session_token: str) -> str:
    return hmac.new(session_token.encode(), b"remit console csrf", hashlib.sha256).hexdigest()


def new_signin_csrf() -> str:
    return secrets.token_urlsafe(24)


class Sessions:
    """The console's view of the sign-in store: reads the cookie, sets and clears it."""

    def __init__(self, client: Client, *, secure_cookies: bool) -> None:
        self.client = client
        self.secure_cookies = secure_cookies

    def secure(self, request: Request) -> bool:
        return self.secure_cookies or request.url.scheme == "https"

    def viewer(self, request: Request) -> Viewer:
        """The signed-in viewer of `request`; `SignInNeeded` without a session that works."""
        token = request.cookies.get(SESSION_COOKIE)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method not in ("GET", "HEAD"):
            # A form posted once its session ended: signed in again, its person goes back to
            # the page the form is on (the post's path less its last part: a run's cancel to
            # the run, a gate to the inbox), not to the post's path, which no GET answers.
            target = request.url.path.rsplit("/", 1)[0]
        if not token:
            raise SignInNeeded(target)
        try:
            principal = self.client.sessions.principal(token)
        except Unauthenticated as error:
            raise SignInNeeded(target, str(error)) from error
        return Viewer(principal=principal, csrf=csrf_of(token))

    async def acting(self, request: Request) -> Viewer:
        """The viewer of a form post, once its CSRF token is checked; `CsrfRefused` if not."""
        viewer = self.viewer(request)
        form = await request.form()
        given = form.get(CSRF_FIELD)
        if not isinstance(given, str) or not hmac.compare_digest(given, viewer.csrf):
            raise CsrfRefused()
        return viewer

    async def check_signin_csrf(self, request: Request) -> None:
        """The double-submit check of a sign-in form; `CsrfRefused` if the values differ."""
        form = await request.form()
        given, kept = form.get(CSRF_FIELD), request.cookies.get(SIGNIN_CSRF_COOKIE)
        if not isinstance(given, str) or not kept or not hmac.compare_digest(given, kept):
            raise CsrfRefused()

    def keep(self, response: Response, request: Request, token: str) -> None:
        """Set the session cookie on `response`."""
        response.set_cookie(
            SESSION_COOKIE,
            token,
            httponly=True,
            samesite="lax",
            secure=self.secure(request),
            path="/",
            max_age=12 * 3600,
        )
        response.delete_cookie(SIGNIN_CSRF_COOKIE, path="/console")

    def forget(self, response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, path="/")

    def keep_signin_csrf(self, response: Response, request: Request, value: str) -> None:
        response.set_cookie(
            SIGNIN_CSRF_COOKIE,
            value,
            httponly=True,
            samesite="strict",
            secure=self.secure(request),
            path="/console",
            max_age=3600,
        )


def sign_in_url(next_url: str) -> str:
    return f"/console/sign-in?next={quote(next_url)}"
