"""The built-in workflow `change`: a branch of the operations repo checked, reviewed, merged and
deployed as one durable run.

A change run:
1. records the change (`remit_changes`) and opens a change request at the forge for the branch;
2. checks the branch's head commit (`checks.py`: its tests, its plan against the live bindings,
   and its code against every unfinished run), posting each result to the forge as a status;
3. with every check passed, asks for review through an approval gate of type `change`, whose
   draft is the change's summary. The author may not approve their own change, and approving
   one needs `Action::"decide"` on it and `Action::"call"` on `Op::"remit.change.merge"`. A
   newer head found once the gate is decided makes the decision count for nothing: the checks
   start again on that head;
4. with a check failed, or the review rejected (or withdrawn by whoever started the run, which
   the change records as `withdrawn`, not `rejected`), waits for the forge's events (messages
   on the topic `forge`, which the webhook sends): a push to the branch starts the checks again
   on the branch's new head, a closed change request ends the run;
5. merges through the forge under a key, so a retry never merges twice;
6. deploys: starts the built-in `apply` at the merged revision (hosts' `source("main")` take it),
   waits for it, and checks each host's health and revision, recording each in `remit_deploys`;
7. with a host unhealthy (or the apply failed), asks through a gate of type `change-rollback`
   to roll back to the revision the hosts ran before, and applies that when approved.

Each step is in the ledger, and each thing the run does is an activity row of the record
`change/<id>`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from remit.changes.checks import CHECKS, Where, commits, first_line, mirror_of, run_checks
from remit.changes.forge import ChangeRequest
from remit.changes.ops import Forge, RepoApp, merge, open_change, post_status, resolve_source
from remit.changes.store import RECORD_TYPE, Changes
from remit.core.errors import ChangeGoing, ChildFailed, RemitError
from remit.declare.ops import Op
from remit.declare.resources import SOURCE_KEY, ReadOut, ResourceType, host_health
from remit.declare.workflows import Workflow, workflow
from remit.execution.context import Context
from remit.people.approvals import ApprovalType
from remit.resources.bindings import Bindings

CHANGE = "change"
REVIEW = "change"
ROLLBACK = "change-rollback"
# The topic the forge's events are sent to a change run on.
TOPIC = "forge"


class ChangeInput(BaseModel):
    """`id` names the change (`change/<id>` is its record). Its author, who may not approve
    it, is who starts the run; `author`, when given, must name that principal. `health_wait`: seconds between a failed health check and the next."""

    id: str
    branch: str
    base: str = "main"
    title: str = ""
    author: str = ""
    health_wait: float = Field(default=30.0, ge=0, le=3600)
    health_checks: int = Field(default=3, ge=1, le=100)


class ReviewDraft(BaseModel):
    """What a reviewer is shown: the change, its commits, and each check's result."""

    change: str
    branch: str
    head: str
    author: str
    url: str = ""
    commits: list[str] = Field(default_factory=list)
    checks: dict[str, str] = Field(default_factory=dict)
    plan: str = ""
    deploy_check: str = ""


class RollbackDraft(BaseModel):
    """A rollback asked for: the revision deployed, what failed, and the one to go back to."""

    change: str
    revision: str
    previous: str
    failures: dict[str, str] = Field(default_factory=dict)


class ForgeNote(BaseModel):
    """A forge event as a change run takes it (`ops/changes.py`, `ForgeEvents`, sends it)."""

    kind: str
    delivery: str = ""
    branch: str | None = None
    after: str | None = None
    number: int | None = None
    body: str = ""
    actor: str = ""


def _not_the_author(by: str, decision: str, draft: Mapping[str, Any]) -> str | None:
    if decision == "approved" and by == draft.get("author"):
        return f"{by} opened this change: its author may not approve it; ask a reviewer"
    return None


def change_approval_types() -> list[ApprovalType]:
    return [
        ApprovalType(
            REVIEW,
            draft=ReviewDraft,
            description="the review of a change to the operations repo",
            editable=(),
            refuse=_not_the_author,
            approves=merge.id,
        ),
        ApprovalType(
            ROLLBACK,
            draft=RollbackDraft,
            description="a rollback of a deploy whose hosts are unhealthy",
            editable=(),
        ),
    ]


