"""agentlat's openai instrumentation: the real openai client against a FakeLLM on 127.0.0.1 with
controlled timing, spans read from an in-memory exporter (and, once, from a real collector)."""

from __future__ import annotations

import asyncio
import functools
import gc
import statistics
from collections.abc import Iterator
from itertools import pairwise, product
from typing import Any

import openai
import pytest
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.resources.responses import AsyncResponses, Responses
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentlat
from agentlat import semconv as sc
from agentlat.demo import FakeLLM
from agentlat.instrument import openai as instrumentation
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

MODEL = "gpt-fake-1"
APIS = ("chat", "responses")
MODES = ("sync", "async")
OWNERS = (Completions, AsyncCompletions, Responses, AsyncResponses)


def kwargs_for(api: str, stream: bool, **extra: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": MODEL}
    kwargs |= {"messages": [{"role": "user", "content": "hi"}]} if api == "chat" else {"input": "hi"}
    if stream:
        kwargs |= {"stream": True, **({"stream_options": {"include_usage": True}} if api == "chat" else {})}
    return kwargs | extra


def tools_for(api: str) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {}}
    if api == "chat":
        return [{"type": "function", "function": {"name": name, "parameters": schema}} for name in TOOLS]
    return [{"type": "function", "name": name, "parameters": schema} for name in TOOLS]


def sync_client(llm: FakeLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)


def async_client(llm: FakeLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)


def request(llm: FakeLLM, api: str, mode: str, *, stream: bool, **extra: Any) -> Any:
    """One call as user code makes it, a stream read to its end; returns what the user received."""
    kwargs = kwargs_for(api, stream, **extra)
    if mode == "async":
        return asyncio.run(_request_async(llm, api, kwargs))
    with sync_client(llm) as client:
        create = client.chat.completions.create if api == "chat" else client.responses.create
        result = create(**kwargs)
        return list(result) if stream else result


async def _request_async(llm: FakeLLM, api: str, kwargs: dict[str, Any]) -> Any:
    async with async_client(llm) as client:
        create = client.chat.completions.create if api == "chat" else client.responses.create
        result = await create(**kwargs)
        return [item async for item in result] if kwargs.get("stream") else result


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


@pytest.fixture(scope="module")
def exporter(llm: FakeLLM) -> Iterator[InMemorySpanExporter]:
    """agentlat.init for this module. The warm-up pays the SDK's one-off costs (imports, pydantic
    models of each response type), which would otherwise land in the first measured TTFT."""
    memory = InMemorySpanExporter()
    agentlat.init(service="test-instrument-openai", exporter=memory)
    for api, mode, stream in product(APIS, MODES, (True, False)):
        request(llm, api, mode, stream=stream)
        request(llm, api, mode, stream=stream, tools=tools_for(api), extra_headers={"x-fake-tool-calls": "w"})
    for api in APIS:
        run_stream_helper(llm, api)
    assert model_spans(memory), "agentlat.init was already active in this process: no span reaches this module"
    with quiet_gc():
        yield memory
    agentlat.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    gc.collect()  # the last test's garbage is not collected inside this one's timings
    return cleared(exporter)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_stream_timing_usage_and_phases(spans: InMemorySpanExporter, llm: FakeLLM, api: str, mode: str) -> None:
    def check() -> None:
        request(llm, api, mode, stream=True)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (span.name, span.kind) == (f"chat {MODEL}", SpanKind.CLIENT)
        assert attrs[sc.GEN_AI_PROVIDER_NAME] == "openai"
        assert attrs[sc.GEN_AI_OPERATION_NAME] == "chat"
        assert attrs[sc.GEN_AI_REQUEST_MODEL] == attrs[sc.GEN_AI_RESPONSE_MODEL] == MODEL
        assert attrs[sc.GEN_AI_REQUEST_STREAM] is True
        assert attrs[STREAM_END] == EXHAUSTED
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
        assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == TIMING.cached_tokens
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == TIMING.chunks
        assert attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 0
        assert TOOL_CALLS not in attrs
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_non_stream_usage_and_no_chunks(spans: InMemorySpanExporter, llm: FakeLLM, api: str, mode: str) -> None:
    def check() -> None:
        extra = {"x-fake-cached-tokens": "31", "x-fake-reasoning-tokens": "4"}
        request(llm, api, mode, stream=False, extra_headers=extra)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert attrs[sc.GEN_AI_REQUEST_STREAM] is False
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == MODEL
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
        assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 31
        assert attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 4
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == TIMING.chunks + 4
        assert sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attrs and sc.CHUNK_COUNT not in attrs
        assert children(spans, span) == {}
        # The whole answer leaves the fake after TTFT plus the decode time; the span ends on it.
        [sent] = sends_ms(span, llm.requests[-1])
        assert_near(duration_ms(span), sent, "duration")
        planned_last = (llm.requests[-1].planned_ns[-1] - span.start_time) / 1e6
        assert_near(sent, planned_last, "the fake's answer")

    best_of(spans, check)


