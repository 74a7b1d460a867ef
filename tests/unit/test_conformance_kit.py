"""The conformance kit run against a small vendor's fake, which passes it; and fakes broken in
one way each, which fail the check of that way."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from remit import (
    AfterCreate,
    DatabaseCapabilities,
    DatabaseInputs,
    DatabaseOutputs,
    DatabaseSpec,
    HostSpec,
    ResourceFake,
    ResourceType,
    database_url_secret,
    op,
    resource_type,
    secret,
)
from remit.conformance import DatabaseConformance, HostConformance, KitSecrets
from remit.connectors.base import CallContext, Connector, implements
from remit.connectors.resources import reveal
from remit.core.errors import DriverError
from remit.declare.resources import Applied, UpdateIn


class Database(BaseModel):
    name: str
    region: str
    size: str = "small"
    password: str | None = None
    host: str | None = None


class Site(BaseModel):
    name: str
    image: str
    url: str | None = None


class StoreIn(BaseModel):
    id: str
    export: str


class StoreOut(BaseModel):
    secret: str


store = op("kitco.urls.store", effect="write", input=StoreIn, output=StoreOut, idempotent=True)


def _database_outputs(state: Mapping[str, Any]) -> DatabaseOutputs:
    return DatabaseOutputs(healthy=bool(state.get("host")))


database = resource_type(
    "kitco.database",
    schema=Database,
    immutable=["region"],
    vendor_owned=["host"],
    write_only=["password"],
    after_create=[AfterCreate(store.id)],
    database=DatabaseSpec(
        capabilities=DatabaseCapabilities(pauses=True, branch=False),
        inputs=DatabaseInputs(region="region", size="size"),
        store_url=store.id,
        outputs=_database_outputs,
    ),
)
site = resource_type(
    "kitco.site", schema=Site, vendor_owned=["url"], stateless=True, host=HostSpec(url="url")
)


class KitcoFake(ResourceFake):
    """A vendor of databases and sites, as the kit expects one to behave."""

    resource_types = (database, site)
    id_prefix = "kc"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        if rtype is database:
            return {"host": f"{id}.db.kitco.test"}
        return {"url": f"https://{id}.sites.kitco.test"}

    def url_of(self, id: str, call: CallContext) -> str:
        state = self.read_resource(database, id, call)
        if state is None:
            raise DriverError(
                f"kitco has no database {id}", retryable=False, vendor_code="not_found"
            )
        password = self.received.get((database.id, id), {}).get("password") or "none"
        return f"postgresql://owner:{password}@{state['host']}/main"

    @implements(store)
    def store_url(self, input: StoreIn, call: CallContext) -> StoreOut:
        url = self.url_of(input.id, call)
        name = database_url_secret(input.export)
        if call.ensure_secret(name, url) != url:
            raise DriverError(
                f"{name} holds another database's URL than {input.id}'s",
                retryable=False,
                vendor_code="stale",
            )
        return StoreOut(secret=name)


kitco = Connector(
    "kitco", ops=[store], driver=KitcoFake, fake=KitcoFake, resources=[database, site]
)


class DatabaseCase(DatabaseConformance):
    """The kit's settings for kitco's databases (not collected: its name is no `Test...`)."""

    rtype = database
    connector = kitco
    sample: ClassVar[Mapping[str, Any]] = {
        "name": "orders",
        "region": "eu",
        "password": secret("KIT_DB_PASSWORD"),
    }
    change: ClassVar[Mapping[str, Any]] = {"size": "large"}
    replace_change: ClassVar[Mapping[str, Any] | None] = {"region": "us"}


class TestKitcoDatabase(DatabaseCase):
    @pytest.fixture
    def implementation(self) -> KitcoFake:
        return KitcoFake()


class TestKitcoDatabaseSharedThroughAJournal(DatabaseCase):
    @pytest.fixture
    def implementation(self, tmp_path: Path) -> KitcoFake:
        return KitcoFake(journal=tmp_path / "kitco.jsonl")


class TestKitcoSite(HostConformance):
    rtype = site
    sample: ClassVar[Mapping[str, Any]] = {"name": "web", "image": "web:1"}
    change: ClassVar[Mapping[str, Any]] = {"image": "web:2"}

    @pytest.fixture
    def implementation(self) -> KitcoFake:
        return KitcoFake()


# Fakes broken in one way each.


class IgnoresExpect(KitcoFake):
    """Applies an update whatever plan it was decided on."""

    def _resource_update(self, input: UpdateIn, call: CallContext) -> Applied:
        rtype = self._type(call)
        state = self.update_resource(rtype, input.id, reveal(input.desired, call), call)
        return Applied(id=input.id, state=rtype.readable(state) or {})


class EchoesPassword(KitcoFake):
    """Reports the password it was sent inside the host."""

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"host": f"{desired.get('password')}.db.kitco.test"}


class EchoesPasswordUnredacted(EchoesPassword):
    """Echoes the password, and names no secret it sends, so remit cannot redact it."""

    def call_credentials(self, input: BaseModel) -> tuple[str, ...]:
        return ()


class ReturnsTheUrl(KitcoFake):
    """Stores the URL, and returns it too."""

    @implements(store)
    def store_url(self, input: StoreIn, call: CallContext) -> StoreOut:
        super().store_url(input, call)
        return StoreOut(secret=self.url_of(input.id, call))


class OverwritesTheUrl(KitcoFake):
    """Stores a URL over the one another database stored for the same export."""

    @implements(store)
    def store_url(self, input: StoreIn, call: CallContext) -> StoreOut:
        name = database_url_secret(input.export)
        assert isinstance(call.environ, KitSecrets)
        call.environ.secrets.set(name, self.url_of(input.id, call), by=call.actor)
        return StoreOut(secret=name)


class SaysUnhealthy(KitcoFake):
    """Reports a database with no host."""

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"host": None} if rtype is database else super().vendor_fields(rtype, id, desired)


def test_a_fake_that_ignores_the_plan_fails_the_stale_plan_check() -> None:
    with pytest.raises(AssertionError, match="on a plan made before another update was applied"):
        DatabaseCase().test_an_update_on_a_stale_plan_is_refused(IgnoresExpect(), KitSecrets())


def test_a_fake_that_echoes_a_write_only_value_fails_the_write_only_check() -> None:
    with pytest.raises(AssertionError, match="gives the value of the secret KIT_DB_PASSWORD"):
        DatabaseCase().test_write_only_fields_never_come_back(
            EchoesPasswordUnredacted(), KitSecrets()
        )


def test_a_write_only_value_echoed_back_is_redacted_by_remit() -> None:
    # remit redacts every secret a call sends from its answer, so even this fake passes.
    DatabaseCase().test_write_only_fields_never_come_back(EchoesPassword(), KitSecrets())


def test_a_store_url_that_returns_the_url_fails_its_check() -> None:
    with pytest.raises(AssertionError, match="returns the URL it stored"):
        DatabaseCase().test_store_url_stores_the_url_and_returns_it_nowhere(
            ReturnsTheUrl(), KitSecrets()
        )


def test_a_store_url_that_overwrites_another_databases_url_fails_the_stale_check() -> None:
    with pytest.raises(AssertionError, match="was not refused; it must be refused as `stale`"):
        DatabaseCase().test_a_second_store_for_another_database_is_stale(
            OverwritesTheUrl(), KitSecrets()
        )


def test_a_database_without_a_host_fails_the_health_check() -> None:
    with pytest.raises(AssertionError, match="healthy=False"):
        DatabaseCase().test_a_created_database_is_healthy(SaysUnhealthy(), KitSecrets())


def test_the_kit_deletes_what_a_failed_check_made() -> None:
    broken = IgnoresExpect()
    with pytest.raises(AssertionError):
        DatabaseCase().test_an_update_on_a_stale_plan_is_refused(broken, KitSecrets())
    assert broken.records(database) == {}
    assert len(broken.effects_of(database.ops["create"])) == 1


def test_kit_secrets_give_the_environment_over_what_was_stored() -> None:
    secrets = KitSecrets({"TOKEN": "from-env", "EMPTY": ""})
    secrets.secrets.set("EMPTY", "stored", by="kit")
    secrets.secrets.set("URL", "postgresql://x", by="kit")
    assert dict(secrets) == {"TOKEN": "from-env", "EMPTY": "stored", "URL": "postgresql://x"}
    assert secrets.secrets.set_by == {"EMPTY": "kit", "URL": "kit"}
    assert "stored" not in repr(secrets)
    with pytest.raises(KeyError):
        secrets["MISSING"]
