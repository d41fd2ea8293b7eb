"""Percentiles from rollups follow the raw-span rule: linear interpolation between closest ranks.

A group of at most EXACT_MAX values keeps them in its rollup rows, so its percentiles from rollups equal
``quantilesExactInclusive`` over the raw values (numpy's default quantile) whichever tiers a window reads
(minutes, hours, UTC days) and however many minutes, hours, days and groups a read merges. Larger groups
are estimated by t-digest, within its rank error. Spans go straight into the session's embedded store, at
minutes chosen so that a window reads every tier: ragged minutes, whole hours and a whole day.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlat.store import LATENCY_EDGES_MS, SpanFilter, Store
from agentlat.store.migrations import MIGRATIONS
from agentlat.store.rollup_sql import EXACT_MAX
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for
from tests.span_tables import span_batch

NS, MINUTE, HOUR, DAY = 10**9, 60, 3600, 86_400
QUANTILES = (0.5, 0.95, 0.99)
D = (int(time.time()) // DAY - 8) * DAY  # a whole UTC day, clear of the other tests' data
# The window: 17 ragged minutes, 2 whole hours, the whole day D, 1 whole hour, 23 ragged minutes.
WINDOW = (D - 2 * HOUR - 17 * MINUTE, D + DAY + HOUR + 23 * MINUTE)
# Minutes the spans fall in: in each tier of the window, several in one hour, several hours in the day.
MINUTES = tuple(
    D + offset
    for offset in (
        -2 * HOUR - 17 * MINUTE, -2 * HOUR - MINUTE,  # ragged minutes
        -2 * HOUR, -90 * MINUTE, -MINUTE,  # the whole hours before the day
        0, 7 * MINUTE, 59 * MINUTE, 5 * HOUR, 13 * HOUR + 7 * MINUTE, DAY - MINUTE,  # the day
        DAY, DAY + 30 * MINUTE,  # the whole hour after it
        DAY + HOUR, DAY + HOUR + 22 * MINUTE,  # ragged minutes
    )
)  # fmt: skip
ROUTES = ("/a", "/b", "/c")
TOOLS = ("t0", "t1")
RANK_TOLERANCE = 0.01  # the t-digest's, as tests/test_rollup_accuracy.py holds it on 1M spans
_projects = itertools.count()


def exact(values: list[float]) -> list[float]:
    """quantilesExactInclusive: numpy's default (linear interpolation between closest ranks)."""
    return np.quantile(np.array(values, dtype=np.float64), QUANTILES).tolist()


def load(store: Store, spans: list[tuple[int, int, int, int]]) -> tuple[str, list[dict]]:
    """Tool spans (duration ns, minute index, route index, tool index) in a project of their own,
    rolled up; returns the project and the spans as rows (value in ms, minute, route, tool)."""
    project = f"rollup-exact-{next(_projects)}"
    n = len(spans)
    starts = [MINUTES[m] * NS + i * 1000 for i, (_, m, _, _) in enumerate(spans)]
    store.insert_spans(
        span_batch(
            {
                "Timestamp": pa.array(starts, pa.timestamp("ns", tz="UTC")),
                "TraceId": pa.array([f"{project}-{i}" for i in range(n)]),
                "SpanId": pa.array([f"s{i}" for i in range(n)]),
                "ParentSpanId": pa.array(["parent"] * n),
                "ProjectId": pa.array([project] * n),
                "Role": pa.array(["tool"] * n),
                "Route": pa.array([ROUTES[r] for _, _, r, _ in spans]),
                "Tool": pa.array([TOOLS[t] for _, _, _, t in spans]),
                "Duration": pa.array([d for d, _, _, _ in spans], pa.uint64()),
            },
            n,
        )
    )
    store.rollup(sorted({MINUTES[m] for _, m, _, _ in spans}), version=time.time_ns())
    rows = [{"ms": d / 1e6, "minute": MINUTES[m], "route": ROUTES[r], "tool": TOOLS[t]} for d, m, r, t in spans]
    return project, rows


