"""`client.changes` and the forge's webhook: opening and reading changes to the operations
repo (`remit.changes`), and taking the forge's events.

Opening a change starts a run of the built-in `change` as the principal who opens it, under
the policies (`Action::"start"` on `Workflow::"change"`); that principal is the change's
author. Reading changes is reading the runs of `change` (`Action::"read_runs"` on it).

`POST /forge/{remote}/events` hands each delivery to `ForgeEvents.take`:
1. the signature is checked against the remote's webhook secret (a stored secret, or the
   environment variable of that name), in constant time. A delivery that fails it is refused
   with nothing recorded;
2. an event of another repo than the app's is ignored;
3. a delivery taken before answers as it did then and acts no more (`remit_forge_deliveries`);
4. a push to a branch with a change going, a comment on its change request (a `/merge`
   comment too) and its closing are sent to the change run as messages on the topic `forge`,
   keyed by the delivery, so a redelivery racing the first sends once;
5. a push to the base branch that no change run merged starts the built-in `apply` at the
   pushed revision, keyed by the delivery.

The forge acts as the principal `agent:<remote>` (e.g. `agent:forge`): the policies say
whether it may send to change runs (`Action::"send"` on `Workflow::"change"`) and start
`apply`, and each act is audited as any other.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from remit.changes.forge import ForgeEvent, parse_event, verify
from remit.changes.ops import commit_of
from remit.changes.store import Change, Changes, Deploy
from remit.changes.workflow import CHANGE, TOPIC, ForgeNote
from remit.connectors.forges import normal_url
from remit.core.acting import Acting
from remit.core.errors import AppError, ChangeGoing, RemitError
from remit.core.keys import key_problem
from remit.core.schema import forge_deliveries
from remit.policy.cedar import denied
from remit.resources.workflows import APPLY

if TYPE_CHECKING:
    from remit.app import App
    from remit.connectors.credentials import Secrets
    from remit.ops.runs import RunsRoom
    from remit.policy.guard import Guard


class ChangesServices(Protocol):
    """The client's services changes use."""

    @property
    def guard(self) -> Guard: ...
    @property
    def secrets(self) -> Secrets: ...


class ChangesClient(Acting, Protocol):
    """The client as changes and the forge's events see it."""

    @property
    def app(self) -> App: ...
    @property
    def services(self) -> ChangesServices: ...
    @property
    def runs(self) -> RunsRoom: ...


BASE_BRANCH = "REMIT_REPO_BRANCH"


class EventRefused(RemitError):
    """A delivery that is not the forge's (`status` 401), or not one remit can read (400), or
    that no remote of the app takes (404); nothing was recorded."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Taken:
    """What a delivery did: `action` is `sent` (to the change run `run_id`), `apply` (a run
    started), or `ignored` (`why`); `duplicate` when it was taken before and did nothing now."""

    delivery: str
    kind: str
    action: str
    run_id: str | None = None
    why: str = ""
    duplicate: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def principal_of(vendor: str) -> str:
    """Who a remote's events act as."""
    return f"agent:{vendor}"


def base_branch() -> str:
    return os.environ.get(BASE_BRANCH) or "main"


