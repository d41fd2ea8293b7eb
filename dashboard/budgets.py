"""Latency budgets as ``GET /api/v1/budgets`` reports them, and the colours they give
latencies. Pure: no Streamlit, no I/O.

The server judges its budgets file over the window (``results``: one verdict per route or
agent, metric and percentile) and returns the file's ``thresholds``. A latency shown for a
route is coloured by that route's budget for the metric and percentile (its own, else the
file's default); a latency over all routes by the default. ``ok`` at or under the budget,
``breach`` over it. Without a budget it has no level and stays neutral: the dashboard never
invents a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

LEVEL_COLOURS = {"ok": "#2e7d32", "breach": "#c62828"}
NEUTRAL = "#5f6368"
LEVEL_BADGE = {"ok": "green", "breach": "red"}
STATUS_COLOURS = {"pass": LEVEL_COLOURS["ok"], "breach": LEVEL_COLOURS["breach"], "insufficient": NEUTRAL}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One budget judged over the window by the server."""

    dimension: str  # route | agent
    name: str
    metric: str
    percentile: str  # p50 | p95 | p99
    budget_ms: float
    actual_ms: float | None
    count: int
    min_samples: int
    status: str  # pass | breach | insufficient
    source: str  # where the file declared it: route, agent or default


def parse_verdicts(body: dict[str, Any]) -> list[Verdict]:
    names = [f.name for f in fields(Verdict)]
    return [Verdict(**{name: row[name] for name in names}) for row in body.get("results", [])]


class BudgetBook:
    """The budgets file's thresholds, looked up by route, metric and percentile."""

    def __init__(self, body: dict[str, Any] | None = None) -> None:
        body = body or {}
        thresholds = body.get("thresholds") or {}
        self.service: str | None = body.get("service")
        self.default: dict[str, dict[str, float]] = thresholds.get("default") or {}
        self.routes: dict[str, dict[str, dict[str, float | None]]] = thresholds.get("routes") or {}
        self.verdicts = parse_verdicts(body)
        self.configured = bool(body)

    def __bool__(self) -> bool:
        return self.configured

    def budget_ms(self, route: str, metric: str, percentile: str, service: str = "") -> float | None:
        """The route's own budget (``None`` in the file drops the default), else the default."""
        if self.service and service and service != self.service:
            return None  # the file budgets another service
        own = self.routes.get(route, {}).get(metric, {}) if route else {}
        if percentile in own:
            return own[percentile]
        return self.default.get(metric, {}).get(percentile)

    def level(self, value: float | None, route: str, metric: str, percentile: str, service: str = "") -> str | None:
        return level(value, self.budget_ms(route, metric, percentile, service))


def level(value: float | None, budget_ms: float | None) -> str | None:
    """ok at or under the budget, breach over it; None without a value or a budget."""
    if value is None or budget_ms is None:
        return None
    return "breach" if value > budget_ms else "ok"


def colour(level_name: str | None) -> str:
    return LEVEL_COLOURS.get(level_name or "", NEUTRAL)
