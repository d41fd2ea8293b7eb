"""Flat traces analysed in columnar form (``collector/analysis/flat_traces.py``) against the reference,
``critical_path.analyse``, one trace at a time: random traces of every shape through the real decoder and store,
in both forms of analysis input, give the same row of the traces table either way; and one flat trace with
known timings gives the split its timings make."""

from __future__ import annotations

import json
import random
import time

import pyarrow as pa
import pytest

from agentlat import semconv as sc
from agentlat.collector.analysis.assembler import analysis_rows, spans_by_trace, trace_rows
from agentlat.collector.analysis.critical_path import analyse
from agentlat.collector.analysis.flat_traces import split_flat
from agentlat.store import Store
from tests.otlp_payloads import MS, SpanSpec, new_span_id, new_trace_id
from tests.test_analysis_input import FORMS, stored_input

ANALYSED_AT_US = 1_700_000_000_000_000


def _model(rng: random.Random, duration_ns: int) -> dict[str, object]:
    attributes: dict[str, object] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": rng.choice("ab")}
    stream = rng.random()
    seconds = duration_ns / 1e9
    if stream < 0.7:  # TTFT within the call; decode to its end, short of it (stream ended first), or none
        ttft = seconds * rng.uniform(0.05, 0.6)
        attributes["gen_ai.response.time_to_first_chunk"] = ttft
        if rng.random() < 0.7:
            attributes["agentlat.decode.duration"] = (seconds - ttft) * rng.choice([1.0, 1.0, rng.uniform(0.2, 0.9)])
    elif stream < 0.8:  # a stream stated past the call's end: the reference stretches the call
        attributes["gen_ai.response.time_to_first_chunk"] = seconds * rng.uniform(1.1, 2.0)
    if rng.random() < 0.6:
        attributes["gen_ai.usage.input_tokens"] = rng.randint(0, 5000)
        if rng.random() < 0.8:
            attributes["gen_ai.usage.cache_read.input_tokens"] = rng.randint(0, 4000)
    if rng.random() < 0.15:
        attributes[sc.SPECULATIVE_PROPOSED_TOKENS] = rng.randint(1, 400)
        attributes[sc.SPECULATIVE_ACCEPTED_TOKENS] = rng.randint(0, 300)
    if rng.random() < 0.3:
        attributes["gen_ai.response.id"] = f"resp-{rng.randint(1, 6)}"  # now and then two calls share one
    return attributes


def _tool(rng: random.Random) -> dict[str, object]:
    attributes: dict[str, object] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": rng.choice("xyz")}
    if rng.random() < 0.5:
        attributes["gen_ai.tool.call.id"] = f"call_{rng.randint(1, 10**6)}"
    if rng.random() < 0.05:
        attributes[sc.PREFETCH_OUTCOME] = rng.choice(["hit", "miss"])
    return attributes


def _attributes(rng: random.Random, kind: str, duration_ns: int, route: str) -> dict[str, object]:
    if kind == "model":
        attributes = _model(rng, duration_ns)
    elif kind == "tool":
        attributes = _tool(rng)
    elif kind == "agent":
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": rng.choice(["a", "b"])}
    else:
        attributes = {}
    if route and rng.random() < 0.7:
        attributes["agentlat.route"] = route
    return attributes


def random_trace(rng: random.Random, base_ns: int) -> list[SpanSpec]:
    """A root and children one after another, with now and then what makes a trace not flat: overlapping or
    nested children, a second root, a repeated span, children outside the root, adjacent tool calls."""
    trace_id, route, service = new_trace_id(), rng.choice(["/a", "/b", ""]), rng.choice(["s1", "s2"])
    root_kind = rng.choice(["agent", "agent", "agent", "other", "model", "tool"])
    root_duration = rng.randint(50, 3000) * MS
    root = SpanSpec(
        f"root {root_kind}", trace_id=trace_id, start_ns=base_ns, duration_ns=root_duration,
        service=service if rng.random() < 0.9 else "",
        attributes=_attributes(rng, root_kind, root_duration, route),
        status_code=2 if rng.random() < 0.1 else 0,
    )  # fmt: skip
    spans, t = [root], base_ns + rng.choice([0, rng.randint(0, 30) * MS])
    for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 6, 8])):
        kind = rng.choice(["model", "model", "tool", "tool", "other"])
        duration = rng.choice([0, rng.randint(1, 600) * MS]) if rng.random() < 0.05 else rng.randint(1, 600) * MS
        start = t + rng.choice([0, rng.randint(1, 40) * MS, -rng.randint(1, 50) * MS if rng.random() < 0.1 else 0])
        if rng.random() < 0.03:
            start = base_ns - rng.randint(1, 100) * MS  # before the root started
        parent = root.span_id
        if rng.random() < 0.05 and len(spans) > 1:
            parent = rng.choice(spans[1:]).span_id  # nested
        child = SpanSpec(
            f"{kind} span", trace_id=trace_id, parent_span_id=parent, start_ns=start, duration_ns=duration,
            service=service if rng.random() < 0.9 else "other-svc",
            attributes=_attributes(rng, kind, duration, route), status_code=2 if rng.random() < 0.1 else 0,
        )  # fmt: skip
        spans.append(child)
        t = start + duration
    if rng.random() < 0.03:
        spans.append(SpanSpec("second root", trace_id=trace_id, start_ns=base_ns + MS, duration_ns=MS))
    if rng.random() < 0.03 and len(spans) > 1:
        again = rng.choice(spans[1:])
        spans.append(SpanSpec(**{**again.__dict__, "duration_ns": again.duration_ns + MS}))  # the same span again
    return spans


