"""The span as the dialect tables see it, and the row of derived columns being built from it.

``span_of`` validates the raw inputs of ``normalise.derive`` into a ``Span`` (anything malformed
dropped and flagged); the dialect hooks and the normaliser write into an ``Out``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from agentlat import semconv as sc
from agentlat.collector.normalise.convert import BAD, Converter
from agentlat.shared.columns import DERIVED_DEFAULTS, DERIVED_NAMES

Event = tuple[str, int, Mapping[str, object]]


class EventTimes(NamedTuple):
    """A span's events as parallel sequences of names and unix-ns times, every entry well
    formed: the form the OTLP decoder hands over, so ``derive`` need not check each event."""

    names: Sequence[str]
    times: Sequence[int]


NO_EVENTS = EventTimes((), ())
NS_PER_MS = 1_000_000
FIRST = -1  # priority of a column written before any source is read
_OTHER = sc.ROLE_OTHER
_DEFAULTS = {column: DERIVED_DEFAULTS[column] for column in DERIVED_NAMES}  # in column order


@dataclass(slots=True)
class Span:
    name: str
    kind: str
    start: int | None  # unix ns, None when unusable
    end: int | None
    attrs: Mapping[str, object]  # string keys only; JSON members joined in once the dialect is known
    events: EventTimes  # malformed entries dropped
    keys: str  # "\n" + the attribute keys joined by "\n", for namespace tests

    @property
    def duration_ms(self) -> float | None:
        if self.start is None or self.end is None or self.end < self.start:
            return None
        return (self.end - self.start) / NS_PER_MS

    def in_namespace(self, prefix: str) -> bool:
        """Whether any attribute key starts with ``prefix``. One substring search of the joined
        keys rules most spans out; a hit is confirmed key by key (a key may hold a newline)."""
        return "\n" + prefix in self.keys and any(key.startswith(prefix) for key in self.attrs)


class Out:
    """The row being built. ``taken`` maps each written column to the priority of the source
    read that wrote it (``FIRST`` for anything written otherwise); "" is always taken, so
    reads into it only validate."""

    __slots__ = ("flags", "role", "taken", "values")

    def __init__(self) -> None:
        self.values: dict[str, object] = dict(_DEFAULTS)
        self.role: str = _OTHER
        self.taken: dict[str, int] = {"": FIRST}
        self.flags: dict[str, None] = {}  # ordered, deduplicated

    def put(self, column: str, value: object) -> None:
        """First writer wins: tables list preferred sources first."""
        if column not in self.taken:
            self.values[column] = value
            self.taken[column] = FIRST

    def put_ms(self, column: str, ms: float) -> None:
        """A duration computed here (not read): negative means skew or a bad event."""
        if ms < 0 and column not in self.taken:
            self.flag(f"negative_timing:{column}")
        elif ms >= 0:
            self.put(column, ms)

    def flag(self, text: str) -> None:
        self.flags[text] = None

    def read(self, attrs: Mapping[str, object], attr: str, convert: Converter) -> object:
        """The converted attribute, or None when absent or unusable (then flagged)."""
        value = convert(attrs[attr]) if attr in attrs else None
        if value is BAD:
            self.flag(f"bad_attribute:{attr}")
            return None
        return value


def span_of(name: object, kind: object, start: object, end: object, attrs: object, events: object, out: Out) -> Span:
    """Validate the raw inputs; anything malformed is dropped and flagged."""
    start_ns, end_ns = _unix_ns(start), _unix_ns(end)
    if start_ns is None or end_ns is None or end_ns < start_ns:
        out.flag("bad_span_times")
    if type(attrs) is not dict and not isinstance(attrs, Mapping):
        out.flag("bad_attributes")
        attrs = {}
    attrs, keys = _str_keyed(attrs)
    return Span(
        name=name if isinstance(name, str) else "",
        kind=kind if isinstance(kind, str) else "",
        start=start_ns,
        end=end_ns,
        attrs=attrs,
        events=events if type(events) is EventTimes else _events(events, out),
        keys=keys,
    )


def _str_keyed(attrs: Mapping[object, object]) -> tuple[Mapping[str, object], str]:
    """The attributes with string keys only, and the keys joined for ``Span.in_namespace``.
    A dict (the decoder's output) is used as is, never copied or changed, when joining its
    keys succeeds, which proves they are all strings."""
    if type(attrs) is dict:
        try:
            return attrs, "\n" + "\n".join(attrs)  # type: ignore[arg-type]
        except TypeError:
            pass
    clean = {key: value for key, value in attrs.items() if isinstance(key, str)}
    return clean, "\n" + "\n".join(clean)


def _unix_ns(value: object) -> int | None:
    """A timestamp as OTLP carries it (fixed64 unix ns), else None."""
    return value if type(value) is int and 0 <= value < 2**64 else None


def _events(events: object, out: Out) -> EventTimes:
    if type(events) is not list and (not isinstance(events, Sequence) or isinstance(events, str | bytes)):
        out.flag("bad_event")
        return NO_EVENTS
    names: list[str] = []
    times: list[int] = []
    for event in events:
        ok = type(event) is tuple or (isinstance(event, Sequence) and not isinstance(event, str | bytes))
        if ok and len(event) >= 2 and isinstance(event[0], str) and _unix_ns(event[1]) is not None:
            names.append(event[0])
            times.append(event[1])
        else:
            out.flag("bad_event")
    return EventTimes(names, times)
