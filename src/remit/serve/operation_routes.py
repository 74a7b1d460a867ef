"""The HTTP API's routes for running the app rather than its runs: pausing and resuming it,
a reconciler pass, its secrets, direct calls of its ops, and API tokens. Each acts as the
request's principal (`Who`) through the client's verb for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Path

from remit.client import Client
from remit.connectors.credentials import check_name
from remit.core.errors import RemitError
from remit.policy.tokens import parse_duration
from remit.reads import Reader
from remit.serve.errors import ErrorReason, Problem, error_responses
from remit.serve.models import (
    CallRequest,
    CallView,
    DriftView,
    Paused,
    ReconcileAction,
    ReconcileReport,
    ReconcileRequest,
    Resumed,
    SecretDeleted,
    SecretRequest,
    SecretView,
    TokenMade,
    TokenRequest,
    TokenView,
    usd_text,
)
from remit.serve.params import (
    DURATION_FORM,
    NUL_FREE,
    CallKey,
    NewestFirst,
    SecretName,
    limit_query,
)
from remit.serve.requests import Who


def control_routes(routes: APIRouter, client: Client) -> None:
    """The app's controls: pause, resume, a reconciler pass."""

    @routes.post("/pause", responses=error_responses(400, 401, 403, 413, 422, 503))
    def pause(who: Who) -> Paused:
        """Pause the app, as the policies allow: its queues take no new work, and each run
        parks before its next step."""
        return Paused(paused=True, queues=client.ops.pause(by=who))

    @routes.post("/resume", responses=error_responses(400, 401, 403, 413, 422, 503))
    def resume(who: Who) -> Resumed:
        """Resume the app, as the policies allow: its queues again, its parked runs on."""
        queues, carried_on = client.ops.resume(by=who)
        return Resumed(paused=False, queues=queues, carried_on=carried_on)

    @routes.post("/reconcile", responses=error_responses(400, 401, 403, 413, 422, 503))
    def reconcile(
        who: Who, body: Annotated[ReconcileRequest | None, Body()] = None
    ) -> ReconcileReport:
        """Run one reconciler pass now, as the policies allow (a dry run says what it would do
        and does none)."""
        report = client.ops.reconcile(dry_run=body is not None and body.dry_run, by=who)
        return ReconcileReport(
            dry_run=report.dry_run,
            actions=[
                ReconcileAction(
                    run_id=a.run_id,
                    workflow_id=a.workflow_id,
                    status=a.status,
                    reason=a.reason,
                    kind=a.kind,
                )
                for a in report.actions
            ],
            errors=list(report.errors),
            drift=[
                DriftView(
                    scope=d.scope,
                    period=d.period,
                    spent_usd=usd_text(d.spent_usd),
                    ledger_usd=usd_text(d.ledger_usd),
                    drift_usd=usd_text(d.drift_usd),
                )
                for d in report.drift
            ],
        )


def secret_routes(routes: APIRouter, client: Client) -> None:
    """The app's stored credentials: names only, set, delete."""

    @routes.get("/secrets", responses=error_responses(401, 403, 422, 503))
    def list_secrets(
        who: Who,
        limit: Annotated[int, limit_query("by name")] = 100,
    ) -> list[SecretView]:
        """The app's secrets: names, and when and by whom each was set; never values
        (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            SecretView(name=each.name, set_at=each.set_at, set_by=each.set_by)
            for each in client.services.secrets.list()[:limit]
        ]

    @routes.put("/secrets/{name}", responses=error_responses(400, 401, 403, 413, 422, 503))
    def set_secret(name: SecretName, body: SecretRequest, who: Who) -> SecretView:
        """Store a secret (replacing its value), as the policies allow (`set_secret`)."""
        check_name(name)
        info = client.secrets.set(name, body.value, by=who)
        return SecretView(name=info.name, set_at=info.set_at, set_by=info.set_by)

    @routes.delete("/secrets/{name}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def delete_secret(name: SecretName, who: Who) -> SecretDeleted:
        """Delete a secret, as the policies allow (`delete_secret`)."""
        check_name(name)
        if not client.secrets.delete(name, by=who):
            message = f"no secret `{name}`: GET /secrets lists the secrets"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return SecretDeleted(name=name, deleted=True)


def call_routes(routes: APIRouter, client: Client) -> None:
    """Direct calls of one op, outside any run."""

    @routes.post("/calls", responses=error_responses(400, 401, 403, 404, 413, 422, 503))
    def call(body: CallRequest, who: Who, idempotency_key: CallKey = None) -> CallView:
        """Call one op directly, outside any run, as the policies allow (`call` on the op); a
        policy may hold it for an approval, and a run then waits to make it. An op the app
        does not have is 404."""
        if body.op not in client.app.ops:
            known = sorted(client.app.ops)
            shown = ", ".join(known[:30]) + (", …" if len(known) > 30 else "")
            message = f"app `{client.app.name}` has no op `{body.op}` (it has: {shown or 'none'})"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        result = client.calls.call(body.op, body.input, key=idempotency_key, by=who)
        return CallView(
            status=result.status,
            op=result.op,
            idempotency_key=result.idempotency_key,
            output=result.output,
            error=result.error,
            run_id=result.run_id,
            note=result.note,
            replayed=result.replayed,
        )


def token_routes(routes: APIRouter, client: Client) -> None:
    """The app's API tokens: list, make, revoke."""

    @routes.get("/tokens", responses=error_responses(400, 401, 403, 422, 503))
    def list_tokens(who: Who, limit: NewestFirst = 100) -> list[TokenView]:
        """The app's API tokens, newest first, as the policies allow (`manage_tokens`)."""
        now = client.clock.now()
        return [TokenView.of(each, now) for each in client.tokens.list(by=who)[:limit]]

    @routes.post(
        "/tokens", status_code=201, responses=error_responses(400, 401, 403, 413, 422, 503)
    )
    def create_token(body: TokenRequest, who: Who) -> TokenMade:
        """Make an API token that acts as `for`, as the policies allow (`manage_tokens`). The
        token is in this answer only: it is kept nowhere."""
        expires_in = None if body.expires is None else duration(body.expires)
        info, token = client.tokens.create(body.for_, name=body.name, expires_in=expires_in, by=who)
        return TokenMade(token=token, info=TokenView.of(info, client.clock.now()))

    @routes.delete("/tokens/{token_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def revoke_token(
        token_id: Annotated[
            str,
            Path(max_length=100, json_schema_extra=NUL_FREE, description="The token's id, tok_…."),
        ],
        who: Who,
    ) -> TokenView:
        """Revoke an API token, as the policies allow (`manage_tokens`): it authenticates
        nothing from now on. Revoking one already revoked changes nothing."""
        try:
            client.services.tokens.get(token_id)
        except RemitError:
            message = f"no token `{token_id}`: GET /tokens lists the tokens"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return TokenView.of(client.tokens.revoke(token_id, by=who), client.clock.now())


def duration(text: str) -> timedelta:
    """A token's `expires` as a duration; 422 naming the form otherwise."""
    if not DURATION_FORM.fullmatch(text):
        message = (
            f"`expires` {text!r} is not a duration a token may last: give a whole number and a "
            "unit, m, h, d or w, of at most 999999d (e.g. 30d, 12h)"
        )
        raise Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
    return parse_duration(text)
