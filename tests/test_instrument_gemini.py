"""agentlat's google-genai instrumentation: the real google-genai client against a FakeLLM speaking
Gemini's wire format on 127.0.0.1 with controlled timing, spans read from an in-memory exporter (and,
once, from a real collector). Each request google-genai sends is one model call span: the public
``generate_content`` and ``generate_content_stream`` send one each here (no Python functions among
the tools, so no automatic function calling)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from itertools import product
from typing import Any

import pytest
from google import genai
from google.genai import errors
from google.genai import types as genai_types
from google.genai.models import AsyncModels, Models
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentlat
from agentlat import semconv as sc
from agentlat.demo import FakeLLM
from agentlat.instrument import google_genai as instrumentation
from agentlat.instrument._streams import ABANDONED, EXHAUSTED, FAILED, STREAM_END
from agentlat.instrument._wrapper import TOOL_CALL_COUNT, TOOL_CALLS, is_patched
from tests.conformance.envs import ROOT, overlay
from tests.fake_llm_fixtures import (
    TIMING,
    TOOLS,
    assert_kept_schedule,
    assert_near,
    assert_stream_timing,
    best_of,
    children,
    duration_ms,
    export_to,
    fresh,
    hex_ids,
    instrumented,
    model_spans,
    ms,
    only_model_span,
    parse_traceparent,
    sends_ms,
    stored_spans,
)
from tests.servers import ServerProcess

MODEL = "gemini-fake-1"
OLDEST = "1.0.0"  # the oldest google-genai pyproject.toml declares: this module runs on it too
MODES = ("sync", "async")
METHODS = ("_generate_content", "_generate_content_stream")
OWNERS = (Models, AsyncModels)
TOOL_SPEC = {"function_declarations": [{"name": name, "description": f"the {name} tool"} for name in TOOLS]}


def client_for(llm: FakeLLM, **options: Any) -> genai.Client:
    return genai.Client(api_key="fake", http_options=genai_types.HttpOptions(base_url=llm.url), **options)


@contextmanager
def sync_client(llm: FakeLLM, **options: Any) -> Iterator[genai.Client]:
    """A client, closed after (google-genai before 1.3x has no ``close``)."""
    client = client_for(llm, **options)
    try:
        yield client
    finally:
        getattr(client, "close", lambda: None)()


@asynccontextmanager
async def async_client(llm: FakeLLM, **options: Any) -> AsyncIterator[Any]:
    """``client.aio``, closed after where it can be."""
    aio = client_for(llm, **options).aio
    try:
        yield aio
    finally:
        if aclose := getattr(aio, "aclose", None):
            await aclose()


def fake_headers(**fields: str) -> dict[str, Any]:
    """A config asking the fake for other figures (``x-fake-*`` headers)."""
    headers = {f"x-fake-{name.replace('_', '-')}": value for name, value in fields.items()}
    return {"http_options": {"headers": headers}}


def request(llm: FakeLLM, mode: str, *, stream: bool, config: Any = None, **options: Any) -> Any:
    """One call as user code makes it, a stream read to its end; returns what the user received."""
    kwargs = {"model": MODEL, "contents": "hi", "config": config}
    if mode == "async":
        return asyncio.run(_request_async(llm, stream, kwargs, options))
    with sync_client(llm, **options) as client:
        if stream:
            return list(client.models.generate_content_stream(**kwargs))
        return client.models.generate_content(**kwargs)


async def _request_async(llm: FakeLLM, stream: bool, kwargs: dict[str, Any], options: dict[str, Any]) -> Any:
    async with async_client(llm, **options) as aio:
        if stream:
            return [chunk async for chunk in await aio.models.generate_content_stream(**kwargs)]
        return await aio.models.generate_content(**kwargs)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


@pytest.fixture(scope="module")
def exporter(llm: FakeLLM) -> Iterator[InMemorySpanExporter]:
    def warm_up() -> None:
        for mode, stream in product(MODES, (True, False)):
            request(llm, mode, stream=stream)
            request(llm, mode, stream=stream, config={"tools": [TOOL_SPEC], **fake_headers(tool_calls="w")})

    with instrumented("test-instrument-gemini", warm_up) as memory:
        yield memory


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    return fresh(exporter)


def assert_usage(attrs: Any, output_tokens: int) -> None:
    """Gemini's prompt count includes the cached tokens; it reports no cache writes."""
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == TIMING.cached_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == output_tokens
    assert sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS not in attrs


