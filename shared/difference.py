"""How much slower one side is than another, and how sure that is: the difference B - A of a percentile or a
mean between two samples of latencies, with a 95 % bootstrap interval (pure, numpy).

Shared by the store's comparisons (``GET /api/v1/compare``) and by the checks against a baseline (``agentlat
budget check --baseline`` and the pytest plugin's), so every path judges a difference alike. The percentiles are
numpy's linear interpolation (the rule ``quantileExactInclusive`` follows); ``RESAMPLES`` resamples of each side
with a fixed seed, so one input gives one answer, their 2.5th and 97.5th percentiles the interval. A side with
fewer values than a statistic needs (``measures.DEFAULT_MIN_SAMPLES``) gives the point difference but no
interval: too few samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, PERCENTILES

LEVELS = {"p50": 50.0, "p95": 95.0, "p99": 99.0}
RESAMPLES = 500
BOOTSTRAP_CAP = 10_000  # values a side's bootstrap draws from at most (a random subset beyond: a wider interval)
SEED = 40
MEAN_MIN_SAMPLES = DEFAULT_MIN_SAMPLES["p50"]  # a mean's interval needs as many samples as a median's
STATUSES = ("slower", "faster", "no_clear_change", "too_few_samples", "no_data")


def _stats(values: np.ndarray) -> dict[str, Any]:
    found = {"count": int(values.size), "mean": float(values.mean()) if values.size else None}
    for name, level in LEVELS.items():
        found[name] = float(np.percentile(values, level)) if values.size else None
    return found


def _measure(values: np.ndarray, statistic: str, axis: int | None = None) -> Any:
    return values.mean(axis=axis) if statistic == "mean" else np.percentile(values, LEVELS[statistic], axis=axis)


def _bootstrap(values: np.ndarray, statistics: Sequence[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each statistic over ``RESAMPLES`` resamples of ``values`` (drawn once for them all)."""
    drawn = _resampled(values, rng)
    return {s: _measure(drawn, s, axis=1) for s in statistics}


