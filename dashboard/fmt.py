"""How the dashboard writes numbers: milliseconds, shares and changes. Pure."""

from __future__ import annotations

import math

DASH = "—"


def ms(value: float | None) -> str:
    """Milliseconds with precision that fits the size: 1,234 ms, 56.7 ms, 0.42 ms."""
    if value is None or math.isnan(value):
        return DASH
    if abs(value) >= 100:
        return f"{value:,.0f} ms"
    if abs(value) >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def share(value: float | None) -> str:
    """A ratio as a percentage: 0.125 -> 12.5%."""
    if value is None or math.isnan(value):
        return DASH
    return f"{value * 100:.1f}%"


def change(current: float | None, previous: float | None) -> str | None:
    """'+195 ms (+21.7%)' from previous to current; None when either is missing."""
    if current is None or previous is None:
        return None
    diff = current - previous
    text = f"{'+' if diff >= 0 else '-'}{ms(abs(diff))}"
    if previous:
        text += f" ({diff / previous * 100:+.1f}%)"
    return text


def count(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"
