"""agentlat's anthropic instrumentation: the real anthropic client against a FakeLLM on 127.0.0.1
with controlled timing, spans read from an in-memory exporter (and, once, from a real collector).

The anthropic SDK (2.x) makes a span of its own per call ("anthropic.messages.create"). It comes
out as a child of agentlat's span, marked ``agentlat.inner_of_model_call`` so the collector counts
the call once. These tests tell the two apart by instrumentation scope."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from itertools import product
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.resources.messages import AsyncMessages, Messages
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentlat
from agentlat import semconv as sc
from agentlat.demo import FakeLLM
from agentlat.instrument import anthropic as instrumentation
from agentlat.instrument._streams import ABANDONED, CLOSED, EXHAUSTED, FAILED, STREAM_END
from agentlat.instrument._wrapper import TOOL_CALL_COUNT, TOOL_CALLS, is_patched
from tests.fake_llm_fixtures import (
    TIMING,
    TOOLS,
    assert_kept_schedule,
    assert_near,
    assert_stream_timing,
    best_of,
    children,
    cleared,
    duration_ms,
    export_to,
    hex_ids,
    model_spans,
    ms,
    only_model_span,
    parse_traceparent,
    quiet_gc,
    sends_ms,
    stored_spans,
)
from tests.servers import ServerProcess

MODEL = "claude-fake-1"
MODES = ("sync", "async")
OWNERS = (Messages, AsyncMessages)
TOOL_SPECS = [{"name": name, "input_schema": {"type": "object", "properties": {}}} for name in TOOLS]


def kwargs_for(stream: bool, **extra: Any) -> dict[str, Any]:
    kwargs = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    return kwargs | ({"stream": True} if stream else {}) | extra


def sync_client(llm: FakeLLM, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=llm.url, api_key="fake", max_retries=0, **options)


def async_client(llm: FakeLLM) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=llm.url, api_key="fake", max_retries=0)


def request(llm: FakeLLM, mode: str, *, stream: bool, **extra: Any) -> Any:
    """One call as user code makes it, a stream read to its end; returns what the user received."""
    kwargs = kwargs_for(stream, **extra)
    if mode == "async":
        return asyncio.run(_request_async(llm, kwargs))
    with sync_client(llm) as client:
        result = client.messages.create(**kwargs)
        return list(result) if stream else result


async def _request_async(llm: FakeLLM, kwargs: dict[str, Any]) -> Any:
    async with async_client(llm) as client:
        result = await client.messages.create(**kwargs)
        return [event async for event in result] if kwargs.get("stream") else result


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


SDK_SPAN = "anthropic.messages.create"  # the anthropic SDK's own span of a call


@pytest.fixture(scope="module")
def exporter(llm: FakeLLM) -> Iterator[InMemorySpanExporter]:
    """agentlat.init for this module; the warm-up pays the SDK's one-off costs (imports, pydantic
    models of each event type), which would otherwise land in the first measured TTFT."""
    memory = InMemorySpanExporter()
    agentlat.init(service="test-instrument-anthropic", exporter=memory)
    for mode, stream in product(MODES, (True, False)):
        request(llm, mode, stream=stream)
        request(llm, mode, stream=stream, tools=TOOL_SPECS, extra_headers={"x-fake-tool-calls": "w"})
    assert model_spans(memory), "agentlat.init was already active in this process: no span reaches this module"
    with quiet_gc():
        yield memory
    agentlat.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    gc.collect()  # the last test's garbage is not collected inside this one's timings
    return cleared(exporter)


def assert_usage(attrs: Any, output_tokens: int) -> None:
    """Anthropic's input_tokens leaves cache reads and writes out; the span's includes them."""
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == TIMING.cached_tokens
    assert attrs[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == TIMING.cache_creation_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == output_tokens


@pytest.mark.parametrize("mode", MODES)
def test_stream_timing_usage_and_phases(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    def check() -> None:
        request(llm, mode, stream=True)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (span.name, span.kind) == (f"chat {MODEL}", SpanKind.CLIENT)
        assert attrs[sc.GEN_AI_PROVIDER_NAME] == "anthropic"
        assert attrs[sc.GEN_AI_REQUEST_MODEL] == attrs[sc.GEN_AI_RESPONSE_MODEL] == MODEL
        assert (attrs[sc.GEN_AI_REQUEST_STREAM], attrs[STREAM_END]) == (True, EXHAUSTED)
        assert_usage(attrs, output_tokens=TIMING.chunks)  # from message_delta, not message_start's 1
        assert TOOL_CALLS not in attrs
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_non_stream_usage_and_no_chunks(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    def check() -> None:
        request(llm, mode, stream=False)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[sc.GEN_AI_REQUEST_STREAM], attrs[sc.GEN_AI_RESPONSE_MODEL]) == (False, MODEL)
        assert_usage(attrs, output_tokens=TIMING.chunks)
        assert sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attrs and sc.CHUNK_COUNT not in attrs
        assert set(children(spans, span)) <= {SDK_SPAN}  # no phase spans without chunks
        [sent] = sends_ms(span, llm.requests[-1])
        assert_near(duration_ms(span), sent, "duration")

    best_of(spans, check)


def _dump(result: Any) -> Any:
    if isinstance(result, list):
        return [_dump(item) for item in result]
    return type(result), result.model_dump()


@pytest.mark.parametrize("stream", [True, False])
def test_user_receives_what_the_sdk_returns(spans: InMemorySpanExporter, llm: FakeLLM, stream: bool) -> None:
    instrumented = request(llm, "sync", stream=stream)
    instrumentation.uninstrument()
    try:
        plain = request(llm, "sync", stream=stream)
    finally:
        instrumentation.instrument()
    assert _dump(instrumented) == _dump(plain)
    assert len(instrumented) > 3 if stream else instrumented.usage.input_tokens == 40  # the wire's, no cache
    assert len(model_spans(spans)) == 1


@pytest.mark.parametrize("close", ["with", "close"])
def test_stream_stand_in_behaves_like_the_stream(spans: InMemorySpanExporter, llm: FakeLLM, close: str) -> None:
    with sync_client(llm) as client:
        stream = client.messages.create(**kwargs_for(True))
        assert isinstance(stream, anthropic.Stream)
        assert stream.response.status_code == 200  # attributes are the stream's
        if close == "with":
            with stream as inside:
                assert inside is stream
                events = [next(inside) for _ in range(3)]
        else:
            events = [next(stream) for _ in range(3)]
            stream.close()
        assert model_spans(spans)[0].attributes[STREAM_END] == CLOSED
    assert [e.type for e in events] == ["message_start", "content_block_start", "content_block_delta"]
    assert only_model_span(spans).attributes[sc.CHUNK_COUNT] == 1  # only the delta is content


@pytest.mark.parametrize("close", ["async with", "close"])
def test_async_stream_stand_in_behaves_like_the_stream(spans: InMemorySpanExporter, llm: FakeLLM, close: str) -> None:
    async def run() -> list[Any]:
        async with async_client(llm) as client:
            stream = await client.messages.create(**kwargs_for(True))
            assert isinstance(stream, anthropic.AsyncStream)
            assert not hasattr(stream, "aclose")  # as on anthropic's AsyncStream itself
            if close == "async with":
                async with stream as inside:
                    assert inside is stream
                    return [await anext(inside) for _ in range(3)]
            events = [await anext(stream) for _ in range(3)]
            await stream.close()
            return events

    events = asyncio.run(run())
    assert [e.type for e in events] == ["message_start", "content_block_start", "content_block_delta"]
    attrs = only_model_span(spans).attributes or {}
    assert (attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == (CLOSED, 1)


@pytest.mark.parametrize("mode", MODES)
def test_abandoned_stream_still_ends_its_span(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    """Three text deltas read, then the stream is dropped without closing it."""

    def read_three_and_drop() -> None:
        with sync_client(llm) as client:
            stream = client.messages.create(**kwargs_for(True))
            deltas = 0
            for event in stream:
                deltas += event.type == "content_block_delta"
                if deltas == 3:
                    break
            assert model_spans(spans) == []  # still open while the stream is referenced

    async def read_three_and_drop_async() -> None:
        async with async_client(llm) as client:
            stream = await client.messages.create(**kwargs_for(True))
            deltas = 0
            async for event in stream:
                deltas += event.type == "content_block_delta"
                if deltas == 3:
                    break
            assert model_spans(spans) == []

    def check() -> None:
        if mode == "sync":
            read_three_and_drop()
        else:
            asyncio.run(read_three_and_drop_async())
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == (ABANDONED, 3)
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 1  # what message_start said; message_delta never came
        sent = sends_ms(span, llm.requests[-1])
        assert_near(ms(attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]), sent[0], "TTFT")
        assert_near(ms(attrs[sc.DECODE_DURATION]), sent[2] - sent[0], "decode")

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_off_ends_its_span_with_the_error(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    """The span records the error the caller got: anthropic 2.17 and later wrap the transport's error in an
    APIConnectionError, earlier releases let it through."""
    with pytest.raises((anthropic.APIConnectionError, httpx2.RemoteProtocolError)) as caught:
        request(llm, mode, stream=True, extra_headers={"x-fake-abort-after-chunks": "4"})
    transport_error = caught.value.__cause__ if isinstance(caught.value, anthropic.APIConnectionError) else caught.value
    assert isinstance(transport_error, httpx2.RemoteProtocolError)
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert (attrs[sc.ERROR_TYPE], attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == (type(caught.value).__name__, FAILED, 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "error"),
    [(429, anthropic.RateLimitError), (529, anthropic.OverloadedError), (400, anthropic.BadRequestError)],
)
def test_error_answer_sets_status_and_type(
    spans: InMemorySpanExporter, llm: FakeLLM, status: int, error: type[anthropic.APIStatusError], mode: str
) -> None:
    with pytest.raises(error) as caught:
        request(llm, mode, stream=True, extra_headers={"x-fake-status": str(status)})
    assert type(caught.value) is error and caught.value.status_code == status
    assert isinstance(caught.value.body, dict) and caught.value.body["error"]["message"] == f"fake {status} answer"
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert attrs[sc.ERROR_TYPE] == error.__name__
    assert STREAM_END not in attrs and sc.GEN_AI_USAGE_INPUT_TOKENS not in attrs


@pytest.mark.parametrize("mode", MODES)
def test_traceparent_joins_the_trace_and_user_headers_stay(
    spans: InMemorySpanExporter, llm: FakeLLM, mode: str
) -> None:
    request(llm, mode, stream=True, extra_headers={"x-user-header": "kept"})
    received = llm.requests[-1].headers
    assert received["x-user-header"] == "kept"
    span = only_model_span(spans)
    # The SDK's own span, a child of agentlat's, sends its traceparent: same trace either way.
    inner = children(spans, span)[SDK_SPAN]
    assert parse_traceparent(received["traceparent"]) in (hex_ids(span), hex_ids(inner))
    assert parse_traceparent(received["traceparent"])[0] == hex_ids(span)[0]
    assert {s.name for s in spans.get_finished_spans()} == {f"chat {MODEL}", "prefill", "decode", SDK_SPAN}
    assert (inner.attributes or {})[sc.INNER_OF_MODEL_CALL] is True  # counted once by the collector


def test_the_sdks_own_span_is_a_child_and_sends_its_traceparent(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    with sync_client(llm, open_telemetry={}) as client:  # the SDK's spans, asked for explicitly
        client.messages.create(**kwargs_for(False))
    span = only_model_span(spans)
    [sdk_span] = [s for s in spans.get_finished_spans() if s.name == "anthropic.messages.create"]
    assert sdk_span.parent is not None and sdk_span.parent.span_id == span.context.span_id
    assert parse_traceparent(llm.requests[-1].headers["traceparent"]) == hex_ids(sdk_span)


@pytest.mark.parametrize("stream", [True, False])
def test_tool_calls_are_recorded(spans: InMemorySpanExporter, llm: FakeLLM, stream: bool) -> None:
    result = request(llm, "sync", stream=stream, tools=TOOL_SPECS, extra_headers={"x-fake-tool-calls": ",".join(TOOLS)})
    attrs = only_model_span(spans).attributes or {}
    assert attrs[TOOL_CALLS] == TOOLS
    assert attrs[TOOL_CALL_COUNT] == len(TOOLS)
    if stream:  # each call: its tool_use block start, then its input in pieces; all of them are output
        assert attrs[sc.CHUNK_COUNT] == TIMING.chunks
    else:
        assert [block.name for block in result.content] == list(TOOLS)


def test_instrument_twice_is_a_no_op(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    before = {owner: vars(owner)["create"] for owner in OWNERS}
    instrumentation.instrument()
    assert {owner: vars(owner)["create"] for owner in OWNERS} == before
    assert all(is_patched(method) for method in before.values())
    request(llm, "sync", stream=False)
    assert len(model_spans(spans)) == 1


def test_uninstrument_restores_the_original_methods(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    wrappers = {owner: vars(owner)["create"] for owner in OWNERS}
    instrumentation.uninstrument()
    try:
        for owner, wrapper in wrappers.items():
            assert vars(owner)["create"] is wrapper.__wrapped__
            assert not is_patched(vars(owner)["create"])
        request(llm, "sync", stream=True)
        request(llm, "async", stream=False)
        assert model_spans(spans) == []
    finally:
        instrumentation.instrument()
    assert all(is_patched(vars(owner)["create"]) for owner in OWNERS)


def test_collector_derives_timing_and_usage_from_the_spans(
    spans: InMemorySpanExporter, llm: FakeLLM, server: ServerProcess
) -> None:
    def check() -> None:
        request(llm, "sync", stream=True)
        span = only_model_span(spans)
        sent = assert_kept_schedule(span, llm.requests[-1], TIMING)
        export_to(server, spans.get_finished_spans())
        trace_id, span_id = hex_ids(span)
        stored = {s["span_id"]: s for s in stored_spans(server, trace_id, count=3)}
        derived = stored[span_id]["derived"]
        assert (derived["Role"], derived["Dialect"], derived["Provider"]) == ("model", "genai", "anthropic")
        assert (derived["Model"], derived["Streaming"]) == (MODEL, 1)
        assert (derived["InputTokens"], derived["OutputTokens"]) == (TIMING.input_tokens, TIMING.chunks)
        assert (derived["CacheReadTokens"], derived["CacheCreationTokens"]) == (7, 3)
        assert_near(derived["TtftMs"], sent[0], "collector TtftMs")
        assert_near(derived["DecodeMs"], sent[-1] - sent[0], "collector DecodeMs")
        assert_near(derived["ItlMeanMs"], (sent[-1] - sent[0]) / (len(sent) - 1), "collector ItlMeanMs")

    best_of(spans, check)
