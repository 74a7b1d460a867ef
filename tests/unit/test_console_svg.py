"""The console's SVG drawings: the step timeline's rectangles and axis, the budget chart."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal
from typing import Any

from remit.budgets.model import PeriodState
from remit.console.svg import budget_chart, duration, ticks, timeline
from remit.ops.runs import Step

NS = {"s": "http://www.w3.org/2000/svg"}
T0 = 1_700_000_000_000
DAY = 86_400_000


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


def parsed(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def rects(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{{{NS['s']}}}rect") if "step" in r.get("class", "").split()]


def with_class(root: ET.Element, kind: str) -> list[ET.Element]:
    return [r for r in rects(root) if kind in r.get("class", "").split()]


def test_each_step_is_one_rect_classed_by_what_it_was() -> None:
    steps = [
        step(1, "load", 0, 100, output={"ok": 1}),
        step(2, "approval:refund", 100, 5000, output={"id": "apr_1", "status": "approved"}),
        step(3, "sleep", 5000, 9000),
        step(4, "charge", 9000, 9100, output={"error": {"message": "card declined"}}),
        step(1, "load", 0, 100, attempt=2, output={"ok": 1}, copied=True),
        step(2, "approval:refund", 100, 5000, attempt=2, copied=True),
        step(3, "DBOS.sleep", 10_000, 10_500, attempt=2),
        step(4, "charge", 10_500, None, attempt=2),
        step(5, "boom", 10_600, 10_700, attempt=2, error="ValueError: nope"),
    ]
    root = parsed(timeline(steps, now_ms=T0 + 12_000))
    assert root.get("id") == "timeline"
    assert root.get("role") == "img"
    assert len(rects(root)) == 9
    assert len(with_class(root, "copied")) == 2
    assert len(with_class(root, "ran")) == 7
    assert len(with_class(root, "wait")) == 4
    assert len(with_class(root, "failed")) == 2
    open_ = with_class(root, "open")
    assert len(open_) == 1
    # The unfinished step is drawn up to now: wider than the minimum.
    assert float(open_[0].get("width", "0")) > 3
    labels = [t.text for t in root.iter(f"{{{NS['s']}}}text")]
    assert "Attempt 1" in labels
    assert "Attempt 2" in labels
    assert labels.count("charge") == 2


def test_tooltips_say_name_duration_and_output() -> None:
    steps = [step(1, "charge", 0, 1500, output={"ok": {"charge": "ch_9"}})]
    root = parsed(timeline(steps, now_ms=T0 + 2000))
    (rect,) = rects(root)
    title = rect.find("s:title", NS)
    assert title is not None
    assert title.text is not None
    assert "charge" in title.text
    assert "1.5 s" in title.text
    assert "ch_9" in title.text


def test_a_zero_length_step_is_still_visible() -> None:
    steps = [step(1, "a", 0, 0), step(2, "b", 0, 60_000)]
    root = parsed(timeline(steps, now_ms=T0 + 60_000))
    widths = [float(r.get("width", "0")) for r in rects(root)]
    assert widths[0] >= 3
    assert widths[1] > widths[0]


def test_hostile_step_names_are_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    steps = [step(1, hostile, 0, 10, output={"ok": "</title><script>bad()</script>"})]
    svg = str(timeline(steps, now_ms=T0 + 10))
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    root = parsed(svg)
    assert hostile in [t.text for t in root.iter(f"{{{NS['s']}}}text")]


def test_a_three_week_span_is_labelled_in_days() -> None:
    steps = [
        step(1, "open", 0, 1000),
        step(2, "approval:sign-off", 1000, 21 * DAY - 500),
        step(3, "close", 21 * DAY - 500, 21 * DAY),
    ]
    root = parsed(timeline(steps, now_ms=T0 + 22 * DAY))
    axis = root.find("s:g[@class='axis']", NS)
    assert axis is not None
    labels = [t.text for t in axis.iter(f"{{{NS['s']}}}text")]
    assert labels == ["0", "7 d", "14 d", "21 d"]


def test_axis_labels_follow_the_span() -> None:
    assert [label for _, label in ticks(400)][:3] == ["0", "50 ms", "100 ms"]
    assert [label for _, label in ticks(45_000)][-1] == "50 s"
    assert [label for _, label in ticks(3 * 3_600_000)][1] == "30 min"
    assert [label for _, label in ticks(20 * 3_600_000)][-2:] == ["18 h", "21 h"]
    assert [label for _, label in ticks(5 * DAY)][-1] == "5 d"
    assert duration(90 * 60_000) == "1 h 30 min"
    assert duration(DAY + 5 * 60_000) == "1 d"
    assert duration(1500) == "1.5 s"


def test_two_hundred_steps_draw_as_two_hundred_rects() -> None:
    steps = [
        step(i, f"step-{i}", i * 50, i * 50 + 40, attempt=1 + i // 100, copied=i < 40)
        for i in range(200)
    ]
    root = parsed(timeline(steps, now_ms=T0 + 20_000))
    assert len(rects(root)) == 200
    assert len(with_class(root, "copied")) == 40
    assert int(root.get("height", "0")) > 200 * 18


def test_no_steps_is_an_empty_timeline() -> None:
    root = parsed(timeline([], now_ms=T0))
    assert rects(root) == []
    desc = root.find("s:desc", NS)
    assert desc is not None
    assert desc.text == "No steps yet"


def test_budget_chart_stacks_spent_and_reserved_against_the_limit() -> None:
    periods = [
        (PeriodState("app", "2025-06", Decimal(100), Decimal(40), Decimal(10)), Decimal(0)),
        (PeriodState("app", "2025-05", Decimal(100), Decimal(95), Decimal(20)), Decimal("2.5")),
    ]
    root = parsed(budget_chart(periods, width=600))
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
    parsed(svg)
    assert "No periods yet" in str(budget_chart([]))


def test_a_pending_gate_of_the_latest_attempt_is_open_up_to_now() -> None:
    pending = {"id": "apr_1", "status": "pending"}
    steps = [
        step(1, "load", 0, 100),
        step(2, "approval:refund", 100, 110, output=pending),
    ]
    root = parsed(timeline(steps, now_ms=T0 + 10_000))
    gate = with_class(root, "open")
    assert len(gate) == 1
    assert float(gate[0].get("width", "0")) > 600
    # Once a later attempt records the decision, the first attempt's pending gate is closed.
    decided = [*steps, step(2, "approval:refund", 100, 20_000, attempt=2, output={"id": "apr_1"})]
    assert with_class(parsed(timeline(decided, now_ms=T0 + 30_000)), "open") == []