def test_itl_statistics_follow_uneven_gaps(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    """Gaps drawn around 15 ms with a 10 ms deviation (the demo's seeded jitter), so that the mean,
    median, p95 and maximum differ; each must match the gaps the fake really left."""
    uneven = {"x-fake-itl-jitter-ms": "10", "x-fake-seed": "3"}

    def check() -> None:
        request(llm, "chat", "sync", stream=True, extra_headers=uneven)
        planned = llm.requests[-1].planned_ns
        gaps = [(b - a) / 1e6 for a, b in pairwise(planned)]
        assert statistics.stdev(gaps) > 3  # uneven enough that the statistics tell apart
        assert_stream_timing(spans, only_model_span(spans), TIMING, llm.requests[-1])

    best_of(spans, check)


def _dump(result: Any) -> Any:
    if isinstance(result, list):
        return [_dump(item) for item in result]
    return type(result), result.model_dump()


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", APIS)
def test_user_receives_what_the_sdk_returns(spans: InMemorySpanExporter, llm: FakeLLM, api: str, stream: bool) -> None:
    instrumented = request(llm, api, "sync", stream=stream)
    instrumentation.uninstrument()
    try:
        plain = request(llm, api, "sync", stream=stream)
    finally:
        instrumentation.instrument()
    assert _dump(instrumented) == _dump(plain)
    assert len(instrumented) > 3 if stream else instrumented.usage is not None  # something to compare
    assert len(model_spans(spans)) == 1


@pytest.mark.parametrize("close", ["with", "close"])
def test_stream_stand_in_behaves_like_the_stream(spans: InMemorySpanExporter, llm: FakeLLM, close: str) -> None:
    with sync_client(llm) as client:
        stream = client.chat.completions.create(**kwargs_for("chat", True))
        assert isinstance(stream, openai.Stream)
        assert stream.response.status_code == 200  # attributes are the stream's
        if close == "with":
            with stream as inside:
                assert inside is stream
                first, second = next(inside), next(inside)
        else:
            first, second = next(stream), next(stream)
            stream.close()
        assert model_spans(spans)[0].attributes[STREAM_END] == CLOSED
    assert first.choices[0].delta.role == "assistant" and second.choices[0].delta.content == "tok0 "
    assert only_model_span(spans).attributes[sc.CHUNK_COUNT] == 1  # the role-only chunk is no content


@pytest.mark.parametrize("close", ["async with", "close", "aclose"])
def test_async_stream_stand_in_behaves_like_the_stream(spans: InMemorySpanExporter, llm: FakeLLM, close: str) -> None:
    async def run() -> list[Any]:
        async with async_client(llm) as client:
            stream = await client.chat.completions.create(**kwargs_for("chat", True))
            assert isinstance(stream, openai.AsyncStream)
            assert stream.response.status_code == 200
            if close == "async with":
                async with stream as inside:
                    assert inside is stream
                    return [await anext(inside), await anext(inside)]
            items = [await anext(stream), await anext(stream)]
            await (stream.close() if close == "close" else stream.aclose())
            return items

    first, second = asyncio.run(run())
    assert first.choices[0].delta.role == "assistant" and second.choices[0].delta.content == "tok0 "
    attrs = only_model_span(spans).attributes or {}
    assert (attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == (CLOSED, 1)


@pytest.mark.parametrize("mode", MODES)
def test_abandoned_stream_still_ends_its_span(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    """Three content chunks read, then the stream is dropped without closing it."""

    def is_content(chunk: Any) -> bool:
        return bool(chunk.choices and chunk.choices[0].delta.content)

    def read_three_and_drop() -> None:
        with sync_client(llm) as client:
            stream = client.chat.completions.create(**kwargs_for("chat", True))
            contents = 0
            for chunk in stream:
                contents += is_content(chunk)
                if contents == 3:
                    break
            assert model_spans(spans) == []  # still open while the stream is referenced

    async def read_three_and_drop_async() -> None:
        async with async_client(llm) as client:
            stream = await client.chat.completions.create(**kwargs_for("chat", True))
            contents = 0
            async for chunk in stream:
                contents += is_content(chunk)
                if contents == 3:
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
        sent = sends_ms(span, llm.requests[-1])
        assert_near(ms(attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]), sent[0], "TTFT")
        assert_near(ms(attrs[sc.DECODE_DURATION]), sent[2] - sent[0], "decode")

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_off_ends_its_span_with_the_error(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    with pytest.raises(openai.APIConnectionError):
        request(llm, "chat", mode, stream=True, extra_headers={"x-fake-abort-after-chunks": "4"})
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert (attrs[sc.ERROR_TYPE], attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == ("APIConnectionError", FAILED, 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "error"),
    [(429, openai.RateLimitError), (500, openai.InternalServerError), (400, openai.BadRequestError)],
)
def test_error_answer_sets_status_and_type(
    spans: InMemorySpanExporter, llm: FakeLLM, status: int, error: type[openai.APIStatusError], mode: str
) -> None:
    with pytest.raises(error) as caught:
        request(llm, "chat", mode, stream=True, extra_headers={"x-fake-status": str(status)})
    assert type(caught.value) is error and caught.value.status_code == status
    assert isinstance(caught.value.body, dict) and caught.value.body["message"] == f"fake {status} answer"
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert attrs[sc.ERROR_TYPE] == error.__name__
    assert STREAM_END not in attrs and sc.GEN_AI_USAGE_INPUT_TOKENS not in attrs


@pytest.mark.parametrize("mode", MODES)
def test_traceparent_joins_the_trace_and_user_headers_stay(
    spans: InMemorySpanExporter, llm: FakeLLM, mode: str
) -> None:
    request(llm, "chat", mode, stream=True, extra_headers={"x-user-header": "kept"})
    received = llm.requests[-1].headers
    assert received["x-user-header"] == "kept"
    assert parse_traceparent(received["traceparent"]) == hex_ids(only_model_span(spans))


def test_a_traceparent_the_user_sets_wins(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    mine = f"00-{'a' * 32}-{'b' * 16}-01"
    request(llm, "responses", "sync", stream=False, extra_headers={"traceparent": mine})
    assert llm.requests[-1].headers["traceparent"] == mine


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", APIS)
def test_tool_calls_are_recorded(spans: InMemorySpanExporter, llm: FakeLLM, api: str, stream: bool) -> None:
    result = request(
        llm, api, "sync", stream=stream, tools=tools_for(api), extra_headers={"x-fake-tool-calls": ",".join(TOOLS)}
    )
    attrs = only_model_span(spans).attributes or {}
    assert attrs[TOOL_CALLS] == TOOLS
    assert attrs[TOOL_CALL_COUNT] == len(TOOLS)
    if stream:  # each call: its name, then its arguments in pieces; all of them are output
        assert attrs[sc.CHUNK_COUNT] == TIMING.chunks
    elif api == "chat":
        assert [c.function.name for c in result.choices[0].message.tool_calls] == list(TOOLS)


def run_stream_helper(llm: FakeLLM, api: str) -> None:
    """``chat.completions.stream()`` or ``responses.stream()``, read to the end."""
    with sync_client(llm) as client:
        if api == "chat":
            helper = client.chat.completions.stream(**kwargs_for("chat", False))
        else:
            helper = client.responses.stream(**kwargs_for("responses", False))
        with helper as events:
            for _ in events:
                pass


@pytest.mark.parametrize("api", APIS)
def test_stream_helpers_built_on_create_are_timed(spans: InMemorySpanExporter, llm: FakeLLM, api: str) -> None:
    def check() -> None:
        run_stream_helper(llm, api)
        span = only_model_span(spans)
        assert span.attributes[STREAM_END] == EXHAUSTED
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


def test_instrument_twice_is_a_no_op(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    before = {owner: vars(owner)["create"] for owner in OWNERS}
    instrumentation.instrument()
    assert {owner: vars(owner)["create"] for owner in OWNERS} == before
    assert all(is_patched(method) for method in before.values())
    request(llm, "chat", "sync", stream=False)
    assert len(model_spans(spans)) == 1


def test_uninstrument_restores_the_original_methods(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    wrappers = {owner: vars(owner)["create"] for owner in OWNERS}
    instrumentation.uninstrument()
    try:
        for owner, wrapper in wrappers.items():
            assert vars(owner)["create"] is wrapper.__wrapped__
            assert not is_patched(vars(owner)["create"])
        request(llm, "chat", "sync", stream=True)
        request(llm, "responses", "async", stream=False)
        assert model_spans(spans) == []
    finally:
        instrumentation.instrument()
    assert all(is_patched(vars(owner)["create"]) for owner in OWNERS)


def test_uninstrument_under_another_wrapper_leaves_it_working(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    """Another library wrapped agentlat's wrapper: uninstrument cannot take ours out from under
    theirs, so ours stays there, passing calls through; instrument puts a live one on top."""
    ours = vars(Completions)["create"]
    seen: list[str] = []

    @functools.wraps(ours)
    def theirs(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["model"])
        return ours(self, *args, **kwargs)

    Completions.create = theirs  # type: ignore[method-assign]
    try:
        instrumentation.uninstrument()
        assert vars(Completions)["create"] is theirs and not is_patched(theirs)
        request(llm, "chat", "sync", stream=False)
        assert (seen, model_spans(spans)) == ([MODEL], [])
        instrumentation.instrument()
        assert is_patched(vars(Completions)["create"])
        request(llm, "chat", "sync", stream=False)
        assert (seen, len(model_spans(spans))) == ([MODEL, MODEL], 1)
    finally:
        instrumentation.uninstrument()
        Completions.create = ours.__wrapped__  # type: ignore[method-assign]
        instrumentation.instrument()


def test_collector_derives_timing_and_usage_from_the_spans(
    spans: InMemorySpanExporter, llm: FakeLLM, server: ServerProcess
) -> None:
    def check() -> None:
        request(llm, "chat", "sync", stream=True)
        span = only_model_span(spans)
        sent = assert_kept_schedule(span, llm.requests[-1], TIMING)
        export_to(server, spans.get_finished_spans())
        trace_id, span_id = hex_ids(span)
        stored = {s["span_id"]: s for s in stored_spans(server, trace_id, count=3)}
        derived = stored[span_id]["derived"]
        assert (derived["Role"], derived["Dialect"], derived["Provider"]) == ("model", "genai", "openai")
        assert (derived["Model"], derived["Operation"], derived["Streaming"]) == (MODEL, "chat", 1)
        assert (derived["InputTokens"], derived["OutputTokens"]) == (TIMING.input_tokens, TIMING.chunks)
        assert derived["CacheReadTokens"] == TIMING.cached_tokens
        assert {s["name"] for s in stored.values()} == {f"chat {MODEL}", "prefill", "decode"}
        assert_near(derived["TtftMs"], sent[0], "collector TtftMs")
        assert_near(derived["DecodeMs"], sent[-1] - sent[0], "collector DecodeMs")
        assert_near(derived["ItlMeanMs"], (sent[-1] - sent[0]) / (len(sent) - 1), "collector ItlMeanMs")

    best_of(spans, check)
