"""Filters that live in the URL, so a link (from Slack, say) opens the same view.

Each filter widget takes its first value from ``st.query_params`` and writes its current
value back, so the address bar always describes what is on screen. The window, service and
route sit in the sidebar on every page; the rest belong to one page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from agentlat.api.windows import TimeRangeError, parse_duration

WINDOWS = ("15m", "1h", "6h", "24h", "7d", "30d")
DEFAULT_WINDOW = "1h"
# Time-series step per window: about 60 to 180 points, whole minutes (the rollup grain).
STEPS = {"15m": "1m", "1h": "1m", "6h": "5m", "24h": "15m", "7d": "1h", "30d": "6h"}
_POINTS = 120  # about as many points for a window a link names that is not in WINDOWS
_UNIT_NAMES = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_SEEN = "_url_seen"  # session key: the value each URL parameter had when last written


@dataclass(frozen=True, slots=True)
class Scope:
    """The sidebar filters: a trailing window, and optionally one service and one route."""

    window: str = DEFAULT_WINDOW
    service: str = ""
    route: str = ""

    def params(self) -> dict[str, str]:
        """Query-API parameters for this scope (empty filters left out)."""
        return {k: v for k, v in (("window", self.window), ("service", self.service), ("route", self.route)) if v}

    def link(self, **extra: str) -> dict[str, str]:
        """URL query parameters that reopen this scope, with page parameters on top."""
        return {**self.params(), **{k: v for k, v in extra.items() if v}}


INTERVAL_KEYS = ("start", "end")  # URL parameters of an interval opened from a chart: ISO-8601 instants


def interval_link(scope: Scope, start: str, end: str) -> dict[str, str]:
    """URL query parameters of the trace explorer on ``[start, end)`` in ``scope``, slowest traces first."""
    return scope.link(start=start, end=end, sort="slowest")


def is_window(window: str) -> bool:
    """Whether the query API takes ``window`` as a trailing window (its grammar: ``agentlat.api.windows``)."""
    try:
        parse_duration(window, "window")
    except TimeRangeError:
        return False
    return True


def previous_window(window: str, now_s: int) -> tuple[int, int]:
    """The window of the same length just before the trailing ``window`` ending at ``now_s``."""
    seconds = parse_duration(window, "window")
    return now_s - 2 * seconds, now_s - seconds


def step(window: str) -> str:
    """The time-series step for ``window``: ``STEPS`` for the sidebar's windows, else whole minutes
    giving about 120 points."""
    if window in STEPS:
        return STEPS[window]
    return f"{max(1, parse_duration(window, 'window') // 60 // _POINTS)}m"


def describe_window(window: str) -> str:
    """'1h' -> 'the last 1 hour' style text for headings."""
    parse_duration(window, "window")  # raises TimeRangeError on what the API would refuse
    text = window.strip()
    number, unit = int(text[:-1]), _UNIT_NAMES[text[-1]]
    return f"the last {number} {unit}{'s' if number != 1 else ''}"


def url_value(key: str, default: str = "") -> str:
    """The URL's value for ``key`` (the last one when repeated), else ``default``."""
    value = st.query_params.get(key)
    return default if value in (None, "") else str(value)


def _adopt(key: str, default: str) -> None:
    """Give widget ``key`` the URL's value when the session is new or the URL changed it since
    the last run (a link, a page link with filters). A URL without the key (page navigation
    drops parameters) leaves the widget as the user set it."""
    raw = url_value(key)
    if key not in st.session_state:
        st.session_state[key] = raw or default
    elif raw and raw != st.session_state.get(_SEEN, {}).get(key):
        st.session_state[key] = raw


def write_url(key: str, value: str) -> None:
    """Put ``value`` in the URL under ``key``, or take ``key`` out when ``value`` is empty."""
    st.session_state.setdefault(_SEEN, {})[key] = value
    if value:
        if st.query_params.get(key) != value:
            st.query_params[key] = value
    elif key in st.query_params:
        del st.query_params[key]


def url_select(
    label: str,
    key: str,
    options: Sequence[str],
    default: str = "",
    *,
    where: Any = st,
    format_func: Callable[[str], str] = str,
    keep_unknown: bool | Callable[[str], bool] = True,
    **widget: Any,
) -> str:
    """A selectbox bound to URL parameter ``key``. A value missing from ``options`` is kept as an
    extra choice (a link may name a route with no data yet) or, with ``keep_unknown=False`` (or a
    test the value fails), reset to ``default``."""
    _adopt(key, default)
    choices = list(dict.fromkeys(options))
    value = st.session_state[key]
    if value not in choices:
        if keep_unknown(value) if callable(keep_unknown) else keep_unknown:
            choices.append(st.session_state[key])
        else:
            st.session_state[key] = default
    value = where.selectbox(label, choices, key=key, format_func=format_func, **widget)
    write_url(key, value)
    return value


def url_segment(label: str, key: str, options: Sequence[str], default: str, *, format_func: Callable = str) -> str:
    """A segmented control bound to URL parameter ``key``; always has a value."""
    _adopt(key, default)
    if st.session_state[key] not in options:
        st.session_state[key] = default
    value = st.segmented_control(label, list(options), key=key, format_func=format_func) or default
    write_url(key, value)
    return value


def url_text(label: str, key: str, *, where: Any = st, **widget: Any) -> str:
    """A text input bound to URL parameter ``key``."""
    _adopt(key, "")
    value = where.text_input(label, key=key, **widget).strip()
    write_url(key, value)
    return value
