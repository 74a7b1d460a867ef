"""The console's SVG drawings: the step timeline (its bars, the waits after gates, sleeps and
tasks, the shortened axis, the labels in the workflow's words, the legend), the budget chart."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from remit.budgets.model import PeriodState
from remit.console.svg import budget_chart, timeline
from remit.console.timeline import Row, duration, rows, ticks
from remit.ops.runs import Step
from remit.people.approvals import Approval
from remit.people.tasks import Task

NS = {"s": "http://www.w3.org/2000/svg"}
SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_700_000_000_000
SECOND = 1000
DAY = 86_400_000
WIDTH = 960
CHAR_W = 6.5  # what svg.py allows for a character of its 11px labels


def step(
    function_id: int,
    name: str,
    start: int | None,
    end: int | None,
    *,
    attempt: int = 1,
    output: Any = None,
    error: str | None = None,
    copied: bool = False,
) -> Step:
    return Step(
        attempt=attempt,
        function_id=function_id,
        name=name,
        started_ms=None if start is None else T0 + start,
        finished_ms=None if end is None else T0 + end,
        output=output,
        error=error,
        copied=copied,
    )


def at(offset_ms: int) -> datetime:
    return datetime.fromtimestamp((T0 + offset_ms) / 1000, UTC)


def gate(step_id: int, status: str = "pending", *, decided: int | None = None) -> Approval[Any]:
    return Approval(
        id="apr_1",
        run_id="run_1",
        key="refund",
        type="refund",
        title="Refund?",
        draft={},
        edited_draft=None,
        status=status,
        assignee=None,
        created_at=at(0),
        expires_at=None,
        workflow_id="run_1:1",
        step_id=step_id,
        decided_by=None if decided is None else "user:carol",
        decided_via=None if decided is None else "console",
        decided_at=None if decided is None else at(decided),
        decision_key=None,
        batch_id=None,
        reason=None,
        resumed_workflow_id=None,
        draft_json={},
        edited_draft_json=None,
    )


def task(step_id: int, *, answered: int | None = None) -> Task:
    return Task(
        id="tsk_1",
        app="shop",
        run_id="run_1",
        workflow_id="run_1:1",
        step_id=step_id,
        op_id="shop.emails.send",
        idempotency_key="run_1:2",
        title="Did shop.emails.send happen?",
        status="open" if answered is None else "done",
        output=None,
        created_at=at(0),
        resolved_at=None if answered is None else at(answered),
        resolved_by=None if answered is None else "user:carol",
        resolve_key=None,
        resumed_workflow_id=None,
    )


def wake(offset_ms: int) -> str:
    return at(offset_ms).isoformat()


PENDING = {"id": "apr_1", "status": "pending"}
APPROVED = {"id": "apr_1", "status": "approved", "decided_by": "user:carol"}
UNCERTAIN = {"error": {"kind": "uncertain", "message": "did it happen?", "task_id": "tsk_1"}}


# The refund desk's gate is decided 40 minutes after it opened, and its long sleep begins.
DECIDED = 9 + 40 * 60 * SECOND
ASLEEP = DECIDED + 2041


def refund_desk() -> list[Step]:
    """The subscription-refund desk's run: a gate decided after 40 minutes, then a patch, a
    short sleep and a three-day sleep it is still in."""
    decided = DECIDED
    return [
        step(1, "shop.items.get", 0, 4, output={"ok": {"sku": "s"}}),
        step(2, "approval:refund", 6, 9, output=PENDING),
        step(1, "shop.items.get", 0, 4, attempt=2, output={"ok": {"sku": "s"}}, copied=True),
        step(2, "approval:refund", decided + 30, decided + 33, attempt=2, output=APPROVED),
        step(3, "DBOS.patch-acknowledge", decided + 34, decided + 34, attempt=2),
        step(4, "acknowledge", decided + 35, decided + 38, attempt=2, output={"ok": "told"}),
        step(
            5,
            "DBOS.sleep",
            decided + 40,
            decided + 2040,
            attempt=2,
            output=(T0 + decided + 2040) / 1000,
        ),
        step(
            6,
            "sleep",
            decided + 2041,
            decided + 2044,
            attempt=2,
            output={"wake_at": wake(decided + 2041 + 3 * DAY), "over": False},
        ),
    ]


def drawn(timeline_rows: list[Row], now: int, width: int = WIDTH) -> ET.Element:
    return ET.fromstring(str(timeline(timeline_rows, now_ms=T0 + now, width=width)))


def rects(root: ET.Element, kind: str) -> list[ET.Element]:
    """The drawing's rectangles of a kind (`step`, `wait`, `gate`, `break`, ...), not the
    legend's swatches."""
    legend = root.find("s:g[@class='legend']", NS)
    swatches = set() if legend is None else {id(r) for r in legend.iter(f"{SVG}rect")}
    return [
        r
        for r in root.iter(f"{SVG}rect")
        if kind in r.get("class", "").split() and id(r) not in swatches
    ]


