"""`wakeup.instance`, this instance's registration at the wakeup service as a resource of a
host: made for the host's URL, read back, planned, moved to a new host and deleted, with the
fake and with the driver against a real wakeup service (`remit wakeup serve` in a subprocess),
which answer alike. Every app still has the `wakeup` connector, now with the type's six ops."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remit import AppError, Client, DriverError, MissingCredential, RemitError
from remit.connectors.base import Implementation
from remit.connectors.wakeup import (
    FakeWakeup,
    InstanceRef,
    Registration,
    Wake,
    WakeupDriver,
    create_instance,
    get_instance,
    instance,
    register_wake,
    wakeup_connector,
)
from remit.core.settings import Settings
from remit.core.wakeup_tokens import mint_instance_token
from remit.declare.resources import (
    RESOURCE_OPS,
    CreateIn,
    Expect,
    PlanIn,
    ResourceRef,
    UpdateIn,
    WakeupSpec,
    ref,
)
from tests.instances import WakeupService
from tests.support import make_app
from tests.wakeup_support import call

HOST = "http://127.0.0.1:9/web"
MOVED = "http://127.0.0.1:9/web-2"
AT = datetime(2030, 1, 31, 9, 0, tzinfo=UTC)
READ, IMPORT, PLAN, CREATE, UPDATE, DELETE = (instance.ops[name] for name in RESOURCE_OPS)


def environ(url: str, account: str, token: str | None) -> dict[str, str]:
    given = {"REMIT_WAKEUP_URL": url, "REMIT_WAKEUP_ACCOUNT_TOKEN": account}
    if token is not None:
        given["REMIT_WAKEUP_TOKEN"] = token
    return given


@pytest.fixture(params=["fake", "driver"])
def vendor(
    request: pytest.FixtureRequest, wakeup_service: WakeupService
) -> tuple[Implementation, str, str]:
    """The fake or the driver, the service's URL and an account of it of the test's own."""
    account = wakeup_service.account()
    implementation: Implementation = (
        FakeWakeup(accounts=[account]) if request.param == "fake" else WakeupDriver()
    )
    return implementation, wakeup_service.url, account


def state(id: str, host: str, at: str | None = None) -> dict[str, Any]:
    return {"host": host, "id": id, "at": at, "last_error": None}


def test_an_instance_is_made_read_planned_moved_and_deleted(
    vendor: tuple[Implementation, str, str],
) -> None:
    implementation, url, account = vendor
    env = environ(url, account, mint_instance_token())

    assert call(implementation, PLAN, PlanIn(desired={"host": HOST}), env)["action"] == "create"
    made = call(implementation, CREATE, CreateIn(desired={"host": HOST}), env)
    id = made["id"]
    assert made == {"id": id, "state": state(id, HOST)}
    # It is the instance `wakeup.instances.create` registers under the same token.
    assert call(implementation, create_instance, Registration(url=HOST), env)["id"] == id

    call(implementation, register_wake, Wake(at=AT), env)
    assert call(implementation, READ, ResourceRef(id=id), env) == {
        "id": id,
        "gone": False,
        "state": state(id, HOST, "2030-01-31T09:00:00Z"),
    }
    for same in (HOST, HOST + "/"):  # the service stores a URL without its trailing slash
        plan = call(implementation, PLAN, PlanIn(id=id, desired={"host": same}), env)
        assert plan["action"] == "none", plan

    plan = call(implementation, PLAN, PlanIn(id=id, desired={"host": MOVED}), env)
    assert (plan["action"], plan["planned"]["host"], plan["state"]["host"]) == (
        "update",
        MOVED,
        HOST,
    )
    expect = Expect(action="update", basis=plan["basis"])
    moved = call(
        implementation, UPDATE, UpdateIn(id=id, desired={"host": MOVED}, expect=expect), env
    )
    # The same instance, at the new host; a new URL forgets the wake it had.
    assert moved == {"id": id, "state": state(id, MOVED)}
    held = call(implementation, get_instance, InstanceRef(id=id), env)
    assert (held["url"], held["at"]) == (MOVED, None)
    assert call(implementation, PLAN, PlanIn(id=id, desired={"host": MOVED}), env)["action"] == (
        "none"
    )

    assert call(implementation, DELETE, ResourceRef(id=id), env) == {"id": id, "gone": True}
    assert call(implementation, READ, ResourceRef(id=id), env) == {
        "id": id,
        "gone": True,
        "state": None,
    }
    assert call(implementation, get_instance, InstanceRef(id=id), env)["found"] is False
    assert call(implementation, PLAN, PlanIn(id=id, desired={"host": MOVED}), env)["action"] == (
        "create"
    )
    with pytest.raises(DriverError) as missing:
        call(implementation, IMPORT, ResourceRef(id=id), env)
    assert missing.value.vendor_code == "not_found"
    # Deleting what is gone is done already.
    assert call(implementation, DELETE, ResourceRef(id=id), env) == {"id": id, "gone": True}


def test_an_update_planned_before_the_instance_moved_is_refused(
    vendor: tuple[Implementation, str, str],
) -> None:
    implementation, url, account = vendor
    env = environ(url, account, mint_instance_token())
    id = call(implementation, CREATE, CreateIn(desired={"host": HOST}), env)["id"]
    plan = call(implementation, PLAN, PlanIn(id=id, desired={"host": MOVED}), env)

    # `remit wakeup connect` elsewhere registers the instance at another URL meanwhile.
    call(implementation, create_instance, Registration(url=f"{HOST}/other"), env)
    expect = Expect(action=plan["action"], basis=plan["basis"])
    with pytest.raises(DriverError) as refused:
        call(implementation, UPDATE, UpdateIn(id=id, desired={"host": MOVED}, expect=expect), env)
    assert refused.value.vendor_code == "plan_changed"
    assert "run `remit plan` again" in str(refused.value)
    assert call(implementation, READ, ResourceRef(id=id), env)["state"]["host"] == f"{HOST}/other"


def test_an_update_under_another_instances_token_says_which_is_which(
    vendor: tuple[Implementation, str, str],
) -> None:
    implementation, url, account = vendor
    first = call(
        implementation,
        CREATE,
        CreateIn(desired={"host": HOST}),
        environ(url, account, mint_instance_token()),
    )["id"]
    env = environ(url, account, mint_instance_token())
    with pytest.raises(DriverError) as refused:
        call(implementation, UPDATE, UpdateIn(id=first, desired={"host": MOVED}), env)
    message = str(refused.value)
    assert f"wakeup.instance {first}: this instance's token (REMIT_WAKEUP_TOKEN)" in message
    assert f"and left {first} as it was" in message
    assert call(implementation, READ, ResourceRef(id=first), env)["state"]["host"] == HOST


@pytest.mark.parametrize("host", ["ftp://127.0.0.1/web", "http://127.0.0.1/web?x=1", 42])
def test_a_host_that_is_not_a_url_is_refused_naming_the_field(
    vendor: tuple[Implementation, str, str], host: object
) -> None:
    implementation, url, account = vendor
    env = environ(url, account, mint_instance_token())
    with pytest.raises(DriverError) as refused:
        call(implementation, CREATE, CreateIn(desired={"host": host}), env)
    assert refused.value.retryable is False
    assert "wakeup.instance: host must be an http:// or https:// URL" in str(refused.value)


def test_making_one_needs_the_instance_token(vendor: tuple[Implementation, str, str]) -> None:
    implementation, url, account = vendor
    with pytest.raises(MissingCredential) as refused:
        call(implementation, CREATE, CreateIn(desired={"host": HOST}), environ(url, account, None))
    assert refused.value.variable == "REMIT_WAKEUP_TOKEN"
    assert "remit wakeup connect" in str(refused.value)


def test_the_connector_declares_the_type_and_every_app_has_it() -> None:
    own = {f"wakeup.instance.{name}" for name in RESOURCE_OPS}
    assert own <= {declared.id for declared in wakeup_connector.ops}
    assert wakeup_connector.resources == (instance,)
    for implementation in (WakeupDriver, FakeWakeup):
        assert {declared.id for declared in wakeup_connector.ops} <= implementation.implemented()
    assert instance.wakeup == WakeupSpec(host="host", register="wakeup.instances.register")
    assert (instance.stateless, instance.vendor_owned) == (False, ("id", "at", "last_error"))

    app = make_app()
    assert app.connectors["wakeup"] is wakeup_connector
    assert own <= set(app.ops)

    assert instance(host=ref("web", "url")).fields == {"host": {"$ref": "web.url"}}
    with pytest.raises(AppError, match="takes a reference to url, not to `name`"):
        instance(host=ref("web", "name"))
    with pytest.raises(AppError, match="`id` is set by the vendor"):
        instance(host=HOST, id="ins_0001")


@pytest.fixture
def app_client(database_url: str, tmp_path: Path) -> Iterator[Client]:
    env = environ("http://127.0.0.1:9", "rwa_account", mint_instance_token())
    settings = Settings.from_env(tmp_path, environ={"REMIT_DATABASE_URL": database_url})
    with Client(
        make_app(), settings, by="user:ann", implementations={"wakeup": FakeWakeup()}, environ=env
    ) as client:
        yield client


def test_its_reads_are_called_through_remit_and_its_changes_only_by_apply(
    app_client: Client,
) -> None:
    plan = app_client.calls.call(PLAN.id, {"desired": {"host": HOST}})
    assert plan.status == "ok", plan.error
    assert plan.output["action"] == "create"
    rows = [r for r in app_client.calls.ledger() if r.idempotency_key == plan.idempotency_key]
    assert [(row.op_id, row.status, row.actor) for row in rows] == [(PLAN.id, "ok", "user:ann")]
    for op in (CREATE, UPDATE):
        with pytest.raises(RemitError, match="only the built-in `apply` does"):
            app_client.calls.call(op.id, {"id": "ins_0001", "desired": {"host": HOST}})
    assert [r.op_id for r in app_client.calls.ledger()] == [PLAN.id]
