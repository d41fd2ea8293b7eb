"""Percentiles from the per-minute t-digest rollups agree with exact percentiles from raw spans, on 1M spans.

One million tool spans over 60 minutes and three routes with different, drifting duration distributions
are written straight into the session's embedded store, rolled up, and read back both ways. The rollup's
p50/p95/p99 must sit within 1% in rank of the exact answer (|F(v) - q| <= 0.01, F the empirical CDF of the
generated durations); counts must match exactly and means to 1e-9 relative.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from agentlat.store import SpanFilter, Store
from tests.span_tables import span_batch

PROJECT = "rollup-accuracy"
SERVICE = "rollup-accuracy-svc"
N_SPANS = 1_000_000
ROUTES = ("/r0", "/r1", "/r2")
QUANTILES = (0.5, 0.95, 0.99)
RANK_TOLERANCE = 0.01
SEED = 20_240_611


@dataclass(frozen=True)
class Loaded:
    window: SpanFilter
    durations_ms: dict[str, np.ndarray]  # sorted, keyed by route; "" for the whole window
    timings: str


def _durations_ns(rng: np.random.Generator, route: np.ndarray, drift: np.ndarray) -> np.ndarray:
    """Lognormal durations in ns: a different shape per route, and all slowing down over the hour."""
    ms = np.empty(route.size)
    for r, (median_ms, sigma) in enumerate(((40.0, 0.5), (300.0, 1.0), (900.0, 0.4))):
        pick = route == r
        ms[pick] = rng.lognormal(np.log(median_ms), sigma, pick.sum())
    fast = (route == 2) & (rng.random(route.size) < 0.2)  # route 2 is bimodal: cache hits answer in ~5 ms
    ms[fast] = rng.lognormal(np.log(5.0), 0.3, fast.sum())
    return np.maximum(1, np.rint(ms * (1.0 + 0.5 * drift) * 1e6)).astype(np.uint64)


def _ids(prefix: str, ids: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(prefix, pc.cast(pa.array(ids), pa.string()), "")


@pytest.fixture(scope="module")
def loaded(embedded_store: Store) -> Loaded:
    """1M tool spans spread over the 60 whole minutes ending 3 minutes ago, inserted and rolled up once."""
    began = time.perf_counter()
    rng = np.random.default_rng(SEED)
    last = int(time.time()) // 60 * 60 - 3 * 60
    first = last - 60 * 60
    start_ns = rng.integers(first * 10**9, last * 10**9, N_SPANS, dtype=np.int64)
    route = rng.integers(0, len(ROUTES), N_SPANS)
    duration = _durations_ns(rng, route, (start_ns - first * 10**9) / (3600 * 10**9))
    ids = np.arange(N_SPANS)
    generated = time.perf_counter()
    for chunk in np.array_split(ids, 4):
        n = chunk.size
        columns = {
            "Timestamp": pa.array(start_ns[chunk], pa.timestamp("ns", tz="UTC")),
            "TraceId": _ids("rollup-accuracy-trace-", chunk),
            "SpanId": _ids("span-", chunk),
            "ParentSpanId": _ids("parent-", chunk),  # never a root: no e2e metric from these spans
            "SpanName": pa.repeat("execute_tool lookup", n),
            "SpanKind": pa.repeat("Internal", n),
            "ServiceName": pa.repeat(SERVICE, n),
            "Duration": pa.array(duration[chunk], pa.uint64()),
            "StatusCode": pa.repeat("Ok", n),
            "Role": pa.repeat("tool", n),
            "Tool": pa.repeat("lookup", n),
            "Route": pc.take(pa.array(ROUTES), pa.array(route[chunk])),
            "ProjectId": pa.repeat(PROJECT, n),
        }
        embedded_store.insert_spans(span_batch(columns, n))
    inserted = time.perf_counter()
    embedded_store.rollup(list(range(first, last, 60)), version=1)
    rolled = time.perf_counter()
    as_ms = duration.astype(np.float64) / 1e6  # the store's value: Duration / 1e6 in Float64
    durations = {"": np.sort(as_ms), **{name: np.sort(as_ms[route == r]) for r, name in enumerate(ROUTES)}}
    window = SpanFilter(PROJECT, first * 10**9, last * 10**9)
    timings = (
        f"generate={generated - began:.1f}s build+insert={inserted - generated:.1f}s rollup={rolled - inserted:.1f}s"
    )
    return Loaded(window, durations, timings)


def _rank_error(sorted_values: np.ndarray, value: float, q: float) -> float:
    """How far q lies from the range of ranks value holds in the data: 0 when value is a valid q-quantile."""
    below = np.searchsorted(sorted_values, value, side="left") / sorted_values.size
    at_or_below = np.searchsorted(sorted_values, value, side="right") / sorted_values.size
    return max(0.0, below - q, q - at_or_below)


@pytest.mark.parametrize("route", ["", *ROUTES], ids=["whole-window", *ROUTES])
def test_rollup_percentiles_match_exact_percentiles(embedded_store: Store, loaded: Loaded, route: str) -> None:
    group_by = ["route"] if route else []
    began = time.perf_counter()
    exact_rows = embedded_store.percentiles("tool", group_by, loaded.window)
    exact_seconds = time.perf_counter() - began
    began = time.perf_counter()
    rolled_rows = embedded_store.rollup_percentiles(["tool"], group_by, loaded.window)
    rollup_seconds = time.perf_counter() - began
    exact = next(r for r in exact_rows if r.group.get("route", "") == route)
    rolled = next(r for r in rolled_rows if r.get("route", "") == route)
    data = loaded.durations_ms[route]

    assert exact.count == rolled["count"] == data.size
    assert exact.mean == pytest.approx(data.mean(), rel=1e-9)
    assert rolled["mean"] == pytest.approx(exact.mean, rel=1e-9)
    exact_values = (exact.p50, exact.p95, exact.p99)
    assert exact_values == pytest.approx(np.quantile(data, QUANTILES), rel=1e-12)  # inclusive = numpy's linear

    rank_errors = [_rank_error(data, v, q) for v, q in zip(rolled["q"], QUANTILES, strict=True)]
    value_errors = [abs(v - e) / e for v, e in zip(rolled["q"], exact_values, strict=True)]
    report = (
        f"route={route or '*'} n={data.size} {loaded.timings} "
        f"exact query={exact_seconds:.2f}s rollup query={rollup_seconds:.3f}s\n"
        + "\n".join(
            f"  p{round(q * 100)}: exact={e:.4f} ms rollup={v:.4f} ms rank error={r:.5f} value error={ve:.3%}"
            for q, e, v, r, ve in zip(QUANTILES, exact_values, rolled["q"], rank_errors, value_errors, strict=True)
        )
    )
    print(report)
    assert max(rank_errors) <= RANK_TOLERANCE, report
