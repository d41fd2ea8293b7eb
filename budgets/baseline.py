"""Latency against a baseline: is this run slower than the last one, by more than a margin, with the
confidence its data gives? Shared by ``agentlat budget check --baseline`` and the pytest plugin's
``--agentlat-baseline``.

Both sides are samples: per group (``route /chat``, ``agent planner``, a test's node id) and latency, the
values in ms. A check takes one percentile of one group's latency: the difference current - baseline and its
95 % bootstrap interval (``shared/difference.py``, as ``/api/v1/compare``). It is a **regression** when the
whole interval lies above the margin (``10%`` of the baseline's value, or ``50ms``), **pass** when it does not,
**insufficient** below the percentile's sample minimum on either side (the difference is still given), and
**no_baseline** when the baseline has no values for it (nothing to compare, not judged).

A results file (``--save-results``, ``--agentlat-results``) holds one run's samples, so a later run can take
it as its baseline: JSON, ``{"agentlat_results": 1, "source": ..., "groups": {group: {metric: [ms, ...]}}}``.
numpy is needed (the bootstrap), and PyYAML for a margin in ms; both come with ``agentlat[server]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentlat.errors import ConfigError
from agentlat.shared.measures import METRIC_NAMES, ms, signed_ms

RESULTS_VERSION = 1
CHECK_STATUSES = ("regression", "insufficient", "pass", "no_baseline")  # the worst first
DEFAULT_MARGIN = "10%"

Samples = Mapping[str, Mapping[str, Sequence[float]]]  # group -> latency -> values (ms)


class BaselineError(ConfigError):
    """A baseline that cannot be read or a margin that is not one."""


@dataclass(frozen=True, slots=True)
class Margin:
    """How much slower than the baseline a percentile may be: a share of the baseline's value, or ms."""

    share: float | None = None
    ms: float | None = None

    def allowed(self, baseline_ms: float) -> float:
        return self.ms if self.ms is not None else (self.share or 0.0) * baseline_ms

    def __str__(self) -> str:
        return ms(self.ms) if self.ms is not None else f"{(self.share or 0.0) * 100:g}%"


def parse_margin(text: str) -> Margin:
    """``10%`` (of the baseline's value), ``50ms``, ``1.5s`` or a number of ms; 0 allows no slowdown."""
    from agentlat.shared.yamlfile import latency_ms, share

    raw = text.strip()
    if raw.endswith("%"):
        found = share(raw)
        if found is not None:
            return Margin(share=found)
    elif raw in ("0", "0ms", "0s"):
        return Margin(ms=0.0)
    elif (found := latency_ms(_number(raw))) is not None:
        return Margin(ms=found)
    raise BaselineError(f"margin {text!r}: give a percentage of the baseline (10%) or a duration (50ms, 1.5s)")


def _number(raw: str) -> str | float:
    try:
        return float(raw)
    except ValueError:
        return raw


def group_name(dimension: str, name: str) -> str:
    """How a results file names a route's or an agent's samples: ``route /chat``, ``agent planner``."""
    return f"{dimension} {name}"


@dataclass(frozen=True, slots=True)
class Wanted:
    """One check to make: a percentile of a group's latency, with the samples it needs on each side."""

    group: str
    metric: str
    percentile: str
    min_samples: int


@dataclass(frozen=True, slots=True)
class BaselineCheck:
    group: str
    metric: str
    percentile: str
    baseline: float | None  # ms
    current: float | None
    difference: float | None  # current - baseline
    low: float | None  # the difference's 95 % interval
    high: float | None
    allowed: float | None  # the margin in ms
    baseline_count: int
    current_count: int
    min_samples: int
    status: str  # one of CHECK_STATUSES

    @property
    def name(self) -> str:
        return f"{METRIC_NAMES[self.metric]} {self.percentile}"

    def describe(self) -> str:
        """One line: what moved, how sure, against what margin."""
        if self.status == "no_baseline":
            return f"{self.name}: the baseline has no samples"
        moved = f"{self.name} {ms(self.baseline)} → {ms(self.current)} ({signed_ms(self.difference)}"
        if self.low is None:
            needs = f"{self.percentile} needs {self.min_samples} a side"
            return f"{moved}; too few samples: {self.baseline_count} and {self.current_count}, {needs})"
        interval = f"95% interval {signed_ms(self.low)} to {signed_ms(self.high)}"
        verdict = "more than" if self.status == "regression" else "not surely more than"
        return f"{moved}, {interval}), {verdict} the margin {ms(self.allowed)}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unit": "ms"}


def check_against(current: Samples, baseline: Samples, wanted: Iterable[Wanted], margin: Margin) -> list[BaselineCheck]:
    """Each wanted percentile of the current samples against the baseline's (the file's order)."""
    from agentlat.shared.difference import compare_values

    wanted = list(wanted)
    by_series: dict[tuple[str, str], list[Wanted]] = {}
    for w in wanted:
        by_series.setdefault((w.group, w.metric), []).append(w)
    found: dict[tuple[str, str, str], BaselineCheck] = {}
    for (group, metric), checks in by_series.items():
        before = list(baseline.get(group, {}).get(metric, ()))
        after = list(current.get(group, {}).get(metric, ()))
        minimums = {w.percentile: w.min_samples for w in checks}
        compared = compare_values(before, after, list(minimums), minimums)
        for w, difference in zip(checks, compared["differences"], strict=True):
            found[(group, metric, w.percentile)] = _check(w, compared, difference, margin)
    return [found[(w.group, w.metric, w.percentile)] for w in wanted]