def _hosts_at(app: RepoApp, revision: str, base: str) -> dict[str, str]:
    """The hosts a deploy of `revision` puts it on, by declaration name, with their types'
    ids: those the data files at that revision declare with `source(base)` as their revision
    (a host pinned to another revision, or following another branch, is not this deploy's)."""
    resources = app.resources
    if resources is None:
        return {}
    found: dict[str, str] = {}
    for name, declared in sorted(resources.files(revision).items()):
        rtype = app.resource_types.get(str(declared["type"]))
        spec = None if rtype is None else rtype.host
        if rtype is None or spec is None or spec.revision is None:
            continue
        if declared["fields"].get(spec.revision) == {SOURCE_KEY: base}:
            found[name] = rtype.id
    return found


def change_workflow(app: RepoApp) -> Workflow:
    """The built-in workflow `change` of `app` (see the module)."""
    reads = {
        rtype.ops["read"].id: rtype.ops["read"]
        for rtype in app.resource_types.values()
        if rtype.host is not None and "read" in rtype.ops
    }
    uses: list[Op[Any, Any]] = [open_change, post_status, merge, resolve_source, *reads.values()]

    @workflow(
        name=CHANGE,
        input=ChangeInput,
        uses=uses,
        record=lambda input: (RECORD_TYPE, input.id),
    )
    def change(ctx: Context, input: ChangeInput) -> dict[str, Any]:
        return _Change(ctx, app, input).run()

    return change


