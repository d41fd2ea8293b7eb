"""Latency budgets: the budgets file, its validation and the pure evaluation against measured data.

One file serves ``agentlat budget check`` (CI), the server's ``/api/v1/budgets`` (which the
dashboard reads), alert rules and the pytest plugin. Loading is the only I/O here;
``evaluate`` takes plain data (percentiles per group) and returns verdicts.

A verdict is ``pass``, ``breach`` or ``insufficient``: a percentile computed from fewer
samples than its minimum (REFERENCE.md §5: about 30 for p50, 200 for p95, 1,000 for p99)
says too little to pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from agentlat.errors import ConfigError
from agentlat.shared.yamlfile import LATENCY_EXPECTED, FieldParser, Marked, latency_ms, load_yaml, read_file

METRICS = ("ttft", "itl", "e2e", "model", "tool")  # names of the query API's metrics
METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E", "model": "model time", "tool": "tool time"}
PERCENTILES = ("p50", "p95", "p99")
DEFAULT_MIN_SAMPLES = {"p50": 30, "p95": 200, "p99": 1000}
STATUSES = ("pass", "breach", "insufficient")

EXIT_PASS, EXIT_BREACH, EXIT_INSUFFICIENT = 0, 1, 3  # the CLI exits 2 on usage and file errors

TOP_LEVEL_KEYS = ("version", "type", "service", "min_samples", "default", "routes", "agents")
SECTIONS = {"route": "routes", "agent": "agents"}  # where a file lists each dimension's own budgets

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class AgentType:
    """A kind of agent and the two latencies its users feel most."""

    label: str
    primary: str
    secondary: str


AGENT_TYPES: dict[str, AgentType] = {
    "chat": AgentType("chat assistant", "ttft", "itl"),
    "reasoning": AgentType("reasoning / code agent", "e2e", "ttft"),
    "tools": AgentType("tool-using agent", "e2e", "ttft"),
    "rag": AgentType("long-context RAG", "ttft", "e2e"),
    "multimodal": AgentType("multimodal assistant", "ttft", "itl"),
}


class BudgetError(ConfigError):
    """The budgets file is missing, not YAML, or declares something agentlat cannot use."""


# --- the model ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Threshold:
    """One budget: ``metric`` at ``percentile`` must stay at or under ``budget_ms``."""

    metric: str
    percentile: str
    budget_ms: float
    line: int  # where the file declares it


@dataclass(frozen=True, slots=True)
class Target:
    """The budgets a file declares for one route or agent (``None`` budgets drop a default)."""

    dimension: str
    name: str
    budgets: Mapping[tuple[str, str], Threshold | None]


@dataclass(frozen=True, slots=True)
class Budgets:
    """A validated budgets file."""

    path: str
    type: str | None
    service: str | None
    min_samples: Mapping[str, int]
    default: Mapping[tuple[str, str], Threshold]
    routes: tuple[Target, ...]
    agents: tuple[Target, ...]

    @property
    def metric_order(self) -> tuple[str, ...]:
        """The file's agent type's primary and secondary metrics first, then the rest."""
        if self.type is None:
            return METRICS
        kind = AGENT_TYPES[self.type]
        return (kind.primary, kind.secondary, *(m for m in METRICS if m not in (kind.primary, kind.secondary)))

    def thresholds_for(self, dimension: str, name: str) -> tuple[Threshold, ...]:
        """What ``name`` must meet: a route's own budgets over the default; an agent's own only."""
        targets = self.routes if dimension == "route" else self.agents
        own = next((t.budgets for t in targets if t.name == name), None)
        if own is None and dimension == "agent":
            listed = ", ".join(t.name for t in self.agents) or "none"
            raise BudgetError(f"{self.path}: no budgets for agent {name!r} (agents listed: {listed})")
        return self.ordered(applicable(dimension, self.default, own).values())

    def queries(self) -> list[tuple[str, str]]:
        """The (dimension, metric) pairs whose percentiles an evaluation needs."""
        routes = {m for m, _ in self.default} | {m for t in self.routes for m, _ in t.budgets}
        agents = {m for t in self.agents for m, _ in t.budgets}
        return [("route", m) for m in self.metric_order if m in routes] + [
            ("agent", m) for m in self.metric_order if m in agents
        ]

    def raw_thresholds(self) -> dict[str, Any]:
        """The file's budgets as plain data: ``{section: {name: {metric: {percentile: ms}}}}``."""

        def plain(budgets: Mapping[tuple[str, str], Threshold | None]) -> dict[str, dict[str, float | None]]:
            out: dict[str, dict[str, float | None]] = {}
            for (metric, pct), threshold in budgets.items():
                out.setdefault(metric, {})[pct] = threshold.budget_ms if threshold else None
            return out

        return {
            "default": plain(self.default),
            "routes": {t.name: plain(t.budgets) for t in self.routes},
            "agents": {t.name: plain(t.budgets) for t in self.agents},
        }

    def ordered(self, thresholds: Iterable[Threshold]) -> tuple[Threshold, ...]:
        order = {m: i for i, m in enumerate(self.metric_order)}
        return tuple(sorted(thresholds, key=lambda t: (order[t.metric], PERCENTILES.index(t.percentile))))


