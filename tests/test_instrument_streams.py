"""Every streaming surface of the openai and anthropic clients (tests/stream_surfaces.py), sync and
async, against a FakeLLM with controlled timing: one model span per request (never two, whichever
way the client version builds the request), its traceparent sent, exact TTFT, decode, ITL and
tokens; a stream closed early or dropped ends its span at once, marked; streamed tool calls get
their named and ready moments. Runs on the project's clients and, through
tests/test_instrument_oldest_clients.py, on the oldest ones the project declares."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlat import semconv as sc
from agentlat.demo import FakeLLM, Received
from agentlat.demo.fake_llm import plan
from agentlat.instrument._streams import ABANDONED, CLOSED, EXHAUSTED, STREAM_END
from agentlat.instrument._wrapper import TOOL_CALLS
from tests.fake_llm_fixtures import (
    TIMING,
    assert_near,
    assert_stream_timing,
    best_of,
    children,
    fresh,
    hex_ids,
    instrumented,
    model_spans,
    ms,
    only_model_span,
    parse_traceparent,
    sends_ms,
)
from tests.stream_surfaces import (
    HELPERS,
    MODES,
    SURFACES,
    TOOL_NAMES,
    Surface,
    client_for,
    has_surface,
    open_async,
    open_sync,
    read_async,
    read_some_async,
    read_some_sync,
    read_sync,
    request_kwargs,
)

TOOL_SCENARIO = TIMING.override({"x-fake-tool-calls": ",".join(TOOL_NAMES)})


def present(surface: Surface) -> Surface:
    """The surface, or a skip that names the client version lacking it (a surface missing from a
    version ``ABSENT`` does not name fails)."""
    if has_surface(surface):
        return surface
    why = surface.absent_because()
    assert why, f"{surface.id} is missing from {surface.client_version}"
    pytest.skip(f"{surface.id}: not in {surface.client_version}: {why}")


def run(llm: FakeLLM, surface: Surface, mode: str, *, tools: bool = False) -> None:
    """Open the surface, read it to the end as its users do, close it."""
    kwargs = request_kwargs(surface, tools=tools)
    if mode == "async":
        asyncio.run(_run_async(llm, surface, kwargs))
        return
    with client_for(surface, llm, mode) as client:
        stream, close = open_sync(client, surface, kwargs)
        read_sync(stream, surface.how)
        close()


async def _run_async(llm: FakeLLM, surface: Surface, kwargs: dict[str, Any]) -> None:
    async with client_for(surface, llm, "async") as client:
        stream, close = await open_async(client, surface, kwargs)
        await read_async(stream, surface.how)
        await close()


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


@pytest.fixture(scope="module")
def exporter(llm: FakeLLM) -> Iterator[InMemorySpanExporter]:
    def warm_up() -> None:  # every surface once, tool calls too
        for surface in SURFACES:
            if has_surface(surface):
                for mode in MODES:
                    run(llm, surface, mode)
                    if surface.how == "events" and surface.kind in ("create", "helper"):
                        run(llm, surface, mode, tools=True)

    with instrumented("test-instrument-streams", warm_up) as memory:
        yield memory


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    return fresh(exporter)


def assert_traceparent_sent(exporter: InMemorySpanExporter, span: ReadableSpan, received: Received) -> None:
    """The request carried the model span's traceparent (or that of the client's own span inside it)."""
    trace_id, parent_id = parse_traceparent(received.headers["traceparent"])
    inner = {hex_ids(child)[1] for child in children(exporter, span).values()}
    assert trace_id == hex_ids(span)[0]
    assert parent_id in {hex_ids(span)[1], *inner}


def assert_usage(surface: Surface, attrs: Any) -> None:
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == TIMING.chunks
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == TIMING.cached_tokens
    if surface.provider == "anthropic":
        assert attrs[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == TIMING.cache_creation_tokens


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.id)
def test_surface_timing_tokens_and_traceparent(
    spans: InMemorySpanExporter, llm: FakeLLM, surface: Surface, mode: str
) -> None:
    present(surface)

    def check() -> None:
        before = len(llm.requests)
        run(llm, surface, mode)
        assert len(llm.requests) == before + 1
        span = only_model_span(spans)  # one request, one span: never two
        attrs = span.attributes or {}
        assert attrs[sc.GEN_AI_PROVIDER_NAME] == surface.provider
        assert (attrs[sc.GEN_AI_REQUEST_STREAM], attrs[STREAM_END]) == (True, EXHAUSTED)
        assert attrs[sc.GEN_AI_REQUEST_MODEL] == attrs[sc.GEN_AI_RESPONSE_MODEL]
        assert TOOL_CALLS not in attrs
        assert_usage(surface, attrs)
        assert_traceparent_sent(spans, span, llm.requests[-1])
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


def read_three_then(llm: FakeLLM, spans: InMemorySpanExporter, surface: Surface, mode: str, *, close: bool) -> None:
    """Open the surface, read three text items, then close it as its users close it (a helper's
    ``with`` block left), when the span must have ended though the stream is still referenced, or
    drop everything the caller held without closing it."""
    kwargs = request_kwargs(surface)

    def closed(stream: Any) -> None:
        assert len(model_spans(spans)) == 1 and stream is not None, "the span outlived the close"

    async def in_async() -> None:
        async with client_for(surface, llm, "async") as client:
            stream, closer = await open_async(client, surface, kwargs)
            await read_some_async(surface, stream, 3)
            assert model_spans(spans) == []
            if close:
                await closer()
                closed(stream)
            del stream, closer
            gc.collect()  # helpers' streams hold themselves in a cycle (their generator)

    if mode == "async":
        asyncio.run(in_async())
        # asyncio closes a dropped async generator (a helper's event iterator) on the loop, keeping
        # what it holds alive until then: the stream is collected by a later collection. Closing
        # the generator can also close the HTTP response first: then the span ends as closed.
        gc.collect()
        return
    with client_for(surface, llm, "sync") as client:
        stream, closer = open_sync(client, surface, kwargs)
        read_some_sync(surface, stream, 3)
        assert model_spans(spans) == []
        if close:
            closer()
            closed(stream)
        del stream, closer
        gc.collect()


def _assert_ended_after_three(spans: InMemorySpanExporter, llm: FakeLLM, *how: str) -> None:
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert attrs[STREAM_END] in how
    assert attrs[sc.CHUNK_COUNT] == 3
    sent = sends_ms(span, llm.requests[-1])
    assert_near(ms(attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]), sent[0], "TTFT")
    assert_near(ms(attrs[sc.DECODE_DURATION]), sent[2] - sent[0], "decode")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", [s for s in SURFACES if s.how == "events"], ids=lambda s: s.id)
def test_closed_half_way_ends_the_span_at_once(
    spans: InMemorySpanExporter, llm: FakeLLM, surface: Surface, mode: str
) -> None:
    present(surface)

    def check() -> None:
        read_three_then(llm, spans, surface, mode, close=True)
        _assert_ended_after_three(spans, llm, CLOSED)

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", [s for s in SURFACES if s.how == "events"], ids=lambda s: s.id)
def test_dropped_half_way_ends_the_span(spans: InMemorySpanExporter, llm: FakeLLM, surface: Surface, mode: str) -> None:
    present(surface)

    def check() -> None:
        read_three_then(llm, spans, surface, mode, close=False)
        # an async helper's generator closed by asyncio may close the response first (see above)
        _assert_ended_after_three(spans, llm, *((ABANDONED,) if mode == "sync" else (ABANDONED, CLOSED)))

    best_of(spans, check)


def expected_tool_moments(surface: Surface, sent: list[float]) -> dict[str, tuple[float, float]]:
    """call id -> (named at, ready at) in ms from the span's start, from when the fake sent each piece:
    a call is named with its first piece; its arguments are complete with its last piece (Responses,
    Anthropic: a done/stop event goes out with it), or, on Chat Completions, which has no such event,
    when the next call starts or the choice finishes (with the last piece)."""
    pieces = plan(TOOL_SCENARIO, tools_offered=True)
    starts = [i for i, piece in enumerate(pieces) if piece.kind == "tool"]
    ends = [*(start - 1 for start in starts[1:]), len(pieces) - 1]
    if surface.api == "chat":
        ends = [*starts[1:], len(pieces) - 1]
    prefix = {"chat": "call_", "responses": "call_", "messages": "toolu_"}[surface.api]
    return {f"{prefix}{k}": (sent[start], sent[end]) for k, (start, end) in enumerate(zip(starts, ends, strict=True))}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", [s for s in SURFACES if s.kind == "create"] + HELPERS, ids=lambda s: s.id)
def test_streamed_tool_calls_named_and_ready(
    spans: InMemorySpanExporter, llm: FakeLLM, surface: Surface, mode: str
) -> None:
    present(surface)

    def check() -> None:
        run(llm, surface, mode, tools=True)
        span = only_model_span(spans)
        assert (span.attributes or {})[TOOL_CALLS] == TOOL_NAMES
        sent = sends_ms(span, llm.requests[-1])
        events = [e for e in span.events if e.name == sc.TOOL_CALL_EVENT]
        found = {e.attributes[sc.GEN_AI_TOOL_CALL_ID]: e.attributes for e in events}
        expected = expected_tool_moments(surface, sent)
        assert list(found) == list(expected)
        for (call_id, (named, ready)), name in zip(expected.items(), TOOL_NAMES, strict=True):
            attrs = found[call_id]
            assert attrs[sc.GEN_AI_TOOL_NAME] == name
            assert_near(ms(attrs[sc.TOOL_CALL_NAMED_AT]), named, f"{call_id} named")
            assert_near(ms(attrs[sc.TOOL_CALL_READY_AT]), ready, f"{call_id} ready")
        [event] = [e for e in events if e.attributes[sc.GEN_AI_TOOL_CALL_ID] == call_id]
        assert span.start_time is not None
        assert_near((event.timestamp - span.start_time) / 1e6, ready, "the last event's time")

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_a_chat_stream_without_usage_reports_no_token_counts(
    spans: InMemorySpanExporter, llm: FakeLLM, mode: str
) -> None:
    """Without ``stream_options.include_usage`` (and without agentlat's option to ask for it) the
    stream says nothing of tokens: the span's counts are null, never guessed from the chunks."""
    surface = next(s for s in SURFACES if s.path == "chat.completions.create")
    kwargs = {k: v for k, v in request_kwargs(surface).items() if k != "stream_options"}

    async def read_async() -> None:
        async with client_for(surface, llm, "async") as client:
            async for _ in await client.chat.completions.create(stream=True, **kwargs):
                pass

    if mode == "async":
        asyncio.run(read_async())
    else:
        with client_for(surface, llm, "sync") as client:
            for _ in client.chat.completions.create(stream=True, **kwargs):
                pass
    assert "stream_options" not in llm.requests[-1].body
    attrs = only_model_span(spans).attributes or {}
    assert attrs[sc.CHUNK_COUNT] == TIMING.chunks
    assert not [key for key in attrs if key.startswith("gen_ai.usage.")]


def test_parse_is_one_span(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    """``beta.chat.completions.parse()`` (through ``create`` on older clients, straight to the
    resource's ``_post`` on newer ones): one model span with the response's tokens."""
    surface = next(s for s in SURFACES if s.path == "chat.completions.create")
    kwargs = {k: v for k, v in request_kwargs(surface).items() if k != "stream_options"}
    with client_for(surface, llm, "sync") as client:
        completion = client.beta.chat.completions.parse(**kwargs)
    attrs = only_model_span(spans).attributes or {}
    assert attrs[sc.GEN_AI_REQUEST_STREAM] is False
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == completion.usage.completion_tokens == TIMING.chunks
    assert_traceparent_sent(spans, only_model_span(spans), llm.requests[-1])


def test_raw_lines_of_a_streaming_response_end_the_span_with_the_body(
    spans: InMemorySpanExporter, llm: FakeLLM
) -> None:
    """``with_streaming_response`` read as raw SSE lines, never parsed: the span covers the response
    until its body is read (the HTTP client closes it then), with no chunk timing (null, never guessed)."""
    surface = next(s for s in SURFACES if s.path == "chat.completions.with_streaming_response.create")

    def check() -> None:
        with client_for(surface, llm, "sync") as client:
            kwargs = request_kwargs(surface)
            with client.chat.completions.with_streaming_response.create(stream=True, **kwargs) as answer:
                lines = [line for line in answer.iter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[STREAM_END], attrs[sc.GEN_AI_REQUEST_STREAM]) == (CLOSED, True)
        assert sc.CHUNK_COUNT not in attrs and sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attrs
        assert span.end_time is not None
        assert_near((span.end_time - llm.requests[-1].finished_ns[0]) / 1e6, 0, "the span's end after the last byte")

    best_of(spans, check)
