"""Time parameters of queries (instants, trailing windows, steps), parsed and bounded in one place.

Instants are accepted from 1970-01-01T00:00:00Z to 2100-01-01T00:00:00Z: every time column
of the store holds that range (``DateTime`` columns are UInt32 seconds, which end in 2106;
``DateTime64(9)`` ends in 2262). A value outside it, or one that is not a time, raises
``TimeRangeError`` whose message names the parameter and says what is accepted, so an API
answers it as a 400 instead of failing in the store.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from agentlat.errors import AgentlatError

NS = 1_000_000_000
EARLIEST_NS = 0
LATEST_NS = 4_102_444_800 * NS  # 2100-01-01T00:00:00Z
MAX_WINDOW_SECONDS = 400 * 86400
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DURATION = re.compile(r"^(\d{1,12})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SHOWN_CHARS = 200


class TimeRangeError(AgentlatError, ValueError):
    """A time parameter that cannot be used; the message names it and says what is accepted."""


def iso(ns: int) -> str:
    """``2026-11-29T12:00:00Z`` (with microseconds when there are any)."""
    moment = _EPOCH + timedelta(microseconds=ns // 1000)
    return moment.isoformat().replace("+00:00", "Z")


ACCEPTED_TIMES = (
    f"a time from {iso(EARLIEST_NS)} to {iso(LATEST_NS)}, as ISO-8601 (2026-11-29T12:00:00Z) or unix seconds"
)


def shown(value: str) -> str:
    """``value`` quoted for a message, cut short so an error never echoes a large input."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value):,} characters)"


def parse_instant(value: str, name: str) -> int:
    """Nanoseconds since the epoch of an ISO-8601 time or of unix seconds, within the accepted range."""
    try:
        ns = _instant_ns(value.strip())
    except (ArithmeticError, ValueError):  # OverflowError: an offset moves year 1 or 9999 out of datetime's range
        ns = None
    if ns is None or not EARLIEST_NS <= ns <= LATEST_NS:
        raise TimeRangeError(f"{name}={shown(value)}: expected {ACCEPTED_TIMES}")
    return ns


def _instant_ns(text: str) -> int | None:
    try:
        seconds = Decimal(text)
    except InvalidOperation:
        return _iso_ns(text)
    # Compared in seconds first: NaN, infinities and 1e999999 never reach an integer conversion.
    if not (seconds.is_finite() and EARLIEST_NS // NS <= seconds <= LATEST_NS // NS):
        return None
    return int(seconds * NS)


def _iso_ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * NS + delta.microseconds * 1000


def parse_duration(value: str, name: str, *, most: int = MAX_WINDOW_SECONDS, example: str = "15m, 24h, 7d") -> int:
    """Whole seconds of ``'90s'``, ``'15m'``, ``'24h'`` or ``'7d'``, from 1 s to ``most``."""
    match = _DURATION.match(value.strip())
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else 0
    if not 0 < seconds <= most:
        raise TimeRangeError(
            f"{name}={shown(value)}: expected a number and a unit s|m|h|d, from 1s to {_duration(most)}, e.g. {example}"
        )
    return seconds


def _duration(seconds: int) -> str:
    for unit in "dhm":
        if seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds // _UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"


def trailing(end_ns: int, seconds: int) -> tuple[int, int]:
    """The range of ``seconds`` before ``end_ns``; it may not begin before 1970."""
    start_ns = end_ns - seconds * NS
    if start_ns < EARLIEST_NS:
        raise TimeRangeError(
            f"a window of {_duration(seconds)} before {iso(end_ns)} begins before {iso(EARLIEST_NS)}, "
            "the earliest time accepted: give a later end or a shorter window"
        )
    return start_ns, end_ns


def time_range(now_ns: int, window: str, start: str | None, end: str | None) -> tuple[int, int]:
    """A range from ``start``/``end`` or a trailing ``window`` (before ``end``, or now); empty values are absent."""
    end_ns = parse_instant(end, "end") if end else now_ns
    if start:
        start_ns = parse_instant(start, "start")
    else:
        start_ns, end_ns = trailing(end_ns, parse_duration(window, "window"))
    if start_ns >= end_ns:
        raise TimeRangeError(f"start ({iso(start_ns)}) must be before end ({iso(end_ns)})")
    return start_ns, end_ns
