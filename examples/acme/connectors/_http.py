"""The example vendors' JSON APIs as their drivers call them (`dns`, `hosting`, `pgcloud`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from remit import CallContext, DriverError


class VendorApi:
    """A vendor's JSON API as a driver calls it, for one call at a time: the base URL and the
    Bearer token come from the call's credentials, every POST carries the call's idempotency
    key, and redirects are not followed, since they would carry the token elsewhere."""

    def __init__(
        self,
        vendor: str,
        *,
        url: str,
        token: str,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.vendor = vendor
        self.url_credential = url
        self.token_credential = token
        self.transport = transport

    def find(self, call: CallContext, path: str) -> dict[str, Any] | None:
        """`GET path`, or None when the vendor has no such thing (404)."""
        return self._request(call, "GET", path, None, missing_ok=True)

    def send(
        self, call: CallContext, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """`method path` with a JSON body: the vendor's answer (a 404 is a refusal)."""
        answer = self._request(call, method, path, body, missing_ok=False)
        assert answer is not None
        return answer

    def forget(self, call: CallContext, path: str) -> None:
        """`DELETE path`; one already gone (404) is done."""
        self._request(call, "DELETE", path, None, missing_ok=True)

    def _request(
        self,
        call: CallContext,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        missing_ok: bool,
    ) -> dict[str, Any] | None:
        vendor, url_credential = self.vendor, self.url_credential
        base = call.credential(url_credential).rstrip("/")
        if urlsplit(base).scheme not in ("http", "https"):
            raise DriverError(
                f"{url_credential} is {base!r}, which is not an http(s) address: set it to "
                f"the {vendor} API's base URL",
                retryable=False,
                maybe_applied=False,
            )
        headers = {
            "Authorization": f"Bearer {call.credential(self.token_credential)}",
            "Accept": "application/json",
        }
        if method == "POST":
            headers["Idempotency-Key"] = call.idempotency_key
        try:
            with httpx.Client(
                transport=self.transport, timeout=call.timeout, follow_redirects=False
            ) as client:
                response = client.request(method, base + path, json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # No connection, so the vendor saw nothing: safe to try again.
            raise DriverError(
                f"the {vendor} API at {base} is unreachable ({error}): is it up, and is "
                f"{url_credential} right?",
                retryable=True,
                maybe_applied=False,
            ) from error
        except httpx.HTTPError as error:
            raise DriverError(
                f"the {vendor} API at {base} failed {method} {path}: "
                f"{type(error).__name__}: {error}",
                retryable=True,
            ) from error
        status = response.status_code
        if status == 404 and missing_ok:
            return None
        if 300 <= status < 400:
            raise DriverError(
                f"the {vendor} API at {base} answered {method} {path} with a redirect "
                f"({status}), which is not followed: set {url_credential} to the API's own "
                "address",
                retryable=False,
                status=status,
                maybe_applied=False,
            )
        try:
            answer = response.json() if response.content else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise DriverError(
                f"the {vendor} API at {base} answered {method} {path} with {status} and a "
                f"body that is not a JSON object: is {url_credential} right?",
                retryable=status == 429 or status >= 500,
                status=status,
            )
        if status >= 400:
            said = answer.get("error") or response.reason_phrase
            hint = f"; check {self.token_credential}" if status in (401, 403) else ""
            code = answer.get("code")
            raise DriverError(
                f"the {vendor} API refused {method} {path} ({status}): {said}{hint}",
                retryable=status == 429 or status >= 500,
                status=status,
                vendor_code=code if isinstance(code, str) else None,
            )
        return answer
