"""Alert rules: the model of an alert rules file. Pure data; ``rules_parse.py`` validates files into it.

Three rule types, each judged per label set (the values of the rule's ``by`` dimensions):

- ``threshold``: a metric's p50/p95/p99 over a trailing window is above a latency; for a ratio
  (``cache_hit_rate``, the prompt cache's cached input tokens / input tokens) the ratio is below a floor;
- ``drift``: the window's percentile (p99 by default) against a baseline of earlier windows
  (the last N windows, or the same window in each of the last N weeks), by a ratio and an
  absolute floor in ms;
- ``burn_rate``: the rate at which a latency SLO ("a fraction ``objective`` of requests is
  faster than ``threshold``") spends its error budget, in long/short window pairs as in the
  Google SRE workbook. A burn-rate rule becomes one alert per severity of its windows.

Times are whole seconds (unix time for instants); latencies are milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentlat.errors import ConfigError

QUANTILE_INDEX = {"p50": 0, "p95": 1, "p99": 2}  # position in the store's quantile triples
BURN_MIN_SAMPLES = 100  # requests each window of a burn-rate pair needs by default
SEVERITIES = ("critical", "warning", "info")  # most severe first; a more severe alert inhibits a less severe one
RULE_TYPES = ("threshold", "drift", "burn_rate")
STATES = ("inactive", "pending", "firing", "resolved")  # of an alert (a rule for one label set)
DIMENSIONS = ("service", "route", "agent", "model", "tool")  # kept per minute in the rollups
# Metric -> the dimensions its values carry (trace-level E2E has no model or tool; tool calls no model).
METRIC_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "e2e": ("service", "route", "agent"),
    "ttft": ("service", "route", "agent", "model"),
    "itl": ("service", "route", "agent", "model"),
    "decode": ("service", "route", "agent", "model"),
    "model": ("service", "route", "agent", "model"),
    "tool": ("service", "route", "agent", "tool"),
    "agent": ("service", "route", "agent"),
    "cache_hit_rate": ("service", "route", "agent", "model"),
}
WEEK = 7 * 86400
OUTAGE_TOLERANCE = 3600  # a pending alert not evaluated for longer than this starts its `for` again
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_LABELS = ("alertname", "severity")


class AlertRulesError(ConfigError):
    """The alert rules file is missing, not YAML, or declares something agentlat cannot use."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


@dataclass(frozen=True, slots=True)
class Threshold:
    """Fires while the percentile over ``window`` seconds is above ``threshold_ms``."""

    percentile: str
    threshold_ms: float
    window: int


@dataclass(frozen=True, slots=True)
class Floor:
    """Fires while a ratio (``RATIO_METRICS``) over ``window`` seconds is below ``threshold``."""

    threshold: float
    window: int


@dataclass(frozen=True, slots=True)
class Drift:
    """Fires while the window's percentile exceeds the baseline (median of earlier windows that
    had enough samples and did not overlap this alert being active) by ``ratio`` and ``floor_ms``."""

    percentile: str
    window: int
    ratio: float
    floor_ms: float
    windows: int  # baseline: the last N windows (0 when weeks is used)
    weeks: int  # baseline: the same window in each of the last N weeks (0 when windows is used)
    min_windows: int  # baseline windows with enough samples needed for a verdict

    def baseline_ends(self, end: int) -> list[int]:
        """End times of the baseline windows of the window ending at ``end``, newest first."""
        if self.weeks:
            return [end - k * WEEK for k in range(1, self.weeks + 1)]
        return [end - k * self.window for k in range(1, self.windows + 1)]

    @property
    def lookback(self) -> int:
        return self.weeks * WEEK + self.window if self.weeks else (self.windows + 1) * self.window


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """A long/short window pair: both must burn the error budget at ``factor`` times the sustainable rate or faster."""

    long: int
    short: int
    factor: float
    severity: str


@dataclass(frozen=True, slots=True)
class BurnRate:
    """A latency SLO: ``objective`` of the requests take at most ``threshold_ms``."""

    objective: float
    threshold_ms: float
    windows: tuple[BurnWindow, ...]

    @property
    def budget(self) -> float:
        """The error budget: the fraction of requests allowed to be slower than the threshold."""
        return 1.0 - self.objective


