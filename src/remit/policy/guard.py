"""Where policies are enforced: every start, direct call and decision a person or agent asks
for passes through a `Guard`, which checks the app's policies and records every refusal in
`remit_denials` before raising `PolicyDenied`.

remit's own principals (`remit:expiry`, `remit:schedule`) are not checked: they act on what a
checked principal already set going. No surface accepts them as `--as` or `by`.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from pydantic import BaseModel

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.principals import SYSTEM_PREFIX, check_actor
from remit.core.runs import ParentLink, ParsedInput, Run, RunStore, parse_input
from remit.core.schema import denials
from remit.declare.workflows import Workflow
from remit.policy.cedar import HELD, Action, Policy, Verdict, denied

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.guard")


@dataclass(frozen=True)
class Denial:
    """One refused action, as `remit denials` lists it."""

    id: str
    at: datetime
    principal: str
    action: str
    resource: str
    context: dict[str, Any]
    reason: str


class GuardedApp(Protocol):
    """What a guard reads of its app (`remit.app.App`, which sits above the policies)."""

    @property
    def name(self) -> str: ...

    @property
    def policy(self) -> Policy: ...


class Guard:
    """The app's policies plus the record of what they refused."""

    def __init__(
        self, app_name: str, policy: Policy, db: Database, *, clock: Clock | None = None
    ) -> None:
        self.app_name = app_name
        self.policy = policy
        self.db = db
        self.clock = clock or SystemClock()

    @classmethod
    def of(cls, app: GuardedApp, db: Database, *, clock: Clock | None = None) -> Guard:
        return cls(app.name, app.policy, db, clock=clock)

    def start(
        self,
        runs: RunStore,
        client: DBOSClient,
        wf: Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str,
        run_id: str | None = None,
        parent: ParentLink | None = None,
    ) -> Run:
        """Start a run of `wf` for `by`, if the policies let them: `start` on the workflow,
        with the parsed input as context. Refused (and recorded) with `PolicyDenied`.
        `run_id` is the run's id (default: a new one); `parent`, the run starting it as its
        child (`ctx.start`).

        The built-in `call` workflow is started only by a held direct call: started by hand it
        would make a call the `call` policies never saw.
        """
        check_actor(by)
        if wf.name == HELD and self.policy.enabled:
            raise RemitError(
                f"the `{HELD}` workflow runs direct calls a policy holds, and is not started by "
                f"hand: call the op with `remit call OP --input JSON --as {by}`"
            )
        payload = parse_input(wf, input)
        self.require(by, "start", wf.name, {"input": payload})
        return runs.start(
            client, wf, ParsedInput(wf.name, payload), started_by=by, run_id=run_id, parent=parent
        )

    def check(
        self, principal: str, action: Action, resource: str, context: Mapping[str, Any]
    ) -> Verdict:
        """The policies' answer; a refusal is recorded (not raised). For remit's own work
        (`remit:` principals) it is not asked: use `check_actor` on what people and agents
        give as who they are."""
        if principal.startswith(SYSTEM_PREFIX) or not self.policy.enabled:
            return Verdict(True, "not checked")
        verdict = self.policy.check(principal, action, resource, context)
        if not verdict.allowed:
            self.record(principal, action, resource, context, verdict.reason)
        return verdict

    def allowed(
        self, principal: str, action: Action, resources: Iterable[str]
    ) -> frozenset[str] | None:
        """Which of `resources` `principal` may take `action` on, with an empty context: one
        check per distinct resource, nothing recorded (a list leaves the rest out). None: all
        of them, without a look (no policies, or remit's own work)."""
        if principal.startswith(SYSTEM_PREFIX) or not self.policy.enabled:
            return None
        return frozenset(
            resource
            for resource in set(resources)
            if self.policy.check(principal, action, resource, {}).allowed
        )

    def require(
        self, principal: str, action: Action, resource: str, context: Mapping[str, Any]
    ) -> Verdict:
        """`check`, raising `PolicyDenied` naming the principal, action and resource."""
        verdict = self.check(principal, action, resource, context)
        if not verdict.allowed:
            raise denied(principal, action, resource, verdict.reason)
        return verdict

    def record(
        self,
        principal: str,
        action: str,
        resource: str,
        context: Mapping[str, Any],
        reason: str,
    ) -> None:
        log.warning("denied: %s may not %s %s: %s", principal, action, resource, reason)
        row = {
            "id": f"den_{uuid.uuid4().hex[:16]}",
            "app": self.app_name,
            "at": self.clock.now(),
            "principal": principal,
            "action": action,
            "resource": resource,
            "context": dict(context),
            "reason": reason,
        }
        self.db.retrying(
            f"record denial of {principal}",
            lambda: self.db.execute_one(denials.insert().values(**row)),
        )

    def denials(self, *, limit: int = 100) -> builtins.list[Denial]:
        """The most recent refusals, newest first."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(denials)
                .where(denials.c.app == self.app_name)
                .order_by(denials.c.at.desc(), denials.c.id)
                .limit(limit)
            ).all()
        return [
            Denial(
                id=row.id,
                at=row.at,
                principal=row.principal,
                action=row.action,
                resource=row.resource,
                context=row.context,
                reason=row.reason,
            )
            for row in rows
        ]
