"""The `wakeup` connector: an instance's side of the wakeup service, which starts a stopped
instance again when its next deadline comes.

Every app has it (`App` adds it; `wakeup` is remit's own vendor), so each registration is an op
call with a ledger row like any other. Its four ops:

- `wakeup.instances.create` `{url}` → `{id, url}`: register this instance, at its public
  `url` (where the service calls `/wake`), under the account of `REMIT_WAKEUP_ACCOUNT_TOKEN`.
  The instance is named by its own token, the secret `REMIT_WAKEUP_TOKEN`: registering the same
  token again is the same registration (a new URL forgets the wake it had).
- `wakeup.instances.get` `{id}` → `{id, url, at, called_at, attempts, last_error, found}`:
  what the service holds for an instance of the account (`found` False for one it does not).
- `wakeup.instances.delete` `{id}` → `{id, deleted}`: forget an instance of the account.
- `wakeup.instances.register` `{at}` → `{at}`: wake this instance at `at`, replacing the wake
  registered before. Sent with the instance token alone; remit makes it as `remit:wakeup`
  (`client.ops.register_wake`) before a worker stops.

The driver (`WakeupDriver`) talks to `REMIT_WAKEUP_URL` over HTTP with the tokens as
`Authorization: Bearer …`; it follows no redirect, which would carry a token elsewhere. Both
tokens are declared credentials, so remit redacts them wherever a call's answer or error goes.
The fake (`FakeWakeup`) keeps the same state in memory and refuses what the service refuses.

The instance is also a resource type, `wakeup.instance`, of a host: `host` takes the host's
public URL (usually `ref("web", "url")`), and the service sets `id`, `at` and `last_error`.
Creating one registers the host's URL under the instance token, as `wakeup.instances.create`
does; the token names the instance, so a new host moves it (and forgets its wake); deleting
one forgets it at the service. Both the driver and the fake answer its six ops.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, Field, field_validator

from remit.connectors.base import CallContext, Connector, Fake, implements
from remit.connectors.resources import ResourceDriver, ResourceImplementation
from remit.core.errors import DriverError, MissingCredential
from remit.core.text import excerpt, printable, unsafe
from remit.core.wakeup_tokens import ACCOUNT_PREFIX, INSTANCE_PREFIX, INSTANCE_TOKEN_SECRET
from remit.declare.ops import op
from remit.declare.resources import (
    DatabaseOutputs,
    Reference,
    ResourceType,
    WakeupSpec,
    resource_type,
)
from remit.declare.steps import Given, steps

if TYPE_CHECKING:
    # httpx is imported where the driver calls the service: every app has this connector, and
    # one that never calls it does not load httpx.
    import httpx

VENDOR = "wakeup"
SERVICE_URL = "REMIT_WAKEUP_URL"
ACCOUNT_TOKEN = "REMIT_WAKEUP_ACCOUNT_TOKEN"
# remit's own settings drivers do not see, except these, which are this connector's.
DRIVER_SETTINGS = frozenset({SERVICE_URL, ACCOUNT_TOKEN, INSTANCE_TOKEN_SECRET})
# Who remit registers the instance's wakes as.
WAKEUP_ACTOR = "remit:wakeup"
# The longest a try waits on the service: a stopping worker should not hang on it.
MOST_SECONDS = 10.0
_CONNECT = "remit wakeup connect URL"
_LONGEST_URL = 2000


def check_url(url: str, *, what: str = "url") -> str:
    """`url` without a trailing slash, if it is an http:// or https:// URL with a host and no
    user, password, query or fragment (as the service stores an instance's); else `ValueError`
    saying so."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        parts = urlsplit("")
    if (
        len(url) > _LONGEST_URL
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or "?" in url
        or "#" in url
        or unsafe(url)
        or any(char.isspace() for char in url)
    ):
        raise ValueError(
            f"{what} must be an http:// or https:// URL with a host and no user, password, "
            f"query or fragment, at most {_LONGEST_URL} characters, e.g. "
            f"https://remit.example.com; not {printable(excerpt(url, 80))!r}"
        )
    return url.rstrip("/")


class Registration(BaseModel):
    """The input of `wakeup.instances.create`: the instance's public URL."""

    url: str = Field(description="where the service reaches this instance (it calls /wake)")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


class Registered(BaseModel):
    """The output of `wakeup.instances.create`: the instance's id at the service."""

    id: str
    url: str


InstanceId = Annotated[str, Field(min_length=1, max_length=200, description="the instance's id")]


class InstanceRef(BaseModel):
    """The input of `wakeup.instances.get` and `.delete`."""

    id: InstanceId


class Instance(BaseModel):
    """The output of `wakeup.instances.get`: the instance's wake and how calling it went.
    `found` is False (and the rest empty) when the service holds no instance of that id."""

    id: str
    url: str | None = None
    at: datetime | None = None
    called_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    found: bool = True


class Removed(BaseModel):
    """The output of `wakeup.instances.delete`: whether this call removed the instance."""

    id: str
    deleted: bool


class Wake(BaseModel):
    """The input of `wakeup.instances.register`: when to wake this instance."""

    at: datetime = Field(description="when, with its UTC offset")

    @field_validator("at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                "at must say its timezone (an offset, or Z for UTC), e.g. 2030-01-31T09:00:00Z"
            )
        return value


class Armed(BaseModel):
    """The output of `wakeup.instances.register`: the wake now registered, in UTC."""

    at: datetime


create_instance = op(
    "wakeup.instances.create",
    effect="write",
    idempotent=True,
    input=Registration,
    output=Registered,
    description="Register this instance with the wakeup service, at its public URL.",
)
get_instance = op(
    "wakeup.instances.get",
    effect="read",
    input=InstanceRef,
    output=Instance,
    description="An instance of the account as the wakeup service holds it.",
)
delete_instance = op(
    "wakeup.instances.delete",
    effect="write",
    idempotent=True,
    input=InstanceRef,
    output=Removed,
    description="Forget an instance of the account at the wakeup service.",
)
register_wake = op(
    "wakeup.instances.register",
    effect="write",
    idempotent=True,
    input=Wake,
    output=Armed,
    description="Ask the wakeup service to wake this instance at a time (replacing the last).",
)
OPS = (create_instance, get_instance, delete_instance, register_wake)


class InstanceFields(BaseModel):
    """A `wakeup.instance`: the host the service wakes, and what the service holds for it."""

    host: str = Field(description="the host's public URL; the service calls <host>/wake")
    id: str | None = Field(default=None, description="the instance's id at the service")
    at: datetime | None = Field(default=None, description="the wake registered, in UTC")
    last_error: str | None = Field(default=None, description="why the last call of /wake failed")


def _health(state: Mapping[str, Any]) -> DatabaseOutputs:
    """A `wakeup.instance` is healthy once the service holds it and its last call of `/wake`
    was answered."""
    if not isinstance(state.get("id"), str):
        return DatabaseOutputs(healthy=False, why="the wakeup service holds no such instance")
    if state.get("last_error"):
        return DatabaseOutputs(healthy=False, why=f"its last wake failed: {state['last_error']}")
    return DatabaseOutputs(healthy=True)


instance = resource_type(
    "wakeup.instance",
    schema=InstanceFields,
    title="wakeup instance",
    vendor_owned=("id", "at", "last_error"),
    references={"host": Reference(fields=("url",))},
    # Not stateless: the service holds the instance's registered wake, which a delete loses.
    wakeup=WakeupSpec(host="host", register=register_wake.id, outputs=_health),
)
# The ops that register the instance token, whose 409 means another account holds it.
_REGISTERING = frozenset({create_instance.id, instance.ops["create"].id, instance.ops["update"].id})


def _utc(at: datetime | None) -> datetime | None:
    return None if at is None else at.astimezone(UTC)


def _instance_token(call: CallContext) -> str:
    """The instance's token, checked; `MissingCredential` saying how to make one."""
    token = call.environ.get(INSTANCE_TOKEN_SECRET)
    if not token:
        raise MissingCredential(
            f"op `{call.op.id}` needs the secret {INSTANCE_TOKEN_SECRET}, this instance's token "
            f"at the wakeup service: run `{_CONNECT}` (URL: this instance's public address), "
            "which makes and stores it",
            op=call.op.id,
            variable=INSTANCE_TOKEN_SECRET,
        )
    if not token.startswith(INSTANCE_PREFIX):
        raise MissingCredential(
            f"op `{call.op.id}`: {INSTANCE_TOKEN_SECRET} is not an instance token (they start "
            f"{INSTANCE_PREFIX}): delete it (`remit secrets delete {INSTANCE_TOKEN_SECRET}`) and "
            f"run `{_CONNECT}`, which makes one",
            op=call.op.id,
            variable=INSTANCE_TOKEN_SECRET,
        )
    return token


def _account_token(call: CallContext) -> str:
    """The account's token, checked; `MissingCredential` saying where one comes from."""
    token = call.environ.get(ACCOUNT_TOKEN)
    if not token or not token.startswith(ACCOUNT_PREFIX):
        problem = (
            "is not set" if not token else f"is not an account token (they start {ACCOUNT_PREFIX})"
        )
        raise MissingCredential(
            f"op `{call.op.id}` needs {ACCOUNT_TOKEN}, a wakeup account's token, and it "
            f"{problem}: `remit wakeup accounts create LABEL` on the service prints one; set it "
            f"for this process, then run `{_CONNECT}`",
            op=call.op.id,
            variable=ACCOUNT_TOKEN,
        )
    return token


def refused(op_id: str, status: int, error: str) -> DriverError:
    """The service's refusal of a call, as a `DriverError`: a rate limit or a server error may
    pass; any other refusal says what to change."""
    said = printable(excerpt(error, 300))
    message = f"the wakeup service refused `{op_id}` ({status}): {said}"
    if status == 401 and op_id == register_wake.id:
        message += (
            f". It does not know this instance's token ({INSTANCE_TOKEN_SECRET}): run "
            f"`{_CONNECT}` to register it"
        )
    elif status == 401:
        message += f". Check {ACCOUNT_TOKEN}: it must be an account's token at this service"
    elif status == 403:
        message += f". The instance belongs to another account than {ACCOUNT_TOKEN}'s"
    elif status == 409 and op_id in _REGISTERING:
        message += (
            f". Another account registered this instance's token ({INSTANCE_TOKEN_SECRET}); a "
            f"new account needs a new instance token: `remit secrets delete "
            f"{INSTANCE_TOKEN_SECRET}`, then `{_CONNECT}` again"
        )
    return DriverError(
        message,
        retryable=status == 429 or status >= 500,
        status=status,
        op=op_id,
    )


def _host(desired: Mapping[str, Any], call: CallContext) -> str:
    """The declared host's URL, checked as the service checks an instance's; a `DriverError`
    saying what to declare otherwise."""
    given = desired.get("host")
    try:
        return check_url(given if isinstance(given, str) else repr(given), what="host")
    except ValueError as error:
        raise DriverError(
            f'{instance.id}: {error}; declare the host\'s public URL (e.g. ref("web", "url"))',
            retryable=False,
            op=call.op.id,
        ) from None


def _normal(desired: dict[str, Any] | None) -> dict[str, Any] | None:
    """`desired` with its host as the service stores it (no trailing slash), so a declared
    `https://x.example.com/` plans no change against `https://x.example.com`."""
    if desired is None or not isinstance(desired.get("host"), str):
        return desired
    try:
        return {**desired, "host": check_url(desired["host"])}
    except ValueError:
        return desired  # create or update refuses it, naming the field


def _state(held: Instance) -> dict[str, Any] | None:
    """An instance the service holds as a `wakeup.instance`'s state; None when it holds none."""
    if not held.found:
        return None
    shown = held.model_dump(mode="json", include={"id", "at", "last_error"})
    return {"host": held.url, **shown}


def _another_instance(call: CallContext, id: str, found: str) -> DriverError:
    return DriverError(
        f"{instance.id} {id}: this instance's token ({INSTANCE_TOKEN_SECRET}) is registered as "
        f"instance {found}, not {id}, so the update moved {found} and left {id} as it was: "
        f"bind the declaration to {found} (import it) and delete {id}, or give "
        f"{INSTANCE_TOKEN_SECRET} the token {id} was registered with",
        retryable=False,
        op=call.op.id,
    )


class _InstanceType(ResourceImplementation):
    """What the driver and the fake share for `wakeup.instance`: a declared host is compared
    as the service stores it."""

    resource_types = (instance,)

    def as_stored(
        self, rtype: ResourceType, desired: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        return _normal(desired)

    # How each reaches the service's instances: the same calls as the connector's ops.

    @abstractmethod
    def _register_at(self, call: CallContext, url: str) -> str:
        """Register the instance's token at `url`; the instance's id."""

    @abstractmethod
    def _fetch(self, call: CallContext, instance_id: str) -> Instance:
        """What the service holds for the instance (`found` False for none)."""

    @abstractmethod
    def _remove(self, call: CallContext, instance_id: str) -> bool:
        """Forget the instance; False when the service held none of that id."""

    # The connector's ops.

    @implements(create_instance)
    def create(self, input: Registration, call: CallContext) -> Registered:
        return Registered(id=self._register_at(call, input.url), url=input.url)

    @implements(get_instance)
    def get(self, input: InstanceRef, call: CallContext) -> Instance:
        return self._fetch(call, input.id)

    @implements(delete_instance)
    def delete(self, input: InstanceRef, call: CallContext) -> Removed:
        return Removed(id=input.id, deleted=self._remove(call, input.id))

    # The type's.

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        return _state(self._fetch(call, id))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        url = _host(desired, call)
        made = self._register_at(call, url)
        # Read back: the same token at the same URL keeps the wake it had.
        return made, _state(self._fetch(call, made)) or {"host": url, "id": made}

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        url = _host(desired, call)
        made = self._register_at(call, url)
        if made != id:
            raise _another_instance(call, id, made)
        return _state(self._fetch(call, made)) or {"host": url, "id": made}

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        self._remove(call, id)


class WakeupDriver(_InstanceType, ResourceDriver):
    """The wakeup service at `REMIT_WAKEUP_URL`. Registering, reading and deleting instances
    needs `REMIT_WAKEUP_ACCOUNT_TOKEN`; every call needs the secret `REMIT_WAKEUP_TOKEN`,
    which `remit wakeup connect` makes."""

    credentials = (INSTANCE_TOKEN_SECRET, ACCOUNT_TOKEN)

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.transport = transport

    def needs(self, op_id: str) -> tuple[str, ...]:
        # A wake is sent with the instance's token alone: a worker or a command that wakes
        # the instance needs no account token.
        if op_id == register_wake.id:
            return (INSTANCE_TOKEN_SECRET,)
        return super().needs(op_id)

    @implements(register_wake)
    def register(self, input: Wake, call: CallContext) -> Armed:
        at = input.at.astimezone(UTC)
        body = {"at": at.isoformat()}
        response = self._send(call, "PUT", "/wakeup/wake", _instance_token(call), body)
        self._answer(call, response, (204,))
        return Armed(at=at)

    def _register_at(self, call: CallContext, url: str) -> str:
        """Register the instance token at `url`; the instance's id."""
        body = {"url": url, "token": _instance_token(call)}
        response = self._send(call, "POST", "/wakeup/instances", _account_token(call), body)
        answer = self._answer(call, response, (200, 201))
        found = answer.get("id")
        if not isinstance(found, str) or not found:
            raise self._not_the_service(call, response)
        return found

    def _fetch(self, call: CallContext, instance_id: str) -> Instance:
        path = f"/wakeup/instances/{quote(instance_id, safe='')}"
        response = self._send(call, "GET", path, _account_token(call))
        answer = self._answer(call, response, (200,), missing=True)
        if answer is _MISSING:
            return Instance(id=instance_id, found=False)
        try:
            held = Instance.model_validate({**answer, "found": True})
        except ValueError:
            raise self._not_the_service(call, response) from None
        return held.model_copy(update={"at": _utc(held.at), "called_at": _utc(held.called_at)})

    def _remove(self, call: CallContext, instance_id: str) -> bool:
        """Forget the instance; False when the service held none of that id."""
        path = f"/wakeup/instances/{quote(instance_id, safe='')}"
        response = self._send(call, "DELETE", path, _account_token(call))
        return self._answer(call, response, (204,), missing=True) is not _MISSING

    def _send(
        self,
        call: CallContext,
        method: str,
        path: str,
        token: str,
        body: dict[str, Any] | None = None,
    ) -> httpx.Response:
        import httpx

        base = self._base(call)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        try:
            with httpx.Client(
                transport=self.transport,
                timeout=min(call.timeout, MOST_SECONDS),
                follow_redirects=False,
            ) as client:
                return client.request(method, f"{base}{path}", json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # No connection, so the service saw nothing: safe to try again.
            raise DriverError(
                f"the wakeup service at {base} is unreachable ({type(error).__name__}: {error}): "
                f"is it running, and is {SERVICE_URL} right?",
                retryable=True,
                maybe_applied=False,
                op=call.op.id,
            ) from error
        except httpx.HTTPError as error:
            raise DriverError(
                f"the wakeup service at {base} failed `{call.op.id}`: {type(error).__name__}: "
                f"{error}",
                retryable=True,
                op=call.op.id,
            ) from error

    def _base(self, call: CallContext) -> str:
        url = call.environ.get(SERVICE_URL)
        if not url:
            raise MissingCredential(
                f"op `{call.op.id}` needs {SERVICE_URL}, the wakeup service's address: set it "
                f"for this process (and run `{_CONNECT}` once, to register the instance)",
                op=call.op.id,
                variable=SERVICE_URL,
            )
        try:
            return check_url(url, what=SERVICE_URL).rstrip("/")
        except ValueError as error:
            raise MissingCredential(str(error), op=call.op.id, variable=SERVICE_URL) from None

    def _answer(
        self,
        call: CallContext,
        response: httpx.Response,
        expected: tuple[int, ...],
        *,
        missing: bool = False,
    ) -> dict[str, Any]:
        """The service's JSON answer to a call it took; `_MISSING` for its 404 where `missing`
        allows one. A refusal is a `DriverError` with the service's `error`; a redirect, or a
        reply that is not the service's, is one saying `REMIT_WAKEUP_URL` may be wrong."""
        status = response.status_code
        if 300 <= status < 400:
            where = response.headers.get("location", "elsewhere")
            raise DriverError(
                f"the wakeup service at {self._base(call)} answered `{call.op.id}` with a "
                f"redirect ({status}) to {printable(excerpt(where, 200))}, which remit does not "
                f"follow (it would carry the token there): is {SERVICE_URL} right? Set it to the "
                "service's own address",
                retryable=False,
                status=status,
                maybe_applied=False,
                op=call.op.id,
            )
        if status == 204 and status in expected:
            return {}
        answer = _json_object(response)
        if status in expected and answer is not None:
            return answer
        error = None if answer is None else answer.get("error")
        if status >= 400 and isinstance(error, str):
            if status == 404 and missing:
                return _MISSING
            raise refused(call.op.id, status, error)
        raise self._not_the_service(call, response)

    def _not_the_service(self, call: CallContext, response: httpx.Response) -> DriverError:
        status = response.status_code
        shown = printable(excerpt(response.text, 120))
        return DriverError(
            f"the wakeup service at {self._base(call)} answered `{call.op.id}` with {status} "
            f"and a reply that is not the wakeup service's ({shown!r}): is {SERVICE_URL} right?",
            # A proxy in front of the service answers so while it restarts.
            retryable=status == 429 or status >= 500,
            status=status,
            op=call.op.id,
        )


# The marker of a 404 the service itself answered.
_MISSING: dict[str, Any] = {}


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    if "json" not in response.headers.get("content-type", ""):
        return None
    try:
        parsed = response.json()
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class FakeInstance:
    """One instance the fake service holds."""

    id: str
    account: str
    url: str
    at: datetime | None = None
    called_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class WakeRegistered:
    """One wake the fake was asked for: which instance, when."""

    id: str
    at: datetime


class FakeWakeup(_InstanceType, Fake):
    """The wakeup service in memory: instances by their token, each of the account that
    registered it, and every wake asked for in `registrations`. Its `wakeup.instance`s are
    these instances too (not a `ResourceFake`'s journal: the registered wakes live here).

    `accounts` are the account tokens it knows (any other is refused as the service refuses
    an unknown one); None takes any account token, each a separate account.
    """

    def __init__(self, *, accounts: Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.accounts = None if accounts is None else frozenset(accounts)
        self.instances: dict[str, FakeInstance] = {}
        self.registrations: list[WakeRegistered] = []
        self._state = threading.Lock()

    @implements(register_wake)
    def register(self, input: Wake, call: CallContext) -> Armed:
        token = _instance_token(call)
        at = input.at.astimezone(UTC)
        with self._state:
            held = self.instances.get(token)
            if held is None:
                raise refused(call.op.id, 401, "unknown instance token")
            held.at, held.called_at, held.attempts, held.last_error = at, None, 0, None
            self.registrations.append(WakeRegistered(id=held.id, at=at))
        return Armed(at=at)

    def _register_at(self, call: CallContext, url: str) -> str:
        return self._register(call, url).id

    def _register(self, call: CallContext, url: str) -> FakeInstance:
        token, account = _instance_token(call), self._account(call)
        with self._state:
            held = self.instances.get(token)
            if held is not None and held.account != account:
                raise refused(call.op.id, 409, "the token is registered by another account")
            if held is None:
                held = FakeInstance(
                    id=f"ins_{len(self.instances) + 1:04d}", account=account, url=""
                )
                self.instances[token] = held
            if held.url != url:
                held.url, held.at, held.called_at = url, None, None
                held.attempts, held.last_error = 0, None
            return held

    def _fetch(self, call: CallContext, instance_id: str) -> Instance:
        held = self._of_account(instance_id, call)
        if held is None:
            return Instance(id=instance_id, found=False)
        return Instance(
            id=held.id,
            url=held.url,
            at=held.at,
            called_at=held.called_at,
            attempts=held.attempts,
            last_error=held.last_error,
        )

    def _remove(self, call: CallContext, instance_id: str) -> bool:
        held = self._of_account(instance_id, call)
        with self._state:
            if held is not None:
                self.instances = {t: i for t, i in self.instances.items() if i is not held}
        return held is not None

    def _account(self, call: CallContext) -> str:
        token = _account_token(call)
        if self.accounts is not None and token not in self.accounts:
            raise refused(call.op.id, 401, "unknown account token")
        return token

    def _of_account(self, instance_id: str, call: CallContext) -> FakeInstance | None:
        account = self._account(call)
        with self._state:
            held = next((i for i in self.instances.values() if i.id == instance_id), None)
        if held is not None and held.account != account:
            raise refused(call.op.id, 403, "the instance belongs to another account")
        return held


# The scenarios' sentences about the instance's wakeup, said against `FakeWakeup`.
wakeup_steps = steps(VENDOR)


@wakeup_steps.given('a wakeup for "{host}"')
def a_wakeup_for(host: str) -> Given:
    """Set up a wakeup for the instance at `host` (its public URL, quoted: `Given a wakeup for
    "https://desk.example.com"`): the instance registered at the fake service
    (`wakeup.instances.create`, the registration that applying a declared `wakeup.instance`
    makes); its output, `{id, url}`, is kept as `$wakeup`."""
    return Given(op=create_instance, input={"url": host}, name="wakeup")


def _held(fake: FakeWakeup, host: str) -> FakeInstance:
    url = check_url(host, what="host")
    found = [held for held in fake.instances.values() if held.url == url]
    held = ", ".join(sorted(each.url for each in fake.instances.values())) or "none"
    assert found, f"the wakeup service holds no instance at {url} (it holds: {held})"
    return found[0]


@wakeup_steps.then('the wakeup for "{host}" holds no wake')
def holds_no_wake(fake: FakeWakeup, host: str) -> None:
    held = _held(fake, host)
    assert held.at is None, f"the wakeup for {held.url} holds a wake at {held.at.isoformat()}"


@wakeup_steps.then('the wakeup for "{host}" wakes it at {at}')
def wakes_at(fake: FakeWakeup, host: str, at: str) -> None:
    """`at` as a scenario writes a time: `2026-12-01 10:00 UTC`, or ISO 8601 with an offset."""
    utc = at.endswith(" UTC")
    wanted = datetime.fromisoformat(at.removesuffix(" UTC") + ("+00:00" if utc else ""))
    held = _held(fake, host)
    shown = "no wake" if held.at is None else f"a wake at {held.at.isoformat()}"
    assert held.at == wanted, f"the wakeup for {held.url} holds {shown}, not one at {at}"


wakeup_connector = Connector(
    VENDOR,
    ops=OPS,
    driver=WakeupDriver,
    fake=FakeWakeup,
    resources=[instance],
    steps=wakeup_steps,
    description="The wakeup service, which starts this instance again when its next deadline comes.",
)