def by(rows: list[dict], key) -> dict:
    groups: dict = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row["ms"])
    return groups


def window(project: str) -> SpanFilter:
    return SpanFilter(project, WINDOW[0] * NS, WINDOW[1] * NS)


def histogram(values: list[float]) -> list[int]:
    """How many values fall in each of the heatmap's buckets [edge i, edge i + 1), the last one unbounded."""
    edges = np.array(LATENCY_EDGES_MS)
    return np.bincount(np.searchsorted(edges, values, side="right") - 1, minlength=len(edges)).tolist()


def assert_exact(found: list[float], values: list[float], what: str) -> None:
    assert found == pytest.approx(exact(values), abs=1e-6, rel=0), f"{what}: {sorted(values)}"


durations = st.one_of(
    st.sampled_from([50_000_000, 120_000_000, 1_000, 7]),  # ties, and values far below a millisecond
    st.integers(1, 60 * NS),
)
spans_of = st.tuples(
    durations, st.integers(0, len(MINUTES) - 1), st.integers(0, len(ROUTES) - 1), st.integers(0, len(TOOLS) - 1)
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spans=st.lists(spans_of, min_size=1, max_size=EXACT_MAX))
def test_small_groups_are_exact_from_every_tier_and_merge(embedded_store: Store, spans: list) -> None:
    project, rows = load(embedded_store, spans)
    where = window(project)
    values = [r["ms"] for r in rows]

    [whole] = embedded_store.rollup_percentiles(["tool"], [], where)  # every tier, every group merged
    [raw] = embedded_store.percentiles("tool", [], where)
    assert whole["count"] == raw.count == len(values)
    assert_exact(whole["q"], values, "whole window")
    assert [raw.p50, raw.p95, raw.p99] == pytest.approx(exact(values), abs=1e-6, rel=0)

    per_route = by(rows, lambda r: r["route"])
    found = {r["route"]: r for r in embedded_store.rollup_percentiles(["tool"], ["route"], where)}
    assert found.keys() == per_route.keys()
    for route, route_values in per_route.items():
        assert_exact(found[route]["q"], route_values, f"route {route}")

    for step in (HOUR, DAY):  # steps of an hour merge minutes and hours, of a day also days
        buckets = by(rows, lambda r, s=step: r["minute"] // s * s)
        series = {r["t"]: r for r in embedded_store.timeseries("tool", [], where, step)}
        assert series.keys() == buckets.keys()
        heatmap = {c.t: c for c in embedded_store.latency_heatmap("tool", where, step)}
        assert series.keys() == heatmap.keys() == buckets.keys()
        for t, bucket in buckets.items():
            assert_exact(series[t]["q"], bucket, f"step {step} at {t}")
            assert (heatmap[t].count, heatmap[t].exact, heatmap[t].counts) == (len(bucket), True, histogram(bucket))

    per_tool = by(rows, lambda r: r["tool"])
    summary = {r["name"]: r for r in embedded_store.dimension_summary("tool", where, True)}
    from_spans = {r["name"]: r for r in embedded_store.dimension_summary("tool", where, False)}
    for tool, tool_values in per_tool.items():
        assert_exact(summary[tool]["tool_q"], tool_values, f"tool {tool}")
        assert summary[tool]["tool_q"] == pytest.approx(from_spans[tool]["tool_q"], abs=1e-6, rel=0)

    minutes_only = SpanFilter(project, (D - 2 * HOUR) * NS, D * NS)  # alert rules merge minute rows
    inside = [r["ms"] for r in rows if D - 2 * HOUR <= r["minute"] < D]
    alert = embedded_store.alerts.window_percentiles(minutes_only, "tool", [], [D], 2 * HOUR)
    assert [r["count"] for r in alert] == ([len(inside)] if inside else [])
    if inside:
        assert_exact(alert[0]["q"], inside, "alert window")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(EXACT_MAX + 1, 3000),
    sigma=st.floats(0.2, 1.5),
)
def test_large_groups_are_estimated_within_the_digest_error(
    embedded_store: Store, seed: int, n: int, sigma: float
) -> None:
    """Above EXACT_MAX the t-digest answers: within 1 % in rank of the exact percentile (plus the rank
    step 1/n, within which any value between two order statistics lies), merged from rows that keep
    values and rows that keep digests."""
    rng = np.random.default_rng(seed)
    durations_ns = np.maximum(1, np.rint(rng.lognormal(np.log(200.0), sigma, n) * 1e6)).astype(int)
    minutes = rng.integers(0, len(MINUTES), n)
    project, rows = load(embedded_store, [(int(d), int(m), 0, 0) for d, m in zip(durations_ns, minutes, strict=True)])
    [row] = embedded_store.rollup_percentiles(["tool"], [], window(project))
    data = np.sort([r["ms"] for r in rows])
    assert row["count"] == n
    for value, q in zip(row["q"], QUANTILES, strict=True):
        below = np.searchsorted(data, value, side="left") / n
        at_or_below = np.searchsorted(data, value, side="right") / n
        assert max(0.0, below - q, q - at_or_below) <= RANK_TOLERANCE + 1 / n, (q, value, exact(data.tolist()))

    # The heatmap at a step of a week (one column, or two when a week starts inside the window: 7-day steps
    # start on Thursdays, so on a Thursday D is a Wednesday and the window's last hours fall in a second
    # column): 100 quantiles of each digest shared out, so each bucket edge splits the values within the
    # digest's rank error plus a hundredth (each quantile stands for a hundredth of the values), and one for
    # rounding. A column of at most EXACT_MAX values has them all at hand, and only such a column is exact.
    columns = embedded_store.latency_heatmap("tool", window(project), 7 * DAY)
    assert [c.count for c in columns] == [sum(c.counts) for c in columns] and sum(c.count for c in columns) == n
    assert [c.exact for c in columns] == [c.count <= EXACT_MAX for c in columns]
    below_each_edge = np.cumsum(np.sum([c.counts for c in columns], axis=0))[:-1]
    truly_below = np.searchsorted(data, np.array(LATENCY_EDGES_MS[1:]), side="left")
    assert np.abs(below_each_edge - truly_below).max() <= (RANK_TOLERANCE + 0.01) * n + len(columns)