def width_of(rect: ET.Element) -> float:
    return float(rect.get("width", "0"))


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_a_gated_run_asleep_for_three_days_draws_each_wait_as_a_span() -> None:
    now = ASLEEP + 10 * 60 * SECOND  # ten minutes into the three-day sleep
    desk = rows(refund_desk(), now_ms=T0 + now, approvals=[gate(2, "approved", decided=DECIDED)])
    root = drawn(desk, now)

    assert len(rects(root, "step")) == 8
    [waited] = rects(root, "gate")
    assert "open" not in waited.get("class", "")
    sleeps = rects(root, "sleep")
    assert len(sleeps) == 2  # the short sleep and the long one
    [sleeping] = rects(root, "open")
    assert sleeping in sleeps
    # Nothing is a sliver: each wait is tens of pixels wide, and so is each step of
    # milliseconds, drawn at a scale of its own beside forty minutes and three days.
    assert width_of(waited) >= 36
    assert width_of(sleeping) >= 36
    steps = [width_of(r) for r in rects(root, "step") if "ran" in r.get("class", "")]
    assert sorted(steps)[len(steps) // 2] >= 10
    # The waits are shortened to breaks (the gate's, the short sleep's, the long sleep's),
    # each with its duration written on it.
    assert len(rects(root, "break")) == 3
    said = texts(root)
    assert "40 min" in said
    assert "10 min so far, wakes in 2 d 23 h" in said
    assert "now" in said


def test_steps_are_named_as_the_workflow_wrote_them() -> None:
    now = ASLEEP + 5000
    svg = str(timeline(rows(refund_desk(), now_ms=T0 + now), now_ms=T0 + now))
    names = texts(ET.fromstring(svg))
    for said in ("approval refund", "patch acknowledge", "sleep 2 seconds", "sleep 3 days"):
        assert said in names, names
    assert "DBOS." not in svg
    assert "approval:" not in svg
    assert not any(name == "sleep" for name in names)


def test_the_axis_labels_stay_inside_the_drawing_and_apart() -> None:
    for now in (123_000, ASLEEP + 5000, 21 * DAY):
        desk = [*refund_desk()[:2], step(3, "close", now - 500, now, output={"ok": 1})]
        root = drawn(rows(desk, now_ms=T0 + now, finished_ms=T0 + now), now)
        axis = root.find("s:g[@class='axis']", NS)
        assert axis is not None
        spans = []
        for label in axis.iter(f"{SVG}text"):
            half = len(label.text or "") * CHAR_W / 2
            x = float(label.get("x", "0"))
            assert x - half >= 0, (now, label.text, x)
            assert x + half <= WIDTH, (now, label.text, x)
            spans.append((x - half, x + half))
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_each_kind_has_its_own_colour_and_pattern_and_a_legend_entry() -> None:
    now = 60_000
    steps = [
        step(1, "load", 0, 100, output={"ok": 1}),
        step(2, "approval:refund", 100, 110, output=PENDING),
        step(1, "load", 0, 100, attempt=2, output={"ok": 1}, copied=True),
        step(3, "charge", 200, 300, attempt=2, error="ValueError: nope"),
        step(4, "shop.emails.send", 300, 320, attempt=2, output=UNCERTAIN),
        step(5, "sleep", 400, 410, attempt=2, output={"wake_at": wake(DAY), "over": False}),
        step(6, "export", 500, None, attempt=2),
    ]
    root = drawn(rows(steps, now_ms=T0 + now), now)
    legend = root.find("s:g[@class='legend']", NS)
    assert legend is not None
    swatches = {r.get("class"): r for r in legend.iter(f"{SVG}rect")}
    words = texts(legend)
    for kind, said in (
        ("ran", "step ran"),
        ("copied", "copied from the attempt before"),
        ("failed", "step failed"),
        ("open", "step not finished"),
        ("gate", "waiting at a gate"),
        ("sleep", "sleeping"),
        ("task", "waiting for a task's answer"),
    ):
        assert kind in swatches, kind
        assert said in words
    strokes = [
        swatches[k].get("stroke")
        for k in ("ran", "copied", "failed", "open", "gate", "sleep", "task")
    ]
    assert len(set(strokes)) == 7  # a colour each
    fills = [swatches[k].get("fill") for k in ("copied", "failed", "open", "gate", "sleep", "task")]
    assert fills == [f"url(#tl-{k})" for k in ("copied", "failed", "open", "gate", "sleep", "task")]
    assert swatches["ran"].get("fill") == swatches["ran"].get(
        "stroke"
    )  # solid: the one with no marks
    marks = {ET.tostring(p.find("s:g", NS)) for p in root.iter(f"{SVG}pattern")}  # type: ignore[arg-type]
    assert len(marks) == 6  # the patterns differ in their marks, not in their colour alone
    # The bars use the same fills as their legend.
    [failed] = rects(root, "failed")
    assert failed.get("fill") == "url(#tl-failed)"
    [asked] = rects(root, "task")
    assert asked.get("fill") == "url(#tl-task)"
    assert "open" in asked.get("class", "")


def test_a_wait_ends_at_its_decision_its_answer_or_the_attempt_that_took_it_up() -> None:
    steps = [
        step(1, "approval:refund", 0, 10, output=PENDING),
        step(2, "shop.emails.send", 20, 30, output=UNCERTAIN),
    ]
    # Decided after 5 s, answered after 9 s: both closed, each at its own end.
    done = rows(
        steps,
        now_ms=T0 + 60_000,
        approvals=[gate(1, "approved", decided=5000)],
        tasks=[task(2, answered=9000)],
    )
    assert [(r.wait.kind, r.wait.end - T0, r.wait.open) for r in done if r.wait] == [
        ("gate", 5000, False),
        ("task", 9000, False),
    ]
    assert "apr_1 approved by user:carol via console" in [r.wait.note for r in done if r.wait]
    # Still pending: open up to now.
    waiting = rows(steps[:1], now_ms=T0 + 60_000, approvals=[gate(1)])
    assert waiting[0].wait is not None
    assert (waiting[0].wait.end - T0, waiting[0].wait.open) == (60_000, True)
    assert "ran for 10 ms; waiting at the gate for 59 s so far" in waiting[0].words()
    # A later attempt that took the gate up again ends the wait of the attempt before, and a
    # run that ended (cancelled at the gate) ends it too.
    again = [*steps[:1], step(1, "approval:refund", 7000, 7010, attempt=2, output=APPROVED)]
    first = rows(again, now_ms=T0 + 60_000)[0].wait
    assert first is not None
    assert (first.end - T0, first.open) == (7000, False)
    ended = rows(steps[:1], now_ms=T0 + 60_000, finished_ms=T0 + 3000)[0].wait
    assert ended is not None
    assert (ended.end - T0, ended.open) == (3000, False)


def test_a_copied_step_draws_no_wait_of_its_own() -> None:
    steps = [
        step(1, "sleep", 0, 5, output={"wake_at": wake(DAY), "over": False}),
        step(
            1, "sleep", DAY + 10, DAY + 12, attempt=2, output={"wake_at": wake(DAY), "over": True}
        ),
        step(2, "after", DAY + 20, DAY + 30, attempt=2, output={"ok": 1}),
        step(
            1,
            "sleep",
            DAY + 10,
            DAY + 12,
            attempt=3,
            output={"wake_at": wake(DAY), "over": True},
            copied=True,
        ),
    ]
    drawn_rows = rows(steps, now_ms=T0 + DAY + 60_000, finished_ms=T0 + DAY + 30)
    assert [r.wait is not None for r in drawn_rows] == [True, False, False, False]
    slept = drawn_rows[0].wait
    assert slept is not None
    assert (slept.end - T0, slept.open) == (DAY + 10, False)
    assert [r.label for r in drawn_rows] == ["sleep 1 day", "sleep 1 day", "after", "sleep 1 day"]


def test_short_gaps_are_drawn_to_scale_with_no_break() -> None:
    steps = [step(1, "a", 0, 1, output={"ok": 1}), step(2, "b", 400, 402, output={"ok": 2})]
    root = drawn(rows(steps, now_ms=T0 + 402, finished_ms=T0 + 402), 402)
    assert rects(root, "break") == []
    a, b = rects(root, "step")
    # 400 ms of idling takes its share of the plot: b starts near the right end.
    assert float(b.get("x", "0")) - float(a.get("x", "0")) > 600


def test_tooltips_say_name_duration_and_output() -> None:
    steps = [step(1, "charge", 0, 1500, output={"ok": {"charge": "ch_9"}})]
    root = drawn(rows(steps, now_ms=T0 + 2000), 2000)
    (rect,) = rects(root, "step")
    title = rect.find("s:title", NS)
    assert title is not None
    assert title.text is not None
    assert "charge" in title.text
    assert "1.5 s" in title.text
    assert "ch_9" in title.text


def test_a_zero_length_step_is_still_visible() -> None:
    steps = [step(1, "a", 0, 0), step(2, "b", 0, 60_000)]
    root = drawn(rows(steps, now_ms=T0 + 60_000), 60_000)
    widths = [width_of(r) for r in rects(root, "step")]
    assert widths[0] >= 3
    assert widths[1] > widths[0]


def test_hostile_step_names_are_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    steps = [step(1, hostile, 0, 10, output={"ok": "</title><script>bad()</script>"})]
    svg = str(timeline(rows(steps, now_ms=T0 + 10), now_ms=T0 + 10))
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    assert hostile in texts(ET.fromstring(svg))


def test_the_description_says_in_words_what_is_drawn() -> None:
    now = ASLEEP + 3000
    desk = rows(refund_desk(), now_ms=T0 + now, approvals=[gate(2, "approved", decided=DECIDED)])
    desc = drawn(desk, now).find("s:desc", NS)
    assert desc is not None
    assert desc.text is not None
    assert desc.text.startswith("8 steps in 2 attempts, over 40 min")
    assert "approval refund: waited at the gate for 40 min" in desc.text
    assert "sleep 3 days: sleeping for 3 s so far, wakes in 2 d 23 h" in desc.text
    assert "shortened, not drawn to scale" in desc.text


def test_axis_labels_and_durations_read_as_a_person_says_them() -> None:
    assert [label for _, label in ticks(400)][:3] == ["0", "50 ms", "100 ms"]
    assert [label for _, label in ticks(45_000)][-1] == "50 s"
    assert [label for _, label in ticks(3 * 3_600_000)][1] == "30 min"
    assert [label for _, label in ticks(20 * 3_600_000)][-2:] == ["18 h", "21 h"]
    assert [label for _, label in ticks(5 * DAY)][-1] == "5 d"
    assert [label for _, label in ticks(5 * DAY, most=2)] == ["0", "7 d"]
    assert duration(90 * 60_000) == "1 h 30 min"
    assert duration(DAY + 5 * 60_000) == "1 d"
    assert duration(1500) == "1.5 s"
    assert duration(3 * DAY, words=True) == "3 days"
    assert duration(61_000, words=True) == "1 minute 1 second"
    assert duration(250, words=True) == "250 milliseconds"


def test_two_hundred_steps_draw_as_two_hundred_rects() -> None:
    steps = [
        step(i, f"step-{i}", i * 50, i * 50 + 40, attempt=1 + i // 100, copied=i < 40)
        for i in range(200)
    ]
    root = drawn(rows(steps, now_ms=T0 + 20_000), 20_000)
    assert len(rects(root, "step")) == 200
    assert len(rects(root, "copied")) == 40
    assert int(root.get("height", "0")) > 200 * 18


def test_no_steps_is_an_empty_timeline() -> None:
    root = drawn([], 0)
    assert rects(root, "step") == []
    desc = root.find("s:desc", NS)
    assert desc is not None
    assert desc.text == "No steps yet"


def test_budget_chart_stacks_spent_and_reserved_against_the_limit() -> None:
    periods = [
        (PeriodState("app", "2025-06", Decimal(100), Decimal(40), Decimal(10)), Decimal(0)),
        (PeriodState("app", "2025-05", Decimal(100), Decimal(95), Decimal(20)), Decimal("2.5")),
    ]
    root = ET.fromstring(budget_chart(periods, width=600))
    assert root.get("class") == "budget-chart"
    groups = root.findall("s:g", NS)
    assert [g.get("class") for g in groups] == ["period", "period over"]
    first = {r.get("class"): float(r.get("width", "0")) for r in groups[0].findall("s:rect", NS)}
    # Spent is four times reserved, and both fit inside the limit.
    assert first["spent"] == 4 * first["reserved"]
    amounts = "".join(groups[0].find("s:text[@class='amounts']", NS).itertext())  # type: ignore[union-attr]
    assert amounts == "spent $40.00 + reserved $10.00 of $100.00"
    drift = groups[1].find(".//s:tspan[@class='drift']", NS)
    assert drift is not None
    assert drift.text == "drift $+2.50"
    assert groups[0].find(".//s:tspan[@class='drift']", NS) is None


def test_budget_chart_escapes_and_handles_no_periods() -> None:
    hostile = PeriodState("<b>x</b>", "<i>p</i>", Decimal(0), Decimal(0), Decimal(0))
    svg = str(budget_chart([(hostile, Decimal(0))]))
    assert "<i>" not in svg
    assert "&lt;i&gt;p&lt;/i&gt;" in svg
    ET.fromstring(svg)
    assert "No periods yet" in str(budget_chart([]))


def test_a_step_cut_off_is_drawn_up_to_the_attempt_that_took_it_up() -> None:
    steps = [
        step(1, "export", 0, None),
        step(1, "export", 5000, 5100, attempt=2, output={"ok": 1}),
    ]
    cut_off, again = rows(steps, now_ms=T0 + 60_000)
    assert (cut_off.open, cut_off.end - T0) == (True, 5000)
    assert cut_off.words() == "not finished for 5 s so far"
    assert (again.open, again.end - T0) == (False, 5100)
