"""The SDK's manual API: exact timing maths on a controlled clock, context propagation under
asyncio and threads, decorators, errors, and an application unaffected by a dead collector."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agentlat
from agentlat import _model_call
from agentlat import semconv as sc

MS = 1_000_000


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    agentlat.init(service="sdk-tests", exporter=memory, options=agentlat.Options(instrument_clients=False))
    yield memory
    agentlat.shutdown()


@pytest.fixture
def finished(exporter: InMemorySpanExporter) -> Callable[[], dict[str, ReadableSpan]]:
    """Spans finished during this test, by name."""
    exporter.clear()

    def spans() -> dict[str, ReadableSpan]:
        assert agentlat.flush()
        return {s.name: s for s in exporter.get_finished_spans()}

    return spans


class FakeClock:
    """Stands in for the ``time`` module inside agentlat._model_call."""

    def __init__(self) -> None:
        self.mono = 5_000 * MS
        self.wall = 1_800_000_000_000 * MS

    def perf_counter_ns(self) -> int:
        return self.mono

    def time_ns(self) -> int:
        return self.wall

    def advance(self, ms: float) -> None:
        self.mono += int(ms * MS)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(_model_call, "time", fake)
    return fake


def test_model_call_timing_maths_is_exact(finished, clock: FakeClock) -> None:
    with agentlat.model_call("gpt-4o", provider="openai", stall_threshold_seconds=0.025) as call:
        clock.advance(100)  # TTFT
        for gap in (0, 10, 20, 30, 40):  # chunks at +100, +110, +130, +160, +200 ms
            clock.advance(gap)
            call.chunk(tokens=2)
        call.usage(input_tokens=1000, output_tokens=10, cache_read_tokens=800, cache_creation_tokens=0)
        clock.advance(5)
    spans = finished()
    chat = spans["chat gpt-4o"]
    a = chat.attributes
    assert a[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.100)
    assert a[sc.DECODE_DURATION] == pytest.approx(0.100)
    assert a[sc.ITL_MEAN] == pytest.approx(0.025)
    assert a[sc.ITL_P50] == pytest.approx(0.025)
    assert a[sc.ITL_P95] == pytest.approx(0.0385)
    assert a[sc.ITL_MAX] == pytest.approx(0.040)
    assert a[sc.ITL_STALLS] == 2  # 30 and 40 ms exceed 25 ms
    assert a[sc.CHUNK_COUNT] == 5
    assert a[sc.OUTPUT_TOKENS_PER_SECOND] == pytest.approx(100.0)  # 10 tokens over 0.1 s
    assert a[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 800
    assert a[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == 0
    assert chat.start_time == clock.wall and chat.end_time == clock.wall + 205 * MS
    prefill, decode = spans["prefill"], spans["decode"]
    assert (prefill.start_time, prefill.end_time) == (clock.wall, clock.wall + 100 * MS)
    assert (decode.start_time, decode.end_time) == (clock.wall + 100 * MS, clock.wall + 200 * MS)
    assert prefill.parent.span_id == chat.context.span_id == decode.parent.span_id
    assert prefill.attributes[sc.PHASE] == "prefill" and decode.attributes[sc.PHASE] == "decode"


def test_tokens_per_second_falls_back_to_chunk_tokens(finished, clock: FakeClock) -> None:
    with agentlat.model_call("m") as call:
        clock.advance(50)
        call.chunk(tokens=3)
        clock.advance(500)
        call.chunk(tokens=3)
    assert finished()["chat m"].attributes[sc.OUTPUT_TOKENS_PER_SECOND] == pytest.approx(12.0)


def test_non_streaming_call_has_no_stream_timings(finished) -> None:
    with agentlat.model_call("m", operation="text_completion") as call:
        call.usage(input_tokens=5, output_tokens=7)
        call.response_model("m-2026")
        call.speculative(proposed=40, accepted=30)
    spans = finished()
    span = spans["text_completion m"]
    assert sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in span.attributes
    assert "prefill" not in spans and "decode" not in spans
    assert span.attributes[sc.GEN_AI_RESPONSE_MODEL] == "m-2026"
    assert span.attributes[sc.SPECULATIVE_ACCEPTED_TOKENS] == 30
    assert span.attributes[sc.GEN_AI_OPERATION_NAME] == "text_completion"


def test_agent_tool_and_route_propagation(finished) -> None:
    with agentlat.agent("planner", route="/plan", conversation_id="conv-1"):
        with agentlat.tool("search", call_id="c1") as first:
            pass
        with agentlat.tool("fetch", call_id="c2", depends_on=["c1"]) as second:
            second.consumes(first, "c0")
    spans = finished()
    root = spans["invoke_agent planner"]
    assert root.attributes[sc.GEN_AI_CONVERSATION_ID] == "conv-1"
    fetch = spans["execute_tool fetch"]
    assert fetch.parent.span_id == root.context.span_id
    assert list(fetch.attributes[sc.TOOL_DEPENDS_ON]) == ["c1", "c0"]
    assert fetch.attributes[sc.ROUTE] == "/plan"  # copied from the enclosing agent run
    assert spans["execute_tool search"].attributes[sc.GEN_AI_TOOL_CALL_ID] == "c1"


def test_prefetch_outcomes(finished) -> None:
    with agentlat.agent("a"):
        with agentlat.prefetch("weather", call_id="p1") as hit:
            hit.hit(saved_seconds=0.3)
        with agentlat.prefetch("stocks") as miss:
            miss.miss()
        with agentlat.prefetch("news"):
            pass  # no verdict: its result was not used
    spans = finished()
    assert spans["execute_tool weather"].attributes[sc.PREFETCH_OUTCOME] == "hit"
    assert spans["execute_tool weather"].attributes[sc.PREFETCH_SAVED] == pytest.approx(0.3)
    stocks = spans["execute_tool stocks"]
    assert stocks.attributes[sc.PREFETCH_OUTCOME] == "miss"
    assert 0 <= stocks.attributes[sc.PREFETCH_WASTED] <= (stocks.end_time - stocks.start_time) / 1e9 + 1e-3
    assert spans["execute_tool news"].attributes[sc.PREFETCH_OUTCOME] == "miss"


def test_errors_mark_the_span_and_propagate(finished) -> None:
    with pytest.raises(KeyError), agentlat.tool("lookup"):
        raise KeyError("missing")
    span = finished()["execute_tool lookup"]
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.ERROR_TYPE] == "KeyError"
    assert [e.name for e in span.events] == ["exception"]


def test_decorators_sync_and_async_make_a_span_per_call(exporter: InMemorySpanExporter) -> None:
    exporter.clear()

    @agentlat.tool("add")
    def add(a: int, b: int) -> int:
        return a + b

    @agentlat.agent("runner", route="/run")
    async def run() -> list[int]:
        return [add(1, 2), add(3, 4)]

    assert asyncio.run(run()) == [3, 7]
    assert add.__name__ == "add"
    assert sorted(_parent_pairs(exporter)) == [
        ("execute_tool add", "invoke_agent runner"),
        ("execute_tool add", "invoke_agent runner"),
        ("invoke_agent runner", ""),
    ]


def _parent_pairs(exporter: InMemorySpanExporter) -> list[tuple[str, str]]:
    agentlat.flush()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s.name for s in spans}
    return [(s.name, by_id.get(s.parent.span_id, "") if s.parent else "") for s in spans]


def _parents(exporter: InMemorySpanExporter) -> dict[str, str]:
    return dict(_parent_pairs(exporter))


def test_parallel_tools_under_gather_and_taskgroup_keep_parents(exporter: InMemorySpanExporter) -> None:
    exporter.clear()

    async def call(name: str) -> None:
        async with agentlat.tool(name):
            await asyncio.sleep(0.01)

    async def main() -> None:
        async with agentlat.agent("gatherer"):
            await asyncio.gather(call("g1"), call("g2"))
        async with agentlat.agent("grouper"), asyncio.TaskGroup() as group:
            group.create_task(call("t1"))
            group.create_task(call("t2"))

    asyncio.run(main())
    parents = _parents(exporter)
    assert parents["execute_tool g1"] == parents["execute_tool g2"] == "invoke_agent gatherer"
    assert parents["execute_tool t1"] == parents["execute_tool t2"] == "invoke_agent grouper"


def test_thread_pool_work_keeps_its_parent(exporter: InMemorySpanExporter) -> None:
    exporter.clear()

    def work(name: str) -> str:
        with agentlat.tool(name):
            return name

    with agentlat.agent("threaded"), concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, ["w1", "w2", "w3"])) == ["w1", "w2", "w3"]
    parents = _parents(exporter)
    assert {parents[f"execute_tool w{i}"] for i in (1, 2, 3)} == {"invoke_agent threaded"}


def test_internal_errors_do_not_reach_user_code(monkeypatch: pytest.MonkeyPatch, finished) -> None:
    monkeypatch.setenv("AGENTLAT_STRICT", "0")

    def broken_tracer():
        raise RuntimeError("telemetry is broken")

    monkeypatch.setattr("agentlat._scopes.tracer", broken_tracer)
    with agentlat.agent("still-runs") as run:
        run.set("x", 1)
        result = 42
    assert result == 42


def test_internal_errors_raise_under_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAT_STRICT", "1")
    monkeypatch.setattr("agentlat._scopes.tracer", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"), agentlat.agent("x"):
        pass


def test_a_dead_collector_does_not_slow_or_break_the_app() -> None:
    # A fresh interpreter: init is process-wide. Port 9 (discard) on loopback refuses.
    script = textwrap.dedent(
        """
        import time, agentlat
        agentlat.init(service="offline", endpoint="http://127.0.0.1:9",
                      options=agentlat.Options(max_queue_size=512, export_timeout_seconds=0.5,
                                               instrument_clients=False))
        started = time.perf_counter()
        for i in range(20_000):
            with agentlat.agent("a", route="/r"):
                with agentlat.model_call("m") as call:
                    call.chunk(); call.chunk()
        elapsed = time.perf_counter() - started
        queued = agentlat._setup._state.processors[0]._batch_processor._queue
        print(f"{elapsed:.3f} {len(queued)}")
        agentlat.shutdown()
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    elapsed, queued = result.stdout.split()
    assert float(elapsed) < 30  # 80,000 spans; a blocking exporter would take minutes
    assert int(queued) <= 512  # bounded memory: the queue never grows past its limit


