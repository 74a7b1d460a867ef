"""Scenarios of runs that wait for the world, on SQLite and Postgres: a step sends a message
(its table typed by the model the run waits with), checks what a run waits for and what it
published, and names and checks the child runs it started; every step waits for those
children, and for a parent their ends move on."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.scenarios import Scenario, ScenarioFailed, read, run_scenario
from tests.support import shop
from tests.waits_app import collect, credit_note, quote, refund_line


class Paid(BaseModel):
    amount: Decimal
    reference: str


class Settle(BaseModel):
    invoice_id: str = "inv_1"
    timeout: float | None = None


@workflow(name="settle-invoice", input=Settle)
def settle_invoice(ctx: Context, input: Settle) -> dict[str, Any]:
    """Waits for the payment: its code names the model of the topic `paid`."""
    paid = ctx.wait_for("paid", model=Paid, timeout=input.timeout)
    if paid is None:
        return {"paid": None}
    return {"paid": str(paid.amount), "reference": paid.reference}


APP = App(
    name="ledger",
    workflows=[settle_invoice, collect, credit_note, refund_line, quote],
    connectors=[shop],
)

FEATURE = """\
Feature: Waiting for the world
  Background:
    Given it is 2026-11-29 09:00 UTC

  Scenario: {name}
{steps}
"""

# Only the payments feed tells a run that it was paid; ann starts runs and says the rest.
POLICIES = """\
permit (principal == User::"ann", action == Action::"start", resource);
permit (principal == User::"ann", action == Action::"send", resource)
when { context.topic != "paid" };
permit (principal == Agent::"payments-feed", action == Action::"send", resource)
when { context.topic == "paid" };
permit (principal, action == Action::"read_runs", resource);
"""


def scenario_of(tmp_path: Path, steps: str, name: str = "Waits") -> Scenario:
    path = tmp_path / "waits.feature"
    path.write_text(FEATURE.format(name=name, steps=textwrap.indent(steps, "    ")))
    (scenario,) = read(path)
    return scenario


def passes(tmp_path: Path, database_url: str, steps: str, app: App = APP) -> None:
    run_scenario(app, scenario_of(tmp_path, steps), database_url=database_url)


def failure(tmp_path: Path, database_url: str, steps: str) -> str:
    with pytest.raises(ScenarioFailed) as failed:
        passes(tmp_path, database_url, steps)
    return failed.value.report


def governed(tmp_path: Path) -> App:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "waits.cedar").write_text(POLICIES)
    return APP.with_policies(folder)


def test_a_message_from_a_feed_moves_the_run_on_its_table_typed_by_the_wait(
    tmp_path: Path, database_url: str
) -> None:
    passes(
        tmp_path,
        database_url,
        """\
When ann starts settle-invoice as $pay
Then $pay is waiting
And $pay is waiting for "paid"
When the payments feed sends $pay "paid" with:
  | amount    | 120.00 |
  | reference | 1234   |
Then $pay is done
And the output of $pay is:
  | paid      | 120.00 |
  | reference | "1234" |
""",
        governed(tmp_path),
    )


def test_whoever_the_policies_do_not_let_send_is_refused(tmp_path: Path, database_url: str) -> None:
    passes(
        tmp_path,
        database_url,
        """\
When ann starts settle-invoice as $pay
And ann sends $pay "paid" with:
  | amount    | 120.00 |
  | reference | pi_1   |
