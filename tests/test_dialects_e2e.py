"""Other instrumentations of the openai client, through a real collector: OpenLLMetry
(opentelemetry-instrumentation-openai) and OpenInference (openinference-instrumentation-openai),
each on a TracerProvider of its own, call a FakeLLM with controlled timing; their spans go to the
collector with the real OTLP/HTTP exporter and must come back classified as model calls.

agentlat's own instrumentation is off here, so only the other library's span is in each trace."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.resources.responses import AsyncResponses, Responses
from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetryInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlat.demo import FakeLLM
from agentlat.instrument._wrapper import is_patched
from tests.fake_llm_fixtures import (
    TIMING,
    TOLERANCE_MS,
    assert_kept_schedule,
    assert_near,
    best_of,
    export_to,
    hex_ids,
    restored,
    stored_spans,
)
from tests.servers import ServerProcess

MODEL = "gpt-fake-1"
INSTRUMENTORS = {"openllmetry": OpenLLMetryInstrumentor, "openinference": OpenInferenceInstrumentor}


def openai_classes() -> list[type]:
    """Every class the openai package defines: where instrumentations put their wrappers."""
    modules = [m for name, m in list(sys.modules.items()) if name == "openai" or name.startswith("openai.")]
    return [obj for m in modules for obj in vars(m).values() if isinstance(obj, type) and obj.__module__ == m.__name__]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    owners = (Completions, AsyncCompletions, Responses, AsyncResponses)
    assert not any(is_patched(vars(owner)["create"]) for owner in owners), "agentlat's instrumentation is on"
    with FakeLLM(TIMING) as fake:
        yield fake


def chat(llm: FakeLLM, stream: bool) -> None:
    """One Chat Completions call, a stream read to its end."""
    with openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0) as client:
        kwargs: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        if stream:
            list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
        else:
            client.chat.completions.create(**kwargs)


@pytest.fixture(scope="module", params=list(INSTRUMENTORS))
def instrumented(request: pytest.FixtureRequest, llm: FakeLLM) -> Iterator[tuple[str, InMemorySpanExporter]]:
    """(dialect name, its spans): one instrumentation on its own provider, warmed up. Its wrappers
    go when the module ends, even where its own ``uninstrument`` leaves them (OpenLLMetry 0.62
    unwraps the wrong paths with openai 3)."""
    name = request.param
    provider = TracerProvider(resource=Resource.create({"service.name": f"dialect-{name}"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = INSTRUMENTORS[name]()
    with restored(openai_classes()):
        instrumentor.instrument(tracer_provider=provider)
        try:
            chat(llm, stream=True)
            chat(llm, stream=False)
            assert exporter.get_finished_spans(), f"{name} made no span"
            yield name, exporter
        finally:
            instrumentor.uninstrument()
    provider.shutdown()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    return span


def stored_model_span(
    server: ServerProcess, llm: FakeLLM, exporter: InMemorySpanExporter, stream: bool
) -> tuple[dict[str, Any], list[float]]:
    """Make one call, send its span to the collector; return the stored span's derived columns
    and when the fake sent each content chunk (ms from the span's start)."""
    exporter.clear()
    chat(llm, stream)
    span = only_span(exporter)
    sent = assert_kept_schedule(span, llm.requests[-1], TIMING) if stream else []
    export_to(server, [span])
    [stored] = stored_spans(server, hex_ids(span)[0], count=1)
    return stored["derived"], sent


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_span_is_a_model_call_with_usage(
    server: ServerProcess, llm: FakeLLM, instrumented: tuple[str, InMemorySpanExporter], stream: bool
) -> None:
    derived, _ = stored_model_span(server, llm, instrumented[1], stream)
    assert (derived["Role"], derived["Operation"], derived["Model"]) == ("model", "chat", MODEL)
    assert (derived["InputTokens"], derived["OutputTokens"]) == (TIMING.input_tokens, TIMING.chunks)
    assert derived["CacheReadTokens"] == TIMING.cached_tokens


def test_dialect_and_ttft_of_a_stream(
    server: ServerProcess, llm: FakeLLM, instrumented: tuple[str, InMemorySpanExporter]
) -> None:
    """OpenLLMetry 0.62 writes GenAI names only (no llm.request.type nor traceloop.span.kind), marks
    the stream with gen_ai.is_streaming and times it with one completion chunk event per SSE chunk:
    TTFT from the first, decode time to the last. OpenInference has one first-token event."""
    dialect, exporter = instrumented

    def check() -> None:
        derived, sent = stored_model_span(server, llm, exporter, stream=True)
        assert (derived["Role"], derived["Dialect"], derived["Streaming"]) == ("model", dialect, 1)
        assert derived["TtftMs"] is not None, "no TTFT derived"
        assert_near(derived["TtftMs"], sent[0], "collector TtftMs")
        if dialect == "openllmetry":
            assert derived["DecodeMs"] is not None, "no decode time derived"
            assert_near(derived["DecodeMs"], sent[-1] - sent[0], "collector DecodeMs")
            assert derived["ItlMaxMs"] is not None and derived["ItlMaxMs"] >= TIMING.itl_ms - TOLERANCE_MS

    best_of(exporter, check)


def test_no_ttft_without_a_stream(
    server: ServerProcess, llm: FakeLLM, instrumented: tuple[str, InMemorySpanExporter]
) -> None:
    dialect, exporter = instrumented
    derived, _ = stored_model_span(server, llm, exporter, stream=False)
    assert (derived["Role"], derived["Dialect"], derived["Streaming"]) == ("model", dialect, 0)
    assert (derived["TtftMs"], derived["DecodeMs"], derived["ItlMeanMs"]) == (None, None, None)