def test_endpoint_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlat._setup import resolve_endpoint

    monkeypatch.delenv("AGENTLAT_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert resolve_endpoint(None) == "http://127.0.0.1:4318"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/")
    assert resolve_endpoint(None) == "http://otel:4318"
    monkeypatch.setenv("AGENTLAT_ENDPOINT", "http://agentlat:4318")
    assert resolve_endpoint(None) == "http://agentlat:4318"
    assert resolve_endpoint("http://arg:1") == "http://arg:1"


def test_other_instrumentations_inside_a_model_call_are_marked_inner(exporter: InMemorySpanExporter) -> None:
    from opentelemetry import trace

    exporter.clear()
    foreign = trace.get_tracer("com.anthropic.sdk.python")
    with agentlat.agent("a"):
        with foreign.start_as_current_span("outside a model call"):
            pass
        with agentlat.model_call("claude") as call, foreign.start_as_current_span("anthropic.messages.create"):
            call.chunk()
    agentlat.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["anthropic.messages.create"].attributes[sc.INNER_OF_MODEL_CALL] is True
    assert sc.INNER_OF_MODEL_CALL not in spans["outside a model call"].attributes
    assert sc.INNER_OF_MODEL_CALL not in spans["prefill"].attributes  # agentlat's own children are not layers
