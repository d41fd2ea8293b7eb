"""Latency budgets as ``GET /api/v1/budgets`` reports them, and the colours they give
latencies. Pure: no Streamlit, no I/O. Which budget applies, and what a breach is, are the
budgets file's own rules (``agentlat.budgets.model``), not a copy of them.

The server judges its budgets file over the window (``results``: one verdict per route or
agent, metric and percentile) and returns the file's ``thresholds``. A latency shown for a
route is coloured by that route's budget for the metric and percentile (its own, else the
file's default); a latency over all routes by the default. ``ok`` at or under the budget,
``breach`` over it. Without a budget it has no level and stays neutral: the dashboard never
invents a threshold.
"""

from __future__ import annotations

from typing import Any

from agentlat.budgets.model import Verdict, budget_for, over_budget

LEVEL_COLOURS = {"ok": "#2e7d32", "breach": "#c62828"}
NEUTRAL = "#5f6368"
LEVEL_BADGE = {"ok": "green", "breach": "red"}
STATUS_COLOURS = {"pass": LEVEL_COLOURS["ok"], "breach": LEVEL_COLOURS["breach"], "insufficient": NEUTRAL}


def parse_verdicts(body: dict[str, Any]) -> list[Verdict]:
    """The server's verdicts (``results``), one per route or agent, metric and percentile."""
    return [Verdict.from_dict(row) for row in body.get("results", [])]


class BudgetBook:
    """The budgets ``/api/v1/budgets`` reports, looked up by route, metric and percentile with the
    budgets file's own rule (``agentlat.budgets.model.budget_for``)."""

    def __init__(self, body: dict[str, Any] | None = None) -> None:
        self.body: dict[str, Any] = body or {}
        self.service: str | None = self.body.get("service")
        self.verdicts = parse_verdicts(self.body)
        self.configured = bool(body)

    def __bool__(self) -> bool:
        return self.configured

    def budget_ms(self, route: str, metric: str, percentile: str, service: str = "") -> float | None:
        """The route's own budget (``None`` in the file drops the default), else the default;
        None for a service the file does not budget."""
        return budget_for(self.body, "route", route, metric, percentile, service)

    def level(self, value: float | None, route: str, metric: str, percentile: str, service: str = "") -> str | None:
        return level(value, self.budget_ms(route, metric, percentile, service))


def level(value: float | None, budget_ms: float | None) -> str | None:
    """ok at or under the budget, breach over it; None without a value or a budget."""
    if value is None or budget_ms is None:
        return None
    return "breach" if over_budget(value, budget_ms) else "ok"


def colour(level_name: str | None) -> str:
    return LEVEL_COLOURS.get(level_name or "", NEUTRAL)
