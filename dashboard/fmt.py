"""How the dashboard writes numbers: milliseconds, shares and changes. Pure."""

from __future__ import annotations

import math
from datetime import datetime

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
    """A ratio as a percentage: 0.125 -> 12.5%. Only 0 reads 0.0% and only 1 reads 100.0%: a part that is not
    zero reads at least <0.1%, and the rest then at most >99.9%."""
    if value is None or math.isnan(value):
        return DASH
    if 0 < value < 0.0005:
        return "<0.1%"
    if 0.9995 <= value < 1:
        return ">99.9%"
    return f"{value * 100:.1f}%"


def saving(value: float | None) -> str:
    """A saving as the decrease it is: 410 -> '-410 ms' (a leading minus, so a metric's delta points down)."""
    return DASH if value is None or math.isnan(value) else f"-{ms(abs(value))}"


def instant(iso: str) -> datetime:
    """An ISO-8601 time as the API writes it ('...Z') as an aware datetime."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def utc_time(iso: str) -> str:
    """An ISO-8601 UTC time to the second, readable: '2025-01-02T13:45:07.123456Z' -> '2025-01-02 13:45:07 UTC'."""
    return f"{iso.replace('T', ' ')[:19]} UTC" if iso else DASH


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


def duration(seconds: float) -> str:
    """A length of time, as coarse as reads well: '45 s', '10 min', '2.5 h', '3 d'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}".removesuffix(".0") + " h"
    return f"{seconds / 86400:.1f}".removesuffix(".0") + " d"
