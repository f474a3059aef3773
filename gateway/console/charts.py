"""Stacked hourly bar charts as inline SVG, drawn on the server: nothing to fetch, nothing to
build, and readable with scripts off.

    ┌───────────────────────────────── max ┐   one <path> per series: a bar per hour with a
    │        ▆▆            - - share - - - │   value, stacked in series order (compact: a
    │   ▂▂   ██   ▄▄                       │   week of six series stays ~30 KB a chart)
    └──┴────┴────┴────┴────┴────┴────┴─────┘   x: hours (a label every 6 h, or every day)

Each path carries its series and total as data attributes and a <title> (a tooltip, and what a
screen reader says); the chart is an `img` whose label gives the totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720.0, 200.0
LEFT, RIGHT, TOP, BOTTOM = 56.0, 8.0, 10.0, 22.0
# Colour-blind-safe (Okabe-Ito), then greys.
OFF_SCALE = 4.0  # a share over 4× the busiest hour is written in words, not drawn
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#666666", "#999999")


@dataclass(frozen=True, slots=True)
class ChartSeries:
    label: str
    values: Sequence[float]


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def stacked_bars(
    chart_id: str, title: str, hours: Sequence[datetime], series: Sequence[ChartSeries], share: float | None = None
) -> Markup:
    """An SVG of `series` stacked per hour; `share`, when given, is drawn as a dashed line."""
    stacks = [sum(s.values[i] for s in series) for i in range(len(hours))]
    peak = max([*stacks, 0.0])
    # A share far above what was used would flatten every bar: then it is said, not drawn.
    share_drawn = share is not None and share > 0 and (peak == 0 or share <= OFF_SCALE * peak)
    top = max(peak, share if share is not None and share_drawn else 0.0)
    scale = (HEIGHT - TOP - BOTTOM) / top if top > 0 else 0.0
    plot_w = WIDTH - LEFT - RIGHT
    step = plot_w / max(len(hours), 1)
    bar_w = max(step * 0.8, 0.5)
    base_y = HEIGHT - BOTTOM
    totals = ", ".join(f"{s.label}: {_num(sum(s.values))}" for s in series) or "no usage"
    parts = [
        f'<svg id="{escape(chart_id)}" class="chart" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" role="img" '
        f'aria-label="{escape(title)} per hour: {escape(totals)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)} per hour</title>",
        f'<line x1="{LEFT:g}" y1="{base_y:g}" x2="{WIDTH - RIGHT:g}" y2="{base_y:g}" stroke="#888"/>',
        f'<text x="{LEFT - 4:g}" y="{TOP + 4:g}" text-anchor="end" class="axis">{escape(_num(top))}</text>',
        f'<text x="{LEFT - 4:g}" y="{base_y:g}" text-anchor="end" class="axis">0</text>',
    ]
    parts += _hour_labels(hours, step, base_y)
    below = [0.0] * len(hours)
    for index, s in enumerate(series):
        path = []
        for i, value in enumerate(s.values):
            if value <= 0:
                continue
            y0 = base_y - below[i] * scale
            y1 = y0 - value * scale
            path.append(f"M{LEFT + i * step:.1f} {y0:.1f}V{y1:.1f}h{bar_w:.1f}V{y0:.1f}z")
            below[i] += value
        total = sum(s.values)
        parts.append(
            f'<path class="series" fill="{colour(index)}" data-series="{escape(s.label)}" '
            f'data-total="{escape(_raw(total))}" d="{"".join(path) or "M0 0"}">'
            f"<title>{escape(s.label)}: {escape(_num(total))} in the window</title></path>"
        )
    if share is not None and share > 0 and not share_drawn:
        parts.append(
            f'<text class="axis share" x="{LEFT + 4:g}" y="{TOP + 4:g}" '
            f'data-share="{share:.0f}">your share: {escape(_num(share))} an hour (off this scale)</text>'
        )
    elif share is not None and share > 0:
        y = base_y - share * scale
        parts.append(
            f'<line class="share" x1="{LEFT:g}" y1="{y:.1f}" x2="{WIDTH - RIGHT:g}" y2="{y:.1f}" '
            f'stroke="#C00000" stroke-dasharray="6 4" data-share="{share:.0f}">'
            f"<title>your share: {escape(_num(share))} per hour</title></line>"
        )
        parts.append(
            f'<text x="{WIDTH - RIGHT:g}" y="{y - 3:.1f}" text-anchor="end" class="axis share-label">share</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _hour_labels(hours: Sequence[datetime], step: float, base_y: float) -> list[str]:
    every = 6 if len(hours) <= 48 else 24
    labels = []
    for i, hour in enumerate(hours):
        if hour.hour % every == 0:
            text = f"{hour:%H}h" if every == 6 else f"{hour:%a %d}"
            labels.append(f'<text x="{LEFT + i * step:.1f}" y="{base_y + 15:g}" class="axis">{text}</text>')
    return labels


def _num(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def _raw(value: float) -> str:
    """The exact total, as the API would print it (an integer when it is one)."""
    return str(int(value)) if float(value).is_integer() else repr(value)
