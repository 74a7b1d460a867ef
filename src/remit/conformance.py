"""Contract suites for resource types: the checks every vendor's fake and driver pass alike.

A connector's tests subclass a suite in a class named `Test...`, say what to make and what to
change, and give the implementation as a fixture; pytest runs every check against it:

    import pytest
    from remit import secret
    from remit.conformance import DatabaseConformance

    class TestDatabaseOnTheFake(DatabaseConformance):
        rtype = acme.database
        connector = acme.connector
        sample = {"name": "orders", "region": "eu", "password": secret("KIT_PASSWORD")}
        change = {"size": "large"}
        replace_change = {"region": "us"}

        @pytest.fixture
        def implementation(self) -> AcmeFake:
            return AcmeFake()

The same class with a fixture that gives the driver, and an `environ` fixture that gives its
credentials (`KitSecrets(os.environ)`), checks the live vendor the same way: so a fake cannot
drift from its driver, and one vendor is swappable for another. Each check deletes what it
made, even when it fails.

`sample` is written as a declaration is: a write-only field as `secret("NAME")`, which the kit
mints in its `KitSecrets` and checks never comes back. `change` and `replace_change` are laid
over `sample`: the first changes fields that can change in place, the second an immutable one
(leave it out when the type has none; its check is skipped).
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pytest
from pydantic import BaseModel

from remit.connectors.base import CallContext, Connector, Implementation
from remit.core.errors import AppError, DriverError
from remit.declare.ops import Op
from remit.declare.resources import (
    Applied,
    Declaration,
    Deleted,
    Expect,
    Made,
    PlanOut,
    ReadOut,
    ResourceType,
    database_url_secret,
    host_health,
    secret_names,
)

__all__ = [
    "DatabaseConformance",
    "HostConformance",
    "KitSecrets",
    "KitStore",
    "ResourceConformance",
]

M = TypeVar("M", bound=BaseModel)

# The declaration name the database checks store URLs for.
EXPORT = "kit_store"


class KitStore:
    """Secrets stored in memory, as remit's secret store keeps them for a call
    (`CallContext.ensure_secret` writes here); `set_by` says who set each."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.set_by: dict[str, str] = {}

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str, *, by: str) -> None:
        if not value:
            raise ValueError(f"secret {name}: the value is empty; a secret needs a value")
        self.values[name] = value
        self.set_by[name] = by


class KitSecrets(Mapping[str, str]):
    """The environment the kit's calls see: `environ` (a driver's credentials, say) over the
    secrets in `secrets`, as remit's credentials are the environment over its stored secrets."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(environ or {})
        self.secrets = KitStore()

    def __getitem__(self, name: str) -> str:
        value = self.environ.get(name)
        if value:
            return value
        stored = self.secrets.get(name)
        if stored is None:
            raise KeyError(name)
        return stored

    def __iter__(self) -> Iterator[str]:
        yield from self.environ
        yield from (name for name in self.secrets.values if name not in self.environ)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<KitSecrets of {len(self)} names: values not shown>"


def _key() -> str:
    return f"kit:{uuid.uuid4().hex}"


def _dumped(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json"), sort_keys=True)


def _at(state: Mapping[str, Any], path: str) -> Any:
    """The value at dotted `path` in `state`, or None when a part is missing."""
    current: Any = state
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


@dataclass
class _Kit:
    """One check's calls against an implementation; `made` is deleted when the check ends."""

    rtype: ResourceType
    implementation: Implementation
    environ: Mapping[str, str]
    made: list[str] = field(default_factory=list)

    def call(self, op: Op[Any, Any], payload: Mapping[str, Any], *, key: str | None = None) -> Any:
        context = CallContext(
            op=op,
            idempotency_key=key or _key(),
            run_id="kit",
            attempt=1,
            actor="kit",
            environ=self.environ,
        )
        return self.implementation.invoke(op, op.input.model_validate(dict(payload)), context)

    def _typed(self, name: str, model: type[M], payload: Mapping[str, Any], key: str | None) -> M:
        answer = self.call(self.rtype.ops[name], payload, key=key)
        assert isinstance(answer, model), (
            f"`{self.rtype.id}.{name}` answered {type(answer).__name__}, not {model.__name__}"
        )
        return answer

    def read(self, id: str) -> ReadOut:
        return self._typed("read", ReadOut, {"id": id}, None)

    def import_(self, id: str) -> ReadOut:
        return self._typed("import", ReadOut, {"id": id}, None)

    def plan(self, id: str | None, desired: Mapping[str, Any] | None) -> PlanOut:
        return self._typed("plan", PlanOut, {"id": id, "desired": desired}, None)

    def create(self, desired: Mapping[str, Any], *, key: str | None = None) -> Applied:
        made = self._typed("create", Applied, {"desired": desired}, key)
        assert made.id, f"`{self.rtype.id}.create` answered an empty id"
        if made.id not in self.made:
            self.made.append(made.id)
        return made

    def update(
        self, id: str, desired: Mapping[str, Any], *, expect: Expect | None = None
    ) -> Applied:
        given = {"id": id, "desired": desired, "expect": expect.model_dump() if expect else None}
        return self._typed("update", Applied, given, None)

    def delete(self, id: str) -> Deleted:
        return self._typed("delete", Deleted, {"id": id}, None)

    def clean_up(self) -> None:
        for made in reversed(self.made):
            # What it made goes, whatever the check found; a delete that fails is not its finding.
            with contextlib.suppress(Exception):
                self.delete(made)