def _by_reference(project: str, spans: pa.Table) -> dict[str, dict]:
    results = [(trace_id, analyse(records)) for trace_id, records in spans_by_trace(spans).items()]
    return {row["TraceId"]: row for row in trace_rows(project, results, ANALYSED_AT_US).to_pylist()}


@pytest.mark.parametrize("form", FORMS)
def test_random_traces_get_the_references_rows(embedded_store: Store, form: str) -> None:
    rng = random.Random(f"flat {form}")
    base = time.time_ns() - 3600_000 * MS
    spans = [s for i in range(600) for s in random_trace(rng, base + i * 7 * MS)]
    traces = sorted({s.trace_id for s in spans})
    found = stored_input(embedded_store, form, spans, "flat", traces)

    flat, _ = split_flat(found, "flat", ANALYSED_AT_US)
    rows, _ = analysis_rows("flat", [found], ANALYSED_AT_US)
    expected = _by_reference("flat", found)

    assert 200 < flat.num_rows < 500  # both paths are exercised
    assert {row["TraceId"]: row for row in rows.to_pylist()} == expected


def test_the_bench_traces_are_flat_and_get_the_references_rows(embedded_store: Store) -> None:
    from bench.ingest import trace_spans

    rng = random.Random(3)
    base = time.time_ns() - 3600_000 * MS
    spans = [s for i in range(200) for s in trace_spans(rng, base + i * 11 * MS)]
    traces = sorted({s.trace_id for s in spans})
    found = stored_input(embedded_store, "from the batch", spans, "bench", traces)

    flat, rest = split_flat(found, "bench", ANALYSED_AT_US)

    assert flat.num_rows == 200 and rest.num_rows == 0
    assert {row["TraceId"]: row for row in flat.to_pylist()} == _by_reference("bench", found)


@pytest.mark.parametrize("form", FORMS)
def test_a_flat_trace_splits_as_its_timings_say(embedded_store: Store, form: str) -> None:
    base = time.time_ns() - 600_000 * MS
    trace, root = new_trace_id(), new_span_id()
    ids = [new_span_id() for _ in range(4)]
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "agentlat.route": "/known"}
    spans = [
        SpanSpec("invoke_agent a", trace_id=trace, span_id=root, start_ns=base, duration_ns=1000 * MS,
                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
        # a call whose stream ended at 350 ms (TTFT 50 + decode 200), its span at 400: 50 ms of orchestration
        SpanSpec("chat m", trace_id=trace, span_id=ids[0], parent_span_id=root, start_ns=base + 100 * MS,
                 duration_ns=300 * MS, attributes={**chat, "gen_ai.response.time_to_first_chunk": 0.05,
                                                   "agentlat.decode.duration": 0.2,
                                                   "gen_ai.usage.input_tokens": 1000,
                                                   "gen_ai.usage.cache_read.input_tokens": 250}),
        SpanSpec("execute_tool t", trace_id=trace, span_id=ids[1], parent_span_id=root, start_ns=base + 450 * MS,
                 duration_ns=250 * MS, attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}),
        # runs past the root's end: on the path until then
        SpanSpec("chat m", trace_id=trace, span_id=ids[2], parent_span_id=root, start_ns=base + 900 * MS,
                 duration_ns=300 * MS, attributes={**chat, "gen_ai.response.time_to_first_chunk": 0.08}),
        # starts after the root ended: counted, not on the path
        SpanSpec("execute_tool u", trace_id=trace, span_id=ids[3], parent_span_id=root, start_ns=base + 1300 * MS,
                 duration_ns=10 * MS, attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "u"}),
    ]  # fmt: skip
    found = stored_input(embedded_store, form, spans, "known", [trace])

    flat, rest = split_flat(found, "known", ANALYSED_AT_US)

    assert rest.num_rows == 0
    row = flat.to_pylist()[0]
    assert (row["E2eMs"], row["ModelMs"], row["ToolMs"], row["OrchestrationMs"]) == (1000.0, 350.0, 250.0, 400.0)
    assert (row["ModelSumMs"], row["ToolSumMs"], row["ModelCalls"], row["ToolCalls"]) == (550.0, 260.0, 2, 2)
    assert row["Parallelism"] == 810 / 600 and row["FirstTtftMs"] == 50.0 and row["CacheHitRatio"] == 0.25
    assert (row["Route"], row["Agent"], row["SplitComplete"]) == ("/known", "a", 1)
    assert row["CriticalPath"] == [root, ids[0], ids[1], ids[2]]
    ms = 1_000_000
    assert json.loads(row["Details"])["segments"] == [
        [root, base, base + 100 * ms, "orchestration", ""],
        [ids[0], base + 100 * ms, base + 350 * ms, "model", ""],
        [ids[0], base + 350 * ms, base + 400 * ms, "orchestration", ""],
        [root, base + 400 * ms, base + 450 * ms, "orchestration", ""],
        [ids[1], base + 450 * ms, base + 700 * ms, "tool", ""],
        [root, base + 700 * ms, base + 900 * ms, "orchestration", ""],
        [ids[2], base + 900 * ms, base + 1000 * ms, "model", ""],
    ]
    assert row == _by_reference("known", found)[trace]


@pytest.mark.parametrize("form", FORMS)
def test_an_input_with_no_spans_has_no_rows(embedded_store: Store, form: str) -> None:
    spans = [SpanSpec("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"})]
    empty = stored_input(embedded_store, form, spans, "none", [spans[0].trace_id]).slice(0, 0)

    rows, minutes = analysis_rows("none", [empty], ANALYSED_AT_US)

    assert rows.num_rows == 0 and minutes == []