# --- the look-up rule (pure; also over the plain data of /api/v1/budgets) ------------


def applicable(dimension: str, default: Mapping[K, V], own: Mapping[K, V | None] | None) -> dict[K, V]:
    """The one rule for which budgets a route or agent must meet, keyed as the caller keys them.

    A route meets its own budgets over the file's default, where an own ``None`` drops that
    default (``own`` is None for a route the file does not list, or for all routes at once);
    an agent meets only its own.
    """
    merged: dict[K, V | None] = dict(default) if dimension == "route" else {}
    merged.update(own or {})
    return {key: value for key, value in merged.items() if value is not None}


def covers(file_service: str | None, service: str) -> bool:
    """Whether a file's budgets apply to ``service`` (``""``: all services at once). A file that
    names a service is judged on that service's data only, so it budgets no other."""
    return not (file_service and service and service != file_service)


def over_budget(actual_ms: float, budget_ms: float) -> bool:
    """A breach: over the budget (at or under it passes)."""
    return actual_ms > budget_ms


def budget_for(
    report: Mapping[str, Any], dimension: str, name: str, metric: str, percentile: str, service: str = ""
) -> float | None:
    """``applicable`` over the plain data of ``report_dict`` (what ``/api/v1/budgets`` answers): the
    budget in ms of ``metric`` at ``percentile`` for route or agent ``name`` (``""``: none in
    particular, so the default) of ``service``, or None when nothing applies."""
    if not covers(report.get("service"), service):
        return None
    thresholds = report.get("thresholds") or {}
    own = (thresholds.get(SECTIONS[dimension]) or {}).get(name) if name else None
    found = applicable(dimension, _keyed(thresholds.get("default")), None if own is None else _keyed(own))
    return found.get((metric, percentile))


def _keyed(plain: Mapping[str, Mapping[str, float | None]] | None) -> dict[tuple[str, str], float | None]:
    """``{metric: {percentile: ms}}`` (``Budgets.raw_thresholds``) keyed ``(metric, percentile)`` as ``Budgets`` is."""
    return {(metric, pct): ms for metric, pcts in (plain or {}).items() for pct, ms in (pcts or {}).items()}


# --- loading and validation -----------------------------------------------------------


def load_budgets(path: str | Path) -> Budgets:
    """Read and validate a budgets file; errors name the file, line, field and what was expected."""
    path = Path(path)
    text = read_file(path, BudgetError, "budgets file", "`agentlat budget init` writes a starter one")
    return parse_budgets(text, str(path))


def parse_budgets(text: str, path: str = "<budgets>") -> Budgets:
    """Validate budgets YAML; ``path`` names it in error messages."""
    return _Parser(path, BudgetError).document(load_yaml(text, path, BudgetError))


