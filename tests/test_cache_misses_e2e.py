"""Why a call missed the prompt cache, end to end: the real openai and anthropic clients, instrumented by the SDK,
against the fake providers playing their prompt cache (and their own diagnostics) by prefix; the spans through the
real OTLP exporter into a real collector; each miss's reason read back from ``GET /api/v1/cache``, and the advisor's
finding naming the cause."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentlat
from agentlat.demo import FakeLLM, Scenario
from agentlat.demo.fake_prompt_cache import ProviderCache
from tests.fake_llm_fixtures import export_to, model_spans
from tests.servers import ServerProcess, wait_for
from tests.test_trace_analysis_e2e import FAST

LIFETIME_S = 3.0  # the fake's cache lifetime, and what the SDK is told the account's is
PREFILL_MS_PER_TOKEN = 0.01  # what a cached token saves of the fake's first token
SYSTEM = ("You are the billing agent of a shop. Answer from the policy below, citing it. " * 110)[:8000]
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
    for name in ("lookup_order", "refund", "escalate")
]
SYSTEM_PART = '[{"role":"system","content":"'  # how the SDK sees a chat request's system part begin


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    cache = ProviderCache(ttl_s=LIFETIME_S, prefill_ms_per_token=PREFILL_MS_PER_TOKEN)
    with FakeLLM(Scenario(ttft_ms=40, itl_ms=2, chunks=3), prompt_cache=cache) as llm:
        yield llm


@pytest.fixture(scope="module")
def memory() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    lifetimes = {"openai": LIFETIME_S, "anthropic": LIFETIME_S}
    agentlat.init(service="cache-e2e", exporter=exporter, options=agentlat.Options(prompt_cache_ttl_s=lifetimes))
    yield exporter
    agentlat.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    collector = ServerProcess(tmp_path_factory.mktemp("cache-e2e"), extra_env=FAST).start()
    yield collector
    collector.stop()


def chat(client: openai.OpenAI, route: str, system: str, tools: list[dict] = TOOLS, model: str = "gpt-5") -> Any:
    with agentlat.agent("billing", route=route):
        stream = client.chat.completions.create(
            model=model, stream=True, stream_options={"include_usage": True}, tools=tools,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "where is my order?"}],
        )  # fmt: skip
        return [chunk for chunk in stream]


@pytest.fixture(scope="module")
def reports(fake: FakeLLM, memory: InMemorySpanExporter, server: ServerProcess) -> dict[str, dict[str, Any]]:
    """Every controlled call made, exported to the collector; the cache report per route."""
    gpt = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="fake", max_retries=0)
    claude = anthropic.Anthropic(base_url=fake.url, api_key="fake", max_retries=0)
    memory.clear()
    # /support: cold, a hit, the system prompt changed, the tools reordered, then the same prompt after it expired
    chat(gpt, "/support", SYSTEM)
    chat(gpt, "/support", SYSTEM)
    chat(gpt, "/support", "It is 10:01. " + SYSTEM)
    chat(gpt, "/support", SYSTEM, tools=TOOLS[::-1])
    time.sleep(LIFETIME_S + 0.5)
    chat(gpt, "/support", SYSTEM, tools=TOOLS[::-1])
    # /classify: twice the same short prompt, under OpenAI's 1,024 tokens
    for _ in range(2):
        chat(gpt, "/classify", "Classify the intent.", tools=[])
    # /claude: no breakpoint; then marked (its system differs from the unmarked one's); then a changed system prompt,
    # diagnosed by Anthropic against the marked call; then that prompt again (a hit)
    with agentlat.agent("reviewer", route="/claude"):
        ask = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "review"}]}
        claude.messages.create(**ask, system=SYSTEM)
        marked = claude.messages.create(
            **ask, system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        )
        changed = [{"type": "text", "text": "Today: " + SYSTEM, "cache_control": {"type": "ephemeral"}}]
        claude.messages.create(**ask, system=changed, diagnostics={"previous_message_id": marked.id})
        claude.messages.create(**ask, system=changed)
    # /responses: OpenAI's own diagnosis against the first response: of a changed model, of another cache key
    with agentlat.agent("writer", route="/responses"):
        first = gpt.responses.create(model="gpt-5", instructions=SYSTEM, input="draft a reply")
        gpt.responses.create(model="gpt-5-mini", instructions=SYSTEM, input="draft a reply",
                             prompt_cache_options={"comparison_response_id": first.id})  # fmt: skip
        gpt.responses.create(model="gpt-5", instructions=SYSTEM, input="draft a reply", prompt_cache_key="billing-2",
                             prompt_cache_options={"comparison_response_id": first.id})  # fmt: skip
    # /chat: one call in three with the stable system prompt, the others with a time stamp before it
    for i in range(24):
        chat(gpt, "/chat", SYSTEM if i % 3 == 0 else f"It is 10:{i:02d}. " + SYSTEM)
    export_to(server, model_spans(memory))

    def report() -> dict[str, dict[str, Any]] | None:
        groups = server.get("/api/v1/cache", window="1h", source="spans").json()["groups"]
        found = {g["group"]["route"]: g for g in groups}
        counts = {route: g["calls"] for route, g in found.items()}
        wanted = {"/support": 5, "/classify": 2, "/claude": 4, "/responses": 3, "/chat": 24}
        return found if counts == wanted else None

    return wait_for(report, timeout=30)


def test_each_reason_from_real_client_calls(reports: dict[str, dict[str, Any]]) -> None:
    support = reports["/support"]
    assert (support["hits"], support["misses"]) == (1, 4)
    assert support["misses_by_reason"] == {"cold": 1, "prefix_changed": 2, "expired": 1}
    tools = json.dumps(TOOLS, separators=(",", ":")).encode()
    reordered = json.dumps(TOOLS[::-1], separators=(",", ":")).encode()
    tools_offset = next(i for i, (a, b) in enumerate(zip(tools, reordered, strict=False)) if a != b)
    assert support["changed_parts"] == {
        "system": {"misses": 1, "offset_p50": len(SYSTEM_PART), "offset_p95": len(SYSTEM_PART)},
        "tools": {"misses": 1, "offset_p50": tools_offset, "offset_p95": tools_offset},
    }
    assert reports["/classify"]["misses_by_reason"] == {"below_minimum": 2}
    claude = reports["/claude"]
    assert (claude["hits"], claude["misses"]) == (1, 3)
    # the marked call's system blocks differ from the unmarked string from their first byte; the third is Anthropic's
    # system_changed, where the SDK found the offset too ('[{"type":"text","text":"' then "Today: ")
    assert claude["misses_by_reason"] == {"not_requested": 1, "prefix_changed": 2}
    assert claude["changed_parts"]["system"]["misses"] == 2
    assert claude["cache_write_tokens"] > 0
    responses = reports["/responses"]
    assert responses["misses_by_reason"] == {"cold": 1, "prefix_changed": 1, "settings_changed": 1}
    assert set(responses["changed_parts"]) == {"model"}


def test_the_advisor_names_the_cause_and_the_lever(reports: dict[str, dict[str, Any]], server: ServerProcess) -> None:
    """/chat: 16 of 24 calls' system prompts differ from the previous call's at byte 29 (after a stable one) or 39
    (after another time stamp: "It is 10:0" then the minute's last digit); the first stable call is cold."""
    chat = reports["/chat"]
    assert chat["misses_by_reason"] == {"cold": 1, "prefix_changed": 16}
    assert chat["changed_parts"]["system"]["offset_p95"] == len(SYSTEM_PART) + len("It is 10:0")
    findings = server.get("/api/v1/advice", window="1h", source="spans").json()["findings"]
    [finding] = [f for f in findings if f["kind"] == "prompt_cache" and f["route"] == "/chat"]
    evidence = finding["evidence"]
    per_call = (evidence["ttft_uncached_ms"] - evidence["ttft_cached_ms"]) * 16 / 24
    assert per_call > 0
    assert finding["lever"] == (
        "the system prompt differs from the previous call's within its first 40 bytes on 67% of calls: move the"
        f" dynamic part after it; saves {per_call:.0f} ms TTFT per call"
    )
    assert finding["saving_basis"].endswith("17 of 24 model calls missed the cache, 16 of them avoidably")
