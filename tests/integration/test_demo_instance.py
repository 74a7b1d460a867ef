"""A demo instance in this process: seeded through its hook on the fakes its runs use, one fake
per vendor, a token for each principal, `GET /fakes/{vendor}` behind a token, and a connector
without a fake refused by name. The demo is SQLite by design; the route is tested on both."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit import App, AppError, Connector, RemitError, load_app
from remit.changes.fake_forge import FakeForge
from remit.changes.git import Git
from remit.serve.api import create_api
from remit.serve.demo import Call, Demo, read_instance
from remit.testing import Harness

DEMO_APP = Path(__file__).resolve().parent.parent / "apps" / "demo_app"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    copied = tmp_path / "demo_app"
    shutil.copytree(DEMO_APP, copied, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    return copied


@pytest.fixture
def demo(folder: Path) -> Iterator[Demo]:
    instance = Demo.of(load_app(folder), folder, environ={"REMIT_AS": "user:carol"})
    try:
        yield instance
    finally:
        instance.close()


def open_acme(call: Call) -> None:
    call("books.accounts.open", {"account": "acme", "balance": 100}, "user:carol")


def test_the_seed_hook_calls_on_the_fakes_the_runs_use(demo: Demo) -> None:
    demo.start(seed=open_acme)

    books = demo.fakes["books"]
    assert books.state()["accounts"] == [{"account": "acme", "balance": 100}]
    # A direct call as ann reads what the seed wrote: the API's calls share the worker's fake.
    read = demo.client.calls.call("books.accounts.get", {"account": "acme"}, by="user:ann")
    assert read.output == {"account": "acme", "balance": 100}
    run = demo.client.runs.start_row("refund", {"account": "acme", "amount": 40}, by="user:ann")
    deadline = time.monotonic() + 30
    while not (pending := demo.client.approvals.list(status="pending")):
        assert time.monotonic() < deadline, demo.client.runs.get(run.run_id)
        time.sleep(0.05)
    demo.client.approvals.decide([pending[0].id], "approved", by="user:carol", key="k1")
    while (done := demo.client.runs.get(run.run_id)).status != "done":
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    assert books.state() == {
        "accounts": [{"account": "acme", "balance": 140}],
        "credits": [{"credit_id": "cr_1", "account": "acme", "amount": 40}],
    }


def test_the_demo_mints_a_token_for_each_principal_and_keeps_them_private(demo: Demo) -> None:
    demo.start()

    assert sorted(demo.tokens) == ["user:ann", "user:carol"]
    assert demo.client.tokens.authenticate(demo.tokens["user:ann"]) == "user:ann"
    path = demo.publish("http://127.0.0.1:1")
    assert path == demo.folder / "instance.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert demo.settings.database_url.endswith("/.remit/demo/remit.sqlite")


@pytest.mark.parametrize(
    ("op_id", "by", "told"),
    [
        ("books.accounts.get", "user:carol", "did not succeed: no account nobody"),
        ("books.credits.create", "user:ann", 'was refused: user:ann may not call Op::"books.cr'),
    ],
)
def test_a_seed_call_that_fails_stops_the_demo_naming_the_op(
    demo: Demo, op_id: str, by: str, told: str
) -> None:
    def seed(call: Call) -> None:
        call(op_id, {"account": "nobody", "amount": 5}, by)

    with pytest.raises(RemitError) as failed:
        demo.start(seed=seed)
    assert str(failed.value).startswith(f"seeding the demo: `{op_id}` as {by} {told}")


def test_a_demo_starts_on_a_fresh_database(demo: Demo, folder: Path) -> None:
    demo.start(seed=open_acme)
    demo.close()
    again = Demo.of(load_app(folder), folder, environ={"REMIT_AS": "user:carol"})
    try:
        again.start()
        assert again.fakes["books"].state()["accounts"] == []
        assert again.client.runs.list() == []
    finally:
        again.close()


def test_the_demo_makes_the_apps_remit_folder_its_owners_alone(demo: Demo, folder: Path) -> None:
    old = os.umask(0o022)  # the usual umask, which would leave a folder 0755
    try:
        demo.start()
    finally:
        os.umask(old)

    assert stat.S_IMODE(os.stat(folder / ".remit").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / ".remit" / "demo").st_mode) == 0o700


def test_a_second_demo_of_the_app_is_refused_while_one_runs(demo: Demo, folder: Path) -> None:
    demo.start(seed=open_acme)
    demo.publish("http://127.0.0.1:4711")
    second = Demo.of(load_app(folder), folder, environ={"REMIT_AS": "user:carol"})

    with pytest.raises(RemitError) as refused:
        second.start()

    assert str(refused.value).startswith(
        f"a demo of this app is already running (pid {os.getpid()}, URL http://127.0.0.1:4711)"
    )
    second.close()
    # The first demo's folder is untouched: its database still answers.
    assert demo.fakes["books"].state()["accounts"] == [{"account": "acme", "balance": 100}]
    assert demo.client.runs.list() == []
    assert read_instance(folder)["url"] == "http://127.0.0.1:4711"


def test_a_closed_demo_is_not_found_running(demo: Demo, folder: Path) -> None:
    demo.start()
    path = demo.publish("http://127.0.0.1:4711")
    demo.close()

    assert not path.exists()
    with pytest.raises(RemitError, match="no demo is running for the app in"):
        read_instance(folder)
    # One left by a demo that never closed (killed) is not read either: no one holds the lock.
    path.write_text('{"url": "http://127.0.0.1:4711", "actor": "user:ann", "tokens": {}}')
    with pytest.raises(RemitError, match="no demo is running for the app in"):
        read_instance(folder)


def test_a_connector_without_a_fake_is_refused_by_name(database_url: str) -> None:
    from tests.apps.demo_app.app import NotesDriver, books, get_note, refund

    plain = Connector("notes", ops=[get_note], driver=NotesDriver)
    app = App(name="plain", workflows=[refund], connectors=[books, plain])

    with pytest.raises(AppError, match=r"connector `notes` has no fake") as refused:
        Harness(app, database_url=database_url)
    assert 'Connector("notes", fake=...)' in str(refused.value)


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    with Harness(load_app(DEMO_APP), database_url=database_url, actor="user:carol") as running:
        yield running


def test_fakes_route_needs_a_token_and_names_the_fakes_it_has(harness: Harness) -> None:
    api = create_api(
        harness.client, allowed_hosts=["testserver"], fakes={"books": harness.fake("books")}
    )
    harness.client.calls.call("books.accounts.open", {"account": "acme", "balance": 7})
    _, token = harness.client.services.tokens.create("user:ann", by="user:carol")
    with TestClient(api) as http:
        refused = http.get("/fakes/books")
        assert refused.status_code == 401
        assert "send an API token" in refused.json()["error"]
        assert "acme" not in refused.text

        answered = http.get("/fakes/books", headers={"Authorization": f"Bearer {token}"})
        assert answered.status_code == 200
        assert answered.json()["accounts"] == [{"account": "acme", "balance": 7}]

        unknown = http.get("/fakes/payments", headers={"Authorization": f"Bearer {token}"})
        assert unknown.status_code == 404
        assert unknown.json()["error"] == (
            "this instance runs no fake for the vendor `payments`: the fake vendors here are books"
        )


def test_an_api_not_on_fakes_has_no_fakes_route(harness: Harness) -> None:
    _, token = harness.client.services.tokens.create("user:ann", by="user:carol")
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as http:
        answer = http.get("/fakes/books", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 404


ACME = DEMO_APP.parent.parent.parent / "examples" / "acme"
ACME_REPO = "https://git.acme.test/acme/ops.git"


def test_a_demo_of_an_app_with_a_forge_holds_its_repo_and_its_branches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "acme"
    shutil.copytree(ACME, copy, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    # What Python writes beside the files, as remit's `.remit/`, is never in the repo.
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\x00")
    for name in [name for name in sys.modules if name.partition(".")[0] == "acme"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("REMIT_FAKES_DIR", raising=False)
    monkeypatch.setenv("REMIT_CHANGES_DIR", str(tmp_path / "elsewhere"))
    app = load_app(copy)
    assert app.resources is not None
    demo = Demo.of(app, copy, environ={"REMIT_AS": "user:sam"})
    try:
        demo.start()
        # Its fakes, the forge's repos among them, are in the demo's folder, wiped with it; so
        # are the mirrors a change's checks fetch.
        assert os.environ["REMIT_FAKES_DIR"] == str(demo.folder / "fakes")
        assert os.environ["REMIT_CHANGES_DIR"] == str(demo.folder / "changes")
        forge = FakeForge()
        main = forge.head(ACME_REPO, "main")
        assert main is not None
        git = Git(forge.git_url(ACME_REPO))
        held = git.run("ls-tree", "-r", "--name-only", main).splitlines()
        assert {"app.py", "resources/desk.py", "demo/tour.remit"} <= set(held)
        assert not [path for path in held if {".remit", "__pycache__"} & set(Path(path).parts)]
        # Each folder under demo/branches/ is a branch: its files laid over main.
        branch = demo.branches["desk-notes"]
        assert forge.head(ACME_REPO, "desk-notes") == branch
        assert git.run("rev-parse", f"{branch}^") == main
        notes = copy / "demo" / "branches" / "desk-notes" / "notes" / "desk.md"
        assert git.run("show", f"{branch}:notes/desk.md") == notes.read_text().strip()
        assert git.run("diff", "--name-only", main, branch) == "notes/desk.md"
        # The secret the data files declare is set, for a deploy to send to the fake host.
        smtp = demo.client.services.secrets.get("SMTP_PASSWORD")
        assert smtp is not None
        assert smtp.startswith("demo-")
        # What the demo binds goes to its own lockfile, not the app folder's.
        assert app.resources.lockfile.path == demo.folder / "remit.lock"
    finally:
        demo.close()
    assert "REMIT_FAKES_DIR" not in os.environ
    assert os.environ["REMIT_CHANGES_DIR"] == str(tmp_path / "elsewhere")
    assert app.resources.lockfile.path == copy / "remit.lock"
    assert not (copy / "remit.lock").exists()
