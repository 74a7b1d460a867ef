"""Limits and NUL characters at every entry point, on SQLite and Postgres alike: a value past
its cap is refused with `TooLarge` naming its size, the cap and the setting; text holding a NUL
character is refused with `InputInvalid` naming the field; either way nothing is written.
Inside a run the same refusals fail the run (a step's or the run's output) or the call (an op's
output), clearly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remit import InputInvalid, TooLarge
from remit.testing import Harness
from tests.limits_app import OVER_2_MIB, MiB, counts, fake, make_app


@pytest.fixture
def harness(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    monkeypatch.chdir(tmp_path)
    with Harness(make_app(), database_url=database_url) as running:
        yield running


# A run's input.


def test_a_run_input_past_its_cap_is_refused_and_nothing_is_written(harness: Harness) -> None:
    before = counts(harness)
    with pytest.raises(TooLarge) as refused:
        harness.start("say", {"text": OVER_2_MIB})
    assert str(refused.value) == (
        "the run's input is 2,097,173 bytes, over the 2 MiB limit (REMIT_MAX_INPUT_BYTES): pass a "
        "reference to the data instead, or raise the limit"
    )
    assert (refused.value.setting, refused.value.limit) == ("REMIT_MAX_INPUT_BYTES", 2 * MiB)
    assert refused.value.size == len(OVER_2_MIB) + len('{"text":""}')
    assert counts(harness) == before


def test_a_ten_megabyte_input_names_its_size(harness: Harness) -> None:
    with pytest.raises(TooLarge, match=r"the run's input is 10\.5 MiB, over the 2 MiB limit"):
        harness.start("say", {"text": "x" * int(10.5 * MiB)})


@pytest.mark.parametrize(
    ("given", "where"),
    [({"text": "a\x00b"}, "at `text`"), ({"text": "ok", "n\x00": 1}, "at `n\x00`")],
)
def test_a_nul_in_a_run_input_is_refused_the_same_on_both_databases(
    harness: Harness, given: dict[str, Any], where: str
) -> None:
    before = counts(harness)
    with pytest.raises(InputInvalid) as refused:
        harness.start("say", given)
    message = str(refused.value)
    assert message.startswith(f"the run's input, {where}, holds a NUL character (\\u0000)")
    assert refused.value.target == "say"
    assert counts(harness) == before


def test_a_run_input_with_an_unknown_field_is_refused(harness: Harness) -> None:
    before = counts(harness)
    with pytest.raises(InputInvalid) as refused:
        harness.start("say", {"text": "hi", "txet": "typo"})
    message = str(refused.value)
    assert "input to workflow `say` does not parse: Say has no field `txet`" in message
    assert "(its fields: text)" in message
    assert refused.value.errors == [
        {"loc": ["txet"], "msg": "not a field of the model", "type": "extra_forbidden"}
    ]
    assert counts(harness) == before


def test_a_model_that_sets_extra_keeps_its_choice(harness: Harness) -> None:
    kept = harness.run("allowing", {"text": "a", "more": 1})
    assert (kept.status, kept.output) == ("done", {"text": "a", "more": 1})
    dropped = harness.run("ignoring", {"text": "a", "more": 1})
    assert (dropped.status, dropped.output) == ("done", {"text": "a"})


# Outputs inside a run.


def test_a_step_output_past_its_cap_fails_the_run(harness: Harness) -> None:
    run = harness.run("big-step", {"size": 2 * MiB + 10})
    assert run.status == "failed"
    assert run.error is not None
    assert (
        "the output of step `blob` is 2,097,164 bytes, over the 2 MiB limit (REMIT_MAX_OUTPUT_BYTES)"
        in run.error
    )


def test_a_step_output_holding_a_nul_fails_the_run(harness: Harness) -> None:
    run = harness.run("nul-step", {})
    assert run.status == "failed"
    assert run.error is not None
    assert "the output of step `nul`, at `name`, holds a NUL character" in run.error


def test_a_run_output_past_its_cap_fails_the_run(harness: Harness) -> None:
    run = harness.run("big-output", {"size": 2 * MiB + 10})
    assert (run.status, run.output) == ("failed", None)
    assert run.error is not None
    assert run.error.startswith(
        "the run's output is 2,097,164 bytes, over the 2 MiB limit (REMIT_MAX_OUTPUT_BYTES)"
    )


def test_an_op_input_past_its_cap_is_refused_before_the_call(harness: Harness) -> None:
    run = harness.run("big-call", {"size": 2 * MiB + 10})
    assert run.status == "done"
    assert run.output.startswith(
        "refused: the input to `box.echo.say` is 2,097,173 bytes, over the 2 MiB limit (REMIT_MAX_OP_BYTES)"
    )
    assert harness.ledger(run.run_id) == []
    assert fake(harness).calls == []


def test_a_nul_in_an_op_input_is_refused_before_the_call(harness: Harness) -> None:
    run = harness.run("nul-call", {})
    assert run.status == "done"
    assert run.output.startswith(
        "refused: the input to `box.echo.say`, at `text`, holds a NUL character"
    )
    assert harness.ledger(run.run_id) == []
    assert fake(harness).calls == []


def test_a_driver_answering_a_nul_fails_the_call_once(harness: Harness) -> None:
    fake(harness).answers = ["bad\x00answer"]
    run = harness.run("say", {"text": "hi"})
    assert run.status == "failed"
    assert run.error is not None
    assert "op `box.echo.say` answered output remit cannot keep" in run.error
    assert "the output of `box.echo.say`, at `text`, holds a NUL character" in run.error
    assert "psycopg" not in run.error
    assert "DataError" not in run.error
    [row] = harness.ledger(run.run_id)
    assert row.status == "failed"
    assert len(fake(harness).calls) == 1  # not tried again


@pytest.mark.parametrize("cost", [float("nan"), float("inf")])
def test_a_write_answering_a_number_json_cannot_hold_waits_for_a_person(
    harness: Harness, cost: float
) -> None:
    """The vendor acted, then answered NaN: remit cannot keep that answer (Postgres refuses it,
    SQLite would keep text no JSON reader takes), so it asks a person what happened, the same
    on both databases, rather than failing the run on the database's error."""
    fake(harness).cost = cost
    run = harness.start("mail-out", {})
    task = harness.task(run.run_id)
    [row] = harness.ledger(run.run_id)
    assert row.status == "uncertain"
    assert "the output of `box.mail.send`, at `cost`, holds a number that is not finite" in (
        row.error or ""
    )
    assert fake(harness).sent == 1  # the vendor acted once, and is not asked again
    fake(harness).cost = 0.25
    harness.client.tasks.resolve(task.id, done=True, output={"message_id": "msg_1"}, key="k1")
    finished = harness.wait(run.run_id, until=("done",))
    assert (finished.status, finished.output, fake(harness).sent) == ("done", "msg_1", 1)
    with pytest.raises(InputInvalid, match=r"at `cost`, holds a number that is not finite"):
        harness.client.tasks.resolve(
            task.id, done=True, output={"message_id": "m", "cost": cost}, key="k2"
        )


