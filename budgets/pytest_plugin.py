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
run span E2E. The model calls that report cache-read and (positive) input tokens give the
prompt-cache hit rate over all runs (their cache-read tokens / their input tokens), which a
``cache_hit_rate_min=0.8`` budget (or a file's ``cache_hit_rate: {min: 0.8}``) holds at or above.
Spans go to an in-memory exporter on a processor of the SDK's TracerProvider that records only
while measuring; ``agentlat.init`` may or may not have been called.
PyYAML is imported only when a budgets file is named.

Between a branch and main: ``pytest --agentlat-results=main.json`` on main saves every measured test's
samples; ``pytest --agentlat-baseline=main.json`` on the branch fails a test whose latency is surely slower
than main's by more than ``--agentlat-margin`` (10 % by default), at p50 of each latency it measured and at
each budgeted percentile (``budgets/baseline.py``: the difference's 95 % bootstrap interval wholly above the
margin; p50 needs 30 runs a side, p95 200, p99 1,000). ``--agentlat-summary=summary.md`` writes the budgets'
and the baseline's verdicts as Markdown, for a pull request's comment or a CI job summary.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, LATENCIES, misses, ms, percent
from agentlat.stream_stats import percentile

MARKER = "latency_budget"
HIT_RATE = "cache_hit_rate"  # the prompt cache's hit rate, budgeted with a floor (``min``) as in budgets files
PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
DEFAULT_RUNS = 20
_INLINE = re.compile(r"^(?:(ttft|itl|e2e|model|tool)_(p50|p95|p99)_ms|(cache_hit_rate)_(min))$")
_INLINE_NAMES = "<ttft|itl|e2e|model|tool>_<p50|p95|p99>_ms or cache_hit_rate_min"
_OPTIONS = ("runs", "warmup", "budgets", "route", "agent")
_NO_SAMPLES = {
    "ttft": "no TTFT samples: the function made no streamed model call (agentlat.model_call with call.chunk(), "
    "or an instrumented client with stream=True)",
    "itl": "no ITL samples: no model call streamed two or more chunks",
    "model": "no model-time samples: the function made no model call agentlat saw",
    "tool": "no tool-time samples: the function made no agentlat.tool call",
    "e2e": "no E2E samples",
    HIT_RATE: "no model call reported cache-read and input tokens (call.usage(input_tokens=..., "
    "cache_read_tokens=...), or an instrumented client whose provider reports them)",
}
RESULTS = pytest.StashKey[list["Measurement"]]()
AGAINST = pytest.StashKey["Against"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentlat", "agentlat latency budgets")
    group.addoption(
        "--agentlat-results",
        metavar="PATH",
        help="write each measured test's samples here (JSON): a later run's --agentlat-baseline",
    )
    group.addoption(
        "--agentlat-baseline",
        metavar="PATH",
        help="a results file of an earlier run (main's): fail a test whose latency is surely slower "
        "than there by more than --agentlat-margin",
    )
    group.addoption(
        "--agentlat-margin",
        metavar="MARGIN",
        default="10%",
        help="how much slower than the baseline is allowed: 10%% (of its value, the default) or 50ms",
    )
    group.addoption("--agentlat-summary", metavar="PATH",
                    help="write the budgets' and the baseline's verdicts as Markdown, for a pull request")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("agentlat_baseline", None):
        config.stash[AGAINST] = Against.load(Path(config.getoption("agentlat_baseline")), config)
    config.addinivalue_line(
        "markers",
        f"{MARKER}(runs=20, warmup=0, budgets=None, route=None, agent=None, **budgets): latency budgets "
        "the `latency` fixture checks, inline as <ttft|itl|e2e|model|tool>_<p50|p95|p99>_ms=number "
        "or cache_hit_rate_min=share, and/or from a budgets file's route or agent (agentlat)",
    )


# --- budgets --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    """A latency's ceiling in ms, or (``cache_hit_rate``, ``min``) the hit rate's floor as a share."""

    metric: str
    percentile: str
    limit: float

    @property
    def ratio(self) -> bool:
        return self.metric == HIT_RATE


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
            f"{MARKER}: unknown argument(s) {', '.join(unknown)}; expected runs, warmup, budgets, route, agent, "
            f"{_INLINE_NAMES}"
        )
    runs, warmup = kwargs.get("runs", DEFAULT_RUNS), kwargs.get("warmup", 0)
    if not _whole(runs, 1) or not _whole(warmup, 0):
        raise ValueError(f"{MARKER}: runs must be a whole number ≥ 1 and warmup ≥ 0, got {runs=}, {warmup=}")
    chosen = {(b.metric, b.percentile): b for b in _file_budgets(kwargs, rootpath)}
    for key, value in kwargs.items():
        if match := _INLINE.match(key):
            metric, statistic = (g for g in match.groups() if g is not None)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if metric == HIT_RATE and not (number and 0 <= value <= 1):
                raise ValueError(f"{MARKER}: {key} must be a share from 0 to 1 (0.8 for 80 %), got {value!r}")
            if metric != HIT_RATE and not (number and value > 0):
                raise ValueError(f"{MARKER}: {key} must be a number of milliseconds > 0, got {value!r}")
            chosen[(metric, statistic)] = Budget(metric, statistic, float(value))
    order = {m: i for i, m in enumerate((*LATENCIES, HIT_RATE))}
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
    return [Budget(t.metric, t.percentile, t.limit) for t in budgets.thresholds_for(dimension, name)]


@dataclass(frozen=True, slots=True)
class Against:
    """The baseline a run's tests are compared with: a results file's samples, by test, and the margin."""

    path: Path
    samples: Mapping[str, Mapping[str, Sequence[float]]]
    margin: Any  # budgets.baseline.Margin, imported with numpy only when a baseline is asked for

    @classmethod
    def load(cls, path: Path, config: pytest.Config) -> Against:
        try:
            from agentlat.budgets import baseline
        except ImportError as exc:
            raise pytest.UsageError(
                f"--agentlat-baseline needs numpy ({exc}); pip install 'agentlat[server]'"
            ) from None
        try:
            return cls(path, baseline.load_results(path), baseline.parse_margin(config.getoption("agentlat_margin")))
        except (ImportError, ConfigError) as exc:  # ImportError: PyYAML, for a margin in ms
            raise pytest.UsageError(str(exc)) from None

    def checks(self, test: str, samples: Mapping[str, Sequence[float]], budgets: Sequence[Budget]) -> tuple[Any, ...]:
        """p50 of each latency the test measured and each budgeted percentile, against the file's samples."""
        from agentlat.budgets.baseline import Wanted, check_against

        asked = [(m, "p50") for m in LATENCIES if samples[m]] + [
            (b.metric, b.percentile) for b in budgets if not b.ratio
        ]
        wanted = [Wanted(test, m, p, DEFAULT_MIN_SAMPLES[p]) for m, p in dict.fromkeys(asked)]
        return tuple(check_against({test: samples}, self.samples, wanted, self.margin))


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


def run_and_record(
    fn: Callable[[], Any], runs: int, warmup: int, test: str
) -> tuple[dict[str, list[float]], list[tuple[int, int]]]:
    """Call ``fn`` warmup + runs times, each in a root span; samples (ms) of the measured runs, and the
    (cache-read, input) tokens of their model calls reporting both (``cache_tokens_of``)."""
    call = (lambda: asyncio.run(fn())) if inspect.iscoroutinefunction(fn) else fn
    with _recording() as (tracer, recorder, sink):
        for index in range(warmup + runs):
            attributes = {"agentlat.pytest.test": test, "agentlat.pytest.run": index - warmup}
            with tracer.start_as_current_span("latency run", context=Context(), attributes=attributes) as span:
                if index >= warmup:
                    recorder.follow(span.get_span_context().trace_id)
                call()
        spans = sink.get_finished_spans()
        return samples_of(spans), cache_tokens_of(spans)


def samples_of(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, list[float]]:
    """E2E from run spans; TTFT, ITL and model time from client model calls; tool time from tool calls."""
    out: dict[str, list[float]] = {m: [] for m in LATENCIES}
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


def cache_tokens_of(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> list[tuple[int, int]]:
    """(cache-read, input) tokens of each client model call that reports cache-read tokens and a positive
    input token count (input tokens include the cached ones): the terms of the hit rate."""
    out = []
    for span in spans:
        attrs = span.attributes or {}
        if attrs.get(sc.GEN_AI_OPERATION_NAME) not in sc.MODEL_OPERATIONS or span.kind is SpanKind.SERVER:
            continue
        read, tokens = attrs.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS), attrs.get(sc.GEN_AI_USAGE_INPUT_TOKENS)
        if isinstance(read, int | float) and isinstance(tokens, int | float) and tokens > 0:
            out.append((int(read), int(tokens)))
    return out


def hit_rate(cache_calls: Sequence[tuple[int, int]]) -> float | None:
    """Cache-read tokens / input tokens over the calls; None without any (no data is not 0 %)."""
    tokens = sum(t for _, t in cache_calls)
    return sum(r for r, _ in cache_calls) / tokens if tokens else None


# --- results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    budget: Budget
    actual: float | None  # None: no samples (ms, or the hit rate's share)
    status: str  # pass | breach | insufficient

    def describe(self) -> str:
        b = self.budget
        if b.ratio:
            if self.actual is None:
                return f"{b.metric} ≥ {percent(b.limit)}: {_NO_SAMPLES[b.metric]}"
            sign = "<" if self.status == "breach" else "≥"
            return f"{b.metric} = {percent(self.actual, b.limit)} {sign} minimum {percent(b.limit)}"
        if self.actual is None:
            return f"{b.metric} {b.percentile} ≤ {ms(b.limit)}: {_NO_SAMPLES[b.metric]}"
        sign = ">" if self.status == "breach" else "≤"
        return f"{b.metric} {b.percentile} = {ms(self.actual)} {sign} budget {ms(b.limit)}"


@dataclass(frozen=True, slots=True)
class Measurement:
    """Samples (ms) of one test's runs and how they compare with its budgets; ``cache_calls`` holds the
    (cache-read, input) tokens of the model calls reporting both, the terms of ``hit_rate``."""

    test: str
    runs: int
    samples: dict[str, list[float]]
    checks: tuple[Check, ...] = field(default=())
    cache_calls: tuple[tuple[int, int], ...] = field(default=())
    against: tuple[Any, ...] = field(default=())  # budgets.baseline.BaselineCheck, with --agentlat-baseline

    @property
    def hit_rate(self) -> float | None:
        """The prompt cache's hit rate over every run: cache-read tokens / input tokens; None without reports."""
        return hit_rate(self.cache_calls)

    def percentile(self, metric: str, pct: str) -> float | None:
        values = sorted(self.samples[metric])
        return percentile(values, PERCENTILES[pct]) if values else None

    @property
    def status(self) -> str:
        """breach, insufficient, slower (than the baseline), pass, or measured (nothing judged)."""
        found = {c.status for c in self.checks} | {"slower" for c in self.against if c.status == "regression"}
        return next((s for s in ("breach", "insufficient", "slower", "pass") if s in found), "measured")

    def lines(self) -> list[str]:
        """Per metric with samples or a budget: count, p50/p95/p99, and its budgets' verdicts."""
        out = []
        for metric in LATENCIES:
            checks = [c for c in self.checks if c.budget.metric == metric]
            if not self.samples[metric] and not checks:
                continue
            pcts = "  ".join(f"{p} {ms(self.percentile(metric, p)):>10}" for p in PERCENTILES)
            verdicts = "; ".join(f"{c.budget.percentile} ≤ {ms(c.budget.limit)} {c.status}" for c in checks)
            out.append(f"{metric:<5} n={len(self.samples[metric]):<4} {pcts}" + (f"  | {verdicts}" if verdicts else ""))
        checks = [c for c in self.checks if c.budget.ratio]
        if self.cache_calls or checks:
            verdicts = "; ".join(f"≥ {percent(c.budget.limit)} {c.status}" for c in checks)
            line = f"{HIT_RATE} n={len(self.cache_calls):<4} {percent(self.hit_rate):>6}"
            out.append(line + (f"  | {verdicts}" if verdicts else ""))
        return out


def judge(
    samples: dict[str, list[float]], budgets: tuple[Budget, ...], cache_calls: Sequence[tuple[int, int]] = ()
) -> tuple[Check, ...]:
    checks = []
    for budget in budgets:
        if budget.ratio:
            actual = hit_rate(cache_calls)
        else:
            values = sorted(samples[budget.metric])
            actual = percentile(values, PERCENTILES[budget.percentile]) if values else None
        missed = actual is not None and misses(budget.metric, actual, budget.limit)
        status = "insufficient" if actual is None else "breach" if missed else "pass"
        checks.append(Check(budget, actual, status))
    return tuple(checks)


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
        samples, cache_calls = run_and_record(fn, runs, self.plan.warmup, test)
        checks = judge(samples, self.plan.budgets, cache_calls)
        against = self._request.config.stash.get(AGAINST, None)
        compared = against.checks(test, samples, self.plan.budgets) if against else ()
        self.result = Measurement(test, runs, samples, checks, tuple(cache_calls), compared)
        self._request.config.stash.setdefault(RESULTS, []).append(self.result)
        failed = [c for c in self.result.checks if c.status != "pass"]
        slower = [f"{c.describe()} (against {against.path})" for c in compared if c.status == "regression"]
        if failed or slower:
            details = "\n".join(f"  {line}" for line in [*(c.describe() for c in failed), *slower])
            measured = "\n".join(f"  {line}" for line in self.result.lines())
            what = "latency budget not met" if failed else "slower than the baseline"
            pytest.fail(f"{what} over {runs} runs:\n{details}\nmeasured:\n{measured}", pytrace=False)
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
        for check in result.against:
            terminalreporter.write_line(f"    {check.status}: {check.describe()}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the results file and the Markdown summary, when asked for."""
    config = session.config
    results = config.stash.get(RESULTS, [])
    if path := config.getoption("agentlat_results", None):
        from agentlat.budgets.baseline import save_results

        samples = {r.test: {m: values for m, values in r.samples.items() if values} for r in results}
        save_results(Path(path), samples, "pytest")
    if path := config.getoption("agentlat_summary", None):
        Path(path).write_text(summary(results, config.stash.get(AGAINST, None)), encoding="utf-8")


_MD_STATUS = {"breach": "❌ breach", "insufficient": "⚠️ insufficient data", "pass": "✅ pass"}


def summary(results: Sequence[Measurement], against: Against | None) -> str:
    """The budgets' verdicts per test as Markdown, then (with a baseline) the checks against it."""
    checks = [(r, c) for r in results for c in r.checks]
    found = {c.status for _, c in checks}
    status = next((s for s in ("breach", "insufficient") if s in found), "pass")
    measured = f"{len(results)} test{'s' if len(results) != 1 else ''} measured"
    lines = [f"### agentlat latency budgets: {_MD_STATUS[status]}", "", measured, ""]
    if checks:
        lines += ["| status | test | check | runs |", "|---|---|---|---|"]
        lines += [f"| {_MD_STATUS[c.status]} | `{r.test}` | {c.describe()} | {r.runs} |" for r, c in checks]
    text = "\n".join(lines) + "\n"
    if against is None:
        return text
    from agentlat.budgets.baseline import BaselineReport, markdown

    compared = tuple(c for r in results for c in r.against)
    return text + "\n" + markdown(BaselineReport(f"results file {against.path}", against.margin, compared))
