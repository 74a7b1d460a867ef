"""The forge's half of a change, both halves: `FakeForge` over real bare git repos, and
`ForgeDriver` over HTTP against a local forge in GitHub's shape (`tests/forge_server.py`);
webhook signatures and events; `Remote` and a connector's `remote`."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remit import Connector, DriverError, MissingCredential
from remit.changes.forge import (
    ChangeRequest,
    CommitStatus,
    FakeForge,
    ForgeDriver,
    Remote,
    parse_event,
    sign,
    verify,
)
from remit.changes.git import Git
from remit.core.errors import AppError
from tests.forge_server import TOKEN, ForgeServer
from tests.vendor_servers import serve

REPO = "https://git.acme.test/acme/ops.git"
SECRET = "webhook-secret"


@pytest.fixture
def forge(tmp_path: Path) -> FakeForge:
    fake = FakeForge(root=tmp_path / "git", journal=tmp_path / "forge.jsonl")
    fake.create_repo(REPO, files={"README.md": "ops\n", "desk.py": "SEATS = 1\n"})
    return fake


def _open(forge: FakeForge, branch: str = "more-seats", *, key: str = "open-1") -> ChangeRequest:
    return forge.open_change(
        REPO, branch=branch, base="main", title="More seats", body="", author="ann", key=key
    )


# The fake.


def test_open_answers_the_change_and_again_the_same_one(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    change = _open(forge)
    assert change == ChangeRequest(
        number=1,
        repo=REPO,
        branch="more-seats",
        base="main",
        head=head,
        title="More seats",
        author="ann",
        url="https://git.acme.test/acme/ops/pull/1",
    )
    assert _open(forge, key="open-2") == change  # one open for the branch is answered
    assert _open(forge, key="open-1") == change  # the key repeated: the first answer
    assert forge.changes(REPO) == [change]

    newer = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 3\n"}, "Three seats", "ann")
    assert forge.read_change(REPO, 1).head == newer  # an open change follows its branch
    other = forge.push(REPO, "fewer-seats", {"desk.py": "SEATS = 0\n"}, "None", "bo")
    assert _open(forge, "fewer-seats", key="open-3").number == 2
    assert forge.read_change(REPO, 2).head == other


def test_open_is_refused_for_a_branch_or_repo_the_forge_lacks(forge: FakeForge) -> None:
    with pytest.raises(DriverError, match="no branch `nope`: push it first") as raised:
        _open(forge, "nope")
    assert not raised.value.retryable
    assert not raised.value.maybe_applied
    with pytest.raises(DriverError, match=r"no repo https://git\.acme\.test/acme/other\.git"):
        forge.open_change(
            "https://git.acme.test/acme/other.git",
            branch="x",
            base="main",
            title="",
            body="",
            author="",
            key="k",
        )
    assert forge.changes(REPO) == []


def test_statuses_keep_each_contexts_latest(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    post = forge.post_status
    post(REPO, CommitStatus(sha=head, context="remit/test", state="pending"), key="s1")
    post(REPO, CommitStatus(sha=head, context="remit/plan", state="success"), key="s2")
    done = CommitStatus(sha=head, context="remit/test", state="failure", description="2 failed")
    assert post(REPO, done, key="s3") == done
    assert post(REPO, done, key="s3") == done  # replayed, not posted twice
    assert forge.statuses(REPO, head) == [
        done,
        CommitStatus(sha=head, context="remit/plan", state="success"),
    ]
    assert len(forge.effects) == 3
    with pytest.raises(DriverError, match="has no commit"):
        post(REPO, CommitStatus(sha="0" * 40, context="remit/test", state="pending"), key="s4")


def test_comments_are_kept_once_per_key(forge: FakeForge) -> None:
    forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)
    forge.comment(REPO, 1, "Checks passed.", key="c1")
    forge.comment(REPO, 1, "Checks passed.", key="c1")
    forge.comment(REPO, 1, "Deployed.", key="c2")
    assert forge.comments(REPO, 1) == ["Checks passed.", "Deployed."]
    with pytest.raises(DriverError, match="no change request #7"):
        forge.comment(REPO, 7, "lost", key="c3")


def test_merge_lands_a_merge_commit_with_both_parents(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    base = forge.push(REPO, "main", {"README.md": "the ops repo\n"}, "Docs", "bo")
    _open(forge)
    merged = forge.merge(REPO, 1, head=head, key="merge-1")
    assert merged.state == "merged"
    assert merged.merge_commit == forge.head(REPO, "main")
    bare = Git(forge.git_url(REPO))
    assert bare.run("rev-list", "--parents", "-n", "1", "main").split() == [
        merged.merge_commit,
        base,
        head,
    ]
    assert bare.run("show", "main:desk.py") == "SEATS = 2"
    assert bare.run("show", "main:README.md") == "the ops repo"
    assert forge.read_change(REPO, 1) == merged
    # Merging a merged change again, under another key, answers it as it is.
    assert forge.merge(REPO, 1, head=head, key="merge-2") == merged
    assert forge.head(REPO, "main") == merged.merge_commit


def test_merge_with_a_stale_head_is_refused_and_merges_nothing(forge: FakeForge) -> None:
    stale = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)
    forge.push(REPO, "more-seats", {"desk.py": "SEATS = 9\n"}, "Nine seats", "mallory")
    main = forge.head(REPO, "main")
    with pytest.raises(DriverError, match="has moved: its head is") as raised:
        forge.merge(REPO, 1, head=stale, key="merge-1")
    assert not raised.value.retryable
    assert not raised.value.maybe_applied
    assert forge.head(REPO, "main") == main
    assert forge.read_change(REPO, 1).state == "open"
    assert forge.effects_of("forge.change.merge") == []


def test_a_conflicting_merge_is_refused(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)
    main = forge.push(REPO, "main", {"desk.py": "SEATS = 5\n"}, "Five seats", "bo")
    with pytest.raises(DriverError, match=r"does not merge cleanly.*desk\.py") as raised:
        forge.merge(REPO, 1, head=head, key="merge-1")
    assert not raised.value.retryable
    assert forge.head(REPO, "main") == main
    assert forge.read_change(REPO, 1).state == "open"


def test_a_merge_replayed_under_its_key_merges_once(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)
    first = forge.merge(REPO, 1, head=head, key="merge-1")
    forge.push(REPO, "main", {"README.md": "later\n"}, "Later", "bo")
    assert forge.merge(REPO, 1, head=head, key="merge-1") == first
    bare = Git(forge.git_url(REPO))
    merges = bare.run("rev-list", "--merges", "main").splitlines()
    assert merges == [first.merge_commit]
    assert len(forge.effects_of("forge.change.merge")) == 1


def test_a_key_used_for_another_write_is_refused(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge, key="k")
    with pytest.raises(DriverError, match=r"was used for forge\.change\.open"):
        forge.post_status(REPO, CommitStatus(sha=head, context="c", state="pending"), key="k")


def test_two_fakes_on_one_journal_and_root_are_one_forge(tmp_path: Path) -> None:
    one = FakeForge(root=tmp_path / "forge-git", journal=tmp_path / "forge.jsonl")
    two = FakeForge(root=tmp_path / "forge-git", journal=tmp_path / "forge.jsonl")
    one.create_repo(REPO, files={"desk.py": "SEATS = 1\n"})
    head = two.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    change = _open(one)
    assert two.changes(REPO) == [change]
    assert _open(two, key="open-1") == change  # the key one used: replayed, not opened again
    two.comment(REPO, 1, "from two", key="c1")
    assert one.comments(REPO, 1) == ["from two"]
    merged = one.merge(REPO, 1, head=head, key="merge-1")
    assert two.read_change(REPO, 1) == merged
    assert two.merge(REPO, 1, head=head, key="merge-1") == merged
    assert len(two.effects_of("forge.change.merge")) == 1
    third = FakeForge(journal=tmp_path / "forge.jsonl")  # its repos beside it: forge-git/
    assert third.head(REPO, "main") == merged.merge_commit
    assert third.state()["changes"] == [merged.model_dump(mode="json")]


def test_a_git_push_to_the_fakes_git_url_moves_an_open_change(
    forge: FakeForge, tmp_path: Path
) -> None:
    forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)
    work = tmp_path / "work"
    me = ["-c", "user.name=ann", "-c", "user.email=ann@acme.test", "-c", "commit.gpgSign=false"]
    subprocess.run(["git", "clone", "-q", forge.git_url(REPO), str(work)], check=True)
    subprocess.run(["git", "checkout", "-q", "more-seats"], cwd=work, check=True)
    (work / "desk.py").write_text("SEATS = 4\n")
    subprocess.run(["git", *me, "commit", "-qam", "Four seats"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "more-seats"], cwd=work, check=True)
    pushed = Git(work).resolve("HEAD")
    assert forge.head(REPO, "more-seats") == pushed
    assert forge.read_change(REPO, 1).head == pushed
    assert forge.merge(REPO, 1, head=pushed, key="merge-1").state == "merged"


def test_the_fake_follows_remit_fakes_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMIT_FAKES_DIR", str(tmp_path / "fakes"))
    fake = FakeForge()
    assert fake.using({"FORGE_API_TOKEN": "unused"}) is fake  # a fake needs no credentials
    fake.create_repo(REPO, files={"a": "a\n"})
    assert (tmp_path / "fakes" / "forge-git" / "git.acme.test" / "acme" / "ops.git").is_dir()
    assert FakeForge().git_url(REPO) == str(
        tmp_path / "fakes" / "forge-git" / "git.acme.test" / "acme" / "ops.git"
    )


# Webhooks.


def test_a_signature_verifies_and_a_wrong_or_missing_one_does_not() -> None:
    body = b'{"zen": "hi"}'
    signature = sign(SECRET, body)
    assert signature.startswith("sha256=")
    assert len(signature) == 7 + 64
    assert verify(SECRET, body, signature)
    assert not verify(SECRET, body, sign("another secret", body))
    assert not verify(SECRET, body + b" ", signature)
    assert not verify(SECRET, body, None)
    assert not verify(SECRET, body, "")
    assert not verify("", body, sign("", body))


def test_each_event_kind_parses_back(forge: FakeForge) -> None:
    head = forge.push(REPO, "more-seats", {"desk.py": "SEATS = 2\n"}, "Two seats", "ann")
    _open(forge)

    headers, body = forge.event("push", REPO, secret=SECRET, branch="more-seats", actor="ann")
    assert verify(SECRET, body, headers["X-Hub-Signature-256"])
    assert headers["Content-Type"] == "application/json"
    pushed = parse_event(headers, body)
    assert (pushed.kind, pushed.repo, pushed.branch, pushed.after, pushed.actor) == (
        "push",
        REPO,
        "more-seats",
        head,
        "ann",
    )
    assert pushed.before == "0" * 40
    assert pushed.raw_kind == "push"
    assert pushed.delivery == headers["X-GitHub-Delivery"]

    said = parse_event(*forge.event("comment", REPO, secret=SECRET, number=1, body="LGTM"))
    assert (said.kind, said.number, said.body, said.actor) == ("comment", 1, "LGTM", "dev")
    merge = parse_event(*forge.event("merge", REPO, secret=SECRET, number=1, actor="bo"))
    assert (merge.kind, merge.number, merge.body, merge.actor) == ("merge", 1, "/merge", "bo")
    later = parse_event(*forge.event("comment", REPO, secret=SECRET, number=1, body="ok\n/merge"))
    assert later.kind == "comment"  # `/merge` counts on the first line only
    first = parse_event(*forge.event("comment", REPO, secret=SECRET, number=1, body="/merge\nnow"))
    assert first.kind == "merge"

    closed = parse_event(*forge.event("closed", REPO, secret=SECRET, number=1, delivery="d-1"))
    assert (closed.kind, closed.number, closed.branch, closed.delivery) == (
        "closed",
        1,
        "more-seats",
        "d-1",
    )
    assert closed.raw_kind == "pull_request"
    ping = parse_event(*forge.event("other", REPO, secret=SECRET))
    assert (ping.kind, ping.raw_kind, ping.repo) == ("other", "ping", REPO)


def test_a_repo_given_by_its_page_gets_git_appended() -> None:
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "before": "a" * 40,
            "after": "b" * 40,
            "repository": {"html_url": "https://git.acme.test/acme/ops"},
            "pusher": {"name": "ann"},
        }
    ).encode()
    headers = {"x-github-event": "push", "x-github-delivery": "d-2"}  # any case
    assert parse_event(headers, body).repo == REPO
    tag = json.loads(body)
    tag["ref"] = "refs/tags/v1"
    assert parse_event(headers, json.dumps(tag).encode()).kind == "other"


def test_a_malformed_delivery_is_refused_naming_what_is_missing() -> None:
    body = b'{"zen": "hi"}'
    with pytest.raises(ValueError, match="no X-GitHub-Event header"):
        parse_event({"X-GitHub-Delivery": "d"}, body)
    with pytest.raises(ValueError, match="no X-GitHub-Delivery header"):
        parse_event({"X-GitHub-Event": "ping"}, body)
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-3"}
    with pytest.raises(ValueError, match="delivery d-3 is not JSON"):
        parse_event(headers, b"{nope")
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_event(headers, b"[1]")
    with pytest.raises(ValueError, match="delivery d-3 has no `ref`"):
        parse_event(headers, body)


# Remote, and a connector's remote.


def test_a_remote_serves_the_urls_under_its_prefixes() -> None:
    remote = Remote(urls=("https://git.acme.test/",), driver=ForgeDriver, fake=FakeForge)
    assert remote.serves(REPO)
    assert remote.serves("HTTPS://GIT.ACME.TEST/acme/ops")
    assert not remote.serves("https://git.acme.test.evil/acme/ops.git")
    assert not remote.serves("https://github.com/acme/ops.git")
    one = Remote(urls=("https://git.acme.test/acme/ops.git",), driver=ForgeDriver, fake=FakeForge)
    assert one.serves("https://git.acme.test/acme/ops")
    assert not one.serves("https://git.acme.test/acme/ops-old.git")
    assert one.webhook_secret == "FORGE_WEBHOOK_SECRET"


def test_a_remote_and_a_connectors_remote_are_checked() -> None:
    with pytest.raises(AppError, match="give the prefixes of the repo URLs"):
        Remote(urls=(), driver=ForgeDriver, fake=FakeForge)
    with pytest.raises(AppError, match=r"Remote\(fake="):
        Remote(urls=("https://x/",), driver=ForgeDriver, fake="FakeForge")  # type: ignore[arg-type]
    with pytest.raises(AppError, match="declare it with `Remote"):
        Connector("forge", ops=[], driver=ForgeDriver, remote="https://x/")  # type: ignore[arg-type]
    remote = Remote(urls="https://x/", driver=ForgeDriver, fake=FakeForge)  # type: ignore[arg-type]
    assert remote.urls == ("https://x/",)
    assert Connector("forge", ops=[], driver=ForgeDriver, remote=remote).remote is remote


# The driver, over HTTP.


@pytest.fixture
def server() -> ForgeServer:
    made = ForgeServer()
    made.branches[("acme", "ops", "main")] = "a" * 40
    made.branches[("acme", "ops", "more-seats")] = "b" * 40
    return made


@pytest.fixture
def driver(server: ForgeServer) -> Iterator[ForgeDriver]:
    with serve(server.app) as url:
        yield ForgeDriver({}).using({"FORGE_API_URL": url, "FORGE_API_TOKEN": TOKEN}, timeout=10)


def _open_at(driver: ForgeDriver, key: str = "open-1") -> ChangeRequest:
    return driver.open_change(
        REPO, branch="more-seats", base="main", title="More seats", body="b", author="ann", key=key
    )


def test_the_driver_opens_a_change_once_and_reads_it(
    server: ForgeServer, driver: ForgeDriver
) -> None:
    change = _open_at(driver)
    assert change == ChangeRequest(
        number=1,
        repo=REPO,
        branch="more-seats",
        base="main",
        head="b" * 40,
        title="More seats",
        author="remit-bot",
        url="https://git.test/acme/ops/pull/1",
    )
    assert _open_at(driver, key="open-2") == change  # found open: not opened again
    posts = [request for request in server.requests if request[0] == "POST"]
    assert posts == [("POST", "/repos/acme/ops/pulls", "open-1")]
    server.branches[("acme", "ops", "more-seats")] = "c" * 40
    assert driver.read_change(REPO, 1).head == "c" * 40
    with pytest.raises(DriverError, match=r"\(404\): Not Found") as raised:
        driver.read_change(REPO, 9)
    assert not raised.value.retryable
    assert raised.value.status == 404
    assert driver.git_url(REPO) == REPO
    assert driver.timeout == 10


def test_the_driver_posts_statuses_and_comments(server: ForgeServer, driver: ForgeDriver) -> None:
    sha = "b" * 40
    driver.post_status(REPO, CommitStatus(sha=sha, context="remit/test", state="pending"), key="s1")
    driver.post_status(REPO, CommitStatus(sha=sha, context="remit/plan", state="success"), key="s2")
    done = CommitStatus(sha=sha, context="remit/test", state="success", description="all passed")
    assert driver.post_status(REPO, done, key="s3") == done
    assert driver.post_status(REPO, done, key="s3") == done  # replayed by its key
    assert len(server.statuses[("acme", "ops", sha)]) == 3
    assert driver.statuses(REPO, sha) == [
        done,
        CommitStatus(sha=sha, context="remit/plan", state="success"),
    ]
    _open_at(driver)
    driver.comment(REPO, 1, "Checks passed.", key="c1")
    driver.comment(REPO, 1, "Checks passed.", key="c1")
    assert [made["body"] for made in server.comments[("acme", "ops", 1)]] == ["Checks passed."]
    assert ("POST", "/repos/acme/ops/issues/1/comments", "c1") in server.requests


def test_the_driver_merges_and_answers_a_merged_change_as_it_is(
    server: ForgeServer, driver: ForgeDriver
) -> None:
    _open_at(driver)
    merged = driver.merge(REPO, 1, head="b" * 40, key="merge-1")
    assert merged.state == "merged"
    assert merged.merge_commit == server.branches[("acme", "ops", "main")]
    assert ("PUT", "/repos/acme/ops/pulls/1/merge", "merge-1") in server.requests
    assert driver.merge(REPO, 1, head="b" * 40, key="merge-2") == merged
    assert sum(1 for request in server.requests if request[0] == "PUT") == 1


def test_the_driver_refuses_a_stale_head_and_a_refused_merge(
    server: ForgeServer, driver: ForgeDriver
) -> None:
    _open_at(driver)
    server.branches[("acme", "ops", "more-seats")] = "c" * 40
    with pytest.raises(DriverError, match="has moved") as raised:
        driver.merge(REPO, 1, head="b" * 40, key="merge-1")
    assert not raised.value.retryable
    assert not raised.value.maybe_applied
    server.mergeable = False
    with pytest.raises(DriverError, match=r"\(405\): Pull Request is not mergeable") as raised:
        driver.merge(REPO, 1, head="c" * 40, key="merge-2")
    assert not raised.value.retryable
    assert not raised.value.maybe_applied
    assert driver.read_change(REPO, 1).state == "open"


def test_the_drivers_failures_say_whether_to_retry(
    server: ForgeServer, driver: ForgeDriver
) -> None:
    server.fail_next = 502
    with pytest.raises(DriverError, match=r"\(502\)") as raised:
        driver.comment(REPO, 1, "hi", key="c1")
    assert raised.value.retryable
    assert raised.value.maybe_applied
    bad = ForgeDriver({**driver.environ, "FORGE_API_TOKEN": "wrong"})
    with pytest.raises(DriverError, match="check FORGE_API_TOKEN") as raised:
        bad.read_change(REPO, 1)
    assert not raised.value.retryable
    with pytest.raises(MissingCredential, match="FORGE_API_TOKEN") as missing:
        ForgeDriver({"FORGE_API_URL": "http://127.0.0.1:1"}).read_change(REPO, 1)
    assert missing.value.variable == "FORGE_API_TOKEN"
    with pytest.raises(DriverError, match="does not end in <owner>/<name>"):
        driver.read_change("https://git.acme.test/ops.git", 1)


def test_an_unreachable_forge_is_retryable_and_not_applied() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    driver = ForgeDriver({"FORGE_API_URL": f"http://127.0.0.1:{port}", "FORGE_API_TOKEN": TOKEN})
    with pytest.raises(DriverError, match="is unreachable") as raised:
        driver.comment(REPO, 1, "hi", key="c1")
    assert raised.value.retryable
    assert not raised.value.maybe_applied
