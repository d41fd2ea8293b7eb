"""Normaliser cost: ``agentlat.collector.normalise.derive()`` per span, by span type.

``derive`` runs once per ingested span, so it must stay well under 10 µs for a typical
span for the collector to reach 100,000 spans/s on 2 cores. Each span type is a pool of
varied spans (different models, token counts, ids) as the instrumentations really write
them; a round derives every span in the pool, and the figure is the best round over
several, in µs of CPU time per span: other processes share the machine, and CPU time
leaves out the waits for a core that would otherwise dominate the wall-clock figures.

Run: ``python -m bench.normalise`` (or ``python bench/normalise.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from agentlat.collector.normalise import NO_EVENTS, EventTimes, derive

TARGET_US = 10.0
ROUNDS = 7
POOL = 500  # spans per type, derived once per round
MS = 1_000_000
T0 = 1_735_689_600 * 1_000_000_000  # 2025-01-01T00:00:00Z in unix ns

SpanArgs = tuple[str, str, int, int, dict[str, object], EventTimes]
Derive = Callable[..., tuple[dict[str, object], list[str]]]
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-sonnet-4", "llama-3.1-70b"]
TOOLS = ["search", "fetch", "sql", "calc", "browse"]
ROUTES = ["/chat", "/search", "/code", "/rag"]


def genai_chat(rng: random.Random) -> SpanArgs:
    """Ours (OTel GenAI + agentlat.*): a streamed chat call, 13 attributes."""
    model = rng.choice(MODELS)
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "gen_ai.request.stream": True,
        "gen_ai.response.time_to_first_chunk": rng.uniform(0.05, 1.5),
        "gen_ai.usage.input_tokens": rng.randint(200, 20_000),
        "gen_ai.usage.output_tokens": rng.randint(10, 900),
        "gen_ai.usage.cache_read.input_tokens": rng.randint(0, 10_000),
        "agentlat.itl.mean": rng.uniform(0.01, 0.05),
        "agentlat.itl.p95": rng.uniform(0.05, 0.2),
        "agentlat.decode.duration": rng.uniform(0.1, 3),
        "agentlat.route": rng.choice(ROUTES),
        "agentlat.stream.chunks": rng.randint(5, 400),
    }
    return f"chat {model}", "Client", T0, T0 + rng.randint(200, 4000) * MS, attrs, NO_EVENTS


def genai_tool(rng: random.Random) -> SpanArgs:
    """Ours: a tool call with its call id, some HTTP attributes and app attributes."""
    tool = rng.choice(TOOLS)
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": f"call_{rng.randint(1, 10**9)}",
        "gen_ai.tool.type": "function",
        "agentlat.route": rng.choice(ROUTES),
        "http.request.method": "GET",
        "http.response.status_code": 200,
        "server.address": "tools.internal",
        "url.full": f"https://tools.internal/{tool}?q={rng.randint(1, 999)}",
        "tool.args.size": rng.randint(10, 2000),
        "retry.count": 0,
        "cache.hit": False,
    }
    return f"execute_tool {tool}", "Internal", T0, T0 + rng.randint(5, 900) * MS, attrs, NO_EVENTS


def openinference_llm(rng: random.Random) -> SpanArgs:
    """OpenInference: an LLM span with token details and a first-token event."""
    prompt = rng.randint(50, 5000)
    attrs: dict[str, object] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": rng.choice(MODELS),
        "llm.provider": "openai",
        "llm.system": "openai",
        "llm.invocation_parameters": '{"model": "gpt-4o-mini", "stream": true}',
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": rng.randint(5, 500),
        "llm.token_count.total": prompt + 500,
        "llm.token_count.prompt_details.cache_read": rng.randint(0, prompt),
        "session.id": f"sess-{rng.randint(1, 10**6)}",
        "input.mime_type": "application/json",
        "output.mime_type": "application/json",
    }
    events = EventTimes(["First Token Stream Event"], [T0 + rng.randint(50, 900) * MS])
    return "ChatCompletion", "Client", T0, T0 + 2000 * MS, attrs, events


def openllmetry_chunks(rng: random.Random) -> SpanArgs:
    """OpenLLMetry: a streamed chat span with 20 completion chunk events."""
    attrs: dict[str, object] = {
        "llm.request.type": "chat",
        "gen_ai.system": "OpenAI",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.usage.prompt_tokens": rng.randint(10, 4000),
        "gen_ai.usage.completion_tokens": rng.randint(20, 400),
        "llm.usage.total_tokens": 4400,
        "llm.is_streaming": True,
        "llm.request.functions.0.name": "get_weather",
        "gen_ai.openai.api_base": "https://api.openai.com/v1/",
    }
    at, times = T0 + rng.randint(80, 600) * MS, []
    for _ in range(20):
        times.append(at)
        at += rng.randint(5, 60) * MS
    events = EventTimes(["gen_ai.content.completion.chunk"] * 20, times)
    return "openai.chat", "Client", T0, at + 10 * MS, attrs, events


def vllm_server(rng: random.Random) -> SpanArgs:
    """vLLM: the server's llm_request span with its latency phases."""
    attrs: dict[str, object] = {
        "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
        "gen_ai.request.id": f"cmpl-{rng.randint(1, 10**9)}",
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.n": 1,
        "gen_ai.usage.prompt_tokens": rng.randint(10, 4000),
        "gen_ai.usage.completion_tokens": rng.randint(10, 256),
        "gen_ai.usage.cached_tokens": rng.randint(0, 1000),
        "gen_ai.latency.time_in_queue": rng.uniform(0, 0.05),
        "gen_ai.latency.time_to_first_token": rng.uniform(0.02, 0.3),
        "gen_ai.latency.time_in_model_prefill": rng.uniform(0.01, 0.2),
        "gen_ai.latency.time_in_model_decode": rng.uniform(0.2, 3),
        "gen_ai.latency.e2e": rng.uniform(0.3, 3.5),
    }
    return "llm_request", "Server", T0, T0 + 3500 * MS, attrs, NO_EVENTS


SPAN_TYPES: dict[str, Callable[[random.Random], SpanArgs]] = {
    "genai chat (13 attrs)": genai_chat,
    "genai tool (12 attrs)": genai_tool,
    "openinference llm": openinference_llm,
    "openllmetry 20 chunks": openllmetry_chunks,
    "vllm server span": vllm_server,
}


def pools(seed: int = 7, size: int = POOL) -> dict[str, list[SpanArgs]]:
    """Per span type, ``size`` varied spans (deterministic for a seed)."""
    rng = random.Random(seed)
    return {label: [make(rng) for _ in range(size)] for label, make in SPAN_TYPES.items()}


def us_per_span(fn: Derive, spans: Sequence[SpanArgs], rounds: int = ROUNDS) -> float:
    """Best round of deriving every span once, in µs of this thread's CPU time per span."""
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time_ns()
        for span in spans:
            fn(*span)
        best = min(best, time.thread_time_ns() - started)
    return best / len(spans) / 1000


def run(fn: Derive = derive) -> list[tuple[str, float]]:
    """Rows of (span type, µs/span), plus the mean over the types."""
    rows = [(label, us_per_span(fn, spans)) for label, spans in pools().items()]
    return [*rows, ("mean over types", sum(us for _, us in rows) / len(rows))]


if __name__ == "__main__":
    print(f"{'normalise.derive()':<24} {'µs/span':>8}  target < {TARGET_US:g} µs")
    for label, us in run():
        print(f"{label:<24} {us:>8.2f}  {'ok' if us < TARGET_US else 'OVER'}")
