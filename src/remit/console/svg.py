"""The console's pictures, drawn on the server as SVG text: a run's step timeline and a budget's
periods. No script draws them, so a page shows them as it loads, with JavaScript or without.

Every piece of text in them (a step's name, its output, a budget's scope) is escaped: a step
named `<script>` is drawn as those characters. Each drawing is one pass over its rows, so a run
of 200 steps costs 200 rectangles (and one more for each wait) and nothing more.

The timeline tells each kind of bar by its colour and by its pattern (solid, dots, crosses,
stripes, bars, checks, chevrons, plus signs), so its legend does not rest on colour alone; its
`desc` says in words what it shows, and each bar's `title` what the step or the wait was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from remit.console.timeline import Row, Scale, duration, scale, ticks

if TYPE_CHECKING:
    from remit.budgets.model import PeriodState

# The timeline's layout, in pixels.
_LABEL_W = 220  # the column of step names, left of the axis
_RIGHT = 16
_TOP = 30  # room for the axis labels
_ROW = 20
_GROUP = 22  # the row that names an attempt
_BAR = 12
_MIN_W = 6  # what a step that took no time is drawn as, so it can be seen and pointed at
_LEGEND_ROW = 18
_NAME_CHARS = 30
_CHAR_W = 6.5  # the width of a character of 11px text, a little over, to keep labels apart
_TICK_PX = 80  # at most one axis tick per this many pixels

# Each kind of bar: its colour, the white marks its pattern lays over that colour (None: solid)
# and what the legend calls it. Each colour holds 4.5:1 or more against white.
_KINDS: dict[str, tuple[str, str | None, str]] = {
    "ran": ("#0b5cad", None, "step ran"),
    "copied": ("#5f6b78", '<circle cx="3" cy="3" r="1.3"/>', "copied from the attempt before"),
    "failed": ("#a4161a", '<path d="M0 0L6 6M6 0L0 6" stroke="#fff"/>', "step failed"),
    "open": (
        "#1b6e43",
        '<path d="M-1 7L7 -1M-1 1L1 -1M5 7L7 5" stroke="#fff" stroke-width="1.5"/>',
        "step not finished",
    ),
    "gate": ("#8f5300", '<rect x="4" width="2" height="6"/>', "waiting at a gate"),
    "sleep": ("#5b3fa8", '<rect y="4" width="6" height="2"/>', "sleeping"),
    "task": (
        "#9c2f63",
        '<rect width="3" height="3"/><rect x="3" y="3" width="3" height="3"/>',
        "waiting for a task's answer",
    ),
    "message": (
        "#00696b",
        '<path d="M0 1L3 4L6 1" fill="none" stroke="#fff"/>',
        "waiting for a message",
    ),
    "children": ("#2f4075", '<path d="M3 0V6M0 3H6" stroke="#fff"/>', "waiting for child runs"),
}
# Which of a step's classes its rectangle is filled as, the first that applies.
_STEP_FILLS = ("failed", "open", "copied", "ran")
_BREAK_FILL = "#e9edf1"


def _fill(kind: str) -> str:
    colour, marks, _ = _KINDS[kind]
    return colour if marks is None else f"url(#tl-{kind})"


def _shown(rows: Sequence[Row]) -> set[str]:
    """The kinds of bar the timeline draws: its steps' and its waits'."""
    return {kind for row in rows for kind in row.kinds} | {
        row.wait.kind for row in rows if row.wait is not None
    }


def _patterns(shown: set[str]) -> str:
    """The patterns of the kinds of bar in `shown` (the others are not drawn)."""
    out = ["<defs>"]
    for kind, (colour, marks, _) in _KINDS.items():
        if marks is None or kind not in shown:
            continue
        out.append(
            f'<pattern id="tl-{kind}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f'<rect width="6" height="6" fill="{colour}"/>'
            f'<g fill="#fff" fill-opacity=".8" stroke-opacity=".8">{marks}</g></pattern>'
        )
    out.append("</defs>")
    return "".join(out)


def timeline(rows: Sequence[Row], *, now_ms: int, width: int = 960) -> Markup:
    """A run's steps (`timeline.rows`), attempt by attempt, each a `rect.step` on one time axis
    (its start to its end) with its name beside it, and each wait after a step a `rect.wait`
    (`gate`, `sleep`, `task`, `message` or `children`; `open` while it lasts, drawn up to
    `now_ms`) with its duration
    written on it. A long stretch in which no step runs is shortened to a break (`rect.break`)."""
    width = max(width, _LABEL_W + _RIGHT + 200)
    plot = width - _LABEL_W - _RIGHT
    at = scale(rows, left=_LABEL_W, plot=plot)
    attempts = sorted({row.step.attempt for row in rows})
    legend = _legend_layout(rows, at, width)
    lines = 1 + max((line for *_, line in legend), default=-1)
    body_bottom = _TOP + len(rows) * _ROW + len(attempts) * _GROUP
    height = body_bottom + 10 + lines * _LEGEND_ROW + 4
    out: list[str] = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-labelledby="timeline-title timeline-desc" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<title id="timeline-title">Step timeline</title>',
        f'<desc id="timeline-desc">{escape(_said(rows, at))}</desc>',
        _patterns(_shown(rows)),
    ]
    out.append(_breaks(at, body_bottom))
    out.append(_axis(at, rows, now_ms, width, body_bottom))
    y = _TOP
    attempt = None
    for row in rows:
        if row.step.attempt != attempt:
            attempt = row.step.attempt
            out.append(
                f'<text class="attempt" x="4" y="{y + 15}" font-weight="600">'
                f"Attempt {attempt}</text>"
            )
            y += _GROUP
        out.append(_row(row, at, y, width))
        y += _ROW
    out.append(_legend(legend, body_bottom + 10))
    out.append("</svg>")
    return Markup("".join(out))


def _said(rows: Sequence[Row], at: Scale) -> str:
    """The timeline in words, for a reader that does not see it."""
    if not rows:
        return "No steps yet"
    since = datetime.fromtimestamp(at.t0 / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    attempts = len({row.step.attempt for row in rows})
    said = f"{len(rows)} steps in {attempts} attempts, over {duration(at.t1 - at.t0)} from {since}"
    for row in rows:
        if row.wait is not None:
            said += f"; {row.label}: {row.wait.words()}"
    if at.breaks():
        said += "; long stretches with no step running are shortened, not drawn to scale"
    return said


def _row(row: Row, at: Scale, y: int, width: int) -> str:
    step = row.step
    name = row.label if len(row.label) <= _NAME_CHARS else row.label[: _NAME_CHARS - 1] + "…"
    x = at.x(row.start)
    w = max(_MIN_W, at.x(row.end) - x)
    fill = next(kind for kind in _STEP_FILLS if kind in row.kinds)
    tip = f"{row.label} (attempt {step.attempt}): {row.words()}"
    if row.summary is not None:
        tip += f"\n{row.summary}"
    parts = [f'<g class="row"><text x="14" y="{y + _BAR - 1}">{escape(name)}</text>']
    took = ""
    wait = row.wait
    if wait is not None:
        x0 = at.x(wait.start)
        x1 = max(x0 + _MIN_W, at.x(wait.end))
        dashed = ' stroke-dasharray="4 2"' if wait.open else ""
        words = f"{row.label}: {wait.words()}" + (f"\n{wait.note}" if wait.note else "")
        parts.append(
            f'<rect class="wait {wait.kind}{" open" if wait.open else ""}" x="{x0:.1f}" '
            f'y="{y + 1}" width="{x1 - x0:.1f}" height="{_BAR}" fill="{_fill(wait.kind)}" '
            f'stroke="{_KINDS[wait.kind][0]}"{dashed}><title>{escape(words)}</title></rect>'
        )
        took = _took(wait.short(), x0, x1, y, width)
    # Over its wait, if any: a sleep's step is the instant the sleep began.
    parts.append(
        f'<rect class="step {" ".join(row.kinds)}" x="{x:.1f}" y="{y + 1}" width="{w:.1f}" '
        f'height="{_BAR}" fill="{_fill(fill)}" stroke="{_KINDS[fill][0]}" '
        f'data-function-id="{step.function_id}"><title>{escape(tip)}</title></rect>'
    )
    parts.append(f"{took}</g>")  # the wait's duration last, to be read over both
    return "".join(parts)


def _took(text: str, x0: float, x1: float, y: int, width: int) -> str:
    """A wait's duration, written on its bar if it fits, after it if there is room, else ending
    at its end: white-edged, to read over the bar's pattern."""
    needed = len(text) * _CHAR_W
    if needed + 8 <= x1 - x0:
        x, anchor = (x0 + x1) / 2, "middle"
    elif x1 + 4 + needed <= width - 2:
        x, anchor = x1 + 4, "start"
    else:
        x, anchor = x1 - 4, "end"
    return (
        f'<text class="took" x="{x:.1f}" y="{y + _BAR - 1}" text-anchor="{anchor}" '
        f'font-weight="600" stroke="#fff" stroke-width="3" stroke-linejoin="round" '
        f'paint-order="stroke">{escape(text)}</text>'
    )


