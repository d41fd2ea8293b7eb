"""agentlat's pytest plugin: latency budgets for an agent call, measured in-process by the SDK.

Registered as the ``agentlat`` pytest11 entry point and inert unless a test asks for the
``latency`` fixture: it only registers the ``latency_budget`` marker, and adds a summary
section when something was measured. Disable it with ``-p no:agentlat``.

    @pytest.mark.latency_budget(runs=20, ttft_p95_ms=800, e2e_p50_ms=2000)
    def test_chat_is_fast(latency):
        latency.measure(lambda: my_agent("hello"))

    @pytest.mark.latency_budget(runs=30, budgets="budgets.yaml", route="/chat")
    def test_chat_meets_its_budgets(latency): ...

Each run is a root span; the agent's model and tool spans inside it (``agentlat.model_call``,
``agentlat.tool`` or an instrumented client) give TTFT, ITL, model and tool time, and the
run span E2E. Spans go to an in-memory exporter on a processor of the SDK's TracerProvider
that records only while measuring; ``agentlat.init`` may or may not have been called.
PyYAML is imported only when a budgets file is named.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agentlat import semconv as sc
from agentlat.errors import ConfigError
from agentlat.stream_stats import percentile

MARKER = "latency_budget"
METRICS = ("ttft", "itl", "e2e", "model", "tool")  # as in budgets files and the query API
PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
DEFAULT_RUNS = 20
_INLINE = re.compile(r"^(ttft|itl|e2e|model|tool)_(p50|p95|p99)_ms$")
_OPTIONS = ("runs", "warmup", "budgets", "route", "agent")
_NO_SAMPLES = {
    "ttft": "no TTFT samples: the function made no streamed model call (agentlat.model_call with call.chunk(), "
    "or an instrumented client with stream=True)",
    "itl": "no ITL samples: no model call streamed two or more chunks",
    "model": "no model-time samples: the function made no model call agentlat saw",
    "tool": "no tool-time samples: the function made no agentlat.tool call",
    "e2e": "no E2E samples",
}
RESULTS = pytest.StashKey[list["Measurement"]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(runs=20, warmup=0, budgets=None, route=None, agent=None, **budgets_ms): latency budgets "
        "the `latency` fixture checks, inline as <ttft|itl|e2e|model|tool>_<p50|p95|p99>_ms=number "
        "and/or from a budgets file's route or agent (agentlat)",
    )


# --- budgets --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    metric: str
    percentile: str
    budget_ms: float


@dataclass(frozen=True, slots=True)
class Plan:
    """What the marker asks for."""

    runs: int = DEFAULT_RUNS
    warmup: int = 0
    budgets: tuple[Budget, ...] = ()


def plan_from_marker(marker: pytest.Mark | None, rootpath: Path) -> Plan:
    """Validate the marker's arguments; a budgets file (relative to the rootdir) loads lazily."""
    if marker is None:
        return Plan()
    if marker.args:
        raise ValueError(f"{MARKER} takes keyword arguments only, got {marker.args!r}")
    kwargs = dict(marker.kwargs)
    unknown = [k for k in kwargs if k not in _OPTIONS and not _INLINE.match(k)]
    if unknown:
        raise ValueError(
            f"{MARKER}: unknown argument(s) {', '.join(unknown)}; expected runs, warmup, budgets, route, agent "
            "or <ttft|itl|e2e|model|tool>_<p50|p95|p99>_ms"
        )
    runs, warmup = kwargs.get("runs", DEFAULT_RUNS), kwargs.get("warmup", 0)
    if not _whole(runs, 1) or not _whole(warmup, 0):
        raise ValueError(f"{MARKER}: runs must be a whole number ≥ 1 and warmup ≥ 0, got {runs=}, {warmup=}")
    chosen = {(b.metric, b.percentile): b for b in _file_budgets(kwargs, rootpath)}
    for key, value in kwargs.items():
        if match := _INLINE.match(key):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{MARKER}: {key} must be a number of milliseconds > 0, got {value!r}")
            chosen[match.groups()] = Budget(match.group(1), match.group(2), float(value))
    order = {m: i for i, m in enumerate(METRICS)}
    ordered = sorted(chosen.values(), key=lambda b: (order[b.metric], b.percentile))
    return Plan(runs, warmup, tuple(ordered))