class _Parser(FieldParser):
    """Turns the loaded YAML into ``Budgets``, raising at the first problem it finds."""

    def document(self, doc: Any) -> Budgets:
        if doc is None:
            raise self.fail(1, "the file", "budgets (see `agentlat budget init`)")
        root = self.mapping(doc, 1, "the file", "a mapping with default, routes and/or agents")
        self.keys(root, TOP_LEVEL_KEYS, "")
        if root.get("version", 1) != 1:
            raise self.fail(root.lines["version"], "version", "1 (the format this agentlat reads)", root["version"])
        budgets = Budgets(
            path=self.path,
            type=self._type(root),
            service=self._service(root),
            min_samples=self._min_samples(root),
            default=self._default(root),
            routes=self._targets(root, "routes", "route"),
            agents=self._targets(root, "agents", "agent"),
        )
        if not budgets.default and not any(t.budgets for t in (*budgets.routes, *budgets.agents)):
            raise self.fail(root.line, "the file", "at least one budget under default, routes or agents")
        return budgets

    def _type(self, root: Marked) -> str | None:
        kind = root.get("type")
        if kind is not None and kind not in AGENT_TYPES:
            raise self.fail(root.lines["type"], "type", f"one of {', '.join(AGENT_TYPES)}", kind)
        return kind

    def _service(self, root: Marked) -> str | None:
        service = root.get("service")
        if service is not None and (not isinstance(service, str) or not service):
            raise self.fail(root.lines["service"], "service", "a service name", service)
        return service

    def _min_samples(self, root: Marked) -> dict[str, int]:
        out = dict(DEFAULT_MIN_SAMPLES)
        if "min_samples" not in root:
            return out
        node = self.mapping(root["min_samples"], root.lines["min_samples"], "min_samples", "a mapping p50/p95/p99")
        self.keys(node, PERCENTILES, "min_samples.")
        for pct, value in node.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise self.fail(node.lines[pct], f"min_samples.{pct}", "a whole number of samples ≥ 1", value)
            out[pct] = value
        return out

    def _default(self, root: Marked) -> dict[tuple[str, str], Threshold]:
        if root.get("default") is None:
            return {}
        budgets = self._metrics(root["default"], root.lines["default"], "default")
        dropped = [key for key, t in budgets.items() if t is None]
        if dropped:
            metric, pct = dropped[0]
            line = root["default"][metric].lines[pct]
            raise self.fail(line, f"default.{metric}.{pct}", "a duration (null only drops a default in a route)")
        return {key: t for key, t in budgets.items() if t is not None}

    def _targets(self, root: Marked, section: str, dimension: str) -> tuple[Target, ...]:
        if root.get(section) is None:
            return ()
        node = self.mapping(root[section], root.lines[section], section, f"a mapping of {dimension} name to budgets")
        targets = []
        for name, value in node.items():
            line = node.lines[name]
            if not isinstance(name, str) or not name:
                raise self.fail(line, section, f"{dimension} names as strings (quote numbers)", name)
            targets.append(Target(dimension, name, self._metrics(value, line, f"{section}.{name}")))
        return tuple(targets)

    def _metrics(self, value: Any, line: int, where: str) -> dict[tuple[str, str], Threshold | None]:
        node = self.mapping(value, line, where, f"a mapping of metric ({', '.join(METRICS)}) to percentiles")
        self.keys(node, METRICS, f"{where}.")
        out: dict[tuple[str, str], Threshold | None] = {}
        for metric, pcts in node.items():
            here = f"{where}.{metric}"
            pct_node = self.mapping(pcts, node.lines[metric], here, "a mapping of p50/p95/p99 to a duration")
            self.keys(pct_node, PERCENTILES, f"{here}.")
            for pct, raw in pct_node.items():
                ms = self._duration(raw, pct_node.lines[pct], f"{here}.{pct}")
                out[(metric, pct)] = None if ms is None else Threshold(metric, pct, ms, pct_node.lines[pct])
        return out

    def _duration(self, raw: Any, line: int, where: str) -> float | None:
        if raw is None:
            return None
        ms = latency_ms(raw)
        if ms is None:
            raise self.fail(line, where, LATENCY_EXPECTED, raw)
        return ms


# --- evaluation (pure) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """Count and percentiles (ms) of one metric in one group."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None

    def value(self, percentile: str) -> float | None:
        return getattr(self, percentile)


# (dimension, metric) -> group name -> stats, e.g. ("route", "ttft") -> {"/chat": Stats(...)}
Measurements = Mapping[tuple[str, str], Mapping[str, Stats]]


@dataclass(frozen=True, slots=True)
class Verdict:
    dimension: str
    name: str
    source: str  # "route", "agent" or "default": where the budget was declared
    metric: str
    percentile: str
    budget_ms: float
    actual_ms: float | None
    count: int
    min_samples: int
    status: str
    line: int

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def over_so_far(self) -> bool:
        """Too few samples to judge, but the samples there are already put it over its budget."""
        return (
            self.status == "insufficient" and self.actual_ms is not None and over_budget(self.actual_ms, self.budget_ms)
        )