def _check(w: Wanted, compared: Mapping[str, Any], difference: Mapping[str, Any], margin: Margin) -> BaselineCheck:
    before, after = compared["a"], compared["b"]
    base_value = before[w.percentile]
    allowed = margin.allowed(base_value) if base_value is not None else None
    if not before["count"]:
        status = "no_baseline"
    elif difference["low"] is None:
        status = "insufficient"
    else:
        status = "regression" if difference["low"] > allowed else "pass"
    return BaselineCheck(
        w.group, w.metric, w.percentile, base_value, after[w.percentile], difference["difference"],
        difference["low"], difference["high"], allowed, before["count"], after["count"], w.min_samples, status,
    )  # fmt: skip


def overall(checks: Sequence[BaselineCheck]) -> str:
    """regression if any, else insufficient if any (or nothing to judge), else pass."""
    judged = {c.status for c in checks} - {"no_baseline"}
    if not judged:
        return "insufficient"
    return next(s for s in CHECK_STATUSES if s in judged)


@dataclass(frozen=True, slots=True)
class BaselineReport:
    """The checks against one baseline: what it was (``against``), the margin, and each check."""

    against: str
    margin: Margin
    checks: tuple[BaselineCheck, ...]

    @property
    def status(self) -> str:
        return overall(self.checks)

    def as_dict(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks) for s in CHECK_STATUSES}
        return {
            "against": self.against,
            "margin": {"share": self.margin.share, "ms": self.margin.ms},
            "status": self.status,
            "counts": counts,
            "checks": [c.as_dict() for c in self.checks],
        }


def counted(checks: Sequence[BaselineCheck]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in CHECK_STATUSES}
    text = f"{counts['regression']} slower, {counts['insufficient']} insufficient data, {counts['pass']} passed"
    return text + (f", {counts['no_baseline']} not in the baseline" if counts["no_baseline"] else "")


def by_severity(checks: Sequence[BaselineCheck]) -> list[BaselineCheck]:
    return sorted(checks, key=lambda c: CHECK_STATUSES.index(c.status))


# --- results files ----------------------------------------------------------------------


def save_results(path: Path, samples: Samples, source: str, window: Mapping[str, str] | None = None) -> None:
    """Write one run's samples, for a later run's baseline."""
    document = {
        "agentlat_results": RESULTS_VERSION,
        "source": source,
        "window": dict(window or {}),
        "groups": {group: {m: list(values) for m, values in by_metric.items()} for group, by_metric in samples.items()},
    }
    try:
        path.write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"cannot write the results to {path}: {exc.strerror}") from None


def load_results(path: Path) -> dict[str, dict[str, list[float]]]:
    """A results file's samples, checked: group -> latency -> values in ms."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        hint = "write one with agentlat budget check --save-results, or pytest --agentlat-results"
        raise BaselineError(f"{path}: no such results file; {hint}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"{path}: not a results file ({exc})") from None
    if not isinstance(document, dict) or document.get("agentlat_results") != RESULTS_VERSION:
        raise BaselineError(f"{path}: not an agentlat results file (version {RESULTS_VERSION})")
    groups = document.get("groups")
    if not isinstance(groups, dict):
        raise BaselineError(f"{path}: 'groups' must map each group to its latencies")
    return {str(group): _latencies(path, str(group), by_metric) for group, by_metric in groups.items()}


def _latencies(path: Path, group: str, by_metric: Any) -> dict[str, list[float]]:
    if not isinstance(by_metric, dict):
        raise BaselineError(f"{path}: group {group!r} must map each latency to its values")
    found = {}
    for metric, values in by_metric.items():
        if metric not in METRIC_NAMES or not isinstance(values, list):
            raise BaselineError(f"{path}: group {group!r}: {metric!r} must be a latency with a list of ms")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values):
            raise BaselineError(f"{path}: group {group!r}, {metric}: every value must be a number of ms ≥ 0")
        found[metric] = [float(v) for v in values]
    return found


# --- reports ----------------------------------------------------------------------------

_MD_STATUS = {
    "regression": "❌ slower",
    "insufficient": "⚠️ insufficient data",
    "pass": "✅ pass",
    "no_baseline": "◻️ not in the baseline",
}


def markdown(baseline: BaselineReport) -> str:
    """A Markdown section (for a pull request's comment or a job summary)."""
    checks = baseline.checks
    lines = [
        f"### agentlat against the baseline: {_MD_STATUS[baseline.status]}",
        "",
        f"against {_md(baseline.against)} · margin {baseline.margin} · {counted(checks)}",
        "",
    ]
    if checks:
        lines += [
            "| status | target | check | baseline | now | difference | 95% interval | samples |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [f"| {_MD_STATUS[c.status]} | `{_md(row[1])}` | {' | '.join(row[2:])} |" for c, row in _rows(checks)]
    return "\n".join(lines) + "\n"


def _interval(c: BaselineCheck) -> str:
    if c.low is None:
        return f"too few (needs {c.min_samples})" if c.status == "insufficient" else "—"
    return f"{signed_ms(c.low)} to {signed_ms(c.high)}"


def _md(text: str) -> str:
    return text.replace("`", "'").replace("|", "\\|")


def _rows(checks: Sequence[BaselineCheck]) -> list[tuple[BaselineCheck, tuple[str, ...]]]:
    return [(c, row) for c, row in zip(by_severity(checks), table_rows(checks), strict=True)]


def table_rows(checks: Sequence[BaselineCheck]) -> list[tuple[str, ...]]:
    """status, target, check, baseline, now, difference, interval, samples: the cells of a table's rows."""
    return [
        (c.status, c.group, c.name, ms(c.baseline), ms(c.current), signed_ms(c.difference), _interval(c),
         f"{c.baseline_count} → {c.current_count}")
        for c in by_severity(checks)
    ]  # fmt: skip