class ForgeEvents:
    """The app's forge events, through a client of the app."""

    def __init__(self, client: ChangesClient) -> None:
        self.client = client

    def take(self, vendor: str, headers: dict[str, str], body: bytes) -> Taken:
        app = self.client.app
        try:
            forge = app.forge() if vendor in app.remotes else None
        except AppError as error:  # the repo's URL unknown, or no remote serving it
            raise EventRefused(f"the app's forge cannot take deliveries: {error}", 404) from None
        if forge is None or forge.vendor != vendor:
            known = ", ".join(sorted(app.remotes)) or "none"
            raise EventRefused(
                f"the app has no forge remote `{vendor}` serving its repo (its remotes: {known})",
                404,
            )
        secret_name = forge.remote.webhook_secret
        secret = self.client.services.secrets.get(secret_name) or os.environ.get(secret_name)
        if not secret:
            raise EventRefused(
                f"the webhook secret {secret_name} is not set, so no delivery can be trusted: "
                f"`remit secrets set {secret_name}`, and give the forge the same secret",
                401,
            )
        lowered = {k.lower(): v for k, v in headers.items()}
        if not verify(secret, body, lowered.get("x-hub-signature-256")):
            raise EventRefused(
                "the delivery's signature (X-Hub-Signature-256) does not match the webhook "
                f"secret {secret_name}: it was not sent by the forge, or the secrets differ",
                401,
            )
        try:
            event = parse_event(lowered, body)
        except ValueError as error:
            raise EventRefused(f"the delivery cannot be read: {error}", 400) from None
        # A delivery is known by what was signed, its body: the delivery id is a header, which
        # a copy of an old delivery could change.
        signed = "sha256:" + hashlib.sha256(body).hexdigest()[:40]
        first = self._taken_before(vendor, signed)
        if first is not None:
            return Taken(**{**first, "duplicate": True})
        taken = self._act(vendor, event, signed, same_repo=_same_repo(event.repo, forge.repo_url))
        self._keep(vendor, signed, taken)
        return taken

    def _act(self, vendor: str, event: ForgeEvent, signed: str, *, same_repo: bool) -> Taken:
        def ignored(why: str) -> Taken:
            return Taken(event.delivery, event.kind, "ignored", why=why)

        if not same_repo:
            return ignored(f"an event of {event.repo}, not the app's repo")
        changes = Changes(self.client.db, self.client.app.name)
        by = principal_of(vendor)
        key = f"forge-{signed}"
        if event.kind == "push" and event.branch == base_branch():
            if not event.after or set(event.after) == {"0"}:
                return ignored(f"{event.branch} was deleted")
            merged_by = changes.merged_by_a_change(event.after)
            if merged_by is not None:
                return ignored(f"change {merged_by} merged it, and deploys it itself")
            merging = changes.merging()
            if merging is not None:
                return ignored(
                    f"change {merging.id} is {merging.status}: it deploys {event.branch} itself"
                )
            if self.client.app.resources is None:
                return ignored("the app declares no resources to apply")
            forge = self.client.app.forge()
            assert forge is not None
            now = commit_of(
                forge,
                forge.api(fakes=self.client.app.forge_on_fakes).git_url(forge.repo_url),
                event.branch,
            )
            if now != event.after:
                # A late or repeated delivery: what is on the branch now is what deploys.
                return ignored(f"{event.branch} is at {now[:12]} now, not {event.after[:12]}")
            run = self.client.runs.start(APPLY, {"revision": event.after}, by=by, key=key)
            return Taken(event.delivery, event.kind, "apply", run_id=run.run_id)
        if event.kind == "push":
            change = changes.going(branch=event.branch) if event.branch else None
        elif event.number is not None:
            change = changes.going(number=event.number)
        else:
            change = None
        if change is None:
            return ignored("no change is going for it")
        note = ForgeNote(
            kind=event.kind,
            delivery=event.delivery,
            branch=event.branch,
            after=event.after,
            number=event.number,
            body=event.body,
            actor=event.actor,
        )
        self.client.runs.send(change.run_id, TOPIC, note.model_dump(mode="json"), key=key, by=by)
        return Taken(event.delivery, event.kind, "sent", run_id=change.run_id)

    def _taken_before(self, vendor: str, delivery: str) -> dict[str, Any] | None:
        query = sa.select(forge_deliveries.c.outcome).where(
            forge_deliveries.c.remote == vendor, forge_deliveries.c.delivery == delivery
        )
        found = self.client.db.read(
            f"delivery {delivery}", lambda conn: conn.execute(query).scalar()
        )
        return dict(found) if isinstance(found, dict) else None

    def _keep(self, vendor: str, signed: str, taken: Taken) -> None:
        """Keep the delivery, once: two copies racing both acted under one key, so the second
        to get here finds the first's row and leaves it."""
        try:
            with self.client.db.begin() as conn:
                conn.execute(
                    forge_deliveries.insert().values(
                        remote=vendor,
                        delivery=signed,
                        kind=taken.kind,
                        outcome=taken.as_json(),
                        received_at=datetime.now(UTC),
                    )
                )
        except sa.exc.IntegrityError:
            pass