def test_the_issue_example_is_exact_at_every_level(embedded_store: Store) -> None:
    """Issue 16: 4 TTFT-like values of 50, 50, 120, 120 ms gave a p50 of 85 ms from the spans and 50 ms from
    the rollups. Spread over minutes of every tier, every rollup read now says 85."""
    values_ns = [50_000_000, 50_000_000, 120_000_000, 120_000_000]
    spans = [(d, m, i % 2, 0) for i, (d, m) in enumerate(zip(values_ns, (0, 4, 7, 13), strict=True))]
    project, _ = load(embedded_store, spans)
    where = window(project)
    assert embedded_store.rollup_percentiles(["tool"], [], where)[0]["q"] == pytest.approx([85.0, 120.0, 120.0])
    assert embedded_store.percentiles("tool", [], where)[0].p50 == pytest.approx(85.0)
    by_day = embedded_store.timeseries("tool", [], where, DAY)
    assert [r["count"] for r in by_day] == [2, 1, 1]  # the day before (hours), the day, the day after (hour)
    assert [r["q"] for r in by_day] == [[50.0] * 3, [120.0] * 3, [120.0] * 3]
    rows_1d = embedded_store.backend.query_arrow(
        "SELECT Count, Exact, length(toString(Digest)) AS digest_bytes FROM agentlat_rollup_1d FINAL "
        "WHERE ProjectId = {p:String} AND Metric = 'tool' AND Day = toDateTime({d:UInt32})",
        {"p": project, "d": D},
    ).to_pylist()
    assert rows_1d == [{"Count": 1, "Exact": [120.0], "digest_bytes": 1}]  # the value, and an empty digest


