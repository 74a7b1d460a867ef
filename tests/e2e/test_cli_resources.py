"""`remit plan`, `apply`, `drift`, `import` and `resources` run as a user runs them, against
an app folder whose data files declare a box and an alias of the test vendor (see
tests/resource_support.py), its fake shared with this process through its journal."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import sqlalchemy as sa

from remit.resources.lockfile import Binding, Lockfile
from tests.e2e.cli_support import ROOT, Cli
from tests.resource_support import FakeStore, alias, box

SECRET = "zq-box-pw-7781-never-shown"

APP = """\
from remit import App
from tests.resource_support import store

app = App(name="stock", workflows=[], connectors=[store])
"""

DECLARED = """\
from remit import ref, secret
from tests.resource_support import alias, box

data = box(name="data", size=2, password=secret("BOX_PW"))
www = alias(name="www", target=ref("data", "url"))
"""

NONE_DECLARED = """\
from remit import ref, secret
from tests.resource_support import alias, box
"""


def stock(cli: Cli, tmp_path: Path) -> Path:
    """The app folder `stock` declaring `data` and `www`, its fake vendor under tmp/fakes."""
    folder = tmp_path / "stock"
    (folder / "resources").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(APP)
    (folder / "resources" / "main.py").write_text(DECLARED)
    cli.env["REMIT_FAKES_DIR"] = str(tmp_path / "fakes")
    cli.env["BOX_PW"] = SECRET
    cli.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [cli.env.get("PYTHONPATH")])])
    return folder


def vendor(tmp_path: Path) -> FakeStore:
    """The fake vendor the commands talk to, read (and changed) from this process."""
    return FakeStore(journal=tmp_path / "fakes" / "store.jsonl")


def lockfile(folder: Path) -> dict[str, Binding]:
    return Lockfile(folder / "remit.lock").read()


def flat(text: str) -> str:
    """`text` with its line wrapping undone, for messages that may wrap."""
    return " ".join(text.split())


def printed(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def applied(cli: Cli, folder: Path) -> subprocess.CompletedProcess[str]:
    done = cli("apply", "--yes", app=folder, check=False, stdin="")
    assert done.returncode == 0, printed(done)
    return done


def test_a_first_plan_shows_the_creates_and_exits_2(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    done = cli("plan", app=folder, check=False)
    assert done.returncode == 2, printed(done)
    assert "+ data (store.box) will be created" in done.stdout
    assert "+ www (store.alias) will be created" in done.stdout
    assert "password  (sensitive)" in done.stdout
    assert "url       (known after apply)" in done.stdout
    assert "target  (known after apply)" in done.stdout
    assert "Plan: 2 to create, 0 to update, 0 to replace, 0 to delete; 0 unchanged." in done.stdout
    as_json = cli("plan", "--json", app=folder, check=False)
    assert as_json.returncode == 2, printed(as_json)
    changes = json.loads(as_json.stdout)["changes"]
    assert [(c["name"], c["action"]) for c in changes] == [("data", "create"), ("www", "create")]
    assert changes[0]["desired"]["password"] == {"$secret": "BOX_PW"}
    for each in (done, as_json):
        assert SECRET not in printed(each)
    # A plan changes nothing.
    assert not (folder / "remit.lock").exists()
    assert vendor(tmp_path).records(box) == {}


def test_apply_without_yes_off_a_terminal_asks_for_yes_and_makes_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    folder = stock(cli, tmp_path)
    done = cli("apply", app=folder, check=False, stdin="")
    assert done.returncode == 1, printed(done)
    assert "pass --yes to apply this plan" in done.stderr
    assert "+ data (store.box) will be created" in done.stdout  # the plan it would apply
    assert "Applied" not in done.stdout
    assert not (folder / "remit.lock").exists()
    store = vendor(tmp_path)
    assert store.records(box) == {}
    assert store.records(alias) == {}


def test_apply_creates_binds_and_then_nothing_is_pending(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    done = applied(cli, folder)
    bindings = lockfile(folder)
    assert set(bindings) == {"data", "www"}
    assert bindings["data"].type == "store.box"
    assert bindings["www"].type == "store.alias"
    assert "applying as run run_" in done.stderr
    assert "on fakes" in done.stderr
    assert f"created store.box {bindings['data'].id}" in done.stderr
    assert f"created store.alias {bindings['www'].id}" in done.stderr
    assert "Applied: 2 changed. remit.lock is up to date." in done.stdout
    store = vendor(tmp_path)
    assert store.records(box)[bindings["data"].id]["size"] == 2
    assert store.records(alias)[bindings["www"].id]["target"] == "https://data.store.test"

    again = cli("plan", app=folder, check=False)
    assert again.returncode == 0, printed(again)
    assert "No changes: 2 resources match the data files." in again.stdout
    # Applying a plan of no changes changes nothing, and says so.
    second = applied(cli, folder)
    assert "No changes" in second.stdout
    assert "Applied" not in second.stdout
    assert lockfile(folder) == bindings

    listed = cli("resources", app=folder).stdout
    rows = {line.split()[1]: line for line in listed.splitlines() if line.split()[1:2]}
    for name in ("data", "www"):
        assert bindings[name].id in rows[name]
        assert bindings[name].type in rows[name]
        assert "up to date" in rows[name]
    offline = cli("resources", "--offline", app=folder).stdout
    rows = {line.split()[1]: line for line in offline.splitlines() if line.split()[1:2]}
    for name in ("data", "www"):
        assert bindings[name].id in rows[name]
        assert "not read" in rows[name]
        assert "up to date" not in rows[name]
    as_json = json.loads(cli("resources", "--offline", "--json", app=folder).stdout)
    assert {each["name"]: (each["type"], each["bound_to"], each["state"]) for each in as_json} == {
        name: (bindings[name].type, bindings[name].id, "not read") for name in ("data", "www")
    }


def test_drift_opens_a_finding_once_and_plan_shows_the_change(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    applied(cli, folder)
    clean = cli("drift", app=folder, check=False)
    assert clean.returncode == 0, printed(clean)
    assert "No changes: 2 resources match the data files." in clean.stdout

    data_id = lockfile(folder)["data"].id
    vendor(tmp_path).tamper(box, data_id, size=5)
    found = cli("drift", app=folder, check=False)
    assert found.returncode == 2, printed(found)
    assert f"~ data (store.box) {data_id} will be updated in place" in found.stdout
    assert "size  5 → 2" in found.stdout
    assert "opened finding drf_" in found.stdout
    finding = found.stdout.split("opened finding ", 1)[1].split(".")[0]

    again = cli("drift", app=folder, check=False)
    assert again.returncode == 2, printed(again)
    assert f"as finding {finding} already says" in again.stdout
    assert "opened finding" not in again.stdout

    the_plan = cli("plan", app=folder, check=False)
    assert the_plan.returncode == 2, printed(the_plan)
    assert f"~ data (store.box) {data_id} will be updated in place" in the_plan.stdout
    assert "size  5 → 2" in the_plan.stdout
    assert (
        "Plan: 0 to create, 1 to update, 0 to replace, 0 to delete; 1 unchanged." in the_plan.stdout
    )
    pending = cli("resources", app=folder).stdout
    assert "update pending" in next(line for line in pending.splitlines() if " data " in line)
    # Drift only reports: the vendor keeps what was set there.
    assert vendor(tmp_path).records(box)[data_id]["size"] == 5


BY_HAND = """\
from tests.resource_support import alias