def _whole(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _file_budgets(kwargs: Mapping[str, Any], rootpath: Path) -> list[Budget]:
    route, agent, path = kwargs.get("route"), kwargs.get("agent"), kwargs.get("budgets")
    if path is None:
        if route is not None or agent is not None:
            raise ValueError(f"{MARKER}: route= and agent= pick budgets from a file; add budgets='budgets.yaml'")
        return []
    if route is not None and agent is not None:
        raise ValueError(f"{MARKER}: pass route= or agent=, not both")
    try:
        from agentlat.budgets.model import load_budgets
    except ImportError as exc:
        raise ValueError(f"reading a budgets file needs PyYAML ({exc}); pip install 'agentlat[server]'") from None
    budgets = load_budgets(rootpath / Path(path))
    dimension, name = ("agent", agent) if agent is not None else ("route", route or "")
    return [Budget(t.metric, t.percentile, t.budget_ms) for t in budgets.thresholds_for(dimension, name)]


# --- recording spans ------------------------------------------------------------------


class _Recorder(SpanProcessor):
    """Sends the spans of followed traces to an exporter while recording; idle otherwise.

    OpenTelemetry cannot remove a span processor, so one recorder per provider stays and
    does nothing between measurements.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sink: InMemorySpanExporter | None = None
        self._traces: set[int] = set()

    def start(self, sink: InMemorySpanExporter) -> None:
        with self._lock:
            self._sink, self._traces = sink, set()

    def follow(self, trace_id: int) -> None:
        with self._lock:
            self._traces.add(trace_id)

    def stop(self) -> None:
        with self._lock:
            self._sink, self._traces = None, set()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            sink = self._sink if span.context is not None and span.context.trace_id in self._traces else None
        if sink is not None:
            sink.export((span,))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


_recorders: weakref.WeakKeyDictionary[TracerProvider, _Recorder] = weakref.WeakKeyDictionary()


def _provider() -> TracerProvider:
    """The SDK TracerProvider ``agentlat.init`` uses, set up now if nothing set one yet."""
    from agentlat._setup import _provider as sdk_provider

    provider = sdk_provider(os.environ.get("OTEL_SERVICE_NAME") or "pytest", None, None)
    if trace.get_tracer_provider() is not provider:
        raise RuntimeError(
            f"the global TracerProvider is {type(trace.get_tracer_provider()).__name__}, not the OpenTelemetry "
            "SDK's, so agentlat cannot see the spans; set an opentelemetry.sdk.trace.TracerProvider first"
        )
    return provider


@contextmanager
def _recording() -> Iterator[tuple[trace.Tracer, _Recorder, InMemorySpanExporter]]:
    provider = _provider()
    recorder = _recorders.get(provider)
    if recorder is None:
        recorder = _recorders[provider] = _Recorder()
        provider.add_span_processor(recorder)
    sink = InMemorySpanExporter()
    recorder.start(sink)
    try:
        yield provider.get_tracer("agentlat.pytest"), recorder, sink
    finally:
        recorder.stop()


def run_and_record(fn: Callable[[], Any], runs: int, warmup: int, test: str) -> dict[str, list[float]]:
    """Call ``fn`` warmup + runs times, each in a root span; samples (ms) of the measured runs."""
    call = (lambda: asyncio.run(fn())) if inspect.iscoroutinefunction(fn) else fn
    with _recording() as (tracer, recorder, sink):
        for index in range(warmup + runs):
            attributes = {"agentlat.pytest.test": test, "agentlat.pytest.run": index - warmup}
            with tracer.start_as_current_span("latency run", context=Context(), attributes=attributes) as span:
                if index >= warmup:
                    recorder.follow(span.get_span_context().trace_id)
                call()
        return samples_of(sink.get_finished_spans())


def samples_of(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, list[float]]:
    """E2E from run spans; TTFT, ITL and model time from client model calls; tool time from tool calls."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for span in spans:
        attrs = span.attributes or {}
        duration_ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
        if span.parent is None:
            out["e2e"].append(duration_ms)
        elif operation in sc.MODEL_OPERATIONS and span.kind is not SpanKind.SERVER:
            out["model"].append(duration_ms)
            if (ttft := attrs.get(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)) is not None:
                out["ttft"].append(float(ttft) * 1000)
            if (itl := attrs.get(sc.ITL_MEAN)) is not None:
                out["itl"].append(float(itl) * 1000)
        elif operation == sc.OP_EXECUTE_TOOL:
            out["tool"].append(duration_ms)
    return out


# --- results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    budget: Budget
    actual_ms: float | None  # None: no samples
    status: str  # pass | breach | insufficient

    def describe(self) -> str:
        b = self.budget
        if self.actual_ms is None:
            return f"{b.metric} {b.percentile} ≤ {_ms(b.budget_ms)}: {_NO_SAMPLES[b.metric]}"
        sign = ">" if self.status == "breach" else "≤"
        return f"{b.metric} {b.percentile} = {_ms(self.actual_ms)} {sign} budget {_ms(b.budget_ms)}"


@dataclass(frozen=True, slots=True)
class Measurement:
    """Samples (ms) of one test's runs and how they compare with its budgets."""

    test: str
    runs: int
    samples: dict[str, list[float]]
    checks: tuple[Check, ...] = field(default=())

    def percentile(self, metric: str, pct: str) -> float | None:
        values = sorted(self.samples[metric])
        return percentile(values, PERCENTILES[pct]) if values else None

    @property
    def status(self) -> str:
        found = {c.status for c in self.checks}
        return next((s for s in ("breach", "insufficient", "pass") if s in found), "measured")

    def lines(self) -> list[str]:
        """Per metric with samples or a budget: count, p50/p95/p99, and its budgets' verdicts."""
        out = []
        for metric in METRICS:
            checks = [c for c in self.checks if c.budget.metric == metric]
            if not self.samples[metric] and not checks:
                continue
            pcts = "  ".join(f"{p} {_ms(self.percentile(metric, p)):>10}" for p in PERCENTILES)
            verdicts = "; ".join(f"{c.budget.percentile} ≤ {_ms(c.budget.budget_ms)} {c.status}" for c in checks)
            out.append(f"{metric:<5} n={len(self.samples[metric]):<4} {pcts}" + (f"  | {verdicts}" if verdicts else ""))
        return out


def judge(samples: dict[str, list[float]], budgets: tuple[Budget, ...]) -> tuple[Check, ...]:
    checks = []
    for budget in budgets:
        values = sorted(samples[budget.metric])
        if not values:
            checks.append(Check(budget, None, "insufficient"))
            continue
        actual = percentile(values, PERCENTILES[budget.percentile])
        checks.append(Check(budget, actual, "breach" if actual > budget.budget_ms else "pass"))
    return tuple(checks)


def _ms(value: float | None) -> str:
    """To 0.1 ms without a trailing .0: 800 -> '800 ms', 812.34 -> '812.3 ms'."""
    if value is None:
        return "—"
    return f"{f'{value:,.1f}'.removesuffix('.0')} ms"


class LatencyProbe:
    """The ``latency`` fixture: ``measure(fn)`` runs the agent call and checks the budgets."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        marker = request.node.get_closest_marker(MARKER)
        self._marked = marker is not None
        self.result: Measurement | None = None
        problem = None
        try:
            self.plan = plan_from_marker(marker, request.config.rootpath)
        except (ValueError, ConfigError) as exc:  # ConfigError: a budgets file's BudgetError
            problem = str(exc)  # failing outside the except keeps the message free of exception chains
        if problem is not None:
            pytest.fail(problem, pytrace=False)

    def measure(self, fn: Callable[[], Any], *, runs: int | None = None) -> Measurement:
        """Run ``fn`` (sync or async, no arguments) the marker's number of runs (or ``runs``)."""
        if self.result is not None:
            pytest.fail("latency.measure() runs once per test; split the measurements into tests", pytrace=False)
        runs = self.plan.runs if runs is None else runs
        if not _whole(runs, 1):
            pytest.fail(f"latency.measure(runs=...) must be a whole number ≥ 1, got {runs!r}", pytrace=False)
        test = self._request.node.nodeid
        samples = run_and_record(fn, runs, self.plan.warmup, test)
        self.result = Measurement(test, runs, samples, judge(samples, self.plan.budgets))
        self._request.config.stash.setdefault(RESULTS, []).append(self.result)
        failed = [c for c in self.result.checks if c.status != "pass"]
        if failed:
            details = "\n".join(f"  {c.describe()}" for c in failed)
            measured = "\n".join(f"  {line}" for line in self.result.lines())
            pytest.fail(f"latency budget not met over {runs} runs:\n{details}\nmeasured:\n{measured}", pytrace=False)
        return self.result

    def finish(self) -> None:
        if self._marked and self.result is None:
            pytest.fail(f"the test is marked {MARKER} but never called latency.measure(fn)", pytrace=False)


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> Iterator[LatencyProbe]:
    """Measure an agent call N times through the agentlat SDK and check ``latency_budget``."""
    probe = LatencyProbe(request)
    yield probe
    probe.finish()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS, None)
    if not results:
        return
    terminalreporter.write_sep("=", "agentlat latency budgets")
    for result in results:
        terminalreporter.write_line(f"{result.status.upper():<13}{result.test} ({result.runs} runs)")
        for line in result.lines():
            terminalreporter.write_line(f"    {line}")
