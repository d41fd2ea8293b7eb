"""What rules read from the store, and the observations made of it.

Percentile rules (threshold, drift) and hit-rate rules read the per-minute rollups: each window is whole
minutes, its rows merged as ``/api/v1/percentiles`` does for long windows (exact percentiles of
up to 128 values, t-digest beyond).
Burn-rate rules need the share of requests slower than a latency, which three stored
quantiles cannot give, so they count raw spans per minute (exact, duplicates dropped) and
sum the minutes of each window. What changed with an alert (a new ``service.version``,
model or prompt version) compares the raw spans of the window in which its condition first held with the
window before.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from agentlat.alerts.conditions import Interval, Observation, RatioStat, WindowStat, burn_rate, drift, floor, threshold
from agentlat.alerts.message import iso, when
from agentlat.alerts.rules import BurnRate, Drift, Floor, Rule
from agentlat.store import SpanFilter, Store

NS = 1_000_000_000
LabelKey = tuple[str, ...]  # the values of a rule's ``by`` dimensions, in order
CHANGE_DIMENSIONS = (("service_version", "service.version"), ("model", "model"),
                     ("prompt_version", "agentlat.prompt.version"))  # fmt: skip


class MinuteCounts:
    """Requests and slow requests per minute of one label set, summed over any window in O(log n)."""

    def __init__(self, minutes: Mapping[int, tuple[int, int]]) -> None:
        self.minutes = sorted(minutes)
        self.totals = [0, *accumulate(minutes[m][0] for m in self.minutes)]
        self.slows = [0, *accumulate(minutes[m][1] for m in self.minutes)]

    def window(self, end: int, length: int) -> tuple[int, int]:
        """(requests, slow requests) in [end - length, end)."""
        lo, hi = bisect.bisect_left(self.minutes, end - length), bisect.bisect_left(self.minutes, end)
        return self.totals[hi] - self.totals[lo], self.slows[hi] - self.slows[lo]


@dataclass
class RuleData:
    """What one rule read for one project, covering a set of evaluation ends."""

    # window end -> label set -> stats (a hit-rate rule's: RatioStat)
    windows: dict[int, dict[LabelKey, WindowStat | RatioStat]] = field(default_factory=dict)
    minutes: dict[LabelKey, MinuteCounts] = field(default_factory=dict)  # burn rates: label set -> counts


def window_ends(rule: Rule, ends: Iterable[int]) -> list[int]:
    """Ends of every percentile window the evaluations at ``ends`` read (drift: with its baselines)."""
    needed = set()
    for end in ends:
        needed.add(end)
        if isinstance(rule.spec, Drift):
            needed.update(rule.spec.baseline_ends(end))
    return sorted(needed)


class MetricSource:
    """Reads the store for rules."""

    def __init__(self, store: Store) -> None:
        self.tables = store.alerts

    def projects(self, since: int) -> list[str]:
        return self.tables.projects(since)

    def fetch(self, project: str, rule: Rule, ends: Sequence[int]) -> RuleData:
        """Everything the rule needs to be evaluated in ``project`` at each window end in ``ends``."""
        data = RuleData()
        if isinstance(rule.spec, BurnRate):
            start, stop = (min(ends) - rule.window) * NS, max(ends) * NS
            where = SpanFilter(project, start, stop, dict(rule.match))
            minutes: dict[LabelKey, dict[int, tuple[int, int]]] = {}
            for row in self.tables.slow_counts(where, rule.metric, rule.by, rule.spec.threshold_ms):
                minutes.setdefault(_key(rule, row), {})[row["minute"]] = (row["total"], row["slow"])
            data.minutes = {key: MinuteCounts(counts) for key, counts in minutes.items()}
            return data
        where = SpanFilter(project, 0, 0, dict(rule.match))
        if isinstance(rule.spec, Floor):
            for row in self.tables.window_ratios(where, rule.by, window_ends(rule, ends), rule.window):
                data.windows.setdefault(row["window_end"], {})[_key(rule, row)] = RatioStat(row["count"], row["ratio"])
            return data
        for row in self.tables.window_percentiles(where, rule.metric, rule.by, window_ends(rule, ends), rule.window):
            stat = WindowStat(row["count"], tuple(row["q"]))
            data.windows.setdefault(row["window_end"], {})[_key(rule, row)] = stat
        return data

    def changes(self, project: str, rule: Rule, values: Mapping[str, str], end: int, length: int) -> list[str]:
        """Dimension values new in [end - length, end) against the window before, each with its first span's
        time, e.g. ``new service.version 1.4.2 from 2026-11-29 12:03 UTC (before: 1.4.1)``; nothing when the
        window before had no spans. ``end``: the end of the window in which the alert's condition first held,
        so what is named began where the drift did."""
        where = SpanFilter(project, (end - 2 * length) * NS, end * NS, {**rule.match, **values})
        seen: dict[tuple[bool, str], dict[str, int]] = {}
        for row in self.tables.dimension_values(where, (end - length) * NS):
            seen.setdefault((bool(row["current"]), row["dimension"]), {})[row["value"]] = row["first_ns"]
        if not any(now for now, _ in seen) or all(now for now, _ in seen):
            return []
        found = []
        for column, name in CHANGE_DIMENSIONS:
            now, before = seen.get((True, column), {}), seen.get((False, column), {})
            if new := [v for v in now if v not in before]:
                began = ", ".join(f"{v} from {when(iso(now[v] // NS))}" for v in new)
                found.append(f"new {name} {began} (before: {', '.join(sorted(before)) or 'none'})")
        return found


def _key(rule: Rule, row: Mapping[str, object]) -> LabelKey:
    return tuple(str(row[d]) for d in rule.by)


def observations(
    rule: Rule, data: RuleData, end: int, active: Callable[[Mapping[str, str]], Sequence[Interval]]
) -> list[Observation]:
    """The rule's observation of each label set with samples in the window ending at ``end``.
    Label sets missing a ``by`` value (spans without a route, say) are not judged."""
    out = []
    if isinstance(rule.spec, BurnRate):
        longest = rule.window
        for key, counts in sorted(data.minutes.items()):
            if all(key) and counts.window(end, longest)[0]:
                out.append(burn_rate(rule, _values(rule, key), lambda length, c=counts: c.window(end, length)))
        return out
    for key, stat in sorted(data.windows.get(end, {}).items()):
        if not all(key):
            continue
        values = _values(rule, key)
        if isinstance(rule.spec, Floor):
            assert isinstance(stat, RatioStat)
            out.append(floor(rule, values, stat))
        elif isinstance(rule.spec, Drift):
            baseline = [(e, data.windows.get(e, {}).get(key)) for e in rule.spec.baseline_ends(end)]
            out.append(drift(rule, values, stat, baseline, active(values)))  # type: ignore[arg-type]
        else:
            out.append(threshold(rule, values, stat))  # type: ignore[arg-type]
    return out


def _values(rule: Rule, key: LabelKey) -> dict[str, str]:
    return dict(zip(rule.by, key, strict=True))