def _expect(plan: PlanOut) -> Expect:
    return Expect(action=plan.action, replace=plan.replace, basis=plan.basis)


class ResourceConformance:
    """The checks every writable resource type's implementation passes. See the module's
    docstring for what a subclass sets."""

    rtype: ClassVar[ResourceType]
    sample: ClassVar[Mapping[str, Any]]
    change: ClassVar[Mapping[str, Any]] = {}
    replace_change: ClassVar[Mapping[str, Any] | None] = None

    @pytest.fixture
    def environ(self) -> Mapping[str, str]:
        """What the calls see as their environment: override it to give a driver credentials."""
        return KitSecrets()

    # How the checks are made.

    def _type(self) -> ResourceType:
        rtype = getattr(self, "rtype", None)
        if not isinstance(rtype, ResourceType):
            pytest.fail(f"{type(self).__name__}: set `rtype` to the resource type it checks")
        if not rtype.writable:
            pytest.skip(
                f"{rtype.id} is read-only: apply never makes one, so there is none to check"
            )
        return rtype

    def _desired(self, *layers: Mapping[str, Any] | None) -> dict[str, Any]:
        """`sample` with `layers` laid over it, as apply sends it: checked like a declaration,
        with secret markers."""
        rtype = self._type()
        fields: dict[str, Any] = {}
        for layer in (getattr(self, "sample", None), *layers):
            fields.update(layer or {})
        try:
            return dict(Declaration.of(rtype, fields).fields)
        except AppError as refused:
            pytest.fail(f"{type(self).__name__}: its sample is not a declaration: {refused}")

    @contextlib.contextmanager
    def _kit(self, implementation: Implementation, environ: Mapping[str, str]) -> Iterator[_Kit]:
        kit = _Kit(self._type(), implementation, environ)
        for name in secret_names(self._desired()):
            if environ.get(name):
                continue
            store = getattr(environ, "secrets", None)
            if store is None:
                pytest.fail(
                    f"{type(self).__name__}: its sample takes the secret {name}, which its "
                    "environ lacks: give it there, or use the kit's KitSecrets"
                )
            store.set(name, f"kit-{name.lower()}-{uuid.uuid4().hex[:12]}", by="kit")
        try:
            yield kit
        finally:
            kit.clean_up()

    def _secret_values(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {name: environ[name] for name in secret_names(self._desired())}

    def _assert_declared(
        self, state: Mapping[str, Any], desired: Mapping[str, Any], what: str
    ) -> None:
        rtype = self._type()
        for name, value in desired.items():
            if name in rtype.write_only:
                continue
            assert name in state, f"{what}: the declared field `{name}` is missing from the state"
            assert state[name] == value, (
                f"{what}: `{name}` is {state[name]!r}, and {value!r} was declared"
            )

    # The checks.

    def test_create_then_read_gives_the_declared_fields(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        desired = self._desired()
        with self._kit(implementation, environ) as kit:
            made = kit.create(desired)
            self._assert_declared(made.state, desired, f"create of {kit.rtype.id}")
            found = kit.read(made.id)
            assert not found.gone, f"{kit.rtype.id} {made.id}: read after create finds it gone"
            assert found.id == made.id, f"read of {made.id} answered the id {found.id}"
            assert found.state is not None, f"{kit.rtype.id} {made.id}: read gives no state"
            self._assert_declared(found.state, desired, f"read of {kit.rtype.id} {made.id}")
            for name in kit.rtype.vendor_owned:
                if name in kit.rtype.write_only:
                    continue
                assert name in found.state, (
                    f"read of {kit.rtype.id} {made.id}: the vendor-owned field `{name}` is "
                    "missing; give it in the state, None when the vendor has not set it"
                )

    def test_plan_of_the_same_fields_is_none(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        desired = self._desired()
        with self._kit(implementation, environ) as kit:
            made = kit.create(desired)
            plan = kit.plan(made.id, desired)
            assert plan.action == "none", (
                f"plan of {kit.rtype.id} {made.id} with the fields it was made with is "
                f"`{plan.action}` (replace: {plan.replace}); it must be `none`"
            )

    def test_plan_of_a_change_is_an_update_that_applies(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        if not self.change:
            pytest.fail(f"{type(self).__name__}: set `change` to fields that change in place")
        assert not set(self.change) & set(rtype.immutable), (
            f"{type(self).__name__}: `change` names immutable fields "
            f"({', '.join(sorted(set(self.change) & set(rtype.immutable)))}); put them in "
            "`replace_change`"
        )
        changed = self._desired(self.change)
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            plan = kit.plan(made.id, changed)
            assert plan.action == "update", (
                f"plan of {rtype.id} {made.id} with {dict(self.change)!r} is `{plan.action}`; "
                "a change of fields that are not immutable must be `update`"
            )
            assert plan.replace == [], (
                f"plan of {rtype.id} {made.id} is an update that names fields to replace: "
                f"{plan.replace}"
            )
            updated = kit.update(made.id, changed, expect=_expect(plan))
            assert updated.id == made.id, f"update of {made.id} answered the id {updated.id}"
            self._assert_declared(updated.state, changed, f"update of {rtype.id} {made.id}")
            found = kit.read(made.id)
            assert found.state is not None, f"{rtype.id} {made.id}: read after update finds it gone"
            self._assert_declared(found.state, changed, f"read after update of {rtype.id}")

    def test_a_repeated_create_makes_nothing_twice(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        desired = self._desired()
        key = _key()
        with self._kit(implementation, environ) as kit:
            first = kit.create(desired, key=key)
            again = kit.create(desired, key=key)
            assert again.id == first.id, (
                f"a create of {kit.rtype.id} repeated with the same idempotency key made "
                f"{again.id} besides {first.id}: pass `call.idempotency_key` to the vendor"
            )

    def test_plan_of_an_immutable_change_is_a_replace(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        if self.replace_change is None:
            pytest.skip(f"{type(self).__name__} gives no `replace_change`")
        original = self._desired()
        replaced = self._desired(self.replace_change)
        expected = sorted(
            name
            for name in self.replace_change
            if name in rtype.immutable and replaced.get(name) != original.get(name)
        )
        assert expected, (
            f"{type(self).__name__}: `replace_change` changes no immutable field of {rtype.id} "
            f"(its immutable fields: {', '.join(rtype.immutable) or 'none'})"
        )
        with self._kit(implementation, environ) as kit:
            made = kit.create(original)
            plan = kit.plan(made.id, replaced)
            assert plan.action == "replace", (
                f"plan of {rtype.id} {made.id} changing {', '.join(expected)} is "
                f"`{plan.action}`; a change of an immutable field must be `replace`"
            )
            assert sorted(plan.replace) == expected, (
                f"plan of {rtype.id} {made.id} replaces for {sorted(plan.replace)}, not for the "
                f"immutable fields changed, {expected}"
            )

    def test_an_update_on_a_stale_plan_is_refused(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        if not self.change:
            pytest.fail(f"{type(self).__name__}: set `change` to fields that change in place")
        original = self._desired()
        changed = self._desired(self.change)
        with self._kit(implementation, environ) as kit:
            made = kit.create(original)
            stale = kit.plan(made.id, changed)
            # Another update moves the state after the plan was made.
            kit.update(made.id, changed)
            refused: DriverError | None = None
            try:
                kit.update(made.id, original, expect=_expect(stale))
            except DriverError as error:
                refused = error
            assert refused is not None, (
                f"an update of {rtype.id} {made.id} on a plan made before another update was "
                "applied; it must be refused as `plan_changed`"
            )
            assert refused.vendor_code == "plan_changed", (
                f"an update on a stale plan was refused with vendor_code "
                f"{refused.vendor_code!r}, not 'plan_changed': {refused}"
            )
            found = kit.read(made.id)
            assert found.state is not None, f"{rtype.id} {made.id} is gone after a refused update"
            self._assert_declared(
                found.state, changed, f"read after a refused update of {rtype.id}"
            )

    def test_delete_then_read_is_gone(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            deleted = kit.delete(made.id)
            assert deleted.id == made.id, f"delete of {made.id} answered the id {deleted.id}"
            assert deleted.gone, f"delete of {kit.rtype.id} {made.id} did not say gone"
            found = kit.read(made.id)
            assert found.gone, f"read of {kit.rtype.id} {made.id} after its delete finds it"
            assert found.state is None, (
                f"read of {kit.rtype.id} {made.id} after its delete gives a state: {found.state!r}"
            )
            plan = kit.plan(made.id, None)
            assert plan.action == "none", (
                f"plan of removing {kit.rtype.id} {made.id}, which is gone, is `{plan.action}`; "
                "it must be `none`"
            )
            again = kit.delete(made.id)
            assert again.gone, f"a second delete of {kit.rtype.id} {made.id} did not say gone"

    def test_import_of_an_unknown_id_fails(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        unknown = f"kit-none-{uuid.uuid4().hex[:12]}"
        with self._kit(implementation, environ) as kit:
            failed: DriverError | None = None
            try:
                found = kit.import_(unknown)
            except DriverError as error:
                failed = error
            else:
                pytest.fail(
                    f"import of {kit.rtype.id} {unknown}, which does not exist, found "
                    f"{found.model_dump()}; it must fail with a DriverError"
                )
            assert failed is not None

    def test_write_only_fields_never_come_back(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        if not rtype.write_only:
            pytest.skip(f"{rtype.id} has no write-only fields")
        if not self.change:
            pytest.fail(f"{type(self).__name__}: set `change` to fields that change in place")
        with self._kit(implementation, environ) as kit:
            values = self._secret_values(environ)
            if not values:
                pytest.skip(f"{type(self).__name__}: its sample sets no write-only field")
            made = kit.create(self._desired())
            answers: list[tuple[str, BaseModel]] = [("create", made)]
            answers.append(("read", kit.read(made.id)))
            answers.append(("update", kit.update(made.id, self._desired(self.change))))
            answers.append(("read after update", kit.read(made.id)))
            for what, answer in answers:
                state = getattr(answer, "state", None) or {}
                shown = sorted(set(state) & set(rtype.write_only))
                assert not shown, f"{what} of {rtype.id} gives the write-only fields {shown}"
                text = _dumped(answer)
                for name, value in values.items():
                    assert value not in text, (
                        f"{what} of {rtype.id} gives the value of the secret {name}, sent in a "
                        "write-only field; the vendor's answer must never hold it"
                    )


class DatabaseConformance(ResourceConformance):
    """The checks of a type that is a database (`DatabaseSpec`), besides every type's. Set
    `connector` too: the Connector that declares its `store_url` op."""

    connector: ClassVar[Connector]

    def _store(self) -> tuple[Op[Any, Any], Any]:
        rtype = self._type()
        spec = rtype.database
        assert spec is not None, (
            f"{rtype.id} declares no database: give it `database=DatabaseSpec(...)`"
        )
        connector = getattr(self, "connector", None)
        if not isinstance(connector, Connector):
            pytest.fail(f"{type(self).__name__}: set `connector` to the Connector of {rtype.id}")
        ops = {declared.id: declared for declared in connector.ops}
        assert spec.store_url in ops, (
            f"{rtype.id}'s store_url, `{spec.store_url}`, is no op of connector "
            f"`{connector.vendor}`"
        )
        steps = [step for step in rtype.after_create if step.op == spec.store_url]
        assert steps, f"{rtype.id}'s after_create does not call `{spec.store_url}`"
        return ops[spec.store_url], steps[0].input

    def _stored(self, kit: _Kit, made: Applied) -> Any:
        store, input_of = self._store()
        return kit.call(store, input_of(Made(name=EXPORT, id=made.id, state=made.state)))

    def _secrets(self, environ: Mapping[str, str]) -> Any:
        store = getattr(environ, "secrets", None)
        if store is None:
            pytest.fail(
                f"{type(self).__name__}: its environ has no secret store for store_url to write "
                "to: use the kit's KitSecrets"
            )
        return store

    def test_the_type_declares_a_database(self) -> None:
        rtype = self._type()
        assert rtype.database is not None, (
            f"{rtype.id} declares no database: give it `database=DatabaseSpec(...)`"
        )

    def test_store_url_stores_the_url_and_returns_it_nowhere(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        secrets = self._secrets(environ)
        name = database_url_secret(EXPORT)
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            answer = self._stored(kit, made)
            url = secrets.get(name)
            assert url is not None, (
                f"store_url of {kit.rtype.id} {made.id} stored nothing as {name}; it must store "
                "the database's URL there"
            )
            assert re.match(r"postgres(ql)?://", url), (
                f"store_url of {kit.rtype.id} {made.id} stored no Postgres URL as {name}; it "
                "must store the database's URL there"
            )
            assert url not in _dumped(answer), (
                f"store_url of {kit.rtype.id} {made.id} returns the URL it stored; it must "
                "return none of it"
            )
            found = kit.read(made.id)
            assert url not in _dumped(found), (
                f"read of {kit.rtype.id} {made.id} gives the database's URL; keep it out of "
                "the state, which remit stores"
            )

    def test_a_second_store_for_another_database_is_stale(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        secrets = self._secrets(environ)
        name = database_url_secret(EXPORT)
        with self._kit(implementation, environ) as kit:
            first = kit.create(self._desired())
            self._stored(kit, first)
            url = secrets.get(name)
            other = kit.create(self._desired())
            assert other.id != first.id, (
                f"two creates of {kit.rtype.id} with different idempotency keys made one, "
                f"{first.id}"
            )
            refused: DriverError | None = None
            try:
                self._stored(kit, other)
            except DriverError as error:
                refused = error
            assert refused is not None, (
                f"store_url for `{EXPORT}` of {other.id}, after {first.id}'s URL was stored "
                "for it, was not refused; it must be refused as `stale`"
            )
            assert refused.vendor_code == "stale", (
                f"a second store_url for `{EXPORT}` was refused with vendor_code "
                f"{refused.vendor_code!r}, not 'stale': {refused}"
            )
            assert secrets.get(name) == url, f"a refused store_url changed the secret {name}"

    def test_a_created_database_is_healthy(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        assert rtype.database is not None, f"{rtype.id} declares no database"
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            found = kit.read(made.id)
            assert found.state is not None, f"{rtype.id} {made.id}: read after create finds it gone"
            outputs = rtype.database.outputs(found.state)
            assert outputs.healthy is True, (
                f"{rtype.id}'s outputs of {made.id} as just made say healthy={outputs.healthy!r}"
            )


class HostConformance(ResourceConformance):
    """The checks of a type that is a host (`HostSpec`), besides every type's."""

    def test_a_host_has_a_public_url(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        assert rtype.host is not None, f"{rtype.id} declares no host: give it `host=HostSpec(...)`"
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            found = kit.read(made.id)
            assert found.state is not None, f"{rtype.id} {made.id}: read after create finds it gone"
            url = _at(found.state, rtype.host.url)
            is_url = isinstance(url, str) and re.match(r"https?://[^/\s]+", url) is not None
            assert is_url, (
                f"{rtype.id} {made.id}: its host's url field `{rtype.host.url}` holds {url!r}, "
                "not an http(s) URL"
            )

    def test_a_created_host_is_healthy(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        assert rtype.host is not None, f"{rtype.id} declares no host: give it `host=HostSpec(...)`"
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired())
            found = kit.read(made.id)
            healthy, why = host_health(rtype, found.state)
            assert healthy, f"{rtype.id} {made.id}, as just made, is not healthy: {why}"

    def test_a_host_runs_the_revision_it_was_given(
        self, implementation: Implementation, environ: Mapping[str, str]
    ) -> None:
        rtype = self._type()
        assert rtype.host is not None, f"{rtype.id} declares no host: give it `host=HostSpec(...)`"
        field_name = rtype.host.revision
        if field_name is None:
            pytest.skip(f"{rtype.id} names no revision field (HostSpec(revision=...))")
        first, second = uuid.uuid4().hex + "0" * 8, uuid.uuid4().hex + "1" * 8
        with self._kit(implementation, environ) as kit:
            made = kit.create(self._desired({field_name: first}))
            found = kit.read(made.id)
            assert found.state is not None, f"{rtype.id} {made.id}: read after create finds it gone"
            assert found.state.get(field_name) == first, (
                f"{rtype.id} {made.id} was made at revision {first} and reads back "
                f"`{field_name}` = {found.state.get(field_name)!r}; a host reports the revision "
                "it runs"
            )
            deployed = self._desired({field_name: second})
            plan = kit.plan(made.id, deployed)
            assert plan.action == "update", (
                f"plan of {rtype.id} {made.id} at another revision is `{plan.action}`; a new "
                "revision is deployed in place, an `update`"
            )
            kit.update(made.id, deployed, expect=_expect(plan))
            again = kit.read(made.id)
            assert again.state is not None, f"{rtype.id} {made.id} is gone after its update"
            assert again.state.get(field_name) == second, (
                f"{rtype.id} {made.id} was deployed at revision {second} and reads back "
                f"`{field_name}` = {again.state.get(field_name)!r}"
            )