def _same_repo(a: str, b: str) -> bool:
    """Whether two URLs name one repo: forges take a repo's owner and name in any case."""
    return normal_url(a).rstrip("/").lower() == normal_url(b).rstrip("/").lower()


class ChangeNotFound(RemitError):
    """No change has that id."""


class ChangesRoom:
    def __init__(self, client: ChangesClient) -> None:
        self._client = client

    @property
    def _store(self) -> Changes:
        return Changes(self._client.db, self._client.app.name, clock=self._client.clock)

    def _check(self) -> None:
        if CHANGE not in self._client.app.workflows:
            raise AppError(
                f"app `{self._client.app.name}` has no forge remote, so it has no changes: give "
                "the connector of the repo's git host a remote (`Connector(..., "
                "remote=Remote(...))`)"
            )

    def open(
        self,
        branch: str,
        *,
        title: str = "",
        base: str = "main",
        by: str | None = None,
        key: str | None = None,
        health_wait: float | None = None,
    ) -> Change:
        """Start a change run for `branch` as `by`, its author, and return the change (its row
        as the run will write it: `status` `opened`). With a `key`, the same open again
        returns the first one's change."""
        self._check()
        for what, value in (("branch", branch), ("base", base)):
            problem = key_problem(value, what=f"a change's {what}", longest=255, example="fix-dns")
            if problem is not None:
                raise RemitError(problem)
        who = self._client.person(by)
        # Under a key the same open again must start the same run with the same input.
        change_id = "chg_" + (
            hashlib.sha256(f"{who}\n{key}".encode()).hexdigest()[:12]
            if key is not None
            else uuid.uuid4().hex[:12]
        )
        input: dict[str, object] = {
            "id": change_id,
            "branch": branch,
            "base": base,
            "title": title or branch,
            "author": who,
        }
        if health_wait is not None:
            input["health_wait"] = health_wait
        guard = self._client.services.guard
        may = guard.allowed(who, "start", [CHANGE, APPLY])
        has_hosts = self._client.app.resources is not None
        if has_hosts and may is not None and CHANGE in may and APPLY not in may:
            why = (
                f"a change's deploy runs `{APPLY}` as its author, so a change {who} opened "
                f'could merge and never deploy: permit them `start` on Workflow::"{APPLY}" '
                "too, or have someone who may open the change"
            )
            guard.record(who, "start", APPLY, {"change": branch}, why)
            raise denied(who, "start", APPLY, why)
        store = self._store
        going = store.going(branch=branch)
        if going is not None and going.id != change_id:
            raise ChangeGoing(
                f"the branch {branch} already has a change going, {going.id} (run "
                f"{going.run_id}, {going.status}): carry that one on, or cancel its run "
                f"(`remit cancel {going.run_id}`)",
                change_id=going.id,
                run_id=going.run_id,
            )
        handle = self._client.runs.start(CHANGE, input, by=who, key=key)
        found = store.of_run(handle.run_id)
        if found is None:
            forge = self._client.app.forge()
            store.write(
                change_id,
                remote="" if forge is None else forge.vendor,
                branch=branch,
                base=base,
                run_id=handle.run_id,
                author=who,
                title=title or branch,
                status="opened",
            )
            found = store.of_run(handle.run_id)
        assert found is not None
        return found

    def list(self, *, branch: str | None = None, limit: int = 50) -> builtins.list[Change]:
        """The changes, newest first (of `branch` only, when given)."""
        self._check()
        return self._store.list(branch=branch, limit=limit)

    def get(self, change_id: str) -> Change:
        """One change; `ChangeNotFound` for an id no change has."""
        self._check()
        found = self._store.get(change_id)
        if found is None:
            raise ChangeNotFound(f"no change {change_id}: `remit changes` lists them")
        return found

    def deploys(
        self, *, host: str | None = None, change_id: str | None = None, limit: int = 50
    ) -> builtins.list[Deploy]:
        """The hosts' deploys, newest first (of `host`, or by the change `change_id`, only,
        when given)."""
        return self._store.deploys(host=host, change_id=change_id, limit=limit)
