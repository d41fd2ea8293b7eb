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

from agentlat.api.models import BudgetsResponse
from agentlat.budgets.model import budget_for, over_budget

LEVEL_COLOURS = {"ok": "#2e7d32", "breach": "#c62828"}
NEUTRAL = "#5f6368"
LEVEL_BADGE = {"ok": "green", "breach": "red"}
STATUS_COLOURS = {"pass": LEVEL_COLOURS["ok"], "breach": LEVEL_COLOURS["breach"], "insufficient": NEUTRAL}


class BudgetBook:
    """The budgets ``/api/v1/budgets`` reports, looked up by route, metric and percentile with the
    budgets file's own rule (``agentlat.budgets.model.budget_for``)."""

    def __init__(self, body: BudgetsResponse | None = None) -> None:
        self.body = body
        # budget_for reads the plain data the server answers in (agentlat.budgets knows no models)
        self._plain = body.model_dump(include={"service", "thresholds"}) if body is not None else {}
        self.configured = body is not None

    def __bool__(self) -> bool:
        return self.configured

    def budget_ms(self, route: str, metric: str, percentile: str, service: str = "") -> float | None:
        """The route's own budget (``None`` in the file drops the default), else the default;
        None for a service the file does not budget."""
        return budget_for(self._plain, "route", route, metric, percentile, service)

    def level(self, value: float | None, route: str, metric: str, percentile: str, service: str = "") -> str | None:
        return level(value, self.budget_ms(route, metric, percentile, service))


def level(value: float | None, budget_ms: float | None) -> str | None:
    """ok at or under the budget, breach over it; None without a value or a budget."""
    if value is None or budget_ms is None:
        return None
    return "breach" if over_budget(value, budget_ms) else "ok"


def colour(level_name: str | None) -> str:
    return LEVEL_COLOURS.get(level_name or "", NEUTRAL)
