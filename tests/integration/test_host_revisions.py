"""A host's revision: `source("main")` in a host's revision field only, apply pinned to a
revision (the data files read at it), a `source()` resolved through the app's resolver or
refused without one, a host's health by its outputs (a broken revision crashes), and
`remit resources --declared`. The apply tests run on SQLite and Postgres."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, AppError, CallContext, HostSpec, resource_type, secret, source
from remit.declare.resources import host_health
from remit.execution.context import Context
from remit.resources.direct import direct_caller
from remit.resources.workflows import ApplyInput, apply_workflow
from remit.testing import Harness
from tests.e2e.cli_support import ACME, CRASH_APP, ROOT, Cli
from tests.forked import run_remit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from acme.connectors import dns, hosting

MERGED = "a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6a7b8c9d0"
MAIN = "0f9e8d7c6b5a0f9e8d7c6b5a0f9e8d7c6b5a0f9e"
NEWER = "1234567890abcdef1234567890abcdef12345678"


def site(**fields: Any) -> Any:
    return hosting.container(
        **{"name": "desk", "image": "ghcr.io/acme/desk:1", "revision": source("main"), **fields}
    )


def host_app(tmp_path: Path, declarations: Mapping[str, Any], **hooks: Any) -> App:
    """An app of the hosting connector declaring `declarations`, its resources given `hooks`
    (`resolve_source`, `read_at`) as the app's wiring gives them."""
    app = App(name="hosts", workflows=[], connectors=[hosting.connector])
    app.use_resources(declarations=declarations, lockfile=tmp_path / "remit.lock")
    if hooks:
        assert app.resources is not None
        app.resources = dataclasses.replace(app.resources, **hooks)
        app.workflows["apply"] = apply_workflow(app.resources, app.ops)
    return app


def harness(database_url: str, app: App, fake: hosting.FakeHosting) -> Harness:
    return Harness(app, database_url=database_url, implementations={"hosting": fake})


def containers(fake: hosting.FakeHosting) -> list[dict[str, Any]]:
    return list(fake.records(hosting.container).values())


def invoke(fake: hosting.FakeHosting, name: str, payload: dict[str, Any]) -> Any:
    """Call the container's op `name` on the fake, as apply would (a fresh key)."""
    op = hosting.container.ops[name]
    context = CallContext(
        op=op,
        idempotency_key=f"test:{uuid.uuid4().hex}",
        run_id="run_test",
        attempt=1,
        actor="user:test",
        environ={},
    )
    return fake.invoke(op, op.input.model_validate(payload), context)


# The marker.


def test_source_is_taken_only_by_a_hosts_revision_field() -> None:
    declared = site()
    assert declared.fields["revision"] == {"$source": "main"}
    assert site(revision=source("release/2")).fields["revision"] == {"$source": "release/2"}
    assert site(revision=MERGED).fields["revision"] == MERGED
    # A declaration of a host may leave its revision out.
    assert "revision" not in hosting.container(name="desk", image="i:1").fields

    with pytest.raises(AppError) as image:
        hosting.container(name="desk", image=source("main"))
    assert "`image` takes no source()" in str(image.value)
    assert "hosting.container's is `revision`" in str(image.value)
    assert "give `image` a value" in str(image.value)

    with pytest.raises(AppError) as not_a_host:
        dns.record(zone="acme.example", name="desk", type="CNAME", content=source("main"))
    assert "`content` takes no source()" in str(not_a_host.value)
    assert "dns.record is no host" in str(not_a_host.value)

    with pytest.raises(AppError, match="is a source\\(\\) inside a value"):
        hosting.container(name="desk", image="i:1", env={"REV": source("main")})
    with pytest.raises(AppError, match="`\\$source` object written by hand"):
        hosting.container(name="desk", image="i:1", env={"REV": {"$source": "main"}})
    for bad in ("-u", "a..b", "", "main/", "two words"):
        with pytest.raises(AppError, match="give the name of a branch"):
            source(bad)


def test_a_hosts_revision_must_name_a_declared_field_that_takes_a_commit() -> None:
    class Box(BaseModel):
        name: str
        url: str | None = None
        commit: str | None = None
        build: int = 0
        token: str | None = None

    def host(revision: str, **roles: Any) -> None:
        resource_type(
            "boxes.box",
            schema=Box,
            vendor_owned=("url", *roles.pop("vendor_owned", ())),
            host=HostSpec(url="url", revision=revision),
            **roles,
        )

    host("commit")
    refused = {
        "sha": "`sha`, is not a field of its schema",
        "url": "`url`, is vendor_owned",
        "build": "`build`, does not take a string",
    }
    for revision, said in refused.items():
        with pytest.raises(AppError, match=said):
            host(revision)
    with pytest.raises(AppError, match="`token`, is write_only"):
        host("token", write_only=("token",))
    with pytest.raises(AppError, match="`commit`, is immutable"):
        host("commit", immutable=("commit",))


# Health.


