"""Server-rendered SVG charts: readable without JavaScript, with a text
alternative (a title per bar and a description), no CDN, no client library.

Pure functions of their data, so they are unit-tested without a browser; the
markup is escaped here because it is handed to templates as safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT, PAD_TOP, PAD_BOTTOM = 600, 160, 12, 22


@dataclass(frozen=True)
class Bar:
    label: str  # the x-axis text (a day)
    value: float
    title: str  # the bar's text alternative


def bars(data: Sequence[Bar], *, caption: str, unit: str = "") -> Markup:
    """A bar chart of ``data`` (left to right) as an accessible inline SVG."""
    top = max((b.value for b in data), default=0.0)
    scale = (HEIGHT - PAD_TOP - PAD_BOTTOM) / top if top > 0 else 0.0
    step = WIDTH / max(len(data), 1)
    width = max(step * 0.7, 1.0)
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(caption)}" xmlns="http://www.w3.org/2000/svg">',
             f"<desc>{escape(_describe(data, caption, unit))}</desc>",
             f'<line x1="0" y1="{HEIGHT - PAD_BOTTOM}" x2="{WIDTH}" y2="{HEIGHT - PAD_BOTTOM}" '
             'class="axis"/>']
    for i, bar in enumerate(data):
        h = max(bar.value * scale, 0.0)
        x = i * step + (step - width) / 2
        y = HEIGHT - PAD_BOTTOM - h
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                     f'height="{h:.1f}"><title>{escape(bar.title)}</title></rect>')
    for i in _label_positions(len(data)):
        x = i * step + step / 2
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle" '
                     f'class="tick">{escape(data[i].label)}</text>')
    parts.append(f'<text x="{WIDTH - 4}" y="{PAD_TOP}" text-anchor="end" class="tick">'
                 f'max {escape(_fmt(top, unit))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _label_positions(n: int) -> list[int]:
    """First, last and a few between: labels that never overlap."""
    if n <= 7:
        return list(range(n))
    every = max(n // 5, 1)
    return sorted({0, n - 1, *range(0, n, every)})


def _describe(data: Sequence[Bar], caption: str, unit: str) -> str:
    total = sum(b.value for b in data)
    busiest = max(data, key=lambda b: b.value, default=None)
    text = f"{caption}: {len(data)} bars, total {_fmt(total, unit)}"
    if busiest is not None and busiest.value > 0:
        text += f", highest {_fmt(busiest.value, unit)} on {busiest.label}"
    return text


def _fmt(value: float, unit: str) -> str:
    return f"${value:.4f}" if unit == "usd" else f"{value:g}{unit}"
