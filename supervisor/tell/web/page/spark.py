"""A small inline SVG line of numbers (the board's sparklines): no script, no library."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 80, 18


def sparkline(values: Sequence[float], *, label: str) -> str:
    """An SVG polyline scaled to its own min and max; '' for fewer than two points."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = WIDTH / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{HEIGHT - 1 - (v - low) / span * (HEIGHT - 2):.1f}"
        for i, v in enumerate(values)
    )
    title = escape(f"{label}: {values[-1]:.3g} (min {low:.3g}, max {high:.3g})")
    return (
        f'<svg class="spark" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"'
        f' role="img" aria-label="{title}"><title>{title}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/></svg>'
    )
