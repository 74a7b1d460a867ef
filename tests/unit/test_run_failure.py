"""What a failed run's row says when the database refused a statement: the database's reason,
never the SQL or its parameters (which hold a run's or a call's data)."""

from __future__ import annotations

import sqlalchemy as sa

from remit.core.runs import RunInfo
from remit.ops.runtime import _failure

RUN = RunInfo(
    run_id="run_1", attempt=1, workflow_id="run_1:1", actor="user:ann", workflow="pay",
    again=False, deadline=None,
)  # fmt: skip


def test_a_statement_the_database_refused_is_named_without_its_sql_or_parameters() -> None:
    refused = sa.exc.DataError(
        "UPDATE remit_ledger SET output=%(output)s WHERE id = %(id)s",
        {"output": '{"card": "4242 4242 4242 4242", "amount": NaN}', "id": 7},
        Exception('invalid input syntax for type json\nDETAIL:  Token "NaN" is invalid.'),
    )
    said = _failure(RUN, refused)
    assert said == (
        "DataError: the database refused a statement: invalid input syntax for type json"
    )
    for leaked in ("UPDATE", "remit_ledger", "4242", "NaN", "parameters"):
        assert leaked not in said
    assert _failure(RUN, ValueError("plain")) == "ValueError: plain"