def test_a_driver_answering_past_the_cap_fails_the_call(harness: Harness) -> None:
    fake(harness).answers = [OVER_2_MIB]
    run = harness.run("say", {"text": "hi"})
    assert run.status == "failed"
    assert run.error is not None
    assert (
        "the output of `box.echo.say` is 2,097,173 bytes, over the 2 MiB limit (REMIT_MAX_OP_BYTES)"
        in (run.error)
    )
    assert len(fake(harness).calls) == 1


# Direct calls and collections.


def test_a_direct_call_past_its_cap_or_with_a_nul_writes_nothing(harness: Harness) -> None:
    before = counts(harness)
    with pytest.raises(
        TooLarge, match=r"the input to `box.echo.say` is 2,097,1.. bytes, over the 2 MiB"
    ):
        harness.client.calls.call("box.echo.say", {"text": OVER_2_MIB})
    with pytest.raises(InputInvalid, match=r"the input to `box.echo.say`, at `text`, holds a NUL"):
        harness.client.calls.call("box.echo.say", {"text": "a\x00b"})
    assert counts(harness) == before
    assert fake(harness).calls == []


def test_a_collection_record_with_a_nul_is_refused(harness: Harness) -> None:
    before = counts(harness)
    with pytest.raises(InputInvalid) as refused:
        harness.client.calls.data("people", "put", {"id": "p1", "email": "nul\x00@x"})
    assert str(refused.value).startswith(
        "the input to `data.people.put`, at `email`, holds a NUL character (\\u0000)"
    )
    with pytest.raises(InputInvalid, match=r"at `id`, holds a NUL"):
        harness.client.calls.data("people", "get", {"id": "p\x00"})
    assert counts(harness) == before


# Approvals: drafts, edits and reasons.


def pending(harness: Harness) -> str:
    run = harness.start("gate", {"text": "first"})
    return harness.gate(run.run_id).id


def test_edits_past_the_draft_cap_are_refused_and_nothing_is_decided(harness: Harness) -> None:
    approval_id = pending(harness)
    before = counts(harness)
    with pytest.raises(TooLarge) as refused:
        harness.client.approvals.decide(
            approval_id, "approved", key="k1", edits={approval_id: {"note": "x" * 300_000}}
        )
    assert str(refused.value).startswith(
        f"the edits to approval {approval_id} is 293 KiB, over the 256 KiB limit "
        "(REMIT_MAX_DRAFT_BYTES)"
    )
    assert harness.approvals.get(approval_id).status == "pending"
    assert counts(harness) == before


@pytest.mark.parametrize(
    ("edits", "reason", "said"),
    [
        ({"note": "a\x00b"}, None, "at `note`, holds a NUL character"),
        (None, "a\x00b", "the decision's reason holds a NUL character"),
    ],
)
def test_a_nul_in_an_edit_or_a_reason_is_refused(
    harness: Harness, edits: dict[str, Any] | None, reason: str | None, said: str
) -> None:
    approval_id = pending(harness)
    before = counts(harness)
    with pytest.raises(InputInvalid, match=said):
        harness.client.approvals.decide(
            approval_id,
            "approved",
            key="k1",
            edits=None if edits is None else {approval_id: edits},
            reason=reason,
        )
    assert harness.approvals.get(approval_id).status == "pending"
    assert counts(harness) == before