www = alias(name="www", target="https://elsewhere.test")
other = alias(name="other", target="https://elsewhere.test")
"""


def test_import_binds_an_existing_object_and_refuses_what_it_cannot_bind(
    cli: Cli, tmp_path: Path
) -> None:
    folder = stock(cli, tmp_path)
    (folder / "resources" / "main.py").write_text(BY_HAND)
    # Made by hand at the vendor's console, before remit knew of it.
    vendor(tmp_path).tamper(alias, "st-byhand", name="www", target="https://elsewhere.test")
    unbound = cli("plan", app=folder, check=False)
    assert unbound.returncode == 2, printed(unbound)
    assert "+ www (store.alias) will be created" in unbound.stdout

    unknown = cli("import", "store.alias", "st-nope", "--as", "www", app=folder, check=False)
    assert unknown.returncode == 1, printed(unknown)
    assert "error: alias st-nope: the vendor has no such store.alias; check the id" in flat(
        unknown.stderr
    )
    assert not (folder / "remit.lock").exists()

    nothing = cli("import", "store.alias", "st-byhand", "--as", "nothing", app=folder, check=False)
    assert nothing.returncode == 1, printed(nothing)
    assert "no data file declares `nothing`: declare it in resources/*.py first" in flat(
        nothing.stderr
    )
    wrong_type = cli("import", "store.box", "st-byhand", "--as", "www", app=folder, check=False)
    assert wrong_type.returncode == 1, printed(wrong_type)
    assert "`www` is declared a store.alias, not a store.box" in flat(wrong_type.stderr)
    no_type = cli("import", "store.nope", "st-byhand", "--as", "www", app=folder, check=False)
    assert no_type.returncode == 1, printed(no_type)
    assert "no connector of the app declares the resource type `store.nope`" in flat(no_type.stderr)
    assert not (folder / "remit.lock").exists()

    done = cli("import", "store.alias", "st-byhand", "--as", "www", app=folder, check=False)
    assert done.returncode == 0, printed(done)
    assert "imported store.alias st-byhand as `www` into remit.lock" in done.stdout
    assert "`www` matches its declaration." in done.stdout
    assert lockfile(folder) == {"www": Binding("store.alias", "st-byhand")}
    after = cli("plan", app=folder, check=False)
    assert after.returncode == 2, printed(after)  # `other` is still to make
    assert "www" not in after.stdout

    taken = cli("import", "store.alias", "st-other", "--as", "www", app=folder, check=False)
    assert taken.returncode == 1, printed(taken)
    assert "`www` is bound to st-byhand already" in flat(taken.stderr)
    twice = cli("import", "store.alias", "st-byhand", "--as", "other", app=folder, check=False)
    assert twice.returncode == 1, printed(twice)
    assert "store.alias st-byhand is bound to `www` already" in flat(twice.stderr)
    assert lockfile(folder) == {"www": Binding("store.alias", "st-byhand")}


def test_the_database_holds_the_bindings_and_the_lockfile_is_written_from_it(
    cli: Cli, tmp_path: Path
) -> None:
    folder = stock(cli, tmp_path)
    applied(cli, folder)
    made = lockfile(folder)
    # The file is lost (a checkout elsewhere, a bad merge): the database still binds both.
    (folder / "remit.lock").unlink()
    the_plan = cli("plan", app=folder, check=False)
    assert the_plan.returncode == 0, printed(the_plan)
    assert "www: remit.lock has unbound, the database store.alias" in flat(the_plan.stderr)
    again = cli("apply", "--yes", app=folder, check=False, stdin="")
    assert again.returncode == 0, printed(again)
    assert "written from the database's bindings" in flat(again.stderr)
    assert lockfile(folder) == made
    assert vendor(tmp_path).records(box).keys() == {made["data"].id}  # nothing made twice


def test_removing_the_declarations_deletes_after_an_approval(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    applied(cli, folder)
    made = lockfile(folder)
    (folder / "resources" / "main.py").write_text(NONE_DECLARED)
    the_plan = cli("plan", app=folder, check=False)
    assert the_plan.returncode == 2, printed(the_plan)
    assert f"- www (store.alias) {made['www'].id} will be deleted" in the_plan.stdout
    assert (
        f"- data (store.box) {made['data'].id} will be deleted [asks for approval]"
        in the_plan.stdout
    )

    apply = cli.spawn("apply", "--yes", app=folder)
    (approval,) = cli.pending_approvals()
    assert apply.poll() is None, cli.log(0)
    deadline = time.monotonic() + 30
    while f"remit approve {approval}" not in flat(cli.log(0)):
        assert time.monotonic() < deadline, cli.log(0)
        time.sleep(0.1)
    assert made["data"].id in vendor(tmp_path).records(box)  # the box waits for the decision
    assert apply.poll() is None

    decided = cli("approve", approval, app=folder)
    assert f"{approval} approved by user:ann" in decided.stdout
    assert apply.wait(60) == 0, cli.log(0)
    log = cli.log(0)
    assert f"deleted store.box {made['data'].id}" in log
    assert f"deleted store.alias {made['www'].id}" in log
    assert "Applied: 2 changed. remit.lock is up to date." in log
    assert lockfile(folder) == {}
    store = vendor(tmp_path)
    assert store.records(box) == {}
    assert store.records(alias) == {}
    after = cli("plan", app=folder, check=False)
    assert after.returncode == 0, printed(after)


def test_a_broken_lockfile_is_named_and_left_as_it_is(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    broken = '{"lockfile": 1, "resources": {\n'
    (folder / "remit.lock").write_text(broken)
    for args in (["plan"], ["apply", "--yes"], ["resources", "--offline"]):
        done = cli(*args, app=folder, check=False, stdin="")
        assert done.returncode == 1, (args, printed(done))
        assert f"error: {folder / 'remit.lock'} is not a lockfile" in flat(done.stderr), args
        assert "restore it from git" in flat(done.stderr)
        assert "Traceback" not in done.stderr
    assert (folder / "remit.lock").read_text() == broken
    assert vendor(tmp_path).records(box) == {}


def test_the_secret_is_in_no_output_no_file_and_no_table(cli: Cli, tmp_path: Path) -> None:
    folder = stock(cli, tmp_path)
    outputs = [
        cli("plan", app=folder, check=False),
        cli("plan", "--json", app=folder, check=False),
        applied(cli, folder),
        cli("resources", app=folder),
        cli("drift", app=folder, check=False),
    ]
    store = vendor(tmp_path)
    data_id = lockfile(folder)["data"].id
    store.tamper(box, data_id, size=5)
    outputs += [
        cli("drift", app=folder, check=False),
        cli("drift", app=folder, check=False),
        cli("plan", "--unchanged", app=folder, check=False),
        cli("plan", "--json", app=folder, check=False),
        cli("runs", app=folder),
    ]
    assert [done.returncode for done in outputs] == [2, 2, 0, 0, 0, 2, 2, 2, 2, 0]
    for done in outputs:
        assert SECRET not in printed(done), done.args
    assert "password" not in store.records(box)[data_id]

    files = [file for file in tmp_path.rglob("*") if file.is_file()]
    assert folder / "remit.lock" in files
    assert tmp_path / "fakes" / "store.jsonl" in files
    if cli.db.engine.dialect.name == "sqlite":
        assert tmp_path / "remit.sqlite" in files
    for file in files:
        assert SECRET.encode() not in file.read_bytes(), file

    found: list[str] = []
    engine = cli.db.engine
    inspector = sa.inspect(engine)
    schemas = [None, *(["dbos"] if "dbos" in inspector.get_schema_names() else [])]
    with engine.connect() as conn:
        for schema in schemas:
            for table in inspector.get_table_names(schema=schema):
                name = f'{schema}."{table}"' if schema else f'"{table}"'
                for row in conn.execute(sa.text(f"SELECT * FROM {name}")):
                    if SECRET in repr(tuple(row)):
                        found.append(name)
    assert found == []


PEOPLE = """\
from remit.resources.people import group, person

ann = person(principal='User::"ann"', name="Ann Example")
clerks = group(name="clerks", members=["user:ann"])
"""


def test_declared_people_are_listed_as_local_not_as_waiting_to_be_made(
    cli: Cli, tmp_path: Path
) -> None:
    folder = stock(cli, tmp_path)
    (folder / "resources" / "people.py").write_text(PEOPLE)
    applied(cli, folder)
    assert set(lockfile(folder)) == {"data", "www"}
    listed = cli("resources", app=folder).stdout
    rows = {line.split()[1]: line for line in listed.splitlines() if line.split()[1:2]}
    for name, type_id in (("ann", "remit.person"), ("clerks", "remit.group")):
        assert type_id in rows[name]
        assert "(local)" in rows[name]
        assert "(not made)" not in rows[name]
        assert "nothing to make" in rows[name]
    assert "up to date" in rows["data"]
    as_json = json.loads(cli("resources", "--offline", "--json", app=folder).stdout)
    local = {each["name"]: each for each in as_json if each["local"]}
    assert set(local) == {"ann", "clerks"}
    assert local["ann"]["bound_to"] is None
    assert local["ann"]["state"] == "declared (local: remit holds it, nothing to make)"