UPGRADE = r"""
import json, sys
from pathlib import Path
import pyarrow as pa
from agentlat.store import SpanFilter, Store
from agentlat.store.backends import ChdbBackend
from agentlat.store.migrations import LEDGER_DDL, MIGRATIONS, with_ttl
from tests.span_tables import span_batch

data, applied_before, minute, first, last = Path(sys.argv[1]), *map(int, sys.argv[2:])
backend = ChdbBackend(data)
backend.execute(LEDGER_DDL)
for m in MIGRATIONS[:applied_before]:
    for statement in m.statements:
        backend.execute(with_ttl(statement, 180))
    backend.execute("INSERT INTO agentlat_migrations (Version, Name) VALUES ({v:UInt32}, {n:String})",
                    {"v": m.version, "n": m.name})
rollups = [r["name"] for r in backend.query_arrow(
    "SELECT name FROM system.tables WHERE database = currentDatabase() AND name LIKE 'agentlat_rollup_1_'"
).to_pylist()]
for table in rollups:  # the layout of the version before: no Exact column
    backend.execute(f"ALTER TABLE {table} DROP COLUMN Exact")
n = 4
spans = span_batch({
    "Timestamp": pa.array([minute * 10**9 + i for i in range(n)], pa.timestamp("ns", tz="UTC")),
    "TraceId": pa.array([f"upgrade-{i}" for i in range(n)]), "SpanId": pa.array([f"s{i}" for i in range(n)]),
    "ParentSpanId": pa.array(["parent"] * n), "ProjectId": pa.array(["upgrade"] * n),
    "Role": pa.array(["tool"] * n), "Duration": pa.array([50, 50, 120, 120], pa.uint64()),
}, n)
present = {r["name"] for r in backend.query_arrow(  # that version's spans table: no column a later one added
    "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'otel_traces'").to_pylist()}
backend.insert_arrow("otel_traces", spans.select([c for c in spans.column_names if c in present]))
backend.execute(  # its minute rollup, a digest only
    "INSERT INTO agentlat_rollup_1m (ProjectId, Metric, Minute, ServiceName, Route, Agent, Model, Tool, Count, Sum,"
    " Digest, Version) SELECT ProjectId, 'tool', toStartOfMinute(Timestamp), '', '', '', '', '', count(), sum(v),"
    " quantilesTDigestState(0.5, 0.95, 0.99)(v), 1 FROM (SELECT *, Duration / 1e6 AS v FROM otel_traces)"
    " GROUP BY ProjectId, toStartOfMinute(Timestamp)")
store = Store(backend)
applied = store.migrate()
columns = {t: [r["name"] for r in backend.query_arrow(
    "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} ORDER BY position",
    {"t": t}).to_pylist()] for t in ("agentlat_rollup_1m", "agentlat_rollup_1h", "agentlat_rollup_1d")}
[row] = store.rollup_percentiles(["tool"], [], SpanFilter("upgrade", first * 10**9, last * 10**9))
print(json.dumps({"applied": applied, "columns": columns, "count": row["count"], "q": row["q"]}))
"""


