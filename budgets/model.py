"""Latency budgets: the budgets file, its validation and the pure evaluation against measured data.

One file serves ``agentlat budget check`` (CI), the server's ``/api/v1/budgets`` (which the
dashboard reads), alert rules and the pytest plugin. Loading is the only I/O here;
``evaluate`` takes plain data (percentiles and hit rates per group) and returns verdicts.

Latencies (``LATENCIES``) are budgeted at p50/p95/p99 with a ceiling in ms; the prompt-cache hit rate
(``RATIO_METRICS``: cache-read input tokens / input tokens of the client model calls reporting both) with a
floor, ``cache_hit_rate: {min: 0.8}``. A verdict states its ``unit``: ``ms`` for a latency, ``ratio`` (a
share from 0 to 1) for the hit rate, whose ``percentile`` is ``min``.

A verdict is ``pass``, ``breach`` or ``insufficient``: a percentile computed from fewer
samples than its minimum (``shared.measures``: about 30 for p50, 200 for p95, 1,000 for p99),
or a hit rate from fewer calls reporting cache tokens than its minimum (20), says too little
to pass or fail; no such calls at all is no hit rate (null), never 0 %.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from agentlat.errors import ConfigError
from agentlat.shared.measures import (
    DEFAULT_MIN_SAMPLES,
    LATENCIES,
    PERCENTILES,
    RATIO_METRICS,
    RATIO_MIN_SAMPLES,
    misses,
)
from agentlat.shared.measures import over_budget as over_budget  # the dashboard's rule for colouring a latency
from agentlat.shared.yamlfile import (
    LATENCY_EXPECTED,
    SHARE_EXPECTED,
    FieldParser,
    Marked,
    latency_ms,
    load_yaml,
    read_file,
    share,
)

BUDGET_METRICS = (*LATENCIES, *RATIO_METRICS)  # what a budgets file may budget (a ratio: /api/v1/cache's hit_rate)
FLOOR = "min"  # a ratio's one budget: the least it may be
STATISTICS = (*PERCENTILES, FLOOR)  # in the order verdicts list them
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
    """One budget: ``metric`` at ``percentile`` must stay at or under ``limit`` (ms); for a ratio
    (``percentile`` ``min``), at or above ``limit``, a share from 0 to 1."""

    metric: str
    percentile: str
    limit: float
    line: int  # where the file declares it

    @property
    def ratio(self) -> bool:
        return self.metric in RATIO_METRICS

    @property
    def minimum_key(self) -> str:
        """The key of ``Budgets.min_samples`` that says how many samples this budget needs."""
        return self.metric if self.ratio else self.percentile


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
        """The file's agent type's primary and secondary metrics first, then the rest (the hit rate last)."""
        if self.type is None:
            return BUDGET_METRICS
        kind = AGENT_TYPES[self.type]
        rest = (m for m in BUDGET_METRICS if m not in (kind.primary, kind.secondary))
        return (kind.primary, kind.secondary, *rest)

    def minimum(self, threshold: Threshold) -> int:
        """The fewest samples ``threshold`` can pass or fail with."""
        return self.min_samples.get(threshold.minimum_key, RATIO_MIN_SAMPLES)

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
        """The file's budgets as plain data: ``{section: {name: {metric: {percentile: ms}}}}`` (a ratio's:
        ``{"cache_hit_rate": {"min": share}}``)."""

        def plain(budgets: Mapping[tuple[str, str], Threshold | None]) -> dict[str, dict[str, float | None]]:
            out: dict[str, dict[str, float | None]] = {}
            for (metric, pct), threshold in budgets.items():
                out.setdefault(metric, {})[pct] = threshold.limit if threshold else None
            return out

        return {
            "default": plain(self.default),
            "routes": {t.name: plain(t.budgets) for t in self.routes},
            "agents": {t.name: plain(t.budgets) for t in self.agents},
        }

    def ordered(self, thresholds: Iterable[Threshold]) -> tuple[Threshold, ...]:
        order = {m: i for i, m in enumerate(self.metric_order)}
        return tuple(sorted(thresholds, key=lambda t: (order[t.metric], STATISTICS.index(t.percentile))))


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


def budget_for(
    report: Mapping[str, Any], dimension: str, name: str, metric: str, percentile: str, service: str = ""
) -> float | None:
    """``applicable`` over the plain data of ``report_dict`` (what ``/api/v1/budgets`` answers): the
    budget in ms of ``metric`` at ``percentile`` (``cache_hit_rate`` at ``min``: the share) for route or
    agent ``name`` (``""``: none in particular, so the default) of ``service``, or None when nothing applies."""
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
        kind, service, min_samples = self._type(root), self._service(root), self._min_samples(root)
        default = self._default(root)
        routes, agents = self._targets(root, "routes", "route"), self._targets(root, "agents", "agent")
        if not default and not any(t.budgets for t in (*routes, *agents)):
            raise self.fail(root.line, "the file", "at least one budget under default, routes or agents")
        budgeted = {m for m, _ in default} | {m for t in (*routes, *agents) for m, _ in t.budgets}
        for metric in RATIO_METRICS:  # a ratio's minimum is reported where the file budgets it (or sets it)
            if metric in budgeted:
                min_samples.setdefault(metric, RATIO_MIN_SAMPLES)
        return Budgets(self.path, kind, service, min_samples, default, routes, agents)

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
        expected = f"a mapping of {'/'.join((*PERCENTILES, *RATIO_METRICS))} to counts"
        node = self.mapping(root["min_samples"], root.lines["min_samples"], "min_samples", expected)
        self.keys(node, (*PERCENTILES, *RATIO_METRICS), "min_samples.")
        for key, value in node.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                what = "model calls reporting cache tokens" if key in RATIO_METRICS else "samples"
                raise self.fail(node.lines[key], f"min_samples.{key}", f"a whole number of {what} ≥ 1", value)
            out[key] = value
        return out

    def _default(self, root: Marked) -> dict[tuple[str, str], Threshold]:
        if root.get("default") is None:
            return {}
        budgets = self._metrics(root["default"], root.lines["default"], "default")
        dropped = [key for key, t in budgets.items() if t is None]
        if dropped:
            metric, pct = dropped[0]
            line = root["default"][metric].lines[pct]
            value = "a share" if metric in RATIO_METRICS else "a duration"
            raise self.fail(line, f"default.{metric}.{pct}", f"{value} (null only drops a default in a route)")
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
        expected = f"a mapping of metric ({', '.join(LATENCIES)}) to percentiles, or {', '.join(RATIO_METRICS)} to min"
        node = self.mapping(value, line, where, expected)
        self.keys(node, BUDGET_METRICS, f"{where}.")
        out: dict[tuple[str, str], Threshold | None] = {}
        for metric, pcts in node.items():
            here, ratio = f"{where}.{metric}", metric in RATIO_METRICS
            expected = (
                "{min: share}, e.g. {min: 0.8} or {min: 80%}" if ratio else "a mapping of p50/p95/p99 to a duration"
            )
            pct_node = self.mapping(pcts, node.lines[metric], here, expected)
            for pct in pct_node if ratio else ():
                if pct in PERCENTILES:  # a likely slip: say why, not just what is allowed
                    raise self.fail(
                        pct_node.lines[pct], f"{here}.{pct}", f"{FLOOR} (a hit rate has a floor, no percentiles)"
                    )
            self.keys(pct_node, (FLOOR,) if ratio else PERCENTILES, f"{here}.")
            for pct, raw in pct_node.items():
                amount = self._amount(raw, pct_node.lines[pct], f"{here}.{pct}", ratio)
                out[(metric, pct)] = None if amount is None else Threshold(metric, pct, amount, pct_node.lines[pct])
        return out

    def _amount(self, raw: Any, line: int, where: str, ratio: bool) -> float | None:
        """A latency's duration in ms or a ratio's share; None (``null``) drops an inherited budget."""
        if raw is None:
            return None
        parse, expected = (share, SHARE_EXPECTED) if ratio else (latency_ms, LATENCY_EXPECTED)
        value = parse(raw)
        if value is None:
            raise self.fail(line, where, expected, raw)
        return value


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


@dataclass(frozen=True, slots=True)
class Share:
    """A ratio of one group: the prompt-cache hit rate (``share``: cache-read input tokens / input tokens,
    None without input tokens) and ``count``, the client model calls that reported cache-read tokens."""

    count: int
    share: float | None

    def value(self, statistic: str = FLOOR) -> float | None:
        return self.share


# (dimension, metric) -> group name -> stats, e.g. ("route", "ttft") -> {"/chat": Stats(...)},
# ("route", "cache_hit_rate") -> {"/chat": Share(...)}
Measurements = Mapping[tuple[str, str], Mapping[str, Stats | Share]]


@dataclass(frozen=True, slots=True)
class Verdict:
    dimension: str
    name: str
    source: str  # "route", "agent" or "default": where the budget was declared
    metric: str
    percentile: str  # a latency's p50/p95/p99; a ratio's "min"
    budget: float
    actual: float | None
    count: int
    min_samples: int
    status: str
    line: int

    def as_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "unit": self.unit}

    @property
    def ratio(self) -> bool:
        """A floor on a ratio (the hit rate): ``budget`` and ``actual`` are shares."""
        return self.metric in RATIO_METRICS

    @property
    def unit(self) -> str:
        return "ratio" if self.ratio else "ms"

    @property
    def missed_so_far(self) -> bool:
        """Too few samples to judge, but the samples there already miss the budget (a latency over it, a hit
        rate under it)."""
        return (
            self.status == "insufficient" and self.actual is not None and misses(self.metric, self.actual, self.budget)
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


def judge(threshold: Threshold, stats: Stats | Share | None, min_samples: int) -> tuple[str, float | None, int]:
    """Status, actual value and sample count of one threshold (no value, e.g. no hit rate, is insufficient)."""
    count = stats.count if stats else 0
    actual = stats.value(threshold.percentile) if stats and count else None
    if actual is None or count < min_samples:
        return "insufficient", actual, count
    return ("breach" if misses(threshold.metric, actual, threshold.limit) else "pass"), actual, count


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
    minimum = budgets.minimum(threshold)
    status, actual, count = judge(threshold, stats, minimum)
    return Verdict(
        dimension, name, source, threshold.metric, threshold.percentile, threshold.limit,
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
