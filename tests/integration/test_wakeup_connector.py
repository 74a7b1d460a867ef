"""The `wakeup` connector against a real wakeup service (`remit wakeup serve` in a subprocess):
an instance registers, reads its wake, arms it and is deleted; the service's refusals come back
as errors that say what to change; a reply that is not the service's is never taken for one.
The fake gives the same answers for the same calls. `client.ops.register_wake` makes its call as
`remit:wakeup`, with a ledger row and an audit row."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import Client, DriverError, MissingCredential, RemitError
from remit.connectors.base import Implementation
from remit.connectors.wakeup import (
    FakeWakeup,
    InstanceRef,
    Registration,
    Wake,
    WakeupDriver,
    create_instance,
    delete_instance,
    get_instance,
    register_wake,
)
from remit.core.schema import audit
from remit.core.settings import Settings
from remit.core.wakeup_tokens import mint_instance_token
from remit.declare.ops import Op
from tests.instances import WakeupService
from tests.support import make_app
from tests.wakeup_support import NotTheService, call

AT = datetime(2030, 1, 31, 9, 0, tzinfo=UTC)
INSTANCE_URL = "http://127.0.0.1:9/remit"


def environ(url: str, account: str | None, instance: str | None) -> dict[str, str]:
    given = {"REMIT_WAKEUP_URL": url}
    if account is not None:
        given["REMIT_WAKEUP_ACCOUNT_TOKEN"] = account
    if instance is not None:
        given["REMIT_WAKEUP_TOKEN"] = instance
    return given


def test_an_instance_registers_reads_arms_and_is_deleted(wakeup_service: WakeupService) -> None:
    driver = WakeupDriver()
    env = environ(wakeup_service.url, wakeup_service.account(), mint_instance_token())

    made = call(driver, create_instance, Registration(url=INSTANCE_URL), env)
    assert made["url"] == INSTANCE_URL
    again = call(driver, create_instance, Registration(url=INSTANCE_URL + "/"), env)
    assert again == made  # the same token is the same registration
    instance = made["id"]
    assert call(driver, get_instance, InstanceRef(id=instance), env) == {
        "id": instance,
        "url": INSTANCE_URL,
        "at": None,
        "called_at": None,
        "attempts": 0,
        "last_error": None,
        "found": True,
    }

    later = AT.astimezone(timezone(timedelta(hours=2)))
    assert call(driver, register_wake, Wake(at=later), env) == {"at": "2030-01-31T09:00:00Z"}
    assert call(driver, get_instance, InstanceRef(id=instance), env)["at"] == (
        "2030-01-31T09:00:00Z"
    )

    assert call(driver, delete_instance, InstanceRef(id=instance), env) == {
        "id": instance,
        "deleted": True,
    }
    assert call(driver, get_instance, InstanceRef(id=instance), env)["found"] is False
    assert call(driver, delete_instance, InstanceRef(id=instance), env) == {
        "id": instance,
        "deleted": False,
    }


def test_a_wrong_account_token_is_refused_naming_the_setting(wakeup_service: WakeupService) -> None:
    env = environ(wakeup_service.url, "rwa_not-an-account", mint_instance_token())
    with pytest.raises(DriverError) as refused:
        call(WakeupDriver(), create_instance, Registration(url=INSTANCE_URL), env)
    assert (refused.value.status, refused.value.retryable) == (401, False)
    assert "REMIT_WAKEUP_ACCOUNT_TOKEN" in str(refused.value)


def test_a_token_another_account_registered_needs_a_new_token(
    wakeup_service: WakeupService,
) -> None:
    token = mint_instance_token()
    call(
        WakeupDriver(),
        create_instance,
        Registration(url=INSTANCE_URL),
        environ(wakeup_service.url, wakeup_service.account(), token),
    )
    with pytest.raises(DriverError) as refused:
        call(
            WakeupDriver(),
            create_instance,
            Registration(url=INSTANCE_URL),
            environ(wakeup_service.url, wakeup_service.account(), token),
        )
    assert (refused.value.status, refused.value.retryable) == (409, False)
    assert "a new account needs a new instance token" in str(refused.value)
    assert "remit secrets delete REMIT_WAKEUP_TOKEN" in str(refused.value)


def test_an_unregistered_instance_is_told_to_connect(wakeup_service: WakeupService) -> None:
    env = environ(wakeup_service.url, None, mint_instance_token())
    with pytest.raises(DriverError) as refused:
        call(WakeupDriver(), register_wake, Wake(at=AT), env)
    assert refused.value.status == 401
    assert "remit wakeup connect URL" in str(refused.value)


def test_a_reply_that_is_not_the_services_is_a_clear_error() -> None:
    env = environ("", "rwa_x", mint_instance_token())
    with NotTheService() as other:
        env["REMIT_WAKEUP_URL"] = other.url
        with pytest.raises(DriverError) as refused:
            call(WakeupDriver(), create_instance, Registration(url=INSTANCE_URL), env)
    assert (refused.value.status, refused.value.retryable) == (200, False)
    assert "not the wakeup service's" in str(refused.value)
    assert "is REMIT_WAKEUP_URL right?" in str(refused.value)


def test_a_redirect_is_not_followed_so_the_token_stays_home() -> None:
    token = mint_instance_token()
    with NotTheService() as elsewhere, NotTheService(redirect_to=elsewhere.url) as moved:
        env = environ(moved.url, None, token)
        with pytest.raises(DriverError) as refused:
            call(WakeupDriver(), register_wake, Wake(at=AT), env)
    assert (refused.value.status, refused.value.retryable) == (302, False)
    assert "redirect" in str(refused.value)
    assert "is REMIT_WAKEUP_URL right?" in str(refused.value)
    assert moved.seen == [("PUT", "/wakeup/wake")]
    assert elsewhere.seen == []  # the token went nowhere else
    # The token never reaches the message: remit redacts the driver's declared credentials.
    assert token not in str(refused.value)


def test_an_unreachable_service_may_be_tried_again() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = environ(f"http://127.0.0.1:{port}", None, mint_instance_token())
    with pytest.raises(DriverError) as refused:
        call(WakeupDriver(), register_wake, Wake(at=AT), env)
    assert (refused.value.retryable, refused.value.maybe_applied) == (True, False)
    assert "unreachable" in str(refused.value)


@pytest.mark.parametrize(
    ("missing", "given"),
    [
        (
            "REMIT_WAKEUP_URL",
            {"REMIT_WAKEUP_ACCOUNT_TOKEN": "rwa_x", "REMIT_WAKEUP_TOKEN": "rwi_x"},
        ),
        (
            "REMIT_WAKEUP_ACCOUNT_TOKEN",
            {"REMIT_WAKEUP_URL": "http://127.0.0.1:9", "REMIT_WAKEUP_TOKEN": "rwi_x"},
        ),
        (
            "REMIT_WAKEUP_TOKEN",
            {"REMIT_WAKEUP_URL": "http://127.0.0.1:9", "REMIT_WAKEUP_ACCOUNT_TOKEN": "rwa_x"},
        ),
    ],
)
def test_a_missing_setting_is_named_with_what_to_run(missing: str, given: dict[str, str]) -> None:
    with pytest.raises(MissingCredential) as refused:
        call(WakeupDriver(), create_instance, Registration(url=INSTANCE_URL), given)
    assert refused.value.variable == missing
    assert "remit wakeup" in str(refused.value)


def _same_sequence(
    implementation: Implementation, url: str, ann: str, bob: str
) -> list[tuple[str, Any]]:
    """Each call's output, or its error's class, status and retryable, with the ids the
    service made written `id-1`, `id-2` in the order they first came."""
    token, other = mint_instance_token(), mint_instance_token()
    ids: dict[str, str] = {}
    named: dict[str, str] = {}

    def step(op: Op[Any, Any], input: BaseModel, env: dict[str, str]) -> tuple[str, Any]:
        try:
            output = call(implementation, op, input, env)
        except DriverError as error:
            return (op.id, (type(error).__name__, error.status, error.retryable))
        name = ids.setdefault(output["id"], f"id-{len(ids) + 1}") if "id" in output else None
        if name is not None:
            named[name] = output["id"]
            output["id"] = name
        return (op.id, output)

    def ref(name: str) -> InstanceRef:
        return InstanceRef(id=named[name])

    as_ann, as_bob = environ(url, ann, token), environ(url, bob, other)
    return [
        step(register_wake, Wake(at=AT), as_ann),  # not registered yet
        step(create_instance, Registration(url=INSTANCE_URL), as_ann),
        step(create_instance, Registration(url=INSTANCE_URL), as_ann),
        step(create_instance, Registration(url=INSTANCE_URL), environ(url, bob, token)),
        step(create_instance, Registration(url=f"{INSTANCE_URL}/b"), as_bob),
        step(register_wake, Wake(at=AT), as_ann),
        step(register_wake, Wake(at=AT + timedelta(hours=1)), as_ann),
        step(get_instance, ref("id-1"), as_ann),
        step(get_instance, ref("id-2"), as_ann),  # another account's
        step(create_instance, Registration(url=f"{INSTANCE_URL}/new"), as_ann),
        step(get_instance, ref("id-1"), as_ann),  # a new URL forgets the wake
        step(delete_instance, ref("id-2"), as_ann),
        step(delete_instance, ref("id-1"), as_ann),
        step(get_instance, ref("id-1"), as_ann),
        step(delete_instance, ref("id-1"), as_ann),
        step(register_wake, Wake(at=AT), as_ann),  # deleted: unknown again
    ]


def _instance(url: str | None, at: str | None, *, found: bool = True) -> dict[str, Any]:
    return {
        "id": "id-1",
        "url": url,
        "at": at,
        "called_at": None,
        "attempts": 0,
        "last_error": None,
        "found": found,
    }


EXPECTED: list[tuple[str, Any]] = [
    (register_wake.id, ("DriverError", 401, False)),
    (create_instance.id, {"id": "id-1", "url": INSTANCE_URL}),
    (create_instance.id, {"id": "id-1", "url": INSTANCE_URL}),
    (create_instance.id, ("DriverError", 409, False)),
    (create_instance.id, {"id": "id-2", "url": f"{INSTANCE_URL}/b"}),
    (register_wake.id, {"at": "2030-01-31T09:00:00Z"}),
    (register_wake.id, {"at": "2030-01-31T10:00:00Z"}),
    (get_instance.id, _instance(INSTANCE_URL, "2030-01-31T10:00:00Z")),
    (get_instance.id, ("DriverError", 403, False)),
    (create_instance.id, {"id": "id-1", "url": f"{INSTANCE_URL}/new"}),
    (get_instance.id, _instance(f"{INSTANCE_URL}/new", None)),
    (delete_instance.id, ("DriverError", 403, False)),
    (delete_instance.id, {"id": "id-1", "deleted": True}),
    (get_instance.id, _instance(None, None, found=False)),
    (delete_instance.id, {"id": "id-1", "deleted": False}),
    (register_wake.id, ("DriverError", 401, False)),
]


@pytest.mark.parametrize("kind", ["driver", "fake"])
def test_the_fake_answers_as_the_service_does(kind: str, wakeup_service: WakeupService) -> None:
    ann, bob = wakeup_service.account(), wakeup_service.account()
    implementation: Implementation = (
        WakeupDriver() if kind == "driver" else FakeWakeup(accounts=[ann, bob])
    )
    assert _same_sequence(implementation, wakeup_service.url, ann, bob) == EXPECTED


@pytest.fixture
def app_client(database_url: str, tmp_path: Path) -> Iterator[tuple[Client, FakeWakeup]]:
    fake = FakeWakeup()
    env = environ("http://127.0.0.1:9", "rwa_account", mint_instance_token())
    settings = Settings.from_env(tmp_path, environ={"REMIT_DATABASE_URL": database_url})
    with Client(
        make_app(), settings, by="user:ann", implementations={"wakeup": fake}, environ=env
    ) as client:
        yield client, fake


def test_register_wake_is_called_as_remit_with_a_ledger_row_and_an_audit_row(
    app_client: tuple[Client, FakeWakeup],
) -> None:
    client, fake = app_client
    made = client.calls.call(create_instance.id, {"url": INSTANCE_URL})
    assert made.status == "ok", made.error

    first = client.ops.register_wake(AT)
    other = client.ops.register_wake(AT + timedelta(hours=1))
    again = client.ops.register_wake(AT)  # after another, the same time arms it again
    assert [r.status for r in (first, other, again)] == ["ok", "ok", "ok"]
    assert again.output == {"at": "2030-01-31T09:00:00Z"}
    assert not again.replayed
    assert [(r.id, r.at) for r in fake.registrations] == [
        (made.output["id"], AT),
        (made.output["id"], AT + timedelta(hours=1)),
        (made.output["id"], AT),
    ]

    rows = [row for row in client.calls.ledger() if row.op_id == register_wake.id]
    assert [(row.actor, row.status) for row in rows] == [("remit:wakeup", "ok")] * 3
    assert len({row.idempotency_key for row in rows}) == 3
    with client.db.engine.connect() as conn:
        audited = conn.execute(
            sa.select(audit.c.actor, audit.c.action, audit.c.meta).order_by(audit.c.id)
        ).all()
    assert [(actor, action, meta["op"]) for actor, action, meta in audited] == [
        ("user:ann", "op.called", create_instance.id),
        *[("remit:wakeup", "op.called", register_wake.id)] * 3,
    ]


def test_only_remit_calls_as_remit(app_client: tuple[Client, FakeWakeup]) -> None:
    client, fake = app_client
    with pytest.raises(RemitError, match="remit's own"):
        client.services.direct.call_as_remit(
            register_wake.id, {"at": AT.isoformat()}, actor="user:ann"
        )
    with pytest.raises(RemitError, match="principals are remit's own"):
        client.calls.call(register_wake.id, {"at": AT.isoformat()}, by="remit:wakeup")
    with pytest.raises(RemitError, match="timezone"):
        client.ops.register_wake(datetime(2030, 1, 31, 9, 0))
    assert fake.registrations == []