def _resampled(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``RESAMPLES`` resamples of ``rows`` (values, or pairs), shape (RESAMPLES, n, ...): drawn with replacement
    from a random ``BOOTSTRAP_CAP`` of them beyond that many, which widens the interval rather than narrowing it."""
    if rows.shape[0] > BOOTSTRAP_CAP:
        rows = rng.choice(rows, BOOTSTRAP_CAP, replace=False, axis=0)
    return rows[rng.integers(0, rows.shape[0], size=(RESAMPLES, rows.shape[0]))]


def compare_values(
    a: Sequence[float], b: Sequence[float], statistics: Sequence[str], minimums: Mapping[str, int]
) -> dict[str, Any]:
    """Both sides' count, mean and percentiles, and per statistic the difference B - A, its 95 % interval
    and what it says: slower or faster when the interval leaves out 0, too few samples below the statistic's
    minimum on either side (the difference without an interval), no data when a side has no values."""
    rng = np.random.default_rng(SEED)
    left, right = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))  # in any order, alike
    judged = [s for s in statistics if min(left.size, right.size) >= minimums[s]]
    spreads = {}
    if judged:
        drawn_a, drawn_b = _bootstrap(left, judged, rng), _bootstrap(right, judged, rng)
        spreads = {s: drawn_b[s] - drawn_a[s] for s in judged}
    return {"a": _stats(left), "b": _stats(right), "differences": [
        _difference(left, right, s, spreads.get(s)) for s in statistics
    ]}  # fmt: skip


def _difference(a: np.ndarray, b: np.ndarray, statistic: str, spread: np.ndarray | None) -> dict[str, Any]:
    found: dict[str, Any] = {"statistic": statistic, "difference": None, "low": None, "high": None}
    if not a.size or not b.size:
        return {**found, "status": "no_data"}
    found["difference"] = float(_measure(b, statistic) - _measure(a, statistic))
    if spread is None:
        return {**found, "status": "too_few_samples"}
    low, high = (float(x) for x in np.percentile(spread, (2.5, 97.5)))
    status = "slower" if low > 0 else "faster" if high < 0 else "no_clear_change"
    return {**found, "low": low, "high": high, "status": status}


def percentile_comparison(
    a: Sequence[float], b: Sequence[float], minimums: Mapping[str, int] = DEFAULT_MIN_SAMPLES
) -> dict[str, Any]:
    """``compare_values`` at p50, p95 and p99, each needing its minimum (``DEFAULT_MIN_SAMPLES``) on both sides."""
    return compare_values(a, b, PERCENTILES, minimums)


def mean_comparison(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    return compare_values(a, b, ("mean",), {"mean": MEAN_MIN_SAMPLES})


# --- from the rollups: a side's values are a count, a sum and the values or their quantiles -----------------------
# The levels at which a side's merged t-digest is read when the rollups do not keep its values: a thousandth apart,
# the percentiles compared among them.
GRID = tuple(i / 1000 for i in range(1, 1000))
_Z = 1.959963984540054  # the normal's 97.5th percentile: a 95 % interval


@dataclass(frozen=True, slots=True)
class Summary:
    """One side's values as the rollups keep them: how many, their sum, and either the values themselves
    (``exact``: every one, sorted) or their quantiles at ``GRID`` (a t-digest's estimates)."""

    count: int
    total: float
    exact: bool
    values: Sequence[float]  # sorted values when exact, else one quantile per GRID level

    def quantile(self, level: float) -> float:
        """The value at ``level``: numpy's linear interpolation of the values, or of the grid's quantiles."""
        if self.exact:
            return float(np.percentile(self.values, level * 100))
        return float(np.interp(level, GRID, self.values))

    def variance(self) -> float:
        """Of the values, or of the grid's quantiles (each a thousandth of the values)."""
        return float(np.var(self.values, ddof=1)) if len(self.values) > 1 else 0.0


def compare_summaries(
    a: Summary | None, b: Summary | None, statistics: Sequence[str], minimums: Mapping[str, int]
) -> dict[str, Any]:
    """``compare_values``'s answer from what the rollups keep. Both sides exact: their values, bootstrapped as
    ever. Else a percentile's interval on each side from the ranks that a 95 % interval of a quantile spans
    (level ± 1.96 √(level (1 - level) / n), read from the side's quantiles), combined into one for B - A by
    recovering each side's variance from its interval (Zou and Donner's MOVER); a mean's from the sides' variances
    (normal). Both need as many values a side as ``compare_values``."""
    if a is not None and b is not None and a.exact and b.exact:
        return compare_values(a.values, b.values, statistics, minimums)
    sides = {"a": a, "b": b}
    found: dict[str, Any] = {key: _summary_stats(side) for key, side in sides.items()}
    differences = []
    for statistic in statistics:
        difference: dict[str, Any] = {"statistic": statistic, "difference": None, "low": None, "high": None}
        if a is None or b is None:
            differences.append({**difference, "status": "no_data"})
            continue
        point = _point(b, statistic) - _point(a, statistic)
        difference["difference"] = point
        if min(a.count, b.count) < minimums[statistic]:
            differences.append({**difference, "status": "too_few_samples"})
            continue
        low, high = _summary_interval(a, b, statistic, point)
        status = "slower" if low > 0 else "faster" if high < 0 else "no_clear_change"
        differences.append({**difference, "low": low, "high": high, "status": status})
    return {**found, "differences": differences}


def _summary_stats(side: Summary | None) -> dict[str, Any]:
    if side is None:
        return {"count": 0, "mean": None, **dict.fromkeys(LEVELS)}
    return {"count": side.count, "mean": side.total / side.count,
            **{name: side.quantile(level / 100) for name, level in LEVELS.items()}}  # fmt: skip


def _point(side: Summary, statistic: str) -> float:
    return side.total / side.count if statistic == "mean" else side.quantile(LEVELS[statistic] / 100)


def _summary_interval(a: Summary, b: Summary, statistic: str, point: float) -> tuple[float, float]:
    if statistic == "mean":
        spread = _Z * math.sqrt(a.variance() / a.count + b.variance() / b.count)
        return point - spread, point + spread
    level = LEVELS[statistic] / 100
    (la, ma, ua), (lb, mb, ub) = (_quantile_interval(side, level) for side in (a, b))
    return point - math.hypot(mb - lb, ua - ma), point + math.hypot(ub - mb, ma - la)


def _quantile_interval(side: Summary, level: float) -> tuple[float, float, float]:
    """A 95 % interval of the side's quantile at ``level`` (distribution-free: the ranks it spans), and the quantile."""
    half = _Z * math.sqrt(level * (1 - level) / side.count)
    low, high = max(level - half, 0.0), min(level + half, 1.0)
    return side.quantile(low), side.quantile(level), side.quantile(high)


# --- the levers that move with latency: higher or lower, not slower or faster ----------------------------
DIRECTIONS = {"slower": "higher", "faster": "lower"}  # a lever's difference above or below 0, surely


def mean_change(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """A lever's mean on each side (output tokens a call, ms a trace) and B - A with its interval, ``higher`` or
    ``lower`` when the interval leaves out 0."""
    found = mean_comparison(a, b)
    [difference] = found["differences"]
    side = {k: {"count": found[k]["count"], "value": found[k]["mean"]} for k in ("a", "b")}
    return {**side, **_direction(difference)}


def ratio_change(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]], minimum: int) -> dict[str, Any]:
    """A ratio of sums on each side (cache-read over input tokens of the calls reporting both), and B - A with a
    95 % interval from resampling each side's calls, as ``mean_change`` says it; too few samples below
    ``minimum`` calls a side."""
    rng = np.random.default_rng(SEED)
    left, right = (np.asarray(pairs, dtype=float).reshape(-1, 2) for pairs in (a, b))
    side = {k: {"count": int(v.shape[0]), "value": _ratio(v)} for k, v in (("a", left), ("b", right))}
    found: dict[str, Any] = {"statistic": "ratio", "difference": None, "low": None, "high": None}
    if side["a"]["value"] is None or side["b"]["value"] is None:
        return {**side, **found, "status": "no_data"}
    found["difference"] = side["b"]["value"] - side["a"]["value"]
    if min(left.shape[0], right.shape[0]) < minimum:
        return {**side, **found, "status": "too_few_samples"}
    spread = _ratios(right, rng) - _ratios(left, rng)
    low, high = (float(x) for x in np.percentile(spread, (2.5, 97.5)))
    status = "higher" if low > 0 else "lower" if high < 0 else "no_clear_change"
    return {**side, **found, "low": low, "high": high, "status": status}


def _ratio(pairs: np.ndarray) -> float | None:
    total = pairs[:, 1].sum() if pairs.size else 0.0
    return float(pairs[:, 0].sum() / total) if total > 0 else None


def _ratios(pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The ratio of sums over ``RESAMPLES`` resamples of the pairs."""
    drawn = _resampled(pairs, rng)
    totals = drawn[:, :, 1].sum(axis=1)
    return np.divide(drawn[:, :, 0].sum(axis=1), totals, out=np.zeros(RESAMPLES), where=totals > 0)


def _direction(difference: dict[str, Any]) -> dict[str, Any]:
    return {**difference, "status": DIRECTIONS.get(difference["status"], difference["status"])}