def _breaks(at: Scale, bottom: int) -> str:
    """Each shortened stretch: a pale band the height of the plot, with a zigzag on the axis."""
    out = ['<g class="breaks">']
    for piece in at.breaks():
        mid = (piece.x0 + piece.x1) / 2
        top = _TOP - 6
        zigzag = f"M{mid - 6:.1f} {top + 3}l3 -6l3 6l3 -6l3 6"
        out.append(
            f'<rect class="break" x="{piece.x0:.1f}" y="{top}" width="{piece.x1 - piece.x0:.1f}" '
            f'height="{bottom - top}" fill="{_BREAK_FILL}">'
            f"<title>{escape(duration(piece.end - piece.start))}, shortened: not to scale"
            f'</title></rect><path d="{zigzag}" fill="none" stroke="#4f5863"/>'
        )
    out.append("</g>")
    return "".join(out)


def _axis(at: Scale, rows: Sequence[Row], now_ms: int, width: int, bottom: int) -> str:
    """The axis: time since the first step at the start of each stretch drawn to scale, ticks
    within it (`+50 ms` after a break), and `now` where something still runs or waits. Labels
    never leave the drawing nor overlap: the less telling ones give way."""
    t0 = at.t0
    wanted: list[tuple[int, float, str]] = []  # (rank: lower is kept first, x, label)
    for segment in at.segments():
        start, end = segment[0].start, segment[-1].end
        x0, x1 = segment[0].x0, segment[-1].x1
        wanted.append((0, x0, "0" if start == t0 else duration(start - t0)))
        for offset, said in ticks(end - start, most=int((x1 - x0) // _TICK_PX))[1:]:
            if offset < end - start:
                x = x0 + offset / (end - start) * (x1 - x0)
                wanted.append((2, x, said if start == t0 else f"+{said}"))
    still = any(row.open or (row.wait is not None and row.wait.open) for row in rows)
    if rows:
        last = (at.x(now_ms), "now") if still else (at.x(at.t1), duration(at.t1 - t0))
        wanted.append((-1, *last))
    # The zigzags of the breaks are kept clear too.
    taken = [((p.x0 + p.x1) / 2 - 8, (p.x0 + p.x1) / 2 + 8) for p in at.breaks()]
    out = ['<g class="axis">']
    for rank, x, said in sorted(wanted, key=lambda each: (each[0], each[1])):
        half = len(said) * _CHAR_W / 2
        centre = min(max(x, half + 2), width - half - 2)
        left, right = centre - half - 4, centre + half + 4
        if any(left < after and before < right for before, after in taken):
            continue
        taken.append((left, right))
        dash = ' stroke-dasharray="3 3"' if said == "now" and rank < 0 else ""
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{bottom}" '
            f'stroke-opacity="{".6" if dash else ".25"}"{dash}/>'
            f'<text x="{centre:.1f}" y="{_TOP - 10}" text-anchor="middle">{escape(said)}</text>'
        )
    out.append("</g>")
    return "".join(out)


def _legend_layout(rows: Sequence[Row], at: Scale, width: int) -> list[tuple[str, str, float, int]]:
    """The legend's items, of the kinds of bar the timeline draws: (kind, words, x, line),
    wrapped to the drawing's width."""
    shown = _shown(rows)
    items = [(kind, _KINDS[kind][2]) for kind in _KINDS if kind in shown]
    if at.breaks():
        items.append(("break", "shortened: not to scale"))
    placed: list[tuple[str, str, float, int]] = []
    x, line = 4.0, 0
    for kind, said in items:
        wide = 20 + len(said) * _CHAR_W + 14
        if x + wide > width and x > 4:
            x, line = 4.0, line + 1
        placed.append((kind, said, x, line))
        x += wide
    return placed


def _legend(placed: list[tuple[str, str, float, int]], y: int) -> str:
    parts = ['<g class="legend">']
    for kind, said, x, line in placed:
        top = y + line * _LEGEND_ROW
        fill, stroke = (
            (_BREAK_FILL, "#4f5863") if kind == "break" else (_fill(kind), _KINDS[kind][0])
        )
        parts.append(
            f'<rect class="{kind}" x="{x:.0f}" y="{top}" width="16" height="12" '
            f'fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x + 20:.0f}" y="{top + 10}">{escape(said)}</text>'
        )
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
