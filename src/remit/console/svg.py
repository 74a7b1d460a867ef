"""The console's pictures, drawn on the server as SVG text: a run's step timeline and a budget's
periods. No script draws them, so a page shows them as it loads, with JavaScript or without.

Every piece of text in them (a step's name, its output, a budget's scope) is escaped: a step
named `<script>` is drawn as those characters. Each drawing is one pass over its rows, so a run
of 200 steps costs 200 rectangles and nothing more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from remit.execution.journal import SHORT_SLEEP

if TYPE_CHECKING:
    from remit.budgets.model import PeriodState
    from remit.ops.runs import Step

# How DBOS names a sleep: `DBOS.sleep` holds its thread (up to REMIT_SUSPEND_AFTER); remit's
# own step `sleep` suspends the run until its timer is due.
SLEEP_STEPS = frozenset({SHORT_SLEEP, "sleep"})
GATE_PREFIX = "approval:"

# The timeline's layout, in pixels.
_LABEL_W = 220  # the column of step names, left of the axis
_RIGHT = 16
_TOP = 28  # room for the axis labels
_ROW = 18
_GROUP = 22  # the row that names an attempt
_BAR = 12
_MIN_W = 3  # what a step that took no time is drawn as, so it can be seen and pointed at
_LEGEND = 28
_NAME_CHARS = 30
_SUMMARY_CHARS = 160

# Tick spacings to choose from, in milliseconds: the first giving at most `_MAX_TICKS` ticks.
_SECOND, _MINUTE, _HOUR, _DAY = 1000, 60_000, 3_600_000, 86_400_000
_SPACINGS = (
    *(n for n in (1, 2, 5, 10, 20, 50, 100, 200, 500)),
    *(n * _SECOND for n in (1, 2, 5, 10, 15, 30)),
    *(n * _MINUTE for n in (1, 2, 5, 10, 15, 30)),
    *(n * _HOUR for n in (1, 2, 3, 6, 12)),
    *(n * _DAY for n in (1, 2, 7, 14, 28, 56, 91, 182, 364)),
)
_MAX_TICKS = 8
_UNITS = (("d", _DAY), ("h", _HOUR), ("min", _MINUTE), ("s", _SECOND))


def duration(ms: int) -> str:
    """A span of milliseconds as a person reads it, to two units: `350 ms`, `1.5 s`,
    `4 min 10 s`, `21 d`, `3 d 2 h`."""
    ms = max(0, int(ms))
    if ms < _SECOND:
        return f"{ms} ms"
    if ms < 10 * _SECOND and ms % _SECOND:
        return f"{ms / _SECOND:.1f} s"
    parts: list[str] = []
    rest = ms // _SECOND * _SECOND
    for unit, size in _UNITS:
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
        elif parts:
            break  # `1 d 0 h 5 min` reads as `1 d`: two units that are next to each other
        if len(parts) == 2:
            break
    return " ".join(parts)


def ticks(span_ms: int) -> list[tuple[int, str]]:
    """The axis ticks of a span: (offset in ms, label), from 0 to at least the span's end, with
    a spacing that gives at most eight of them."""
    span_ms = max(1, span_ms)
    spacing = next((s for s in _SPACINGS if span_ms / s <= _MAX_TICKS), None)
    if spacing is None:  # more than eight years: years it is
        spacing = math.ceil(span_ms / _MAX_TICKS / (364 * _DAY)) * 364 * _DAY
    count = math.ceil(span_ms / spacing)
    return [(i * spacing, "0" if i == 0 else duration(i * spacing)) for i in range(count + 1)]


@dataclass(frozen=True)
class _Bar:
    step: Step
    start: int
    end: int
    open: bool
    kinds: tuple[str, ...]
    summary: str | None


def kinds_of(step: Step, *, latest: bool = True) -> tuple[str, ...]:
    """The classes of a step's rectangle, besides `step`: `copied` (a retry's fork copied it
    from the attempt before; it did not run again) or `ran`; `wait` for a gate or a sleep;
    `failed` when it raised or returned an error; `open` when it has not finished, or is a gate
    of the latest attempt (`latest`) still pending."""
    kinds = ["copied" if step.copied else "ran"]
    if step.name.startswith(GATE_PREFIX) or step.name in SLEEP_STEPS:
        kinds.append("wait")
    _, error = step.summary(_SUMMARY_CHARS)
    if error is not None:
        kinds.append("failed")
    if step.finished_ms is None or (latest and _pending_gate(step)):
        kinds.append("open")
    return tuple(kinds)


def _pending_gate(step: Step) -> bool:
    """A gate's step ends as soon as it opens the approval (the run then waits for the
    decision, holding no worker): it stays open until a later attempt records the decision."""
    output = step.output
    return (
        step.name.startswith(GATE_PREFIX)
        and isinstance(output, dict)
        and output.get("status") == "pending"
    )


def _bars(steps: Sequence[Step], now_ms: int) -> list[_Bar]:
    bars: list[_Bar] = []
    last = None
    latest = max((step.attempt for step in steps), default=0)
    for step in steps:
        start = step.started_ms if step.started_ms is not None else last
        if start is None:
            start = step.finished_ms if step.finished_ms is not None else now_ms
        kinds = kinds_of(step, latest=step.attempt == latest)
        is_open = "open" in kinds
        end = max(now_ms, start) if is_open or step.finished_ms is None else step.finished_ms
        output, error = step.summary(_SUMMARY_CHARS)
        bars.append(
            _Bar(
                step, start, max(end, start), is_open, kinds, error if error is not None else output
            )
        )
        last = max(end, start)
    return bars


def timeline(steps: Sequence[Step], *, now_ms: int, width: int = 960) -> Markup:
    """The steps of a run, attempt by attempt, each a `rect.step` on one time axis (its start
    to its end; an unfinished one up to `now_ms`), with a tooltip and its name beside it."""
    width = max(width, _LABEL_W + _RIGHT + 100)
    plot = width - _LABEL_W - _RIGHT
    bars = _bars(steps, now_ms)
    t0 = min((bar.start for bar in bars), default=now_ms)
    t1 = max((bar.end for bar in bars), default=now_ms)
    marks = ticks(t1 - t0)
    scale = plot / max(1, marks[-1][0])
    attempts = sorted({bar.step.attempt for bar in bars})
    height = _TOP + len(bars) * _ROW + len(attempts) * _GROUP + _LEGEND + 8
    since = datetime.fromtimestamp(t0 / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    summary = (
        f"{len(bars)} steps in {len(attempts)} attempts, over {duration(t1 - t0)} from {since}"
        if bars
        else "No steps yet"
    )
    out: list[str] = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-labelledby="timeline-title timeline-desc" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<title id="timeline-title">Step timeline</title>',
        f'<desc id="timeline-desc">{escape(summary)}</desc>',
        '<g class="axis">',
    ]
    bottom = height - _LEGEND
    for offset, label in marks:
        x = _LABEL_W + offset * scale
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{bottom}" stroke-opacity=".25"/>'
            f'<text x="{x:.1f}" y="{_TOP - 10}" text-anchor="middle">{escape(label)}</text>'
        )
    out.append("</g>")
    y = _TOP
    attempt = None
    for bar in bars:
        step = bar.step
        if step.attempt != attempt:
            attempt = step.attempt
            out.append(
                f'<text class="attempt" x="4" y="{y + 15}" font-weight="600">'
                f"Attempt {attempt}</text>"
            )
            y += _GROUP
        x = _LABEL_W + (bar.start - t0) * scale
        w = max(_MIN_W, (bar.end - bar.start) * scale)
        took = duration(bar.end - bar.start) + (" so far" if bar.open else "")
        tip = f"{step.name} (attempt {step.attempt}, {', '.join(bar.kinds)}): {took}"
        if bar.summary is not None:
            tip += f"\n{bar.summary}"
        name = step.name if len(step.name) <= _NAME_CHARS else step.name[: _NAME_CHARS - 1] + "…"
        out.append(
            f'<g class="row"><text x="14" y="{y + _BAR - 1}">{escape(name)}</text>'
            f'<rect class="step {" ".join(bar.kinds)}" x="{x:.1f}" y="{y + 1}" '
            f'width="{w:.1f}" height="{_BAR}" data-function-id="{step.function_id}">'
            f"<title>{escape(tip)}</title></rect></g>"
        )
        y += _ROW
    out.append(_legend(bottom + 8))
    out.append("</svg>")
    return Markup("".join(out))


_LEGEND_ITEMS = (
    ("ran", "ran in this attempt"),
    ("copied", "copied from the attempt before"),
    ("wait", "gate or sleep"),
    ("failed", "failed"),
    ("open", "not finished"),
)


def _legend(y: int) -> str:
    parts = ['<g class="legend">']
    x = 4
    for kind, label in _LEGEND_ITEMS:
        swatch = "ran open" if kind == "open" else kind
        parts.append(
            f'<rect class="{swatch}" x="{x}" y="{y}" width="12" height="12"/>'
            f'<text x="{x + 16}" y="{y + 10}">{escape(label)}</text>'
        )
        x += 24 + 6 * len(label)
    parts.append("</g>")
    return "".join(parts)


# The budget chart's layout, in pixels.
_B_LABEL = 150
_B_ROW = 34
_B_BAR = 14


def budget_chart(periods: Iterable[tuple[PeriodState, Decimal]], *, width: int = 640) -> Markup:
    """One budget's periods, a bar each: what settled calls spent and what calls in flight
    reserved, stacked, against a line at the limit, with the amounts and any drift (the
    counter less the sum of its settled calls' ledger costs) written beside it."""
    rows = list(periods)
    width = max(width, _B_LABEL + 200)
    plot = width - _B_LABEL - 12
    height = 8 + max(1, len(rows)) * _B_ROW + 6
    scope = rows[0][0].scope if rows else "budget"
    out: list[str] = [
        f'<svg class="budget-chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(f'Budget {scope}: spent and reserved against the limit')}</title>",
    ]
    if not rows:
        out.append('<text x="4" y="24">No periods yet</text>')
    y = 8
    for state, drift in rows:
        top = max(state.limit_usd, state.spent_usd + state.reserved_usd, Decimal("0.01"))
        scale = plot / float(top)
        spent_w = float(state.spent_usd) * scale
        reserved_w = float(state.reserved_usd) * scale
        limit_x = _B_LABEL + float(state.limit_usd) * scale
        over = state.spent_usd + state.reserved_usd > state.limit_usd
        words = (
            f"spent {_usd(state.spent_usd)} + reserved {_usd(state.reserved_usd)} "
            f"of {_usd(state.limit_usd)}"
        )
        tip = f"{state.period}: {words}" + (f"; drift {_usd(drift, signed=True)}" if drift else "")
        out.append(
            f'<g class="period{" over" if over else ""}"><title>{escape(tip)}</title>'
            f'<text x="4" y="{y + _B_BAR - 2}">{escape(state.period)}</text>'
            f'<rect class="track" x="{_B_LABEL}" y="{y}" width="{plot}" height="{_B_BAR}" '
            f'fill="#eef1f4"/>'
            f'<rect class="spent" x="{_B_LABEL}" y="{y}" width="{spent_w:.1f}" '
            f'height="{_B_BAR}" fill="#0b5cad"/>'
            f'<rect class="reserved" x="{_B_LABEL + spent_w:.1f}" y="{y}" '
            f'width="{reserved_w:.1f}" height="{_B_BAR}" fill="#c98a00"/>'
            f'<line class="limit" x1="{limit_x:.1f}" y1="{y - 3}" x2="{limit_x:.1f}" '
            f'y2="{y + _B_BAR + 3}" stroke="#a4161a" stroke-width="2"/>'
            f'<text class="amounts" x="{_B_LABEL}" y="{y + _B_BAR + 13}">{escape(words)}'
        )
        if drift:
            out.append(
                f'<tspan class="drift" dx="8" fill="#a4161a">'
                f"drift {escape(_usd(drift, signed=True))}</tspan>"
            )
        out.append("</text></g>")
        y += _B_ROW
    out.append("</svg>")
    return Markup("".join(out))


def _usd(amount: Decimal, *, signed: bool = False) -> str:
    return f"${amount:+,.2f}" if signed else f"${amount:,.2f}"