def test_a_host_is_healthy_by_its_outputs_and_a_broken_revision_is_not(tmp_path: Path) -> None:
    journal = tmp_path / "hosting.jsonl"
    running = {
        "name": "desk",
        "image": "i:1",
        "revision": MERGED,
        "url": "https://d",
        "status": "running",
    }
    assert host_health(hosting.container, running) == (True, "")
    assert host_health(hosting.container, None) == (
        False,
        "the vendor has no such hosting.container: it is gone",
    )
    crashing = {**running, "status": "crashing"}
    assert host_health(hosting.container, crashing) == (
        False,
        f"its status is 'crashing' (running revision {MERGED})",
    )
    # A type that is a host with no outputs is healthy once it reads back.
    plain = resource_type("plain.host", schema=hosting.Container, host=HostSpec(url="url"))
    assert host_health(plain, crashing) == (True, "")
    with pytest.raises(AppError, match=r"dns\.record is no host"):
        host_health(dns.record, running)

    # The fake crashes what runs a revision it was told is broken, in every process sharing
    # its journal, and runs what is deployed at another.
    fake = hosting.FakeHosting(journal=journal)
    desired = {"name": "desk", "image": "i:1", "revision": MERGED}
    made = invoke(fake, "create", {"desired": desired})
    hosting.FakeHosting(journal=journal).break_revision(MERGED)
    state = invoke(fake, "read", {"id": made.id}).state
    assert state["status"] == "crashing"
    healthy, why = host_health(hosting.container, state)
    assert not healthy
    assert why == f"its status is 'crashing' (running revision {MERGED})"
    elsewhere = hosting.FakeHosting(journal=journal)
    assert elsewhere.records(hosting.container)[made.id]["status"] == "crashing"
    assert elsewhere.state()["resources"]["hosting.container"][made.id]["status"] == "crashing"

    newer = {**desired, "revision": NEWER}
    plan = invoke(fake, "plan", {"id": made.id, "desired": newer})
    assert plan.action == "update"
    expect = {"action": "update", "replace": [], "basis": plan.basis}
    invoke(fake, "update", {"id": made.id, "desired": newer, "expect": expect})
    fresh = hosting.FakeHosting(journal=journal).records(hosting.container)[made.id]
    assert (fresh["revision"], fresh["status"]) == (NEWER, "running")
    assert host_health(hosting.container, fresh) == (True, "")


# Apply.


def test_apply_pinned_to_a_revision_deploys_it_to_the_host(
    database_url: str, tmp_path: Path
) -> None:
    fake = hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")
    with harness(database_url, host_app(tmp_path, {"site": site()}), fake) as h:
        run = h.run("apply", {"revision": MERGED})
        assert run.status == "done", run.error
        (made,) = containers(fake)
        assert (made["revision"], made["status"]) == (MERGED, "running")
        # The next merge deploys its own revision, in place.
        again = h.run("apply", {"revision": NEWER})
        assert again.status == "done", again.error
        assert isinstance(again.output, dict)
        assert [a["action"] for a in again.output["applied"]] == ["update"]
    (deployed,) = containers(fake)
    assert deployed["revision"] == NEWER
    assert deployed["url"] == made["url"]


def test_apply_without_a_revision_or_a_remote_refuses_and_makes_nothing(
    database_url: str, tmp_path: Path
) -> None:
    fake = hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")
    with harness(database_url, host_app(tmp_path, {"site": site()}), fake) as h:
        run = h.run("apply", {})
    assert run.status == "failed"
    assert run.error is not None
    assert (
        '`site` takes its revision from `main` (source("main")), and the app has no remote to '
        "resolve `main` against: declare a remote"
    ) in run.error
    assert "give the revision to deploy (`--revision SHA`, or `revision` in apply's input)" in (
        run.error
    )
    assert containers(fake) == []


def test_drift_leaves_a_hosts_source_revision_to_the_deploys(
    database_url: str, tmp_path: Path
) -> None:
    fake = hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")
    with harness(database_url, host_app(tmp_path, {"site": site()}), fake) as h:
        assert h.run("apply", {"revision": MERGED}).status == "done"
        (made_id,) = fake.records(hosting.container)
        clean = h.run("drift", {})
        assert clean.status == "done", clean.error
        assert isinstance(clean.output, dict)
        assert clean.output["drifted"] is False
        # What a person changes at the console is still drift.
        fake.tamper(hosting.container, made_id, image="ghcr.io/acme/desk:hotfix")
        found = h.run("drift", {})
    assert isinstance(found.output, dict)
    assert found.output["drifted"] is True
    (change,) = found.output["plan"]["changes"]
    assert [f["field"] for f in change["fields"]] == ["image"]