@pytest.mark.parametrize("mode", MODES)
def test_stream_timing_usage_and_phases(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    def check() -> None:
        chunks = request(llm, mode, stream=True)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (span.name, span.kind) == (f"generate_content {MODEL}", SpanKind.CLIENT)
        assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.GEN_AI_OPERATION_NAME]) == ("gcp.gemini", "generate_content")
        assert attrs[sc.GEN_AI_REQUEST_MODEL] == attrs[sc.GEN_AI_RESPONSE_MODEL] == MODEL
        assert (attrs[sc.GEN_AI_REQUEST_STREAM], attrs[STREAM_END]) == (True, EXHAUSTED)
        assert_usage(attrs, output_tokens=TIMING.chunks)  # from the last chunk: the others give the prompt's only
        assert sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS not in attrs and TOOL_CALLS not in attrs
        assert "".join(chunk.text for chunk in chunks) == "".join(f"tok{i} " for i in range(TIMING.chunks))
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_non_stream_usage_and_no_chunks(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    def check() -> None:
        response = request(llm, mode, stream=False)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[sc.GEN_AI_REQUEST_STREAM], attrs[sc.GEN_AI_RESPONSE_MODEL]) == (False, MODEL)
        assert attrs[sc.GEN_AI_OPERATION_NAME] == "generate_content"
        assert_usage(attrs, output_tokens=TIMING.chunks)
        assert response.usage_metadata.cached_content_token_count == TIMING.cached_tokens
        assert sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attrs and sc.CHUNK_COUNT not in attrs
        assert children(spans, span) == {}  # no phase spans without chunks
        [sent] = sends_ms(span, llm.requests[-1])
        assert_near(duration_ms(span), sent, "duration")

    best_of(spans, check)


@pytest.mark.parametrize("stream", [True, False])
def test_thinking_tokens_are_output_and_reasoning(spans: InMemorySpanExporter, llm: FakeLLM, stream: bool) -> None:
    """Gemini counts thinking tokens apart from the candidates'; the conventions count them in the output.
    A google-genai that does not read them (before 1.2) reports the candidates' only."""
    result = request(llm, "sync", stream=stream, config=fake_headers(reasoning_tokens="5"))
    usage = (result[-1] if stream else result).usage_metadata
    attrs = only_model_span(spans).attributes or {}
    if "thoughts_token_count" not in type(usage).model_fields:
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.candidates_token_count == TIMING.chunks
        assert sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS not in attrs
        return
    assert (usage.candidates_token_count, usage.thoughts_token_count) == (TIMING.chunks, 5)
    assert (attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS], attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS]) == (15, 5)


def _dump(result: Any) -> Any:
    if isinstance(result, list):
        return [_dump(item) for item in result]
    return type(result), result.model_dump(exclude={"sdk_http_response"})  # its headers hold the time


@pytest.mark.parametrize("config", [None, {"temperature": 0.5}], ids=["no config", "config"])
@pytest.mark.parametrize("stream", [True, False])
def test_user_receives_what_the_sdk_returns(
    spans: InMemorySpanExporter, llm: FakeLLM, stream: bool, config: dict[str, Any] | None
) -> None:
    """The request is the caller's plus the trace header. A call without a config gets one holding only
    the header, which google-genai sends as an empty ``generationConfig`` (the API's default)."""
    instrumented = request(llm, "sync", stream=stream, config=config)
    sent_instrumented = llm.requests[-1]
    instrumentation.uninstrument()
    try:
        plain = request(llm, "sync", stream=stream, config=config)
    finally:
        instrumentation.instrument()
    sent_plain = llm.requests[-1]
    assert len(model_spans(spans)) == 1
    assert set(sent_instrumented.headers) - set(sent_plain.headers) == {"traceparent"}
    assert sent_instrumented.body == {"generationConfig": {}, **sent_plain.body}
    if config is None:  # the fake's response ids are a hash of the request's body
        assert "generationConfig" not in sent_plain.body
        return
    assert _dump(instrumented) == _dump(plain)
    assert len(instrumented) == TIMING.chunks if stream else instrumented.text.startswith("tok0 ")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("as_dict", [True, False], ids=["dict", "GenerateContentConfig"])
