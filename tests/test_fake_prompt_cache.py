"""The fake providers' prompt cache (agentlat.demo.fake_prompt_cache) through the real openai and anthropic clients:
exact token counts from prompts of known size, and each diagnosis the real APIs give."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import anthropic
import openai
import pytest

from agentlat.demo import FakeLLM, Scenario
from agentlat.demo.fake_prompt_cache import ProviderCache

SYSTEM = "s" * 8000  # 8,002 bytes as a JSON string: 2,001 tokens
USER = {"role": "user", "content": "hi"}


def tokens(value: object) -> int:
    return math.ceil(len(json.dumps(value, separators=(",", ":")).encode()) / 4)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(Scenario(ttft_ms=5, itl_ms=1, chunks=2), prompt_cache=ProviderCache(ttl_s=60)) as llm:
        yield llm


def test_anthropic_caches_what_a_breakpoint_marks_and_diagnoses_against_a_message(fake: FakeLLM) -> None:
    claude = anthropic.Anthropic(base_url=fake.url, api_key="fake", max_retries=0)
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [USER]}
    unmarked = claude.messages.create(**ask, system=SYSTEM)
    again = claude.messages.create(**ask, system=SYSTEM)
    assert (again.usage.cache_read_input_tokens, again.usage.cache_creation_input_tokens) == (0, 0)  # no breakpoint
    assert unmarked.usage.input_tokens == tokens(SYSTEM) + tokens(USER)
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    first = claude.messages.create(**ask, system=system)
    second = claude.messages.create(**ask, system=system, diagnostics={"previous_message_id": first.id})
    written = tokens([{"type": "text", "text": SYSTEM}])  # the marker is not content
    assert (first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens) == (written, 0)
    assert (second.usage.cache_read_input_tokens, second.usage.input_tokens) == (written, tokens(USER))
    assert second.diagnostics is None  # nothing differs
    other = claude.messages.create(**{**ask, "model": "claude-haiku-4-5"}, system=system,
                                   diagnostics={"previous_message_id": first.id})  # fmt: skip
    assert other.diagnostics.cache_miss_reason.type == "model_changed"
    lost = claude.messages.create(**ask, system=system, diagnostics={"previous_message_id": "msg_unknown"})
    assert lost.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    edited = [{"role": "user", "content": "hello"}]
    with claude.messages.stream(**{**ask, "messages": edited}, system=[{**system[0], "text": "t" + SYSTEM}],
                                diagnostics={"previous_message_id": first.id}) as stream:  # fmt: skip
        start = stream.get_final_message()
    assert start.diagnostics.cache_miss_reason.type == "system_changed"
    assert start.diagnostics.cache_miss_reason.cache_missed_input_tokens == 0  # nothing shared before the system


def test_openai_caches_every_prefix_and_diagnoses_against_a_response(fake: FakeLLM) -> None:
    gpt = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="fake", max_retries=0)
    first = gpt.responses.create(model="gpt-5", instructions=SYSTEM, input="draft")
    assert (first.usage.input_tokens, first.usage.input_tokens_details.cached_tokens) == (
        tokens(SYSTEM) + tokens("draft"),
        0,
    )
    compare = {"comparison_response_id": first.id}
    hit = gpt.responses.create(model="gpt-5", instructions=SYSTEM, input="redraft", prompt_cache_options=compare)
    assert hit.usage.input_tokens_details.cached_tokens == tokens(SYSTEM)  # the instructions, not the input
    assert hit.prompt_cache_diagnostics.type == "cache_hit"
    keyed = gpt.responses.create(model="gpt-5", instructions="x" + SYSTEM, input="draft", prompt_cache_key="k2",
                                 prompt_cache_options=compare)  # fmt: skip
    assert keyed.prompt_cache_diagnostics.reason == "prompt_cache_key_changed"
    changed = gpt.responses.create(model="gpt-5", instructions="y" + SYSTEM, input="d", prompt_cache_options=compare)
    assert (changed.prompt_cache_diagnostics.type, changed.prompt_cache_diagnostics.reason) == (
        "cache_miss",
        "input_changed",
    )
    assert changed.prompt_cache_options.comparison_response_id == first.id
    missing = gpt.responses.create(model="gpt-5", instructions="z", input="d",
                                   prompt_cache_options={"comparison_response_id": "resp_none"})  # fmt: skip
    assert missing.prompt_cache_diagnostics.type == "comparison_response_not_found"
    short = [{"role": "system", "content": "short"}, USER]
    for _ in range(2):  # under 1,024 tokens: never cached
        usage = gpt.chat.completions.create(model="gpt-5", messages=short).usage
        assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (tokens(short[:1]) + tokens(USER), 0)


def test_an_entry_lives_its_lifetime_from_its_last_use() -> None:
    now = [0.0]
    cache = ProviderCache(ttl_s=10, clock=lambda: now[0])
    body = {"messages": [{"role": "system", "content": SYSTEM}, USER]}
    assert cache.answer("/v1/chat/completions", body, "m", "a").cached_tokens == 0
    now[0] = 9.0
    assert cache.answer("/v1/chat/completions", body, "m", "b").cached_tokens > 0  # read at 9: lives until 19
    now[0] = 18.5
    assert cache.answer("/v1/chat/completions", body, "m", "c").cached_tokens > 0
    now[0] = 29.0
    assert cache.answer("/v1/chat/completions", body, "m", "d").cached_tokens == 0  # 10.5 s unused: expired
    assert cache.answer("/v1/chat/completions", body, "other", "e").cached_tokens == 0  # another model's cache


def test_anthropic_reads_back_from_a_moved_breakpoint_and_ids_name_one_provider(fake: FakeLLM) -> None:
    """The usual multi-turn pattern: each turn marks its newest message; turn 2 reads what turn 1 wrote."""
    claude = anthropic.Anthropic(base_url=fake.url, api_key="fake", max_retries=0)
    marker = {"cache_control": {"type": "ephemeral"}}
    first_turn = [{"role": "user", "content": [{"type": "text", "text": SYSTEM, **marker}]}]
    one = claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=first_turn)
    unmarked = [{"role": "user", "content": [{"type": "text", "text": SYSTEM}]}]
    second_turn = [*unmarked, {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": [{"type": "text", "text": "more", **marker}]}]  # fmt: skip
    two = claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=second_turn)
    assert one.usage.cache_creation_input_tokens == tokens(unmarked[0])  # the marker's bytes are not counted
    assert two.usage.cache_read_input_tokens == tokens(unmarked[0])
    gpt = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="fake", max_retries=0)
    response = gpt.responses.create(model="gpt-5", instructions=SYSTEM, input="draft")
    other = claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=first_turn,
                                   diagnostics={"previous_message_id": response.id})  # fmt: skip
    assert other.diagnostics.cache_miss_reason.type == "previous_message_not_found"  # not a message of this API
