"""The advisor's evidence from rollups equals its exact evidence from spans and traces: counts and
sums exactly, medians within the t-digest's error, identical-prefix misses exactly."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agentlat.store import SpanFilter, Store
from agentlat.store.analysis import TRACE_ROW_SCHEMA
from tests.span_tables import span_batch

PROJECT = "advice-rollups"
ROUTES = ("/chat", "/rag", "/code")
CALLS = 900
TRACES = 300
MINUTES = 150  # spans two whole hours and ragged minutes either side: both rollup tables are read
MEDIANS = ("input_tokens_p50", "ttft_p50_ms", "dispatch_delay_p50_ms")


def _nullable(rng: np.random.Generator, values: np.ndarray, null_share: float) -> list[Any]:
    return [None if rng.random() < null_share else v.item() for v in values]


def _model_calls(rng: np.random.Generator, first_minute: int) -> pa.Table:
    """CALLS client model calls over MINUTES minutes with every fact the advisor reads varied, plus
    server model spans and tools, which the client-call facts must leave out."""
    n = CALLS
    role = rng.choice(["model", "model", "model", "tool"], n)
    server = (rng.random(n) < 0.1).astype(np.uint8)
    cache = rng.choice([-1, 0, 1], n)  # no report, a miss, a hit
    output = rng.integers(50, 900, n)
    itl_p50 = rng.uniform(5, 40, n)
    prefixes = [f"{r}#{p}" if p < 5 else "" for r, p in zip(rng.choice(ROUTES, n), rng.integers(0, 6, n), strict=True)]
    columns = {
        "Timestamp": pa.array(
            (first_minute * 60 + rng.integers(0, MINUTES * 60, n)) * 10**9 + rng.integers(0, 10**9, n),
            pa.timestamp("ns", tz="UTC"),
        ),
        "TraceId": pa.array([f"call-{i // 3}" for i in range(n)]),
        "SpanId": pa.array([f"s{i}" for i in range(n)]),
        "ParentSpanId": pa.array(["root"] * n),
        "ProjectId": pa.array([PROJECT] * n),
        "Role": pa.array(role),
        "IsServerSpan": pa.array(server),
        "Route": pa.array([p.split("#")[0] if p else r for p, r in zip(prefixes, rng.choice(ROUTES, n), strict=True)]),
        "Model": pa.array(rng.choice(["m-small", "m-large"], n)),
        "Duration": pa.array(rng.integers(100, 5000, n) * 10**6, pa.uint64()),
        "TtftMs": pa.array(_nullable(rng, rng.uniform(80, 3000, n), 0.1), pa.float64()),
        "DecodeMs": pa.array(_nullable(rng, rng.uniform(100, 8000, n), 0.2), pa.float64()),
        "InputTokens": pa.array(_nullable(rng, rng.integers(200, 20_000, n), 0.05), pa.uint64()),
        "OutputTokens": pa.array(output.tolist(), pa.uint64()),
        "CacheReadTokens": pa.array([None if c < 0 else int(c * rng.integers(100, 5000)) for c in cache], pa.uint64()),
        "SpecProposedTokens": pa.array(_nullable(rng, rng.integers(10, 300, n), 0.7), pa.uint64()),
        "StallCount": pa.array(_nullable(rng, rng.choice([0, 0, 0, 1, 2], n), 0.2), pa.uint32()),
        "ItlP50Ms": pa.array(itl_p50, pa.float64()),
        "ItlMaxMs": pa.array(itl_p50 + rng.uniform(0, 900, n), pa.float64()),
        "SpanAttributes": pa.array(
            [[("agentlat.prompt.prefix_hash", p)] if p else [] for p in prefixes], pa.map_(pa.string(), pa.string())
        ),
    }
    return span_batch(columns, n)


def _trace_rows(rng: np.random.Generator, first_minute: int) -> pa.Table:
    defaults = {
        pa.types.is_string: "",
        pa.types.is_floating: 0.0,
        pa.types.is_integer: 0,
        pa.types.is_list: [],
        pa.types.is_timestamp: None,
    }
    rows = []
    for i in range(TRACES):
        row = {f.name: next(v for test, v in defaults.items() if test(f.type)) for f in TRACE_ROW_SCHEMA}
        start = first_minute * 60 + rng.uniform(0, MINUTES * 60)
        parallel = rng.uniform(10, 400) if rng.random() < 0.4 else 0.0
        delays = rng.uniform(0, 900, int(rng.choice([0, 1, 2, 3, 4]))).tolist()  # per streamed tool call
        dispatch = rng.uniform(10, 600) if delays and rng.random() < 0.6 else 0.0
        row.update(
            ProjectId=PROJECT, TraceId=f"trace-{i}", Start=datetime.fromtimestamp(start, UTC),
            Route=str(rng.choice(ROUTES)), ServiceName="svc", E2eMs=rng.uniform(500, 9000),
            ModelCalls=int(rng.integers(1, 6)), ParallelSavingMs=parallel, PrefetchHits=int(rng.integers(0, 3)),
            PrefetchMisses=int(rng.integers(0, 3)), PrefetchSavedMs=rng.uniform(0, 300),
            PrefetchWastedMs=rng.uniform(0, 300), DispatchSavingMs=dispatch, DispatchDelaysMs=delays,
            DispatchStreamedCalls=int(rng.integers(0, len(delays) + 1)), AnalysedAt=datetime.now(UTC),
        )  # fmt: skip
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=TRACE_ROW_SCHEMA)


@pytest.fixture(scope="module")
def evidence(embedded_store: Store) -> tuple[dict, dict]:
    """(exact, from rollups) evidence for a minute-aligned window covering all the data."""
    rng = np.random.default_rng(7)
    first_minute = (int(datetime.now(UTC).timestamp()) // 3600 - 4) * 60 + 37  # 37 minutes into an hour
    embedded_store.insert_spans(_model_calls(rng, first_minute))
    embedded_store.write_traces(_trace_rows(rng, first_minute))
    embedded_store.rollup([(first_minute + m) * 60 for m in range(MINUTES)], version=1)
    where = SpanFilter(PROJECT, first_minute * 60 * 10**9, (first_minute + MINUTES) * 60 * 10**9)
    return embedded_store.advice_evidence(where), embedded_store.advice_evidence(where, from_rollups=True)


def test_every_route_has_the_same_facts(evidence: tuple[dict, dict]) -> None:
    exact, rolled = evidence
    assert sorted(exact) == sorted(rolled) == sorted(ROUTES)
    for route in ROUTES:
        assert sorted(exact[route]) == sorted(rolled[route]) == ["cache", "calls", "prefix", "server", "trace"]


@pytest.mark.parametrize("kind", ["calls", "trace", "prefix"])
def test_counts_and_sums_are_exact_and_medians_close(evidence: tuple[dict, dict], kind: str) -> None:
    exact, rolled = evidence
    for route in ROUTES:
        want, got = exact[route][kind], rolled[route][kind]
        assert sorted(want) == sorted(got)
        for key, value in want.items():
            if isinstance(value, int):
                assert got[key] == value, (route, key)
            elif isinstance(value, float):
                tolerance = 0.05 if key in MEDIANS else 1e-9
                assert not math.isnan(value) and got[key] == pytest.approx(value, rel=tolerance), (route, key)
            else:
                assert got[key] == value


def test_the_data_exercises_every_fact(evidence: tuple[dict, dict]) -> None:
    """Each count the rollups must reproduce is non-trivial in this data (a parity of zeros proves nothing)."""
    exact, _ = evidence
    for route in ROUTES:
        calls, trace, prefix = (exact[route][k] for k in ("calls", "trace", "prefix"))
        for key in ("cache_reported_calls", "uncached_calls", "long_plain_calls", "streamed_calls", "stalled_calls"):
            assert 0 < calls[key] < calls["calls"], (route, key)
        assert 0 < trace["parallel_traces"] < trace["traces"] and trace["prefetch_hits"] > 0
        assert 0 < trace["dispatch_traces"] < trace["traces"] and trace["dispatch_streamed_calls"] > 0
        assert trace["dispatch_calls"] > 128  # the median of the delays comes from a t-digest
        assert prefix["prefix_misses"] > 0 and prefix["prefixes"] == 10  # 5 prefixes x 2 models


def test_a_reanalysed_trace_counts_in_the_minute_of_its_newest_start(embedded_store: Store) -> None:
    """A late root moves a trace's start back a minute: the recomputed rollups count it there only."""
    project, later = "reanalysed", (int(datetime.now(UTC).timestamp()) // 60 - 30) * 60
    rows = []
    for start, analysed, e2e in ((later, 1, 100.0), (later - 60, 2, 500.0)):
        row = {f.name: None for f in TRACE_ROW_SCHEMA}
        row.update(
            ProjectId=project, TraceId="moved", Start=datetime.fromtimestamp(start, UTC), Route="/r",
            E2eMs=e2e, ModelCalls=2, ParallelSavingMs=0.0, PrefetchHits=0, PrefetchMisses=0,
            PrefetchSavedMs=0.0, PrefetchWastedMs=0.0, AnalysedAt=datetime.fromtimestamp(analysed, UTC),
        )  # fmt: skip
        rows.append(row)
        embedded_store.write_traces(pa.Table.from_pylist([row], schema=TRACE_ROW_SCHEMA))
        embedded_store.rollup([later - 60, later], version=analysed)
    where = SpanFilter(project, (later - 60) * 10**9, (later + 60) * 10**9)
    e2e = embedded_store.timeseries("e2e", [], where, 60)
    assert [(row["t"], row["count"]) for row in e2e] == [(later - 60, 1)]
    assert embedded_store.advice_evidence(where, from_rollups=True)["/r"]["trace"]["e2e_ms"] == 500.0