# The Google SRE workbook's pairs for a 30-day SLO: page on 2 % of the budget in 1 h or 5 % in 6 h,
# open a ticket on 10 % in 3 days.
DEFAULT_BURN_WINDOWS = (
    BurnWindow(3600, 300, 14.4, "critical"),
    BurnWindow(6 * 3600, 1800, 6.0, "critical"),
    BurnWindow(3 * 86400, 6 * 3600, 1.0, "warning"),
)

Spec = Threshold | Floor | Drift | BurnRate


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert: a condition judged per label set, and how it becomes notifications."""

    alert: str
    severity: str
    spec: Spec
    metric: str
    by: tuple[str, ...]
    match: Mapping[str, str]
    for_seconds: int
    keep_firing_for: int
    min_samples: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    receivers: tuple[str, ...]  # empty: every receiver of the file
    line: int

    @property
    def kind(self) -> str:
        return {Threshold: "threshold", Floor: "threshold", Drift: "drift", BurnRate: "burn_rate"}[type(self.spec)]

    @property
    def key(self) -> str:
        """What identifies the rule across restarts and edits: name, severity and matchers."""
        return f"{self.alert}|{self.severity}|{json.dumps(dict(sorted(self.match.items())))}"

    @property
    def window(self) -> int:
        """The trailing window the rule reports on (a burn-rate rule: its longest window)."""
        if isinstance(self.spec, BurnRate):
            return max(w.long for w in self.spec.windows)
        return self.spec.window

    @property
    def lookback(self) -> int:
        """Seconds of data before an evaluation's end the rule reads."""
        return self.spec.lookback if isinstance(self.spec, Drift) else self.window

    def alert_labels(self, values: Mapping[str, str]) -> dict[str, str]:
        """The labels of the alert for one label set: name, severity, matchers, ``by`` values, static labels."""
        return {"alertname": self.alert, "severity": self.severity, **self.match, **values, **self.labels}


@dataclass(frozen=True, slots=True)
class Notify:
    """How firing alerts become messages (Alertmanager's grouping and timing)."""

    group_by: tuple[str, ...] = ("alertname",)
    group_wait: int = 30
    group_interval: int = 300
    repeat_interval: int = 4 * 3600
    send_resolved: bool = True


@dataclass(frozen=True, slots=True)
class Receiver:
    """Where notifications go. ``url`` and header values may name environment variables (``${VAR}``)."""

    name: str
    type: str  # slack | webhook
    url: str
    timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes notifications of alerts whose labels equal every matcher, from ``starts`` until ``ends``."""

    matchers: Mapping[str, str]
    ends: int
    starts: int | None = None
    comment: str = ""

    def mutes(self, labels: Mapping[str, str], now: int) -> bool:
        active = (self.starts is None or self.starts <= now) and now < self.ends
        return active and all(labels.get(k) == v for k, v in self.matchers.items())


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """A validated alert rules file."""

    path: str
    rules: tuple[Rule, ...]
    receivers: tuple[Receiver, ...] = ()
    notify: Notify = Notify()
    silences: tuple[Silence, ...] = ()
    evaluation_interval: int = 60
    evaluation_delay: int = 60
    dashboard_url: str | None = None

    def rule(self, key: str) -> Rule | None:
        return next((r for r in self.rules if r.key == key), None)

    def window_end(self, now: int) -> int:
        """The end of the windows evaluated at ``now``: whole minutes, ``evaluation_delay`` back."""
        return (now - self.evaluation_delay) // 60 * 60


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id of a label set (as Prometheus identifies an alert by its labels)."""
    return hashlib.sha256(json.dumps(dict(sorted(labels.items()))).encode()).hexdigest()[:16]


def severity_rank(severity: str) -> int:
    """Higher is more severe."""
    return len(SEVERITIES) - SEVERITIES.index(severity)


def format_seconds(seconds: int) -> str:
    """``300`` -> ``'5m'``: the largest unit that divides the value."""
    for unit, size in (("w", WEEK), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