def test_traceparent_joins_the_trace_and_the_callers_config_stays(
    spans: InMemorySpanExporter, llm: FakeLLM, mode: str, as_dict: bool
) -> None:
    headers = {"x-user-header": "kept"}
    config: Any = {"temperature": 0.5, "http_options": {"headers": headers}}
    if not as_dict:
        config = genai_types.GenerateContentConfig(
            temperature=0.5, http_options=genai_types.HttpOptions(headers=headers)
        )
    before = config.copy() if as_dict else config.model_copy(deep=True)
    request(llm, mode, stream=True, config=config)
    received = llm.requests[-1]
    assert received.headers["x-user-header"] == "kept"
    assert received.body["generationConfig"] == {"temperature": 0.5}
    assert parse_traceparent(received.headers["traceparent"]) == hex_ids(only_model_span(spans))
    assert config == before and headers == {"x-user-header": "kept"}  # nothing of the caller's changed
    assert {s.name for s in spans.get_finished_spans()} == {f"generate_content {MODEL}", "prefill", "decode"}


def test_a_traceparent_the_caller_sets_wins(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    request(llm, "sync", stream=False, config={"http_options": {"headers": {"traceparent": theirs}}})
    assert llm.requests[-1].headers["traceparent"] == theirs
    assert len(model_spans(spans)) == 1


def test_vertex_ai_clients_are_named_so(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    """A client made with ``vertexai=True`` (express mode: an API key, no project) calls Vertex AI."""
    request(llm, "sync", stream=True, vertexai=True)
    assert "/publishers/google/models/" in llm.requests[-1].path
    attrs = only_model_span(spans).attributes or {}
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.CHUNK_COUNT]) == ("gcp.vertex_ai", TIMING.chunks)


def _read_three(llm: FakeLLM, spans: InMemorySpanExporter, mode: str, close: bool) -> None:
    """Three chunks read from the public stream, which is then closed, or dropped without closing."""

    def sync() -> None:
        with sync_client(llm) as client:
            stream = client.models.generate_content_stream(model=MODEL, contents="hi")
            for _ in range(3):
                next(stream)
            assert model_spans(spans) == []  # still open while the stream is referenced
            if close:
                stream.close()
            del stream

    async def asynchronous() -> None:
        async with async_client(llm) as aio:
            stream = await aio.models.generate_content_stream(model=MODEL, contents="hi")
            for _ in range(3):
                await anext(stream)
            assert model_spans(spans) == []
            if close:
                await stream.aclose()
            del stream

    if mode == "sync":
        sync()
    else:
        asyncio.run(asynchronous())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
