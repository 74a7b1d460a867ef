"""What a console page shows when an act is refused or fails: the status, and the reason in
words, with the policy's reason for a refusal, on the page rather than as JSON."""

from __future__ import annotations

from remit.core.errors import (
    ApprovalNotFound,
    DecisionRefused,
    InputInvalid,
    KeyReused,
    RemitError,
    RetryRefused,
    RunNotFound,
    TaskNotFound,
    TaskRefused,
    TooLarge,
)
from remit.policy.cedar import PolicyDenied


def status_of(error: RemitError) -> int:
    """The HTTP status of `error` on a page: 403 refused by the policies, 404 not found, 422 for
    input to change, 409 for an act refused as things stand."""
    if isinstance(error, PolicyDenied):
        return 403
    if isinstance(error, DecisionRefused | TaskRefused) and error.by_policy:
        return 403
    if isinstance(error, RunNotFound | ApprovalNotFound | TaskNotFound):
        return 404
    if isinstance(error, InputInvalid | TooLarge):
        return 422
    if isinstance(error, DecisionRefused | TaskRefused | RetryRefused | KeyReused):
        return 409
    return 400


def reasons_of(error: RemitError) -> list[str]:
    """The reasons `error` gives, one per approval or task where it names several."""
    if isinstance(error, DecisionRefused):
        return [f"{ident}: {reason}" for ident, reason in error.reasons] or [str(error)]
    if isinstance(error, TaskRefused):
        return list(error.reasons) or [str(error)]
    if isinstance(error, KeyReused):
        # A form sent again with another answer (Back, then the other button): the key the
        # page was rendered with is spent on the first.
        return [
            "This form was sent already, with another answer, which stands. Reload the page to "
            "see where things are, and act again from there."
        ]
    return [str(error)]