@pytest.mark.parametrize("applied_before", [4, 10], ids=["before-hourly-rollups", "before-exact-values"])
def test_an_older_store_gains_exact_values(tmp_path, applied_before: int) -> None:
    """A store written by an earlier version (rollup tables without Exact) migrates: the column comes
    before any rollup SQL needs it, and the backfill makes its small groups exact at every tier."""
    minute = D + 5 * HOUR
    args = [str(tmp_path / "data"), str(applied_before), str(minute), str(D - HOUR), str(D + DAY + HOUR)]
    run = subprocess.run(
        [sys.executable, "-c", UPGRADE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.splitlines()[-1])
    assert found["applied"] == [m.version for m in MIGRATIONS[applied_before:]]
    for table, columns in found["columns"].items():
        assert columns[columns.index("Digest") + 1] == "Exact", table
    assert found["count"] == 4
    assert found["q"] == pytest.approx(exact([50e-6, 50e-6, 120e-6, 120e-6]), abs=1e-12)


def test_the_advisor_and_the_model_summary_get_the_exact_ttft(embedded_store: Store) -> None:
    """The issue's TTFTs on client model calls: the advisor's median and the per-model summary from
    rollups say 85 ms, as their exact forms from the spans do."""
    project, n = f"rollup-exact-ttft-{next(_projects)}", 4
    minutes = [MINUTES[m] for m in (0, 4, 7, 13)]
    embedded_store.insert_spans(
        span_batch(
            {
                "Timestamp": pa.array([m * NS for m in minutes], pa.timestamp("ns", tz="UTC")),
                "TraceId": pa.array([f"{project}-{i}" for i in range(n)]),
                "SpanId": pa.array([f"s{i}" for i in range(n)]),
                "ParentSpanId": pa.array(["parent"] * n),
                "ProjectId": pa.array([project] * n),
                "Role": pa.array(["model"] * n),
                "Route": pa.array(["/chat"] * n),
                "Model": pa.array(["m"] * n),
                "Duration": pa.array([NS] * n, pa.uint64()),
                "TtftMs": pa.array([50.0, 50.0, 120.0, 120.0], pa.float64()),
            },
            n,
        )
    )
    embedded_store.rollup(minutes, version=time.time_ns())
    where = window(project)
    for from_rollups in (True, False):
        calls = embedded_store.advice_evidence(where, from_rollups=from_rollups)["/chat"]["calls"]
        assert calls["ttft_p50_ms"] == pytest.approx(85.0, abs=1e-9), from_rollups
        [model] = embedded_store.dimension_summary("model", where, from_rollups)
        assert model["ttft_q"] == pytest.approx([85.0, 120.0, 120.0], abs=1e-9), from_rollups


def test_the_query_api_answers_the_issue_example_exactly(server: ServerProcess) -> None:
    """Through a real collector: TTFTs of 50, 50, 120, 120 ms have a p50 of 85 ms from spans and rollups,
    in percentiles, time series and the per-model summary (what the dashboard shows)."""
    start = (time.time_ns() - 20 * 60 * NS) // (60 * NS) * (60 * NS)
    spans = [
        SpanSpec(
            "chat m",
            start_ns=start + i * 1000,
            duration_ns=1000 * 10**6,
            service="rollup-exact-svc",
            parent_span_id="f" * 16,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.response.time_to_first_chunk": ttft,
            },
        )
        for i, ttft in enumerate([0.050, 0.050, 0.120, 0.120])
    ]
    response = httpx.post(
        f"{server.url}/v1/traces",
        content=otlp_protobuf(spans),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    query = {"metric": "ttft", "service": "rollup-exact-svc", "window": "1h"}

    def rolled_up() -> dict | None:
        rows = server.get("/api/v1/percentiles", **query, source="rollups").json()["rows"]
        return rows[0] if rows and rows[0]["count"] == 4 else None

    from_rollups = wait_for(rolled_up, timeout=30)
    [from_spans] = server.get("/api/v1/percentiles", **query, source="spans").json()["rows"]
    for row in (from_rollups, from_spans):
        assert [row["p50"], row["p95"], row["p99"]] == pytest.approx([85.0, 120.0, 120.0], abs=1e-6)
    [series] = server.get("/api/v1/timeseries", **query, step="1m").json()["series"]
    assert [(p["count"], p["p50"]) for p in series["points"]] == [(4, pytest.approx(85.0, abs=1e-6))]
    body = server.get("/api/v1/dimensions", dimension="model", service="rollup-exact-svc", window="1h",
                      source="rollups").json()  # fmt: skip
    [model] = body["rows"]
    assert body["source"] == "rollups" and model["metrics"]["ttft"]["p50"] == pytest.approx(85.0, abs=1e-6)