class _Change:
    """One change run's way through (see the module)."""

    def __init__(self, ctx: Context, app: RepoApp, input: ChangeInput) -> None:
        self.ctx = ctx
        self.app = app
        self.input = input
        db, name = ctx.app_database
        self.db = db
        self.store = Changes(db, name)
        forge = app.forge()
        if forge is None:
            raise RemitError(
                "a change needs the app's forge: give the connector of the repo's git host a "
                "remote (`Connector(..., remote=Remote(...))`)"
            )
        self.forge: Forge = forge
        if input.author and input.author != ctx.actor:
            raise RemitError(
                f"a change's author is who opens it: this run was started by {ctx.actor}, and "
                f"its input names {input.author}. Open the change as its author (`remit change "
                "open BRANCH --as WHO`), and leave `author` out"
            )
        self.author = ctx.actor
        self.git_url = ""
        self.on_fakes = False
        self._last: dict[str, Any] = {}

    def note(self, kind: str, summary: str, target: str, **values: Any) -> None:
        store, input, run_id, actor = self.store, self.input, self.ctx.run_id, self.ctx.actor
        meta = {k: v for k, v in values.items() if k in ("head", "merge_commit", "deployed")}

        def write() -> str:
            store.note(
                input.id,
                kind=kind,
                summary=summary,
                actor=actor,
                run_id=run_id,
                target=target,
                meta=meta,
                **values,
            )
            return target

        self.ctx.step(f"note {target}", write)

    def run(self) -> dict[str, Any]:
        ctx, input = self.ctx, self.input
        store, run_id, vendor = self.store, ctx.run_id, self.forge.vendor
        ctx.step("record the change", lambda: _begin(store, input, run_id, vendor))
        request = ChangeRequest.model_validate(
            ctx.call(
                open_change,
                {
                    "branch": input.branch,
                    "base": input.base,
                    "title": input.title or input.branch,
                    "body": f"Opened by {self.author} through remit (change {input.id}).",
                    "author": self.author,
                },
                key="open",
            ).model_dump()
        )
        self.note(
            "change.opened",
            f"change request #{request.number} opened for {input.branch}",
            "opened",
            number=request.number,
            url=request.url,
            head=request.head,
            status="checking",
        )
        repo = ctx.call(resolve_source, {"ref": input.branch}, key="repo")
        self.git_url, self.on_fakes = str(repo.git_url), bool(repo.on_fakes)
        head, round_ = request.head, 0
        while True:
            passed = self.check(head, round_, request)
            if passed:
                decision = ctx.approval(
                    f"review-{round_}",
                    type=REVIEW,
                    title=f"merge {input.branch} at {head[:12]}",
                    draft=self.review_draft(head, request),
                )
                now = self.head_now(f"head:{round_}:review")
                if now != head:
                    self.note(
                        "change.superseded",
                        f"{now[:12]} came while the review of {head[:12]} waited: checking it",
                        f"superseded:{round_}",
                        head=now,
                        status="checking",
                    )
                    head, round_ = now, round_ + 1
                    continue
                if decision.approved:
                    merged = self.merge(request, head, round_)
                    if merged is not None:
                        break
                else:
                    # A review its author took back is no verdict on the change: it reads
                    # `withdrawn`; one rejected, expired or cancelled reads `rejected`.
                    ended = "withdrawn" if decision.withdrawn else "rejected"
                    self.note(
                        f"change.{ended}",
                        f"review of {head[:12]} {decision.status}"
                        + (f" by {decision.decided_by}" if decision.decided_by else "")
                        + (f": {decision.reason}" if decision.reason else ""),
                        f"{ended}:{round_}",
                        status=ended,
                    )
            after = self.wait_for_commit(head, round_)
            if after is None:
                self.note(
                    "change.closed", "the change request was closed", "closed", status="closed"
                )
                return {"outcome": "closed", "change": input.id, "head": head}
            head, round_ = after, round_ + 1
        revision = merged.merge_commit or head
        self.note(
            "change.merged",
            f"merged {head[:12]} into {input.base} as {revision[:12]}",
            "merged",
            status="merged",
            merge_commit=revision,
        )
        return self.deploy(revision)

    def merge(self, request: ChangeRequest, head: str, round_: int) -> ChangeRequest | None:
        """Merge `head` through the forge, under a key; None, noted, when the forge refuses
        (the head moved, a conflict, the request closed): the run then waits for a commit."""
        self.note("change.merging", f"merging {head[:12]}", f"merging:{round_}", status="merging")
        try:
            answer = self.ctx.call(
                merge, {"number": request.number, "head": head}, key=f"merge:{round_}"
            )
        except RemitError as refused:
            self.note(
                "change.merge_refused",
                f"the forge refused to merge {head[:12]}: {refused}",
                f"merge-refused:{round_}",
                status="failing",
            )
            return None
        return ChangeRequest.model_validate(answer.model_dump())

    def head_now(self, key: str) -> str:
        found = self.ctx.call(resolve_source, {"ref": self.input.branch}, key=key)
        return str(found.commit)

    def check(self, head: str, round_: int, request: ChangeRequest) -> bool:
        """Run the checks on `head`, post each to the forge, and say whether all passed."""
        ctx, input = self.ctx, self.input
        where = self.where()
        vendor = self.forge.vendor

        def checked() -> dict[str, Any]:
            git = mirror_of(where, vendor)
            results = run_checks(git, where, head)
            return {
                "head": head,
                "results": results,
                "commits": commits(git, input.base, head),
            }

        found = ctx.step(f"check {head[:12]}", checked)
        results: dict[str, dict[str, Any]] = found["results"]
        for name in CHECKS:
            result = results[name]
            ctx.call(
                post_status,
                {
                    "sha": head,
                    "context": f"remit/{name}",
                    "state": "success" if result["ok"] else "failure",
                    "description": first_line(result),
                },
                key=f"status:{round_}:{name}",
            )
        ok = all(result["ok"] for result in results.values())
        failed = [name for name, result in results.items() if not result["ok"]]
        ctx.publish("checks", found)
        self.note(
            "change.checked",
            f"checks of {head[:12]} " + ("passed" if ok else f"failed: {', '.join(failed)}"),
            f"checked:{round_}",
            head=head,
            checks=found,
            status="review" if ok else "failing",
        )
        self._last = found
        return ok

    def where(self) -> Where:
        folder = self.app.folder
        if folder is None:
            raise RemitError(
                "a change run checks the branch beside the app's own folder, and this app was "
                "not loaded from one: serve it with `remit worker` in its folder"
            )
        return Where(
            git_url=self.git_url,
            database_url=self.db.url.render_as_string(hide_password=False),
            app_folder=folder,
            environ={**os.environ, **({"REMIT_FAKES": "1"} if self.on_fakes else {})},
        )

    def review_draft(self, head: str, request: ChangeRequest) -> ReviewDraft:
        found = self._last
        results = found["results"]
        return ReviewDraft(
            change=self.input.id,
            branch=self.input.branch,
            head=head,
            author=self.author,
            url=request.url,
            commits=[f"{c['sha'][:12]} {c['subject']}" for c in found.get("commits", [])],
            checks={name: first_line(result) for name, result in results.items()},
            plan=str(results.get("plan", {}).get("summary", "")),
            deploy_check=str(results.get("deploy-check", {}).get("summary", "")),
        )

    def wait_for_commit(self, head: str, round_: int) -> str | None:
        """Wait for the branch to move past `head`: its new head, or None once the change
        request is closed. Other events (comments) are noted and waited past."""
        seen = 0
        while True:
            sent = self.ctx.wait_for(TOPIC)
            seen += 1
            try:
                event = ForgeNote.model_validate(sent)
            except ValidationError:
                self.note(
                    "change.ignored",
                    f"a message on {TOPIC} that is no forge event was ignored: {str(sent)[:200]}",
                    f"ignored:{round_}:{seen}",
                )
                continue
            if event.kind == "closed":
                return None
            if event.kind == "push":
                now = self.head_now(f"head:{round_}:{seen}")
                if now != head:
                    return now
                continue
            if event.kind in ("comment", "merge"):
                self.note(
                    "change.comment",
                    f"{event.actor or 'someone'}: {event.body[:200]}",
                    f"comment:{round_}:{seen}",
                )

    def deploy(self, revision: str) -> dict[str, Any]:
        """Apply the hosts at `revision`, check them, and offer a rollback when one fails."""
        ctx, input = self.ctx, self.input
        app = self.app
        hosts_at = self.ctx.step(
            f"the hosts at {revision[:12]}", lambda: _hosts_at(app, revision, input.base)
        )
        hosts = {name: app.resource_types[type_id] for name, type_id in hosts_at.items()}
        if not hosts:
            self.note(
                "change.deployed",
                f"{revision[:12]} merged; the app declares no hosts to deploy it to",
                "deployed",
                status="deployed",
                deployed=revision,
            )
            return {"outcome": "deployed", "change": input.id, "revision": revision, "hosts": {}}
        before = self.read_hosts(hosts, "before")
        previous = self.previous(hosts, before, revision)
        self.note(
            "change.deploying",
            f"deploying {revision[:12]} to {', '.join(hosts)}",
            "deploying",
            status="deploying",
        )
        failures = self.apply_and_check(revision, "deploy", hosts)
        if not failures:
            self.note(
                "change.deployed",
                f"{', '.join(hosts)} run {revision[:12]}, healthy",
                "deployed",
                status="deployed",
                deployed=revision,
            )
            return {
                "outcome": "deployed",
                "change": input.id,
                "revision": revision,
                "hosts": dict.fromkeys(hosts, revision),
            }
        said = "; ".join(f"{name}: {why}" for name, why in failures.items())
        self.note(
            "change.unhealthy",
            f"after deploying {revision[:12]}: {said}",
            "unhealthy",
            status="unhealthy",
        )
        decision = ctx.approval(
            "rollback",
            type=ROLLBACK,
            title=f"roll back {', '.join(hosts)} to {previous[:12]}",
            draft=RollbackDraft(
                change=input.id, revision=revision, previous=previous, failures=failures
            ),
        )
        if not decision.approved:
            return {
                "outcome": "unhealthy",
                "change": input.id,
                "revision": revision,
                "failures": failures,
            }
        again = self.apply_and_check(previous, "rollback", hosts)
        if again:
            said_again = "; ".join(f"{n}: {w}" for n, w in again.items())
            self.note(
                "change.rollback_failed",
                f"rolling back to {previous[:12]} did not make the hosts healthy: {said_again}",
                "rollback-failed",
                status="unhealthy",
            )
            return {
                "outcome": "unhealthy",
                "change": input.id,
                "revision": revision,
                "previous": previous,
                "failures": failures,
                "still_failing": again,
            }
        self.note(
            "change.rolled_back",
            f"rolled back to {previous[:12]}, healthy",
            "rolled_back",
            status="rolled_back",
            deployed=previous,
        )
        return {
            "outcome": "rolled_back",
            "change": input.id,
            "revision": revision,
            "previous": previous,
            "failures": failures,
            "still_failing": again,
        }

    def read_hosts(
        self, hosts: Mapping[str, ResourceType], tag: str
    ) -> dict[str, dict[str, Any] | None]:
        """Each host's state at its vendor now (None: unbound, or gone)."""
        db, app = self.ctx.app_database
        resources = self.app.resources
        assert resources is not None
        store = Bindings(db, app, resources.lockfile)
        bound = self.ctx.step(
            f"bindings {tag}", lambda: {n: b.id for n, b in store.read().items() if n in hosts}
        )
        states: dict[str, dict[str, Any] | None] = {}
        for name, rtype in hosts.items():
            if name not in bound:
                states[name] = None
                continue
            found = ReadOut.model_validate(
                self.ctx.call(
                    rtype.ops["read"], {"id": bound[name]}, key=f"read:{tag}:{name}"
                ).model_dump()
            )
            states[name] = None if found.gone else found.state
        return states

    def previous(
        self,
        hosts: Mapping[str, ResourceType],
        before: Mapping[str, dict[str, Any] | None],
        revision: str,
    ) -> str:
        """The revision a rollback goes back to: the one every host ran before the deploy,
        or else what the base branch was before the merge (its first parent)."""
        ran = {
            str(state.get(rtype.host.revision))
            for name, rtype in hosts.items()
            if rtype.host is not None
            and rtype.host.revision is not None
            and (state := before.get(name)) is not None
            and state.get(rtype.host.revision)
        }
        if len(ran) == 1:
            return ran.pop()
        where, vendor = self.where(), self.forge.vendor
        return str(
            self.ctx.step(
                "the revision before the merge",
                lambda: mirror_of(where, vendor).resolve(f"{revision}^1"),
            )
        )

    def apply_and_check(
        self, revision: str, kind: str, hosts: Mapping[str, ResourceType]
    ) -> dict[str, str]:
        """Apply the data files at `revision` (a child run of `apply`), then check each host
        until all are healthy on it or the checks run out: what still fails, by host."""
        ctx, input = self.ctx, self.input
        try:
            child = ctx.start("apply", {"revision": revision}, key=kind)
            output = ctx.wait(child)
        except ChildFailed as failed:
            return {"apply": str(failed)}
        except RemitError as refused:  # the apply could not start (the policies, say)
            return {"apply": f"the {kind}'s apply did not start: {refused}"}
        outcome = output.get("outcome") if isinstance(output, dict) else None
        if outcome != "applied":
            return {"apply": f"apply run {child.run_id} ended {outcome}"}
        failures: dict[str, str] = {}
        tries = max(1, input.health_checks)
        for attempt in range(tries):
            states = self.read_hosts(hosts, f"{kind}:{attempt}")
            failures = {}
            for name, rtype in hosts.items():
                why = _unhealthy(rtype, states.get(name), revision)
                if why is not None:
                    failures[name] = why
            if not failures or attempt == tries - 1:
                break
            ctx.sleep(input.health_wait)
        store, run_id = self.store, ctx.run_id

        def record() -> list[str]:
            for name in hosts:
                store.deployed(
                    host=name,
                    revision=revision,
                    kind=kind,
                    change_id=input.id,
                    run_id=run_id,
                    healthy=name not in failures,
                    detail=failures.get(name, "healthy"),
                )
            return sorted(hosts)

        ctx.step(f"record the {kind}", record)
        return failures