Then it is refused because user:ann may not send
And $pay is waiting for "paid"
""",
        governed(tmp_path),
    )


def test_a_message_with_no_model_in_sight_reads_as_any_record_and_a_docstring_as_json(
    tmp_path: Path, database_url: str
) -> None:
    passes(
        tmp_path,
        database_url,
        '''\
When ann starts collect as $collect with:
  | count | 3 |
And ann sends $collect "item" with:
  | n | 0042 |
  | m | 12   |
And ann sends $collect item with:
  """
  "second"
  """
Then $collect is waiting for "item"
When ann sends $collect "item"
Then $collect is done
And the output of $collect is:
  """
  [{"n": "0042", "m": 12}, "second", {}]
  """
''',
    )


def test_a_wait_whose_timeout_passes_moves_on_as_time_passes(
    tmp_path: Path, database_url: str
) -> None:
    passes(
        tmp_path,
        database_url,
        '''\
When ann starts settle-invoice as $pay with:
  | timeout | 86400 |
Then $pay is waiting for "paid"
When 2 days pass
Then $pay is done
And the output of $pay is:
  """
  {"paid": null}
  """
When ann sends $pay "paid"
Then it is refused because it waits for no more messages
''',
    )


def test_a_parent_its_children_and_what_it_published(tmp_path: Path, database_url: str) -> None:
    passes(
        tmp_path,
        database_url,
        """\
When ann starts credit-note as $note with:
  | lines | 3 |
Then $note is done
And $note has started 3 refund-line runs
And $note has started no credit-note runs
And the children of $note are:
  | workflow    | key    | status | detached |
  | refund-line | line-0 | done   | false    |
  | refund-line | line-1 | done   | false    |
  | refund-line | line-2 | done   | false    |
And $note has started the refund-line "line-2" as $last
And the output of $last is:
  | n       | 2 |
  | doubled | 4 |
And $note shows "progress" as:
  | started | 3 |
  | done    | 3 |
And the output of $note is:
  | total | 6 |
""",
    )


def test_a_step_waits_for_the_parent_a_child_s_end_moves_on(
    tmp_path: Path, database_url: str
) -> None:
    passes(
        tmp_path,
        database_url,
        """\
When ann starts credit-note as $note with:
  | lines | 1    |
  | hold  | true |
Then $note is waiting for its children
And $note shows "progress" as {"started": 1}
And $note has started a refund-line as $line
And $line is waiting for "go"
When ann sends $line "go"
Then $line is done
And $note is done
And $note shows "progress" as:
  \"\"\"
  {"started": 1, "done": 1}
  \"\"\"
""",
    )


def test_a_published_value_changes_as_the_run_goes_on(tmp_path: Path, database_url: str) -> None:
    passes(
        tmp_path,
        database_url,
        '''\
When ann starts quote as $quote with:
  | amount | 250 |
Then $quote shows "quote" as:
  | amount | 250  |
  | status | open |
When ann sends $quote "answer" with:
  """
  "accepted"
  """
Then $quote is done
And $quote shows quote as {"amount": 250, "status": "accepted"}
''',
    )


def test_a_child_named_among_several_asks_for_its_key(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts credit-note as $note with:
  | lines | 2 |
Then $note has started a refund-line as $line
""",
    )
    assert "$note has started 2 refund-line runs, not one" in report
    assert 'the keys of its refund-line runs: "line-0", "line-1"' in report
    assert '`$note has started the refund-line "line-0"`' in report


def test_children_that_differ_show_both_tables(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts credit-note as $note with:
  | lines     | 2 |
  | fail_line | 1 |
Then the children of $note are:
  | key    | status |
  | line-0 | done   |
  | line-1 | done   |
""",
    )
    assert "the children of $note differ" in report
    assert "  - line-1 | done\n  + line-1 | failed\n" in report


def test_what_a_run_did_not_publish_or_wait_for_is_named(tmp_path: Path, database_url: str) -> None:
    unpublished = failure(
        tmp_path,
        database_url,
        """\
When ann starts quote as $quote
Then $quote shows "price" as:
  | amount | 100 |
""",
    )
    assert "$quote has published nothing as `price` (it shows `quote`)" in unpublished
    waiting = failure(
        tmp_path,
        database_url,
        """\
When ann starts quote as $quote
Then $quote is waiting for "paid"
""",
    )
    assert "$quote is waiting, not waiting for a message on `paid`" in waiting
    assert "  + a message on `answer`" in waiting
