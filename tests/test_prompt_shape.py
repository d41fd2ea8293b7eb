"""The prompt's structure (issue 39): parts in the order a provider's cache reads them, cumulative hashes, and where
a request first differs from the previous one of its provider and route, from the parameters the real openai,
anthropic and google-genai clients are called with (against the fake providers), never the text."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentlat
from agentlat import semconv as sc
from agentlat._prompt_shape import (
    PromptHistory,
    PromptPart,
    cache_settings_of_anthropic,
    cache_settings_of_openai,
    common_prefix,
    hashes,
    min_cacheable_tokens,
    parts_of_anthropic,
    parts_of_gemini,
    parts_of_openai_chat,
    parts_of_openai_responses,
)
from agentlat.demo import FakeLLM
from tests.fake_llm_fixtures import TIMING, cleared, model_spans

SYSTEM = "You are a weather agent. Answer in one line."
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def names(parts: list[PromptPart]) -> list[str]:
    return [p.name for p in parts]


def test_each_provider_is_cut_in_the_order_its_cache_reads() -> None:
    chat = {
        "tools": [TOOL],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "weather?"},
        ],
    }
    assert names(parts_of_openai_chat(chat)) == ["tools", "system", "message 2"]
    assert parts_of_openai_chat(chat)[1].data == (
        b'[{"role":"system","content":"You are a weather agent. Answer in one line."},'
        b'{"role":"developer","content":"be brief"}]'
    )
    responses = {"instructions": SYSTEM, "input": "weather?", "tools": openai.NOT_GIVEN}
    assert names(parts_of_openai_responses(responses)) == ["system", "message 0"]
    messages = {"system": [{"type": "text", "text": SYSTEM}], "tools": [TOOL], "messages": [{"role": "user"}] * 2}
    assert names(parts_of_anthropic(messages)) == ["tools", "system", "message 0", "message 1"]
    config = genai_types.GenerateContentConfig(system_instruction=SYSTEM, temperature=0.5)
    gemini = parts_of_gemini({"contents": "weather?", "config": config})
    assert names(gemini) == ["system", "message 0"]
    assert (gemini[0].data, gemini[1].data) == (f'"{SYSTEM}"'.encode(), b'"weather?"')
    assert names(parts_of_openai_chat({"messages": "not a list"})) == []  # what no client sends: nothing


def test_hashes_are_cumulative_and_change_from_the_first_part_that_differs() -> None:
    a = [PromptPart("tools", b"[1]"), PromptPart("system", b'"s"'), PromptPart("message 0", b'"m"')]
    b = [*a[:2], PromptPart("message 0", b'"n"')]
    first = hashlib.sha256(b"tools\0" + (3).to_bytes(8, "big") + b"[1]").hexdigest()[:16]
    assert hashes(a)[0] == first
    assert hashes(a)[:2] == hashes(b)[:2] and hashes(a)[2] != hashes(b)[2]
    moved = [PromptPart("system", b"[1]"), PromptPart("tools", b'"s"')]  # the same bytes in other parts
    assert hashes(moved)[1] != hashes(a)[1]
    assert [common_prefix(x, y) for x, y in [(b"abcd", b"abXd"), (b"ab", b"abc"), (b"", b"a"), (b"q", b"q")]] == [
        2,
        2,
        0,
        1,
    ]


def test_the_history_says_where_a_request_first_differs_from_the_last_of_its_route() -> None:
    history = PromptHistory()
    system = [PromptPart("tools", b"[t]"), PromptPart("system", b'"It is 10:00. You are..."')]
    first = history.attributes("openai", "/chat", "m", [*system, PromptPart("message 0", b'"hi"')])
    assert sc.PROMPT_CHANGED_PART not in first
    assert (first[sc.PROMPT_PARTS], first[sc.PROMPT_BYTES]) == (["tools", "system", "message 0"], 32)
    assert first[sc.PROMPT_PREFIX_HASH] == first[sc.PROMPT_PART_HASHES][1]  # tools and system: the stable part
    grown = [*system, PromptPart("message 0", b'"hi"'), PromptPart("message 1", b'"more"')]
    assert sc.PROMPT_CHANGED_PART not in history.attributes("openai", "/chat", "m", grown)  # the conversation grew
    later = [system[0], PromptPart("system", b'"It is 10:01. You are..."'), PromptPart("message 0", b'"hi"')]
    changed = history.attributes("openai", "/chat", "m", later)
    assert (changed[sc.PROMPT_CHANGED_PART], changed[sc.PROMPT_CHANGED_OFFSET]) == ("system", 11)  # '"It is 10:0'"
    assert history.attributes("openai", "/chat", "other-model", later)[sc.PROMPT_CHANGED_PART] == "model"
    assert sc.PROMPT_CHANGED_PART not in history.attributes("openai", "/other-route", "m", later)  # its first
    no_tools = later[1:]
    assert history.attributes("openai", "/chat", "other-model", no_tools)[sc.PROMPT_CHANGED_PART] == "tools"
    shorter = history.attributes("openai", "/chat", "other-model", no_tools[:1])
    assert shorter[sc.PROMPT_CHANGED_PART] == "message 0"  # cut: the old next message is not sent


def test_the_history_is_bounded_in_routes_and_bytes() -> None:
    history = PromptHistory(keys=2, max_bytes=10)
    small, big = [PromptPart("system", b"0123456789")], [PromptPart("system", b"0123456789!")]
    for route in ("/a", "/b", "/c"):
        history.attributes("p", route, "m", small)
    assert sc.PROMPT_CHANGED_PART not in history.attributes("p", "/a", "m", big)  # /a went first: nothing to compare
    assert sc.PROMPT_CHANGED_PART not in history.attributes("p", "/a", "m", small)  # the big one was not kept


def test_what_a_request_asks_of_the_cache() -> None:
    marked = {"type": "ephemeral"}
    assert cache_settings_of_anthropic({"system": SYSTEM, "messages": [{"role": "user", "content": "hi"}]}) == {
        sc.CACHE_BREAKPOINTS: 0
    }
    request = {
        "tools": [{**TOOL["function"], "cache_control": marked}],
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": marked}]}],
    }
    assert cache_settings_of_anthropic(request) == {sc.CACHE_BREAKPOINTS: 3, sc.CACHE_TTL_S: 3600.0}
    # top-level: the last cacheable block; no lifetime stated, so the provider's default (none recorded)
    assert cache_settings_of_anthropic({"cache_control": marked, "messages": []}) == {sc.CACHE_BREAKPOINTS: 1}
    assert cache_settings_of_openai({"prompt_cache_options": {"ttl": "12h"}}) == {sc.CACHE_TTL_S: 43200.0}
    assert cache_settings_of_openai({"prompt_cache_retention": "24h"}) == {sc.CACHE_TTL_S: 86400.0}
    assert cache_settings_of_openai({"prompt_cache_retention": "in_memory"}) == {}  # the provider's default
    assert cache_settings_of_openai({"prompt_cache_options": openai.NOT_GIVEN}) == {}


def test_the_history_times_the_previous_request_and_states_the_accounts_lifetime() -> None:
    history = PromptHistory()
    history.ttl_s = {"openai": 86400.0}
    parts = [PromptPart("system", b'"s"')]
    first = history.attributes("openai", "/r", "m", parts)
    assert sc.PROMPT_SINCE_PREVIOUS_S not in first and first[sc.CACHE_TTL_S] == 86400.0
    time.sleep(0.25)
    again = history.attributes("openai", "/r", "m", parts)
    assert 0.25 <= again[sc.PROMPT_SINCE_PREVIOUS_S] < 0.5
    assert sc.CACHE_TTL_S not in history.attributes("anthropic", "/r", "m", parts)


# --- through the real clients ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(TIMING) as fake:
        yield fake


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    agentlat.init(service="test-prompt-shape", exporter=memory)
    yield memory
    agentlat.shutdown()


def prompts(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    keys = (sc.PROMPT_PARTS, sc.PROMPT_BYTES, sc.PROMPT_CHANGED_PART, sc.PROMPT_CHANGED_OFFSET)
    spans = sorted(model_spans(exporter), key=lambda s: s.start_time or 0)
    return [{k: _plain(s.attributes.get(k)) for k in keys} for s in spans]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def twice(call: Any, first: dict[str, Any], second: dict[str, Any]) -> None:
    with agentlat.agent("weather", route="/prompt-shape"):
        call(**first)
        call(**second)


def test_openai_chat_and_responses_record_the_first_difference(exporter: InMemorySpanExporter, llm: FakeLLM) -> None:
    client = openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)
    cleared(exporter)
    messages = [{"role": "user", "content": "weather?"}]
    twice(
        client.chat.completions.create,
        {"model": "gpt-fake-1", "messages": [{"role": "system", "content": "It is 10:00. " + SYSTEM}, *messages]},
        {"model": "gpt-fake-1", "messages": [{"role": "system", "content": "It is 10:01. " + SYSTEM}, *messages]},
    )
    twice(  # Responses: the same provider and route, so its first call is compared to the last chat call
        client.responses.create,
        {"model": "gpt-fake-1", "instructions": SYSTEM, "input": "weather?"},
        {"model": "gpt-fake-1", "instructions": SYSTEM, "input": "weather?", "tools": [TOOL["function"]]},
    )
    tools = b'[{"name":"get_weather","parameters":{"type":"object","properties":{}}}]'
    chat_bytes = len(b'[{"role":"system","content":"It is 10:00. ' + SYSTEM.encode() + b'"}]') + len(
        b'{"role":"user","content":"weather?"}'
    )
    assert prompts(exporter) == [
        {sc.PROMPT_PARTS: ["system", "message 1"], sc.PROMPT_BYTES: chat_bytes}
        | {sc.PROMPT_CHANGED_PART: None, sc.PROMPT_CHANGED_OFFSET: None},
        {sc.PROMPT_PARTS: ["system", "message 1"], sc.PROMPT_BYTES: chat_bytes}
        | {sc.PROMPT_CHANGED_PART: "system", sc.PROMPT_CHANGED_OFFSET: len('[{"role":"system","content":"It is 10:0')},
        {sc.PROMPT_PARTS: ["system", "message 0"], sc.PROMPT_BYTES: len(SYSTEM) + 2 + len('"weather?"')}
        | {sc.PROMPT_CHANGED_PART: "system", sc.PROMPT_CHANGED_OFFSET: 0},
        {sc.PROMPT_PARTS: ["tools", "system", "message 0"], sc.PROMPT_BYTES: len(tools) + len(SYSTEM) + 12}
        | {sc.PROMPT_CHANGED_PART: "tools", sc.PROMPT_CHANGED_OFFSET: None},
    ]


def test_anthropic_and_gemini_record_the_first_difference(exporter: InMemorySpanExporter, llm: FakeLLM) -> None:
    claude = anthropic.Anthropic(base_url=llm.url, api_key="fake", max_retries=0)
    gemini = genai.Client(api_key="fake", http_options=genai_types.HttpOptions(base_url=llm.url))
    cleared(exporter)
    asked = [{"role": "user", "content": "weather?"}]
    twice(
        claude.messages.create,
        {"model": "claude-fake", "max_tokens": 64, "system": SYSTEM, "messages": asked},
        {"model": "claude-fake", "max_tokens": 64, "system": SYSTEM, "messages": [{"role": "user", "content": "w?"}]},
    )
    config = genai_types.GenerateContentConfig(system_instruction=SYSTEM)
    twice(
        gemini.models.generate_content,
        {"model": "gemini-fake", "contents": "weather?", "config": config},
        {"model": "gemini-fake", "contents": "weather?", "config": config},
    )
    assert [
        (p[sc.PROMPT_PARTS], p[sc.PROMPT_CHANGED_PART], p[sc.PROMPT_CHANGED_OFFSET]) for p in prompts(exporter)
    ] == [
        (["system", "message 0"], None, None),
        (["system", "message 0"], "message 0", len('{"role":"user","content":"w')),
        (["system", "message 0"], None, None),  # the first of its provider and route
        (["system", "message 0"], None, None),  # the same prompt again
    ]
    minimums = [s.attributes.get(sc.CACHE_MIN_TOKENS) for s in model_spans(exporter)]
    assert minimums == [1024, 1024, 1024, 1024]  # Anthropic's default family, Gemini's non-pro tier


def test_the_minimum_cacheable_prompt_is_the_providers_for_the_model() -> None:
    assert [
        min_cacheable_tokens(provider, model)
        for provider, model in (
            ("anthropic", "claude-opus-4-5"), ("anthropic", "claude-haiku-4-5"), ("anthropic", "claude-sonnet-4-6"),
            ("anthropic", "claude-3-5-haiku-latest"), ("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-5"),
            ("gcp.gemini", "gemini-2.5-pro"), ("gcp.gemini", "gemini-2.5-flash"), ("vllm", "llama-3"),
        )
    ] == [4096, 4096, 2048, 2048, 1024, 1024, 4096, 1024, None]  # fmt: skip
    shape = PromptHistory().attributes("vllm", "/r", "llama-3", [PromptPart("system", b"x")])
    assert sc.CACHE_MIN_TOKENS not in shape  # no minimum agentlat knows of: none recorded, none guessed


def test_a_prompt_version_is_the_runs_or_else_the_stable_parts_hash(
    exporter: InMemorySpanExporter, llm: FakeLLM
) -> None:
    client = openai.OpenAI(base_url=f"{llm.url}/v1", api_key="fake", max_retries=0)
    cleared(exporter)
    asked = {
        "model": "gpt-fake-1",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "?"}],
    }
    with agentlat.agent("weather", route="/versions", prompt_version="v4"):
        client.chat.completions.create(**asked)
        with agentlat.tool("lookup"):
            pass
    with agentlat.agent("weather", route="/versions"):
        client.chat.completions.create(**asked)
        client.chat.completions.create(**{**asked, "tools": [TOOL]})
    agentlat.flush()
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    seen = [(s.name, s.attributes.get(sc.PROMPT_VERSION), s.attributes.get(sc.PROMPT_PREFIX_HASH)) for s in spans]
    (_, _, same), (_, _, with_tools) = (row for row in seen[3:] if row[0].startswith("chat"))
    assert same and with_tools and same != with_tools  # the tools are part of the stable prefix
    assert [(name, version) for name, version, _ in seen] == [
        ("invoke_agent weather", "v4"), ("chat gpt-fake-1", "v4"), ("execute_tool lookup", "v4"),
        ("invoke_agent weather", None), ("chat gpt-fake-1", same), ("chat gpt-fake-1", with_tools),
    ]  # fmt: skip
