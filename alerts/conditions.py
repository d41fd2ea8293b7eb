"""Whether a rule's condition holds for one label set, from plain numbers. No I/O.

Each function returns an ``Observation``: ``holds`` is True or False when there were enough
samples to say, and None when there were not (an alert then neither fires nor resolves).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlat.alerts.rules import QUANTILE_INDEX, BurnRate, Drift, Floor, Rule, Threshold


@dataclass(frozen=True, slots=True)
class WindowStat:
    """Sample count and p50/p95/p99 (ms) of a metric over one window."""

    count: int
    quantiles: tuple[float, float, float]

    def value(self, percentile: str) -> float:
        return self.quantiles[QUANTILE_INDEX[percentile]]


@dataclass(frozen=True, slots=True)
class Observation:
    """One evaluation of a rule for one label set."""

    values: Mapping[str, str]  # the label set: each of the rule's ``by`` dimensions -> its value
    holds: bool | None  # None: too few samples to say
    value: float | None = None  # the percentile (ms) or, for burn rates, the long window's burn rate
    reference: float | None = None  # the threshold (ms), the drift baseline (ms) or the burn-rate factor
    count: int = 0  # samples behind value
    facts: Mapping[str, Any] = field(default_factory=dict)  # numbers a message shows beside value

    def as_dict(self) -> dict[str, Any]:
        return {
            "holds": self.holds,
            "value": self.value,
            "reference": self.reference,
            "count": self.count,
            "facts": dict(self.facts),
        }


Interval = tuple[int, int | None]  # window ends [first, stop) in which an alert was active; stop None: still is


def threshold(rule: Rule, values: Mapping[str, str], stat: WindowStat | None) -> Observation:
    spec = rule.spec
    assert isinstance(spec, Threshold)
    if stat is None or stat.count == 0:
        return Observation(values, None, None, spec.threshold_ms, 0)
    value = stat.value(spec.percentile)
    holds = value > spec.threshold_ms if stat.count >= rule.min_samples else None
    return Observation(values, holds, value, spec.threshold_ms, stat.count)


@dataclass(frozen=True, slots=True)
class RatioStat:
    """Samples and the ratio (the prompt-cache hit rate) over one window; None: no input tokens reported."""

    count: int
    ratio: float | None


def floor(rule: Rule, values: Mapping[str, str], stat: RatioStat | None) -> Observation:
    """Holds while the ratio is below the rule's threshold (with enough samples); no ratio is no verdict."""
    spec = rule.spec
    assert isinstance(spec, Floor)
    if stat is None or stat.count == 0 or stat.ratio is None:
        return Observation(values, None, None, spec.threshold, stat.count if stat else 0)
    holds = stat.ratio < spec.threshold if stat.count >= rule.min_samples else None
    return Observation(values, holds, stat.ratio, spec.threshold, stat.count)


def drift(
    rule: Rule,
    values: Mapping[str, str],
    current: WindowStat | None,
    baseline: Sequence[tuple[int, WindowStat | None]],
    active: Sequence[Interval],
) -> Observation:
    """``baseline`` holds (window end, stats) of each baseline window; windows that alerted (ended
    within ``active``: this alert was pending or firing) or have too few samples are left out."""
    spec = rule.spec
    assert isinstance(spec, Drift)
    alerting = [end for end, _ in baseline if any(a <= end and (b is None or end < b) for a, b in active)]
    usable = [
        stat.value(spec.percentile)
        for end, stat in baseline
        if end not in alerting and stat is not None and stat.count >= rule.min_samples
    ]
    base = statistics.median(usable) if usable else None
    facts = {"baseline_windows": len(usable), "alerting_windows": len(alerting), "floor_ms": spec.floor_ms}
    if current is None or current.count == 0:
        return Observation(values, None, None, base, 0, facts)
    value = current.value(spec.percentile)
    if base is None or len(usable) < spec.min_windows or current.count < rule.min_samples:
        return Observation(values, None, value, base, current.count, facts)
    holds = value > base * spec.ratio and value - base > spec.floor_ms
    return Observation(values, holds, value, base, current.count, {**facts, "ratio": value / base if base else None})


def burn_rate(rule: Rule, values: Mapping[str, str], counts: Callable[[int], tuple[int, int]]) -> Observation:
    """``counts(seconds)`` gives (requests, requests slower than the SLO threshold) over the trailing
    window of that length. Holds when any pair burns at its factor in both windows; False only when
    every pair had enough requests to say no."""
    spec = rule.spec
    assert isinstance(spec, BurnRate)
    pairs = [_pair(rule, spec, w.long, w.short, w.factor, counts) for w in spec.windows]
    judged = [p for p in pairs if p["holds"] is not None]
    holds: bool | None = any(p["holds"] for p in judged) if judged else None
    if holds is False and len(judged) < len(pairs):
        holds = None
    deciding = max(judged or pairs, key=lambda p: (bool(p["holds"]), p["level"]))
    facts = {"objective": spec.objective, "threshold_ms": spec.threshold_ms, **deciding, "pairs": pairs}
    value = deciding["long_rate"]
    return Observation(values, holds, value, deciding["factor"], deciding["long_count"], facts)


def _pair(
    rule: Rule, spec: BurnRate, long: int, short: int, factor: float, counts: Callable[[int], tuple[int, int]]
) -> dict[str, Any]:
    (long_count, long_slow), (short_count, short_slow) = counts(long), counts(short)
    long_rate = long_slow / long_count / spec.budget if long_count else None
    short_rate = short_slow / short_count / spec.budget if short_count else None
    enough = long_count >= rule.min_samples and short_count >= rule.min_samples
    holds = (long_rate >= factor and short_rate >= factor) if enough and long_rate is not None else None
    level = min(long_rate or 0.0, short_rate or 0.0) / factor
    return {
        "long": long, "short": short, "factor": factor, "holds": holds, "level": level,
        "long_rate": long_rate, "short_rate": short_rate, "long_count": long_count, "long_slow": long_slow,
        "short_count": short_count, "short_slow": short_slow,
    }  # fmt: skip
