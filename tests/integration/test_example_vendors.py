"""The example vendors (dns, hosting, pgcloud) through their resource types' ops, each on its
fake and on its driver against a local server standing in for the vendor's API: the same
lifecycle on both, so the fake cannot drift from what the driver does."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from remit import AppError, CallContext, DriverError, ResourceType, ref, secret
from remit.connectors.base import Implementation
from remit.declare.resources import CreateIn, Expect, PlanIn, ResourceRef, UpdateIn
from tests.vendor_servers import TOKEN, DnsServer, HostingServer, PgcloudServer, serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "examples"))

from acme.connectors import dns, hosting, pgcloud

SESSION_KEY = "sk-live-4c1d2e9f7a"


class SecretStore:
    """remit's secret store, in memory: what `CallContext.ensure_secret` writes to."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}

    def get(self, name: str) -> str | None:
        return self.held.get(name)

    def set(self, name: str, value: str, *, by: str) -> None:
        self.held[name] = value


class Environ(dict[str, str]):
    """A call's credentials with a secret store, as remit's are."""

    def __init__(self, given: dict[str, str]) -> None:
        super().__init__(given)
        self.secrets = SecretStore()


@dataclass
class Vendor:
    """One vendor as a test drives it: the implementation, the call's credentials, and ways
    to reach behind remit's back."""

    implementation: Implementation
    environ: Environ
    count: Callable[[], int]
    tamper: Callable[..., None]

    def call(self, rtype: ResourceType, name: str, input: BaseModel, *, key: str = "") -> Any:
        return self.op(rtype.ops[name], input, key=key)

    def op(self, which: Any, input: BaseModel, *, key: str = "") -> Any:
        context = CallContext(
            op=which,
            idempotency_key=key or f"k-{uuid.uuid4().hex[:12]}",
            run_id="run_test",
            attempt=1,
            actor="user:ann",
            environ=self.environ,
            timeout=10.0,
        )
        return self.implementation.invoke(which, input, context)


def _credentials(prefix: str, url: str) -> dict[str, str]:
    return {f"{prefix}_API_URL": url, f"{prefix}_API_TOKEN": TOKEN}