def test_a_reason_past_its_cap_is_refused(harness: Harness) -> None:
    approval_id = pending(harness)
    with pytest.raises(TooLarge) as refused:
        harness.client.approvals.decide(approval_id, "rejected", key="k1", reason="r" * 4001)
    assert str(refused.value) == (
        "the decision's reason is 4,001 characters, over the 4,000 character limit "
        "(REMIT_MAX_REASON_CHARS): shorten it, or raise the limit"
    )
    assert refused.value.unit == "characters"
    assert harness.approvals.get(approval_id).status == "pending"


def test_an_approval_id_holding_a_nul_is_not_found_nor_a_database_error(harness: Harness) -> None:
    from remit import ApprovalNotFound, RunNotFound, TaskNotFound

    with pytest.raises(ApprovalNotFound):
        harness.client.approvals.get("apr_\x00")
    with pytest.raises(RunNotFound):
        harness.client.runs.get(harness.client.find_id("run", "run_\x00"))
    with pytest.raises(TaskNotFound):
        harness.client.tasks.get("tsk_\x00")
    with pytest.raises(InputInvalid, match="an approval id holds a NUL character"):
        harness.client.approvals.decide("apr_\x00", "approved", key="k1")


def test_a_validation_error_quotes_an_excerpt_of_what_was_sent(harness: Harness) -> None:
    with pytest.raises(InputInvalid) as refused:
        harness.client.calls.call("box.echo.say", {"text": ["y" * 100_000]})
    message = str(refused.value)
    assert len(message) < 500
    [error] = refused.value.errors
    assert error["input"] == '["' + "y" * 78 + "…"


# Task answers.


def test_a_task_answer_with_a_nul_or_past_its_cap_is_refused(harness: Harness) -> None:
    fake(harness).lost = True
    run = harness.start("mail-out", {})
    task = harness.task(run.run_id)
    before = counts(harness)
    with pytest.raises(InputInvalid, match=r"the answer to task .*, at `message_id`, holds a NUL"):
        harness.client.tasks.resolve(task.id, done=True, output={"message_id": "m\x00"}, key="a1")
    with pytest.raises(
        TooLarge, match=r"the answer to task .* is 2,097,1.. bytes, over the 2 MiB limit"
    ):
        harness.client.tasks.resolve(
            task.id, done=True, output={"message_id": OVER_2_MIB}, key="a1"
        )
    assert harness.tasks.get(task.id).status == "open"
    assert counts(harness) == before


# Lists.


@pytest.mark.parametrize("limit", [0, -1])
def test_a_list_limit_below_one_is_refused(harness: Harness, limit: int) -> None:
    client = harness.client
    for verb in (
        lambda: client.runs.list(limit=limit),
        lambda: client.approvals.list(limit=limit),
        lambda: client.tasks.list(limit=limit),
        lambda: client.calls.ledger(limit=limit),
        lambda: client.ops.denials(limit=limit),
        lambda: client.ops.deadlines(limit=limit),
        lambda: client.budgets.periods(limit=limit),
        lambda: client.records.activity("invoice", "inv_1", limit=limit),
    ):
        with pytest.raises(InputInvalid, match=r"limit must be a whole number of 1 or more"):
            verb()


def test_a_step_output_under_the_cap_is_kept(harness: Harness) -> None:
    run = harness.run("big-step", {"size": 1000})
    assert (run.status, run.output) == ("done", 1000)


def test_a_nul_in_a_list_filter_is_refused_naming_it(harness: Harness) -> None:
    client = harness.client
    for verb, argument in (
        (lambda: client.runs.list(workflow="s\x00"), "workflow"),
        (lambda: client.approvals.list(run_id="r\x00"), "run_id"),
        (lambda: client.tasks.list(run_id="r\x00"), "run_id"),
        (lambda: client.calls.ledger("r\x00"), "run_id"),
        (lambda: client.records.activity("invoice", "i\x00"), "record_id"),
    ):
        with pytest.raises(InputInvalid, match=f"at `{argument}`, holds a NUL character"):
            verb()


def test_a_nul_in_a_principal_or_a_key_is_refused_before_the_database(harness: Harness) -> None:
    from remit import RemitError

    approval_id = pending(harness)
    before = counts(harness)
    with pytest.raises(RemitError, match="a principal is 1 to 200 characters with no control"):
        harness.client.runs.start("say", {"text": "hi"}, by="user:a\x00b")
    with pytest.raises(RemitError, match="must be 1 to 200 printable characters"):
        harness.client.approvals.decide(approval_id, "approved", key="k\x00")
    with pytest.raises(RemitError, match="must be 1 to 100 printable characters"):
        harness.client.calls.call("box.echo.say", {"text": "hi"}, key="k\x00")
    assert counts(harness) == before