def _unhealthy(rtype: ResourceType, state: dict[str, Any] | None, revision: str) -> str | None:
    """Why a host is not serving `revision` healthily; None when it is."""
    if state is None:
        return "gone at its vendor"
    healthy, why = host_health(rtype, state)
    if not healthy:
        return why
    spec = rtype.host
    if spec is not None and spec.revision is not None and state.get(spec.revision) != revision:
        return f"runs {state.get(spec.revision)!r}, not {revision[:12]}"
    return None


def _begin(store: Changes, input: ChangeInput, run_id: str, vendor: str) -> str:
    """Write the change's row, refusing a second change of a branch while one is going."""
    going = store.going(branch=input.branch)
    if going is not None and going.id != input.id:
        raise ChangeGoing(
            f"the branch {input.branch} already has a change going, {going.id} (run "
            f"{going.run_id}): carry that one on, or cancel its run (`remit cancel "
            f"{going.run_id}`)",
            change_id=going.id,
            run_id=going.run_id,
        )
    known = store.get(input.id)
    if known is not None:
        if known.run_id != run_id:
            raise RemitError(
                f"the change {input.id} is run {known.run_id}'s: a change's id names one change. "
                "Open a change with `remit change open BRANCH`, which names it"
            )
        return input.id
    store.write(
        input.id,
        remote=vendor,
        branch=input.branch,
        base=input.base,
        run_id=run_id,
        author=input.author,
        title=input.title or input.branch,
        status="opened",
    )
    return input.id
