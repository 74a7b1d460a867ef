"""Plan, apply and drift of declared resources, on a real worker (SQLite and Postgres): what each
plan says, the lockfile apply writes, a change behind apply's back caught by `expect`, the
approval before a stateful delete, and drift found once per difference."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit import App, CallContext, DriverError, RemitError, secret
from remit.core.errors import AppError
from remit.core.schema import bindings as bindings_table
from remit.declare.resources import Expect, UpdateIn, ref
from remit.resources.bindings import Bindings
from remit.resources.direct import direct_caller
from remit.resources.files import _ordered
from remit.resources.findings import Findings
from remit.resources.lockfile import Binding, Lockfile, render
from remit.resources.planner import Plan
from remit.testing import Harness
from tests.resource_support import FakeStore, alias, box, resource_app, shelf, store

SECRET = "s3cr3t-box-password-value"


def declared(**extra: Any) -> dict[str, Any]:
    return {
        "data": box(name="data", size=2, password=secret("BOX_PW")),
        "www": alias(name="www", target=ref("data", "url")),
        **extra,
    }


def harness(
    database_url: str, tmp_path: Path, declarations: dict[str, Any], fake: FakeStore
) -> Harness:
    app = resource_app(declarations, tmp_path / "remit.lock")
    return Harness(
        app,
        database_url=database_url,
        implementations={"store": fake},
        environ={"BOX_PW": SECRET},
    )


def plan_of(h: Harness) -> Plan:
    assert h.app.resources is not None
    call = direct_caller(h.worker.implementations, {"BOX_PW": SECRET}, actor="user:test")
    return h.app.resources.plan(call)


def applied(h: Harness) -> dict[str, Any]:
    run = h.run("apply", {})
    assert run.status == "done", run.error
    assert isinstance(run.output, dict)
    return run.output


def test_a_first_plan_creates_in_reference_order_with_unknown_fields(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        first = plan_of(h)
    assert [(c.name, c.action) for c in first.changes] == [("data", "create"), ("www", "create")]
    assert first.exit_code == 2
    www = first.changes[1]
    assert www.unknown == ("target",)
    text = first.render()
    assert "+ data (store.box) will be created" in text
    assert "password  (sensitive)" in text
    assert "target  (known after apply)" in text
    assert "url       (known after apply)" in text
    assert SECRET not in text
    assert (
        first.summary() == "Plan: 2 to create, 0 to update, 0 to replace, 0 to delete; 0 unchanged."
    )


def test_apply_creates_binds_and_then_plans_nothing(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        out = applied(h)
        again = plan_of(h)
    assert [a["action"] for a in out["applied"]] == ["create", "create"]
    bindings = Lockfile(tmp_path / "remit.lock").read()
    assert set(bindings) == {"data", "www"}
    boxes = fake.records(box)
    assert list(boxes) == [bindings["data"].id]
    assert fake.records(alias)[bindings["www"].id]["target"] == "https://data.store.test"
    assert fake.received[("store.box", bindings["data"].id)] == {"password": SECRET}
    assert not again.has_changes
    assert again.exit_code == 0
    assert again.summary() == "No changes: 2 resources match the data files."


def test_update_replace_and_delete_are_planned_and_applied(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(old=alias(name="old", target="x")), fake) as h:
        applied(h)
        first_ids = Lockfile(tmp_path / "remit.lock").read()
    changed = {
        "data": box(name="data", size=5, password=secret("BOX_PW")),
        "www": alias(name="web", target=ref("data", "url")),
    }
    with harness(database_url, tmp_path, changed, fake) as h:
        the_plan = plan_of(h)
        by_name = {c.name: c for c in the_plan.changes}
        assert by_name["data"].action == "update"
        assert [(f.field, f.old, f.new) for f in by_name["data"].fields] == [("size", 2, 5)]
        assert by_name["www"].action == "replace"
        assert by_name["www"].replace == ("name",)
        assert by_name["old"].action == "delete"
        text = the_plan.render()
        assert "-/+ www (store.alias)" in text
        assert "name cannot change in place" in text
        assert '"www" → "web"   (forces replacement)' in text
        assert "size  2 → 5" in text
        # Aliases are stateless: apply replaces and deletes them without asking.
        assert not any(c.destructive for c in the_plan.changes)
        applied(h)
    after = Lockfile(tmp_path / "remit.lock").read()
    assert set(after) == {"data", "www"}
    assert after["data"] == first_ids["data"]
    assert after["www"] != first_ids["www"]
    assert first_ids["old"].id not in fake.records(alias)
    assert first_ids["www"].id not in fake.records(alias)
    assert fake.records(box)[after["data"].id]["size"] == 5


def test_a_stateful_delete_waits_for_an_approval(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    data_id = Lockfile(tmp_path / "remit.lock").read()["data"].id
    with harness(database_url, tmp_path, {}, fake) as h:
        run = h.start("apply", {})
        gate = h.gate(run.run_id)
        assert gate.type == "apply"
        assert [c.name for c in gate.draft.changes] == ["data"]
        assert data_id in fake.records(box)  # nothing deleted before the decision
        h.decide(gate.id, "approved")
        done = h.wait(run.run_id)
    assert done.status == "done", done.error
    assert fake.records(box) == {}
    assert fake.records(alias) == {}
    assert Lockfile(tmp_path / "remit.lock").read() == {}


def test_a_rejected_delete_changes_nothing(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    with harness(database_url, tmp_path, {"www": alias(name="www", target="x")}, fake) as h:
        run = h.start("apply", {})
        h.decide(h.gate(run.run_id).id, "rejected")
        done = h.wait(run.run_id)
    assert done.status == "done"
    assert isinstance(done.output, dict)
    assert done.output["outcome"] == "rejected"
    assert set(Lockfile(tmp_path / "remit.lock").read()) == {"data", "www"}
    assert len(fake.records(box)) == 1


def test_a_change_between_plan_and_apply_stops_the_apply(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    grown = declared(data=box(name="data", size=9, password=secret("BOX_PW")))
    with harness(database_url, tmp_path, grown, fake) as h:
        shown = plan_of(h)
        seen = {c.name: {"action": c.action, "basis": c.basis} for c in shown.pending}
        data_id = Lockfile(tmp_path / "remit.lock").read()["data"].id
        fake.tamper(box, data_id, size=3)  # someone at the vendor's console
        run = h.run("apply", {"seen": seen})
    assert run.status == "failed"
    assert "the plan changed since it was shown, so apply changed nothing" in (run.error or "")
    assert fake.records(box)[data_id]["size"] == 3


def test_update_with_a_stale_expect_is_refused_plan_changed(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
        data_id = Lockfile(tmp_path / "remit.lock").read()["data"].id
        basis = plan_of(h).changes[0].basis
        fake.tamper(box, data_id, size=7)
        update = box.ops["update"]
        call = CallContext(
            op=update, idempotency_key="k1", run_id="r", attempt=1, actor="user:test", environ={}
        )
        wanted = UpdateIn(
            id=data_id,
            desired={"name": "data", "size": 4},
            expect=Expect(action="update", basis=basis),
        )
        with pytest.raises(DriverError, match="the plan changed since it was made") as refused:
            fake.invoke(update, wanted, call)
        # A direct call of a change op is refused before it reaches the vendor.
        with pytest.raises(RemitError, match="only the built-in `apply` does"):
            h.call("store.box.update", wanted.model_dump(mode="json"))
    assert refused.value.vendor_code == "plan_changed"
    assert fake.records(box)[data_id]["size"] == 7


def test_drift_is_found_and_recorded_once_per_difference(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
        clean = h.run("drift", {})
        assert clean.status == "done"
        assert isinstance(clean.output, dict)
        assert clean.output["drifted"] is False
        data_id = Lockfile(tmp_path / "remit.lock").read()["data"].id
        fake.tamper(box, data_id, size=40)
        outputs = [h.run("drift", {}).output for _ in range(3)]
        findings = Findings(h.worker.db, h.app.name)
        open_ = findings.list()
        assert [o["finding"]["opened"] for o in outputs] == [True, False, False]
        assert len(open_) == 1
        assert open_[0].passes == 3
        assert "1 to update" in open_[0].summary
        fake.tamper(box, data_id, size=41)  # another difference: the old finding closes
        h.run("drift", {})
        assert [f.fingerprint != open_[0].fingerprint for f in findings.list()] == [True]
        fake.tamper(box, data_id, size=2)  # back as declared
        h.run("drift", {})
        assert findings.list() == []
        assert len(findings.list(status="closed")) == 2


def test_the_lockfile_round_trips_with_stable_bytes(tmp_path: Path) -> None:
    lock = Lockfile(tmp_path / "remit.lock")
    lock.bind("zeta", Binding("store.box", "st-2"))
    lock.bind("alpha", Binding("store.alias", "st-1"))
    text = (tmp_path / "remit.lock").read_text()
    assert text == render(
        {"alpha": Binding("store.alias", "st-1"), "zeta": Binding("store.box", "st-2")}
    )
    assert text.index('"alpha"') < text.index('"zeta"')
    assert text.endswith("}\n")
    assert lock.read() == {
        "alpha": Binding("store.alias", "st-1"),
        "zeta": Binding("store.box", "st-2"),
    }
    lock.bind("alpha", Binding("store.alias", "st-1"))
    assert (tmp_path / "remit.lock").read_text() == text
    assert json.loads(text)["lockfile"] == 1


def test_a_broken_lockfile_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "remit.lock"
    path.write_text("{not json")
    with pytest.raises(AppError, match="is not a lockfile"):
        Lockfile(path).read()
    with pytest.raises(AppError, match="is not a lockfile"):
        Lockfile(path).bind("x", Binding("store.box", "st-1"))
    assert path.read_text() == "{not json"


def test_declarations_that_cannot_be_ordered_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AppError, match="references `nothing`, which no data file declares"):
        resource_app({"www": alias(name="www", target=ref("nothing", "url"))}, tmp_path / "l")
    with pytest.raises(AppError, match=r"references `other\.url`, and a store\.alias has no field"):
        resource_app(
            {
                "other": alias(name="o", target="x"),
                "www": alias(name="www", target=ref("other", "url")),
            },
            tmp_path / "l",
        )
    cycle = {
        "a": alias(name="a", target=ref("b", "url")),
        "b": alias(name="b", target=ref("a", "url")),
    }
    # Types that reference each other could cycle; the order refuses it, naming it.
    with pytest.raises(AppError, match=r"in a cycle \(a → b → a\)"):
        _ordered(cycle)


def test_a_workflow_may_not_call_a_change_op(tmp_path: Path) -> None:
    from pydantic import BaseModel

    from remit import App, Context, workflow
    from tests.resource_support import store

    class Nothing(BaseModel):
        pass

    @workflow(name="sneak", input=Nothing, uses=[box.ops["create"]])
    def sneak(ctx: Context, input: Nothing) -> None:
        ctx.call(box.ops["create"], {"desired": {"name": "x"}})

    with pytest.raises(AppError, match="Change the data file instead"):
        App(name="sneaky", workflows=[sneak], connectors=[store])


def dump(database_url: str) -> str:
    """The whole database as text: `pg_dump`'s, or SQLite's own dump."""
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as conn:
            return "\n".join(conn.iterdump())
    done = subprocess.run(
        ["pg_dump", "--no-owner", database_url.replace("postgresql+psycopg://", "postgresql://")],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_no_write_only_value_is_in_a_dump_a_log_line_or_a_file(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeStore(journal=tmp_path / "store.jsonl")
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
        h.run("drift", {})
        fake.tamper(box, Lockfile(tmp_path / "remit.lock").read()["data"].id, size=8)
        h.run("apply", {})  # an update sends the password again
    text = dump(database_url)
    assert "BOX_PW" in text  # the marker is kept where the value would have been
    assert SECRET not in text
    assert SECRET not in caplog.text
    assert fake.received  # the vendor was given it
    for file in tmp_path.rglob("*"):
        if file.is_file():
            assert SECRET.encode() not in file.read_bytes(), file


class MovingStore(FakeStore):
    """A vendor whose box someone changes at its console just after apply planned it."""

    def _resource_plan(self, input: Any, call: CallContext) -> Any:
        answer = super()._resource_plan(input, call)
        if input.id is not None and call.op.resource == "box":
            self.tamper(box, input.id, size=99)
        return answer


def test_a_change_after_the_runs_own_plan_fails_the_update_plan_changed(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore(journal=tmp_path / "store.jsonl")
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    grown = declared(data=box(name="data", size=3, password=secret("BOX_PW")))
    moving = MovingStore(journal=tmp_path / "store.jsonl")
    with harness(database_url, tmp_path, grown, moving) as h:
        run = h.run("apply", {})
    assert run.status == "failed"
    assert "the plan changed since it was made" in (run.error or "")
    assert "run `remit plan` again" in (run.error or "")
    data_id = Lockfile(tmp_path / "remit.lock").read()["data"].id
    assert moving.records(box)[data_id]["size"] == 99  # the update was not made


def test_a_run_applies_what_it_planned_even_if_the_files_change_while_it_waits(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore(journal=tmp_path / "store.jsonl")
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    renamed = declared(data=box(name="data-two", size=2, password=secret("BOX_PW")))
    with harness(database_url, tmp_path, renamed, fake) as h:
        run = h.start("apply", {})
        gate = h.gate(run.run_id)
    # Someone edits the data file again before the replace is approved; the worker that
    # carries the run on has the new files.
    again = declared(data=box(name="data-three", size=2, password=secret("BOX_PW")))
    with harness(database_url, tmp_path, again, fake) as h:
        h.decide(gate.id, "approved")
        done = h.wait(run.run_id)
        after = plan_of(h)
    assert done.status == "done", done.error
    names = sorted(state["name"] for state in fake.records(box).values())
    assert names == ["data-two"]  # what was planned and approved, not the later edit
    assert [c.action for c in after.changes if c.name == "data"] == ["replace"]


def test_an_apply_waits_for_no_one_but_a_second_apply_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
    with harness(database_url, tmp_path, {}, fake) as h:
        first = h.start("apply", {})
        gate = h.gate(first.run_id)  # it waits to delete the box
        second = h.run("apply", {})
        assert second.status == "failed"
        assert f"another apply, run {first.run_id}, is waiting and started first" in (
            second.error or ""
        )
        h.decide(gate.id, "approved")
        assert h.wait(first.run_id).status == "done"
    assert fake.records(box) == {}


def test_an_apply_shown_other_values_changes_nothing(database_url: str, tmp_path: Path) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        shown = plan_of(h)
    seen = {
        c.name: {"action": c.action, "basis": c.basis, "digest": c.digest()} for c in shown.pending
    }
    bigger = declared(data=box(name="data", size=99, password=secret("BOX_PW")))
    with harness(database_url, tmp_path, bigger, fake) as h:
        run = h.run("apply", {"seen": seen})
    assert run.status == "failed"
    assert "`data` is still create, to other values than were shown" in (run.error or "")
    assert fake.records(box) == {}


def test_a_removed_read_only_resource_is_forgotten_not_deleted(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    fake.tamper(shelf, "sh-1", label="top")  # the vendor's own
    lock = Lockfile(tmp_path / "remit.lock")
    lock.bind("top", Binding("store.shelf", "sh-1"))
    with harness(database_url, tmp_path, {"top": shelf(label="top")}, fake) as h:
        assert not plan_of(h).has_changes
    with harness(database_url, tmp_path, {}, fake) as h:
        the_plan = plan_of(h)
        (change,) = the_plan.pending
        assert change.forget
        assert not change.destructive
        assert "top (store.shelf) sh-1 will be forgotten" in the_plan.render()
        applied(h)
    assert lock.read() == {}
    assert fake.records(shelf) == {"sh-1": {"label": "top"}}


def test_bindings_are_the_databases_wherever_the_apply_ran(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    server = tmp_path / "server"
    server.mkdir()
    with harness(database_url, server, declared(), fake) as h:
        applied(h)  # on a worker whose folder is not the checkout's
        assert h.app.resources is not None
        here = Lockfile(tmp_path / "checkout.lock")
        store = Bindings(h.worker.db, h.app.name, here)
        held = store.read()
        assert held == Lockfile(server / "remit.lock").read()
        assert set(held) == {"data", "www"}
        assert store.differences() == [
            f"data: remit.lock has unbound, the database store.box {held['data'].id}",
            f"www: remit.lock has unbound, the database store.alias {held['www'].id}",
        ]
        assert store.export()
        assert here.read() == held
        assert not store.export()  # already the same
        assert store.differences() == []


def test_a_database_without_bindings_adopts_the_lockfiles(
    database_url: str, tmp_path: Path
) -> None:
    fake = FakeStore()
    with harness(database_url, tmp_path, declared(), fake) as h:
        applied(h)
        brought = Lockfile(tmp_path / "remit.lock").read()
        # As a database restored from before bindings were kept, or a new one for the app:
        # the lockfile from git is adopted, and nothing is made anew.
        with h.worker.db.begin() as conn:
            conn.execute(sa.delete(bindings_table))
        store = Bindings(h.worker.db, h.app.name, Lockfile(tmp_path / "remit.lock"))
        assert store.read() == brought
        with h.worker.db.engine.connect() as conn:
            adopted = conn.execute(sa.select(bindings_table.c.name, bindings_table.c.bound_by))
            assert sorted(adopted) == [("data", "remit:lockfile"), ("www", "remit:lockfile")]
        assert applied(h)["applied"] == []
    assert len(fake.records(box)) == 1


def test_a_drift_schedule_makes_drift_a_scheduled_workflow(
    database_url: str, tmp_path: Path
) -> None:
    app = App(name="stock", workflows=[], connectors=[store], drift_schedule="0 * * * *")
    app.use_resources(declarations=declared(), lockfile=tmp_path / "remit.lock")
    with Harness(
        app,
        database_url=database_url,
        implementations={"store": FakeStore()},
        environ={"BOX_PW": SECRET},
    ) as h:
        due = [d for d in h.deadlines() if d.kind == "schedule" and d.target == "drift"]
    assert len(due) == 1
    assert due[0].at.minute == 0
    assert due[0].at.second == 0