@dataclass(frozen=True, slots=True)
class Report:
    verdicts: tuple[Verdict, ...]

    @property
    def status(self) -> str:
        """breach if any budget is breached, else insufficient if any lacks data (or nothing had
        data to judge), else pass."""
        if not self.verdicts:
            return "insufficient"
        found = {v.status for v in self.verdicts}
        return next((s for s in ("breach", "insufficient") if s in found), "pass")

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for v in self.verdicts if v.status == s) for s in STATUSES}


def judge(threshold: Threshold, stats: Stats | None, min_samples: int) -> tuple[str, float | None, int]:
    """Status, actual value and sample count of one threshold."""
    count = stats.count if stats else 0
    actual = stats.value(threshold.percentile) if stats and count else None
    if actual is None or count < min_samples:
        return "insufficient", actual, count
    return ("breach" if over_budget(actual, threshold.budget_ms) else "pass"), actual, count


def evaluate(budgets: Budgets, measured: Measurements) -> Report:
    """Verdicts for every listed route and agent, then for each unlisted route with data.

    A budget a route or agent declares itself is judged whether or not there is data (none
    is ``insufficient``); a default budget only where the route has samples of its metric.
    """
    verdicts: list[Verdict] = []
    listed = [("route", t) for t in budgets.routes] + [("agent", t) for t in budgets.agents]
    for dimension, target in listed:
        own = {key for key, t in target.budgets.items() if t is not None}
        for threshold in budgets.thresholds_for(dimension, target.name):
            source = dimension if (threshold.metric, threshold.percentile) in own else "default"
            if source == dimension or _has_data(measured, target.name, threshold.metric):
                verdicts.append(_verdict(budgets, measured, dimension, target.name, source, threshold))
    for route in _unlisted_routes(budgets, measured):
        for threshold in budgets.thresholds_for("route", route):
            if _has_data(measured, route, threshold.metric):
                verdicts.append(_verdict(budgets, measured, "route", route, "default", threshold))
    return Report(tuple(verdicts))


def _has_data(measured: Measurements, route: str, metric: str) -> bool:
    stats = measured.get(("route", metric), {}).get(route)
    return stats is not None and stats.count > 0


def _unlisted_routes(budgets: Budgets, measured: Measurements) -> list[str]:
    listed = {t.name for t in budgets.routes}
    seen = {name for m, _ in budgets.default for name in measured.get(("route", m), {})}
    return sorted(name for name in seen if name and name not in listed)


def _verdict(
    budgets: Budgets, measured: Measurements, dimension: str, name: str, source: str, threshold: Threshold
) -> Verdict:
    stats = measured.get((dimension, threshold.metric), {}).get(name)
    minimum = budgets.min_samples[threshold.percentile]
    status, actual, count = judge(threshold, stats, minimum)
    return Verdict(
        dimension, name, source, threshold.metric, threshold.percentile, threshold.budget_ms,
        actual, count, minimum, status, threshold.line,
    )  # fmt: skip


def exit_code(status: str, allow_insufficient: bool = False) -> int:
    """0 pass, 1 breach, 3 insufficient data only (0 with ``allow_insufficient``)."""
    if status == "breach":
        return EXIT_BREACH
    if status == "insufficient" and not allow_insufficient:
        return EXIT_INSUFFICIENT
    return EXIT_PASS


def report_dict(budgets: Budgets, report: Report, window: Mapping[str, str]) -> dict[str, Any]:
    """The JSON shape shared by ``/api/v1/budgets`` and ``agentlat budget check --format json``."""
    kind = AGENT_TYPES.get(budgets.type or "")
    return {
        "file": budgets.path,
        "type": budgets.type,
        "primary": kind.primary if kind else None,
        "secondary": kind.secondary if kind else None,
        "service": budgets.service,
        "window": dict(window),
        "status": report.status,
        "counts": report.counts(),
        "min_samples": dict(budgets.min_samples),
        "thresholds": budgets.raw_thresholds(),
        "results": [v.as_dict() for v in report.verdicts],
    }