def test_a_source_is_resolved_through_the_apps_resolver_in_the_run_and_outside_it(
    database_url: str, tmp_path: Path
) -> None:
    asked: list[tuple[str, str]] = []

    def resolve_source(ctx: Context | None, ref: str) -> str:
        asked.append(("run" if ctx is not None else "command", ref))
        if ctx is None:
            return MAIN
        answer: str = ctx.step(f"resolve {ref}", lambda: MAIN)
        return answer

    app = host_app(tmp_path, {"site": site()}, resolve_source=resolve_source)
    fake = hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")
    with harness(database_url, app, fake) as h:
        assert app.resources is not None
        call = direct_caller(h.worker.implementations, {}, actor="user:test")
        shown = app.resources.plan(call)
        assert shown.changes[0].desired is not None
        assert shown.changes[0].desired["revision"] == MAIN
        run = h.run("apply", {})
        assert run.status == "done", run.error
    assert asked == [("command", "main"), ("run", "main")]
    (made,) = containers(fake)
    assert made["revision"] == MAIN


def test_apply_pinned_to_a_revision_reads_the_data_files_at_it(
    database_url: str, tmp_path: Path
) -> None:
    read: list[str] = []

    def read_at(revision: str) -> dict[str, dict[str, Any]]:
        """The data files as the merged commit has them: a newer image."""
        read.append(revision)
        return {
            "site": {
                "type": "hosting.container",
                "fields": {
                    "name": "desk",
                    "image": "ghcr.io/acme/desk:2",
                    "revision": {"$source": "main"},
                },
            }
        }

    app = host_app(tmp_path, {"site": site()}, read_at=read_at)
    fake = hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")
    with harness(database_url, app, fake) as h:
        run = h.run("apply", {"revision": MERGED})
        assert run.status == "done", run.error
        (made,) = containers(fake)
        assert (made["image"], made["revision"]) == ("ghcr.io/acme/desk:2", MERGED)
        assert read == [MERGED]


def test_a_revision_that_is_not_a_commit_is_refused() -> None:
    assert ApplyInput(revision=MERGED).revision == MERGED
    for bad in ("main", "--upload-pack=x", "ABCDEF1", "abc"):
        with pytest.raises(ValueError, match="String should match pattern"):
            ApplyInput(revision=bad)


# The commands.

HOST_APP = """\
from remit import App
from acme.connectors import hosting

app = App(name="hostdesk", workflows=[], connectors=[hosting.connector])
"""

HOST_DECLARED = """\
from remit import source
from acme.connectors.hosting import container

site = container(name="desk", image="ghcr.io/acme/desk:1", revision=source("main"))
"""


def test_plan_and_apply_take_the_revision_to_deploy(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "hostdesk"
    (folder / "resources").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(HOST_APP)
    (folder / "resources" / "site.py").write_text(HOST_DECLARED)
    cli = Cli(database_url, tmp_path)
    cli.env["REMIT_FAKES_DIR"] = str(tmp_path / "fakes")
    cli.env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "examples"), *filter(None, [cli.env.get("PYTHONPATH")])]
    )
    try:
        refused = cli("plan", app=folder, check=False)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "the app has no remote to resolve `main` against" in refused.stderr
        not_a_commit = cli("plan", "--revision", "main", app=folder, check=False)
        assert not_a_commit.returncode == 1
        assert "--revision 'main' is not a commit" in not_a_commit.stderr
        shown = cli("plan", "--revision", MERGED.upper(), app=folder, check=False)
        assert shown.returncode == 2, shown.stdout + shown.stderr
        assert f'revision  "{MERGED}"' in shown.stdout
        done = cli("apply", "--yes", "--revision", MERGED, app=folder, check=False, stdin="")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Applied: 1 changed." in done.stdout
        again = cli("plan", "--revision", MERGED, app=folder, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        cli.close()
    fake = hosting.FakeHosting(journal=tmp_path / "fakes" / "hosting.jsonl")
    (made,) = containers(fake)
    assert (made["revision"], made["status"]) == (MERGED, "running")


def test_resources_declared_prints_the_data_files_as_json_and_nothing_else(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "REMIT_DATABASE_URL": f"sqlite:///{tmp_path / 'unused.db'}"}
    done = run_remit(["--app", str(ACME), "resources", "--declared"], env=env)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert set(printed) == {"declarations"}
    declared = printed["declarations"]
    assert set(declared) == {"site", "www", "store"}
    assert declared["site"]["type"] == "hosting.container"
    assert declared["site"]["fields"]["revision"] == {"$source": "main"}
    assert declared["site"]["fields"]["secret_env"] == {
        "SMTP_PASSWORD": {"$secret": "SMTP_PASSWORD"}
    }
    assert declared["www"]["fields"]["content"] == {"$ref": "site.url"}
    assert not (tmp_path / "unused.db").exists()

    bare = run_remit(["--app", str(CRASH_APP), "resources", "--declared"], env=env)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout) == {"declarations": {}}


def test_the_declared_json_is_what_apply_reads(tmp_path: Path) -> None:
    app = host_app(tmp_path, {"site": site(secret_env={"PW": secret("PW")})})
    assert app.resources is not None
    assert app.resources.files() == {
        "site": {
            "type": "hosting.container",
            "fields": {
                "name": "desk",
                "image": "ghcr.io/acme/desk:1",
                "revision": {"$source": "main"},
                "secret_env": {"PW": {"$secret": "PW"}},
            },
        }
    }