def test_a_stream_left_early_ends_its_span(spans: InMemorySpanExporter, llm: FakeLLM, mode: str, close: bool) -> None:
    """google-genai's public stream is a generator of its own over the patched one, which it drops
    without closing when it is closed: either way the span ends, as abandoned, with what came."""

    def check() -> None:
        _read_three(llm, spans, mode, close)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[STREAM_END], attrs[sc.CHUNK_COUNT]) == (ABANDONED, 3)
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens  # every chunk gives the prompt's count
        assert sc.GEN_AI_USAGE_OUTPUT_TOKENS not in attrs  # only the last chunk gives the output's: never guessed
        sent = sends_ms(span, llm.requests[-1])
        assert_near(ms(attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]), sent[0], "TTFT")
        assert_near(ms(attrs[sc.DECODE_DURATION]), sent[2] - sent[0], "decode")

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_off_ends_its_span_with_the_error(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    with pytest.raises(Exception) as caught:
        request(llm, mode, stream=True, config=fake_headers(abort_after_chunks="4"))
    error = type(caught.value).__name__
    assert error in {"RemoteProtocolError", "ChunkedEncodingError"}  # the transport's: httpx's, or requests'

    failed = [s for s in model_spans(spans) if (s.attributes or {}).get(STREAM_END) == FAILED]
    assert failed, "no span ended with the stream's error"
    attrs = failed[0].attributes or {}
    assert failed[0].status.status_code == StatusCode.ERROR
    assert (attrs[sc.ERROR_TYPE], attrs[sc.CHUNK_COUNT]) == (error, 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("status", "error"), [(429, errors.ClientError), (400, errors.ClientError), (503, errors.ServerError)]
)
def test_error_answer_sets_status_and_type(
    spans: InMemorySpanExporter, llm: FakeLLM, status: int, error: type[errors.APIError], mode: str, stream: bool
) -> None:
    with pytest.raises(error) as caught:
        request(llm, mode, stream=stream, config=fake_headers(status=str(status)))
    assert caught.value.code == status and caught.value.message == f"fake {status} answer"
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert attrs[sc.ERROR_TYPE] == error.__name__
    assert attrs[sc.GEN_AI_REQUEST_STREAM] is stream
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in attrs and sc.CHUNK_COUNT not in attrs
    # A sync stream sends its request on the first read: the error comes out of the stream.
    assert attrs.get(STREAM_END) == (FAILED if stream and mode == "sync" else None)


def tool_call_events(span: Any) -> list[dict[str, Any]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == sc.TOOL_CALL_EVENT]


@pytest.mark.parametrize("mode", MODES)
def test_streamed_function_calls_are_ready_when_their_chunk_arrives(
    spans: InMemorySpanExporter, llm: FakeLLM, mode: str
) -> None:
    """Gemini sends each function call whole: its arguments are complete when its chunk arrives."""

    def check() -> None:
        chunks = request(
            llm, mode, stream=True, config={"tools": [TOOL_SPEC], **fake_headers(tool_calls=",".join(TOOLS))}
        )
        assert [call.name for chunk in chunks for call in chunk.function_calls or []] == list(TOOLS)
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert (attrs[TOOL_CALLS], attrs[TOOL_CALL_COUNT], attrs[sc.CHUNK_COUNT]) == (TOOLS, len(TOOLS), len(TOOLS))
        sent = assert_kept_schedule(span, llm.requests[-1], TIMING)
        events = tool_call_events(span)
        assert [(e[sc.GEN_AI_TOOL_CALL_ID], e[sc.GEN_AI_TOOL_NAME]) for e in events] == [
            (f"call_{k}", name) for k, name in enumerate(TOOLS)
        ]
        for k, event in enumerate(events):
            assert_near(ms(event[sc.TOOL_CALL_READY_AT]), sent[k], f"tool call {k} ready")
            assert 0 <= event[sc.TOOL_CALL_READY_AT] - event[sc.TOOL_CALL_NAMED_AT] < 0.001  # at once
        span_start = span.start_time or 0
        stamps = [round((event.timestamp - span_start) / 1e6, 3) for event in span.events]
        assert stamps == [round(ms(e[sc.TOOL_CALL_READY_AT]), 3) for e in events]

    best_of(spans, check)


def test_function_calls_of_a_whole_response_are_recorded(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    config = {"tools": [TOOL_SPEC], **fake_headers(tool_calls=",".join(TOOLS))}
    response = request(llm, "sync", stream=False, config=config)
    assert [call.name for call in response.function_calls] == list(TOOLS)
    assert response.function_calls[0].args == {"query": "input of tool call 0"}
    span = only_model_span(spans)
    attrs = span.attributes or {}
    assert (attrs[TOOL_CALLS], attrs[TOOL_CALL_COUNT]) == (TOOLS, len(TOOLS))
    assert tool_call_events(span) == []  # nothing streamed: the whole message came at the end


def test_a_function_call_without_an_id_is_known_by_its_position() -> None:
    """The Gemini API often leaves the id out; the call is then the k-th of the message."""
    reader = instrumentation.ResponseReader()
    reader.call = agentlat.model_call(MODEL, provider="gcp.gemini")
    parts = [{"function_call": {"name": name, "args": {}}} for name in TOOLS]
    chunk = genai_types.GenerateContentResponse(candidates=[{"content": {"parts": parts, "role": "model"}}])
    with reader.call:
        assert reader.feed(chunk) is True
    assert {key: (c.call_id, c.name) for key, c in reader.call._tool_calls.items()} == {
        f"#{k}": (None, name) for k, name in enumerate(TOOLS)
    }
    assert reader.facts.tool_calls == {(0, k): name for k, name in enumerate(TOOLS)}


def test_automatic_function_calling_makes_a_span_of_each_request(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    """With a Python function among the tools, google-genai runs it and asks again: two requests, two
    model call spans, and the function's time between them is never the model's."""
    ran = []

    def get_weather(query: str) -> str:
        """The weather where the query says."""
        time.sleep(0.1)
        ran.append(query)
        return "sunny"

    get_weather.__annotations__ = {"query": str, "return": str}  # types, not this module's postponed strings
    options = genai_types.HttpOptions(headers={"x-fake-tool-calls": "get_weather"})
    config = genai_types.GenerateContentConfig(tools=[get_weather], http_options=options)
    response = request(llm, "sync", stream=False, config=config)
    assert (ran, response.text) == (["input of tool call 0"], "".join(f"tok{i} " for i in range(TIMING.chunks)))
    first, second = sorted(model_spans(spans), key=lambda span: span.start_time or 0)
    assert (first.attributes or {})[TOOL_CALLS] == ("get_weather",) and TOOL_CALLS not in (second.attributes or {})
    assert ((second.start_time or 0) - (first.end_time or 0)) / 1e6 >= 100  # the function ran in between
    sent = [parse_traceparent(received.headers["traceparent"]) for received in llm.requests[-2:]]
    assert sent == [hex_ids(first), hex_ids(second)]


def test_instrument_twice_is_a_no_op(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    before = {(owner, name): vars(owner)[name] for owner in OWNERS for name in METHODS}
    instrumentation.instrument()
    assert {(owner, name): vars(owner)[name] for owner in OWNERS for name in METHODS} == before
    assert all(is_patched(method) for method in before.values())
    request(llm, "sync", stream=False)
    assert len(model_spans(spans)) == 1


def test_uninstrument_restores_the_original_methods(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    wrappers = {(owner, name): vars(owner)[name] for owner in OWNERS for name in METHODS}
    instrumentation.uninstrument()
    try:
        for (owner, name), wrapper in wrappers.items():
            assert vars(owner)[name] is wrapper.__wrapped__
            assert not is_patched(vars(owner)[name])
        request(llm, "sync", stream=True)
        request(llm, "async", stream=False)
        assert model_spans(spans) == []
    finally:
        instrumentation.instrument()
    assert all(is_patched(vars(owner)[name]) for owner in OWNERS for name in METHODS)


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
        assert (derived["Role"], derived["Dialect"], derived["Provider"]) == ("model", "genai", "gcp.gemini")
        assert (derived["Operation"], derived["Model"], derived["Streaming"]) == ("generate_content", MODEL, 1)
        assert (derived["InputTokens"], derived["OutputTokens"]) == (TIMING.input_tokens, TIMING.chunks)
        assert derived["CacheReadTokens"] == TIMING.cached_tokens
        assert_near(derived["TtftMs"], sent[0], "collector TtftMs")
        assert_near(derived["DecodeMs"], sent[-1] - sent[0], "collector DecodeMs")
        assert_near(derived["ItlMeanMs"], (sent[-1] - sent[0]) / (len(sent) - 1), "collector ItlMeanMs")

    best_of(spans, check)


@pytest.mark.skipif(bool(os.environ.get("AGENTLAT_GENAI_OVERLAY")), reason="this is the run on the oldest")
def test_the_oldest_google_genai_declared_passes_these_tests_too() -> None:
    """The instrumentation patches google-genai's internals: the tests above run again (collector aside)
    with google-genai laid over the project's packages at the oldest version pyproject.toml allows."""
    demo = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["demo"]
    assert "google-genai>=1.0" in demo  # OLDEST
    env = {**os.environ, "PYTHONPATH": f"{overlay(f'google-genai=={OLDEST}')}{os.pathsep}{ROOT}"}
    env["AGENTLAT_GENAI_OVERLAY"] = OLDEST
    version = [sys.executable, "-c", "from google.genai import version; print(version.__version__)"]
    assert subprocess.run(version, env=env, capture_output=True, text=True, check=True).stdout.strip() == OLDEST
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not collector"]
    run = subprocess.run(tests, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
