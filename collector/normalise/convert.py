"""Converters of attribute values, for the normaliser (``normalise.py``).

A converter maps an attribute's value to the converted value, None (absent: a later source may
fill the column) or ``BAD`` (present but unusable: flagged). Which converter reads a column follows
from the column (``converter``): durations in the unit the dialect writes them, counts, flags,
prefetch outcomes, text. Pure and total: no converter raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime

from agentlat import semconv as sc

Converter = Callable[[object], object]

BAD = object()  # converter verdict: present but unusable
_INF = math.inf
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Durations and counts first try the exact type instrumentations send (same verdict).


def _number(value: object) -> float | None:
    """A finite, non-negative number, or None; numeric strings count (SDKs stringify)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _scaled(factor: float) -> Converter:
    def convert(value: object) -> object:
        number = value if type(value) is float and 0 <= value < _INF else _number(value)
        if number is None:
            return BAD
        scaled = number * factor  # finite and non-negative, unless it overflowed
        return scaled if scaled < _INF else BAD

    return convert


def _counter(limit: int) -> Converter:
    def convert(value: object) -> object:
        if type(value) is int:
            return value if 0 <= value <= limit else BAD
        if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 20:
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value if 0 <= value <= limit else BAD
        number = _number(value)
        ok = number is not None and number.is_integer() and number <= limit
        return int(number) if ok and number is not None else BAD

    return convert


def _text(value: object) -> object:
    """A string; empty means "not reported", so a later fallback may fill the column."""
    return (value or None) if isinstance(value, str) else BAD


_TRUTH = {"true": 1, "false": 0, "1": 1, "0": 0}


def as_flag(value: object) -> object:
    """0/1 from a bool, 0/1, or "true"/"false"."""
    if isinstance(value, int):  # bools included
        return int(value) if value in (0, 1) else BAD
    return _TRUTH.get(value.strip().lower(), BAD) if isinstance(value, str) else BAD


def _prefetch(value: object) -> object:
    outcome = value.strip().lower() if isinstance(value, str) else None
    return outcome if outcome in sc.PREFETCH_OUTCOMES else BAD


DURATIONS = {"s": _scaled(1e3), "ms": _scaled(1.0), "ns": _scaled(1e-6)}
_COUNT = _counter(2**64 - 1)
_BY_COLUMN = {"StallCount": _counter(2**32 - 1), "Streaming": as_flag, "PrefetchOutcome": _prefetch}


def iso_ns(value: object) -> int | None:
    """Unix ns of an ISO-8601 time (Z or offset, any fraction, maybe JSON-quoted)."""
    text = value.strip() if isinstance(value, str) else None
    if text and text.startswith('"'):
        try:
            text = json.loads(text)
        except ValueError:
            return None
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)  # 3.11+: Z, offsets, any fraction
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000


def converter(column: str, unit: str) -> Converter:
    """Columns fix the type; the dialect fixes the unit its durations are written in."""
    if column.endswith("Ms"):
        return DURATIONS[unit]
    return _COUNT if column.endswith("Tokens") else _BY_COLUMN.get(column, _text)
