"""``agentlat.init(options=Options(openai_stream_usage=True))``: a streamed chat completion that did not
ask for usage asks for it (``stream_options.include_usage``), its span gets exact token counts, and the
caller sees exactly the chunks it would have seen without the option (the usage-only chunk is hidden).
Without the option such a stream's counts are null (tests/test_instrument_streams.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentlat
from agentlat import semconv as sc
from agentlat.demo import FakeLLM
from agentlat.instrument import openai as instrumentation
from agentlat.instrument._streams import EXHAUSTED, STREAM_END
from tests.fake_llm_fixtures import TIMING, assert_stream_timing, best_of, cleared, model_spans, only_model_span
from tests.stream_surfaces import MODES

CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


def read(llm: FakeLLM, mode: str, **kwargs: Any) -> list[Any]:
    """``chat.completions.create(stream=True)`` read to its end: the chunks the caller got."""

    async def read_async() -> list[Any]:
        async with async_client(llm) as client:
            return [chunk async for chunk in await client.chat.completions.create(stream=True, **CHAT, **kwargs)]

    if mode == "async":
        return asyncio.run(read_async())
    with sync_client(llm) as client:
        return list(client.chat.completions.create(stream=True, **CHAT, **kwargs))


def sync_client(llm: FakeLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)


def async_client(llm: FakeLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)


@pytest.fixture(scope="module")
def exporter(llm: FakeLLM) -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    agentlat.init(service="test-stream-usage", exporter=memory, options=agentlat.Options(openai_stream_usage=True))
    for mode in MODES:  # warm-up: the SDK's one-off costs stay out of the measured TTFT
        read(llm, mode)
    assert model_spans(memory), "agentlat.init was already active in this process: no span reaches this module"
    yield memory
    agentlat.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    gc.collect()
    return cleared(exporter)


def dumped(chunks: list[Any]) -> list[dict[str, Any]]:
    """What the caller can tell apart (the fake's ids hash the request body, which the option changes)."""
    return [{k: v for k, v in chunk.model_dump().items() if k != "id"} for chunk in chunks]


@pytest.mark.parametrize("mode", MODES)
def test_usage_asked_for_and_its_chunk_hidden(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    def check() -> None:
        got = read(llm, mode)
        assert llm.requests[-1].body["stream_options"] == {"include_usage": True}
        span = only_model_span(spans)
        attrs = span.attributes or {}
        assert attrs[STREAM_END] == EXHAUSTED
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == TIMING.input_tokens
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == TIMING.chunks
        assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == TIMING.cached_tokens
        assert all(chunk.choices for chunk in got)  # no usage-only chunk reached the caller
        assert_stream_timing(spans, span, TIMING, llm.requests[-1])

    best_of(spans, check)


@pytest.mark.parametrize("mode", MODES)
def test_the_caller_sees_the_chunks_it_would_have_seen(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    with_option = read(llm, mode)
    instrumentation.uninstrument()
    try:
        plain = read(llm, mode)
        assert "stream_options" not in llm.requests[-1].body
    finally:
        instrumentation.instrument(stream_usage=True)
    assert dumped(with_option) == dumped(plain)
    assert len(plain) == TIMING.chunks + 2  # the role chunk, the content, the finish chunk


def test_a_caller_that_asked_for_usage_keeps_its_chunk(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    got = read(llm, "sync", stream_options={"include_usage": True})
    assert got[-1].choices == [] and got[-1].usage.completion_tokens == TIMING.chunks
    assert (only_model_span(spans).attributes or {})[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == TIMING.chunks


def test_a_caller_that_declined_usage_is_not_overruled(spans: InMemorySpanExporter, llm: FakeLLM) -> None:
    got = read(llm, "sync", stream_options={"include_usage": False})
    assert llm.requests[-1].body["stream_options"] == {"include_usage": False}
    assert all(chunk.choices for chunk in got)
    attrs = only_model_span(spans).attributes or {}
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in attrs and sc.GEN_AI_USAGE_OUTPUT_TOKENS not in attrs


@pytest.mark.parametrize("mode", MODES)
def test_the_stream_helper_gets_usage_too(spans: InMemorySpanExporter, llm: FakeLLM, mode: str) -> None:
    """``beta.chat.completions.stream()`` (on every version; newer ones also have it without
    ``beta.``): the span has the counts, and the helper's own accumulation sees no usage chunk, as
    without the option."""

    async def run_async() -> Any:
        async with async_client(llm) as client, client.beta.chat.completions.stream(**CHAT) as stream:
            chunks = [e.chunk for e in [e async for e in stream] if e.type == "chunk"]
            return chunks, await stream.get_final_completion()

    def run() -> Any:
        if mode == "async":
            return asyncio.run(run_async())
        with sync_client(llm) as client, client.beta.chat.completions.stream(**CHAT) as stream:
            return [e.chunk for e in stream if e.type == "chunk"], stream.get_final_completion()

    def check() -> None:
        chunks, final = run()
        assert llm.requests[-1].body["stream_options"] == {"include_usage": True}
        assert all(chunk.choices for chunk in chunks) and final.usage is None
        attrs = only_model_span(spans).attributes or {}
        assert (attrs[sc.GEN_AI_USAGE_INPUT_TOKENS], attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS]) == (50, TIMING.chunks)
        assert_stream_timing(spans, only_model_span(spans), TIMING, llm.requests[-1])

    best_of(spans, check)