@pytest.fixture(params=["fake", "driver"])
def side(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def dns_vendor(side: str, tmp_path: Path) -> Iterator[Vendor]:
    if side == "fake":
        fake = dns.FakeDns(journal=tmp_path / "dns.jsonl")
        yield Vendor(
            fake,
            Environ({}),
            lambda: len(fake.records(dns.record)),
            lambda id, **f: fake.tamper(dns.record, id, **f),
        )
        return
    server = DnsServer()
    with serve(server.app) as url:
        yield Vendor(
            dns.DnsDriver(),
            Environ(_credentials("DNS", url)),
            lambda: len(server.items),
            lambda id, **f: server.items[id].update(f),
        )


@dataclass
class Hosting:
    vendor: Vendor
    journal: Path | None
    received: Callable[[str], dict[str, str]]
    url: str | None


@pytest.fixture
def hosting_vendor(side: str, tmp_path: Path) -> Iterator[Hosting]:
    given = {"HOSTING_SESSION_KEY": SESSION_KEY}
    if side == "fake":
        journal = tmp_path / "hosting.jsonl"
        fake = hosting.FakeHosting(journal=journal)
        vendor = Vendor(
            fake,
            Environ(given),
            lambda: len(fake.records(hosting.container)),
            lambda id, **f: fake.tamper(hosting.container, id, **f),
        )
        yield Hosting(
            vendor,
            journal,
            lambda id: fake.received[hosting.container.id, id]["secret_env"],
            None,
        )
        return
    server = HostingServer()
    with serve(server.app) as url:
        vendor = Vendor(
            hosting.HostingDriver(),
            Environ({**given, **_credentials("HOSTING", url)}),
            lambda: len(server.items),
            lambda id, **f: server.items[id].update(f),
        )
        yield Hosting(vendor, None, lambda id: server.secret_env[id], url)


@pytest.fixture
def pgcloud_vendor(side: str, tmp_path: Path) -> Iterator[Vendor]:
    if side == "fake":
        fake = pgcloud.FakePgcloud(journal=tmp_path / "pgcloud.jsonl")
        yield Vendor(
            fake,
            Environ({}),
            lambda: len(fake.records(pgcloud.project)),
            lambda id, **f: fake.tamper(pgcloud.project, id, **f),
        )
        return
    server = PgcloudServer()
    with serve(server.app) as url:
        yield Vendor(
            pgcloud.PgcloudDriver(),
            Environ(_credentials("PGCLOUD", url)),
            lambda: len(server.items),
            lambda id, **f: server.items[id].update(f),
        )


def lifecycle(
    vendor: Vendor,
    rtype: ResourceType,
    desired: dict[str, Any],
    *,
    change: dict[str, Any],
    then: dict[str, Any],
    tampered: dict[str, Any],
    immutable: dict[str, Any],
) -> dict[str, Any]:
    """Create, read, plan, update, refuse an update whose plan the vendor's state moved from,
    delete: what every vendor's resource does alike. Returns the state as made."""
    key = f"create-{uuid.uuid4().hex[:8]}"
    made = vendor.call(rtype, "create", CreateIn(desired=desired), key=key)
    again = vendor.call(rtype, "create", CreateIn(desired=desired), key=key)
    assert again == made  # the same key is the same create
    assert vendor.count() == 1
    id = made.id
    for name, value in desired.items():
        if name not in rtype.write_only:
            assert made.state[name] == value

    read = vendor.call(rtype, "read", ResourceRef(id=id))
    assert read.gone is False
    assert read.state == made.state

    assert vendor.call(rtype, "plan", PlanIn(id=id, desired=desired)).action == "none"
    replacing = vendor.call(rtype, "plan", PlanIn(id=id, desired={**desired, **immutable}))
    assert (replacing.action, replacing.replace) == ("replace", sorted(immutable))

    changed = {**desired, **change}
    plan = vendor.call(rtype, "plan", PlanIn(id=id, desired=changed))
    assert plan.action == "update"
    expect = Expect(action=plan.action, replace=plan.replace, basis=plan.basis)
    updated = vendor.call(rtype, "update", UpdateIn(id=id, desired=changed, expect=expect))
    assert {name: updated.state[name] for name in change} == change
    assert vendor.call(rtype, "read", ResourceRef(id=id)).state == updated.state

    later = {**changed, **then}
    plan = vendor.call(rtype, "plan", PlanIn(id=id, desired=later))
    assert plan.action == "update"
    vendor.tamper(id, **tampered)
    assert {
        name: vendor.call(rtype, "read", ResourceRef(id=id)).state[name] for name in tampered
    } == tampered
    expect = Expect(action=plan.action, replace=plan.replace, basis=plan.basis)
    with pytest.raises(DriverError) as refused:
        vendor.call(rtype, "update", UpdateIn(id=id, desired=later, expect=expect))
    assert refused.value.vendor_code == "plan_changed"
    assert refused.value.retryable is False
    assert "remit plan" in str(refused.value)

    assert vendor.call(rtype, "delete", ResourceRef(id=id)).gone is True
    gone = vendor.call(rtype, "read", ResourceRef(id=id))
    assert (gone.gone, gone.state) == (True, None)
    assert vendor.count() == 0
    assert vendor.call(rtype, "delete", ResourceRef(id=id)).gone is True  # already gone: done
    return dict(made.state)


def test_a_dns_record_lives_and_dies(dns_vendor: Vendor) -> None:
    desired = dict(
        dns.record(zone="example.com", name="www", type="CNAME", content="web.hosting.test").fields
    )
    made = lifecycle(
        dns_vendor,
        dns.record,
        desired,
        change={"ttl": 60},
        then={"content": "web2.hosting.test"},
        tampered={"content": "elsewhere.test"},
        immutable={"type": "A"},
    )
    assert made["ttl"] == 300
    assert isinstance(made["id"], str)
    assert made["id"]


def test_a_records_content_may_take_another_declarations_url_only() -> None:
    cname = dns.record(zone="example.com", name="www", type="CNAME", content=ref("web", "url"))
    assert cname.refs() == {"content": ("web", "url")}
    with pytest.raises(AppError, match="takes a reference to url, not to `image`"):
        dns.record(zone="example.com", name="www", type="CNAME", content=ref("web", "image"))


def test_a_container_lives_and_dies_and_its_secret_env_is_never_read_back(
    hosting_vendor: Hosting,
) -> None:
    vendor = hosting_vendor.vendor
    desired = dict(
        hosting.container(
            name="web",
            image="ghcr.io/acme/web:1",
            env={"MODE": "live"},
            secret_env={"SESSION_KEY": secret("HOSTING_SESSION_KEY")},
        ).fields
    )
    assert desired["secret_env"] == {"SESSION_KEY": {"$secret": "HOSTING_SESSION_KEY"}}

    made = vendor.call(hosting.container, "create", CreateIn(desired=desired))
    assert made.state["url"] == "https://web.hosting.test"
    assert made.state["status"] == "running"
    assert hosting_vendor.received(made.id) == {"SESSION_KEY": SESSION_KEY}
    assert "secret_env" not in made.state
    assert SESSION_KEY not in made.model_dump_json()
    read = vendor.call(hosting.container, "read", ResourceRef(id=made.id))
    assert "secret_env" not in read.state
    assert SESSION_KEY not in read.model_dump_json()
    plan = vendor.call(hosting.container, "plan", PlanIn(id=made.id, desired=desired))
    assert plan.action == "none"
    assert SESSION_KEY not in plan.model_dump_json()
    if hosting_vendor.url is not None:
        answered = httpx.get(
            f"{hosting_vendor.url}/containers/{made.id}",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert answered.status_code == 200
        assert answered.json()["name"] == "web"
        assert SESSION_KEY not in answered.text
        assert "secret_env" not in answered.json()
    vendor.call(hosting.container, "delete", ResourceRef(id=made.id))

    lifecycle(
        vendor,
        hosting.container,
        {**desired, "name": "api"},
        change={"image": "ghcr.io/acme/web:2"},
        then={"env": {"MODE": "test"}},
        tampered={"image": "ghcr.io/someone/else:1"},
        immutable={"name": "api2"},
    )
    if hosting_vendor.journal is not None:
        written = hosting_vendor.journal.read_text()
        assert "HOSTING_SESSION_KEY" in written  # the secret's name, never its value
        assert SESSION_KEY not in written


def test_a_postgres_project_lives_and_dies(pgcloud_vendor: Vendor) -> None:
    desired = dict(pgcloud.project(name="books", region="eu-west-1").fields)
    made = lifecycle(
        pgcloud_vendor,
        pgcloud.project,
        desired,
        change={"size": "large"},
        then={"size": "xlarge"},
        tampered={"size": "medium"},
        immutable={"region": "us-east-1"},
    )
    assert made["size"] == "small"
    assert made["host"].endswith(".eu-west-1.pgcloud.test")
    assert pgcloud.project.database is not None
    assert pgcloud.project.database.outputs(made).healthy is True


def test_a_projects_url_is_stored_as_a_secret_and_another_for_the_same_export_is_stale(
    pgcloud_vendor: Vendor,
) -> None:
    vendor = pgcloud_vendor
    made = vendor.call(
        pgcloud.project,
        "create",
        CreateIn(desired=dict(pgcloud.project(name="books", region="eu-west-1").fields)),
    )
    stored = vendor.op(pgcloud.store_url, pgcloud.StoreUrl(id=made.id, export="mainStore"))
    assert stored.model_dump() == {"secret": "REMIT_DATABASE_URL_MAIN_STORE"}
    url = vendor.environ.secrets.held["REMIT_DATABASE_URL_MAIN_STORE"]
    assert url.startswith("postgresql://app:")
    assert url.endswith(f"@{made.state['host']}/books")
    password = url.removeprefix("postgresql://app:").partition("@")[0]
    assert password
    assert password not in stored.model_dump_json()
    # The same project again (a retry, a later apply) finds its own URL there: done.
    again = vendor.op(pgcloud.store_url, pgcloud.StoreUrl(id=made.id, export="mainStore"))
    assert again == stored

    other = vendor.call(
        pgcloud.project,
        "create",
        CreateIn(desired=dict(pgcloud.project(name="ledger", region="us-east-1").fields)),
    )
    with pytest.raises(DriverError) as refused:
        vendor.op(pgcloud.store_url, pgcloud.StoreUrl(id=other.id, export="main_store"))
    assert refused.value.vendor_code == "stale"
    assert refused.value.retryable is False
    assert "REMIT_DATABASE_URL_MAIN_STORE" in str(refused.value)
    assert "remit secrets delete REMIT_DATABASE_URL_MAIN_STORE" in str(refused.value)
    assert password not in str(refused.value)
    assert vendor.environ.secrets.held == {"REMIT_DATABASE_URL_MAIN_STORE": url}


@pytest.mark.parametrize(
    ("status", "retryable"), [(503, True), (429, True), (422, False), (409, False)]
)
def test_a_vendor_refusal_may_be_retried_only_for_a_server_error_or_a_rate_limit(
    status: int, retryable: bool
) -> None:
    server = DnsServer()
    with serve(server.app) as url:
        vendor = Vendor(dns.DnsDriver(), Environ(_credentials("DNS", url)), lambda: 0, print)
        server.fail_next = status
        with pytest.raises(DriverError) as refused:
            vendor.call(dns.record, "read", ResourceRef(id="rec_0001"))
    assert (refused.value.status, refused.value.retryable) == (status, retryable)
    assert "DNS API refused GET /records/rec_0001" in str(refused.value)


def test_a_wrong_token_is_refused_naming_the_credential_to_check() -> None:
    server = DnsServer()
    with serve(server.app) as url:
        environ = Environ({"DNS_API_URL": url, "DNS_API_TOKEN": "not-the-token"})
        vendor = Vendor(dns.DnsDriver(), environ, lambda: 0, print)
        with pytest.raises(DriverError) as refused:
            vendor.call(dns.record, "read", ResourceRef(id="rec_0001"))
    assert refused.value.status == 401
    assert refused.value.retryable is False
    assert "check DNS_API_TOKEN" in str(refused.value)


def test_an_unreachable_vendor_may_be_retried_and_saw_nothing() -> None:
    with serve(DnsServer().app) as url:
        pass  # served and stopped: nothing listens there now
    vendor = Vendor(dns.DnsDriver(), Environ(_credentials("DNS", url)), lambda: 0, print)
    desired = dict(dns.record(zone="example.com", name="www", type="A", content="10.0.0.1").fields)
    with pytest.raises(DriverError) as refused:
        vendor.call(dns.record, "create", CreateIn(desired=desired))
    assert refused.value.retryable is True
    assert refused.value.maybe_applied is False
    assert "is DNS_API_URL right?" in str(refused.value)
