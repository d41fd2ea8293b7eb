"""Why a call missed the prompt cache (store/cache_misses.py): each reason from controlled spans, the report's
counts, offsets, TTFT and input cost exactly, and the same report from the rollups as from the spans."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agentlat import semconv as sc
from agentlat.store import SpanFilter, Store
from tests.span_tables import span_batch

PROJECT = "cache-misses"
SHAPE = {sc.PROMPT_PART_HASHES: '["a1","b2"]'}  # the SDK saw the prompt (the hashes' values do not matter here)

# (why, provider, model, input tokens, cache-read tokens, attributes, expected reason, part, offset)
CALLS: list[tuple[str, str, str, int, int | None, dict[str, str], str, str, int | None]] = [
    ("a hit", "openai", "gpt-5", 4000, 3000, SHAPE, "", "", None),
    ("no cache report", "openai", "gpt-5", 4000, None, SHAPE, "", "", None),
    ("first of its route", "openai", "gpt-5", 4000, 0, SHAPE, "cold", "", None),
    ("idle past the default 5 min", "openai", "gpt-5", 4000, 0, SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "400.5"},
     "expired", "", None),
    ("idle 400 s of an hour's lifetime, system changed", "anthropic", "claude-sonnet-4-5", 5000, 0,
     SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "400", sc.CACHE_TTL_S: "3600", sc.CACHE_BREAKPOINTS: "1",
              sc.PROMPT_CHANGED_PART: "system", sc.PROMPT_CHANGED_OFFSET: "41"}, "prefix_changed", "system", 41),
    ("tools reordered", "openai", "gpt-5", 4000, 0,
     SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "5", sc.PROMPT_CHANGED_PART: "tools", sc.PROMPT_CHANGED_OFFSET: "120"},
     "prefix_changed", "tools", 120),
    ("an earlier message edited", "openai", "gpt-5", 4000, 0,
     SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "5", sc.PROMPT_CHANGED_PART: "message 3", sc.PROMPT_CHANGED_OFFSET: "7"},
     "prefix_changed", "messages", 7),
    ("another model", "openai", "gpt-5-mini", 4000, 0,
     SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "5", sc.PROMPT_CHANGED_PART: "model"}, "prefix_changed", "model", None),
    ("below OpenAI's 1,024", "openai", "gpt-5", 800, 0,
     SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "5", sc.PROMPT_CHANGED_PART: "system"}, "below_minimum", "", None),
    ("below Haiku 4.5's 4,096", "anthropic", "claude-haiku-4-5", 3000, 0, SHAPE | {sc.CACHE_BREAKPOINTS: "2"},
     "below_minimum", "", None),
    ("below the minimum the SDK recorded, where the table knows none", "vllm", "llama-3", 1500, 0,
     SHAPE | {sc.CACHE_MIN_TOKENS: "2048", sc.PROMPT_SINCE_PREVIOUS_S: "5"}, "below_minimum", "", None),
    ("over the minimum the SDK recorded, under the table's", "anthropic", "claude-haiku-4-5", 3000, 0,
     SHAPE | {sc.CACHE_MIN_TOKENS: "2048", sc.CACHE_BREAKPOINTS: "1"}, "cold", "", None),
    ("no breakpoint", "anthropic", "claude-sonnet-4-5", 3000, 0, SHAPE | {sc.CACHE_BREAKPOINTS: "0"},
     "not_requested", "", None),
    ("Anthropic's diagnosis", "anthropic", "claude-sonnet-4-5", 5000, 0,
     {sc.CACHE_PROVIDER_REASON: "system_changed", sc.CACHE_BREAKPOINTS: "1"}, "prefix_changed", "system", None),
    ("OpenAI's input_changed, the SDK's message", "openai", "gpt-5", 4000, 0,
     SHAPE | {sc.CACHE_PROVIDER_REASON: "input_changed", sc.PROMPT_SINCE_PREVIOUS_S: "5",
              sc.PROMPT_CHANGED_PART: "message 2", sc.PROMPT_CHANGED_OFFSET: "3"}, "prefix_changed", "messages", 3),
    ("OpenAI's cache key changed", "openai", "gpt-5", 4000, 0, {sc.CACHE_PROVIDER_REASON: "prompt_cache_key_changed"},
     "settings_changed", "", None),
    ("another instrumentation", "openai", "gpt-5", 4000, 0, {}, "unknown", "", None),
    ("the same prefix 10 s ago", "openai", "gpt-5", 4000, 0, SHAPE | {sc.PROMPT_SINCE_PREVIOUS_S: "10"},
     "unknown", "", None),
]  # fmt: skip
TTFT_HIT, TTFT_MISS = 200.0, 900.0


def _table(first_minute: int) -> pa.Table:
    n = len(CALLS) + 1  # and a server span that missed, which the client figures leave out
    rows = [*CALLS, ("a server span", "openai", "gpt-5", 4000, 0, SHAPE, "", "", None)]
    return span_batch(
        {
            "Timestamp": pa.array([(first_minute * 60 + i) * 10**9 for i in range(n)], pa.timestamp("ns", tz="UTC")),
            "TraceId": pa.array([f"t{i}" for i in range(n)]),
            "SpanId": pa.array([f"s{i}" for i in range(n)]),
            "ProjectId": pa.array([PROJECT] * n),
            "Role": pa.array(["model"] * n),
            "IsServerSpan": pa.array([0] * len(CALLS) + [1], pa.uint8()),
            "Route": pa.array(["/chat"] * n),
            "Provider": pa.array([r[1] for r in rows]),
            "Model": pa.array([r[2] for r in rows]),
            "InputTokens": pa.array([r[3] for r in rows], pa.uint64()),
            "CacheReadTokens": pa.array([r[4] for r in rows], pa.uint64()),
            "CacheCreationTokens": pa.array([500 if r[4] == 0 and r[1] == "anthropic" else None for r in rows],
                                            pa.uint64()),
            "TtftMs": pa.array([TTFT_HIT if r[4] else TTFT_MISS for r in rows], pa.float64()),
            "SpanAttributes": pa.array([list(r[5].items()) for r in rows], pa.map_(pa.string(), pa.string())),
        },
        n,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reports(embedded_store: Store) -> tuple[dict[str, Any], dict[str, Any]]:
    """The /chat report (exact, from rollups) over a window holding every call."""
    first_minute = (int(datetime.now(UTC).timestamp()) // 60) - 90
    embedded_store.insert_spans(_table(first_minute))
    embedded_store.rollup([first_minute * 60], version=1)
    where = SpanFilter(PROJECT, first_minute * 60 * 10**9, (first_minute + 1) * 60 * 10**9)
    [exact] = embedded_store.cache_report(["route"], where, from_rollups=False)
    [rolled] = embedded_store.cache_report(["route"], where, from_rollups=True)
    return exact, rolled


def _expected_reasons() -> dict[str, int]:
    counts: dict[str, int] = {}
    for *_, reason, _part, _offset in CALLS:
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    return counts


@pytest.mark.parametrize("source", ["exact", "rollups"])
def test_each_miss_gets_its_reason(reports: tuple[dict, dict], source: str) -> None:
    report = reports[source == "rollups"]
    assert report["group"] == {"route": "/chat"}
    assert (report["calls"], report["hits"], report["misses"]) == (17, 1, 16)
    assert report["misses_by_reason"] == _expected_reasons() == {
        "cold": 2, "expired": 1, "prefix_changed": 6, "below_minimum": 3, "not_requested": 1,
        "settings_changed": 1, "unknown": 2,
    }  # fmt: skip
    parts = report["changed_parts"]
    assert {p: v["misses"] for p, v in parts.items()} == {"system": 2, "tools": 1, "messages": 2, "model": 1}
    # offsets where the SDK found them: system 41 (the provider's diagnosis gave none), messages 7 and 3
    assert (parts["system"]["offset_p50"], parts["tools"]["offset_p95"]) == (41, 120)
    assert (parts["messages"]["offset_p50"], parts["messages"]["offset_p95"]) == (5, pytest.approx(6.8))
    assert parts["model"]["offset_p50"] is None


@pytest.mark.parametrize("source", ["exact", "rollups"])
def test_hit_rate_ttft_and_input_cost_of_hits_and_misses(reports: tuple[dict, dict], source: str) -> None:
    report = reports[source == "rollups"]
    inputs = [c[3] for c in CALLS if c[4] is not None]
    assert report["hit_rate"] == pytest.approx(3000 / sum(inputs))
    assert (report["ttft_hit_ms"], report["ttft_miss_ms"]) == (TTFT_HIT, TTFT_MISS)
    assert report["input_tokens_hit"] == 4000
    misses = len(inputs) - 1
    assert report["input_tokens_miss"] == pytest.approx((sum(inputs) - 4000) / misses)
    assert report["input_cost_hit"] == pytest.approx(1000 + 3000 * 0.1)  # OpenAI: a read token costs a tenth
    anthropic_misses = [c for c in CALLS if c[1] == "anthropic" and c[4] == 0]  # each wrote 500 at 1.25
    cost = sum(inputs) - 4000 + len(anthropic_misses) * 500 * 0.25
    assert report["input_cost_miss"] == pytest.approx(cost / misses)
    assert report["cache_write_tokens"] == 500 * len(anthropic_misses)


def test_rollups_answer_what_the_spans_do_on_random_calls(embedded_store: Store) -> None:
    """Random mixes of every input the reason reads: the rollups' counts and sums equal the exact ones."""
    rng = np.random.default_rng(39)
    first_minute = (int(datetime.now(UTC).timestamp()) // 60) - 300
    n, minutes = 600, 7
    keys = [sc.PROMPT_SINCE_PREVIOUS_S, sc.PROMPT_CHANGED_PART, sc.PROMPT_CHANGED_OFFSET, sc.CACHE_TTL_S,
            sc.CACHE_BREAKPOINTS, sc.CACHE_PROVIDER_REASON, sc.PROMPT_PART_HASHES, sc.CACHE_MIN_TOKENS]  # fmt: skip
    values = [["1", "299", "301", "5000"], ["model", "tools", "system", "message 1"], ["0", "9", "40"],
              ["300", "3600"], ["0", "1"], ["system_changed", "input_changed", "unavailable", "verbosity_changed"],
              ['["x"]'], ["512", "4096"]]  # fmt: skip
    attributes = [
        [(k, str(rng.choice(v))) for k, v in zip(keys, values, strict=True) if rng.random() < 0.5] for _ in range(n)
    ]
    table = span_batch(
        {
            "Timestamp": pa.array((first_minute * 60 + rng.integers(0, minutes * 60, n)) * 10**9,
                                  pa.timestamp("ns", tz="UTC")),
            "TraceId": pa.array([f"r{i}" for i in range(n)]),
            "SpanId": pa.array([f"s{i}" for i in range(n)]),
            "ProjectId": pa.array([PROJECT + "-random"] * n),
            "Role": pa.array(rng.choice(["model", "model", "tool"], n)),
            "Route": pa.array(rng.choice(["/a", "/b"], n)),
            "Provider": pa.array(rng.choice(["openai", "anthropic", "gcp.gemini"], n)),
            "Model": pa.array(rng.choice(["gpt-5", "claude-haiku-4-5", "gemini-2.5-pro"], n)),
            "InputTokens": pa.array(rng.integers(500, 9000, n), pa.uint64()),
            "CacheReadTokens": pa.array([None if c < 0 else int(c) for c in rng.choice([-1, 0, 0, 2000], n)],
                                        pa.uint64()),
            "CacheCreationTokens": pa.array(rng.choice([0, 300], n), pa.uint64()),
            "TtftMs": pa.array(rng.uniform(100, 2000, n), pa.float64()),
            "SpanAttributes": pa.array(attributes, pa.map_(pa.string(), pa.string())),
        },
        n,
    )  # fmt: skip
    embedded_store.insert_spans(table)
    embedded_store.rollup([(first_minute + m) * 60 for m in range(minutes)], version=1)
    where = SpanFilter(PROJECT + "-random", first_minute * 60 * 10**9, (first_minute + minutes) * 60 * 10**9)
    exact = embedded_store.cache_report(["route", "model"], where, from_rollups=False)
    rolled = embedded_store.cache_report(["route", "model"], where, from_rollups=True)
    assert len(exact) == 6 and [r["group"] for r in exact] == [r["group"] for r in rolled]
    for want, got in zip(exact, rolled, strict=True):
        assert _same(want, got)
        assert sum(want["misses_by_reason"].values()) == want["misses"]


def _same(want: dict[str, Any], got: dict[str, Any]) -> bool:
    """Equal, floats to rounding (pytest.approx does not compare nested dicts)."""
    for key, value in want.items():
        if isinstance(value, dict):
            assert value.keys() == got[key].keys(), key
            for k in value:
                assert got[key][k] == pytest.approx(value[k]) or _same(value[k], got[key][k]), (key, k)
        else:
            assert got[key] == pytest.approx(value), key
    return True
