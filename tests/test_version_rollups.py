"""Releases and prompt versions as rollup dimensions (issue 40, migration 24): an older store's analysed traces
get their release from their spans, and its rollups are rolled up again by release and prompt version, with every
old row replaced (no group counted twice). Spans with known timings: per release, three traces, each a root agent
run with one model call carrying the release's prompt version."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

UPGRADE = r"""
import json, sys, time
from pathlib import Path
import pyarrow as pa
from agentlat.collector.analysis.assembler import spans_by_trace, trace_rows
from agentlat.collector.analysis.critical_path import analyse
from agentlat.store import SpanFilter, Store
from agentlat.store.backends import ChdbBackend
from agentlat.store.migrations import ROLLUP_DAILY_DDL, ROLLUP_DDL, ROLLUP_HOURLY_DDL, with_ttl
from agentlat.store.rollup_sql import ALL_EXACT, ALL_VALUES, MERGED_DIGEST, NO_DIGEST, NO_VALUES
from tests.span_tables import span_batch

data, minute = Path(sys.argv[1]), int(sys.argv[2])
project, ms = "upgrade-24", 1_000_000
backend = ChdbBackend(data)
store = Store(backend)
store.migrate()
rows = []  # (trace, span, parent, role, start ns, duration ms, ttft ms, release, prompt version)
for r, (release, call_ms) in enumerate((("1.0", 100), ("2.0", 250))):
    for k in range(3):
        trace, start = f"t{r}{k}", minute * 10**9 + (r * 3 + k) * 5 * 10**9
        rows.append((trace, "root", "", "agent", start, 1000 + 100 * k + 500 * r, None, release, ""))
        rows.append((trace, "call", "root", "model", start + ms, call_ms, call_ms / 2, release, f"p-{release}"))
n = len(rows)
column = lambda i: [row[i] for row in rows]
store.insert_spans(span_batch({
    "Timestamp": pa.array(column(4), pa.timestamp("ns", tz="UTC")), "TraceId": pa.array(column(0)),
    "SpanId": pa.array(column(1)), "ParentSpanId": pa.array(column(2)), "ProjectId": pa.array([project] * n),
    "ServiceName": pa.array(["bot"] * n), "Route": pa.array(["/chat"] * n), "Role": pa.array(column(3)),
    "Model": pa.array(["m" if role == "model" else "" for role in column(3)]),
    "Duration": pa.array([d * ms for d in column(5)], pa.uint64()), "TtftMs": pa.array(column(6), pa.float64()),
    "ResourceAttributes": pa.array([[("service.version", v)] for v in column(7)], pa.map_(pa.string(), pa.string())),
    "SpanAttributes": pa.array([[("agentlat.prompt.version", p)] if p else [] for p in column(8)],
                               pa.map_(pa.string(), pa.string())),
}, n))
ids = sorted(set(column(0)))
analyses = [(t, analyse(spans)) for t, spans in spans_by_trace(store.analysis_input(project, ids)).items()]
store.write_traces(trace_rows(project, analyses, int(time.time() * 1e6)))
store.rollup([minute], version=1)
where = SpanFilter(project, (minute - 3600) * 10**9, (minute + 2 * 86400) * 10**9)
def figures(group_by):
    found = store.rollup_percentiles(["e2e", "ttft", "split_model"], group_by, where)
    return sorted([[r[d] for d in group_by] + [r["metric"], r["count"], r["q"]] for r in found])
def releases():
    return backend.query_arrow(
        "SELECT TraceId, Release FROM agentlat_traces FINAL WHERE ProjectId = {p:String} ORDER BY TraceId",
        {"p": project}).to_pylist()
today = {"by_version": figures(["release", "prompt"]), "by_route": figures(["route"]), "traces": releases()}

# The store as version 23 left it: rollup tables without Release and PromptVersion, each group's row holding what
# every release's rows hold now (merged as the hours merge minutes), and analysed traces without a release.
group = "ProjectId, Metric, {t}, ServiceName, Route, Agent, Model, Tool"
for table, t, ddl in (("agentlat_rollup_1m", "Minute", ROLLUP_DDL), ("agentlat_rollup_1h", "Hour", ROLLUP_HOURLY_DDL),
                      ("agentlat_rollup_1d", "Day", ROLLUP_DAILY_DDL)):
    old = (with_ttl(ddl, 180).replace("    Release LowCardinality(String) CODEC(ZSTD(3)),\n", "")
           .replace("    PromptVersion LowCardinality(String) CODEC(ZSTD(3)),\n", "")
           .replace(", Release, PromptVersion)", ")"))
    assert "Release" not in old
    backend.execute(f"RENAME TABLE {table} TO {table}_today")
    backend.execute(old)
    backend.execute(f"INSERT INTO {table} SELECT {group.format(t=t)}, sum(Count), sum(Sum),"
                    f" if({ALL_EXACT}, {NO_DIGEST}, {MERGED_DIGEST}), if({ALL_EXACT}, {ALL_VALUES}, {NO_VALUES}),"
                    f" max(Version) FROM {table}_today FINAL GROUP BY {group.format(t=t)}")
    backend.execute(f"DROP TABLE {table}_today")
backend.execute("ALTER TABLE agentlat_traces DROP COLUMN Release")
backend.execute("ALTER TABLE agentlat_migrations DELETE WHERE Version = 24 SETTINGS mutations_sync = 1")
before = backend.query_arrow(  # what today's reads cannot read: the old layout's counts
    "SELECT Route, Metric, sum(Count) AS count FROM agentlat_rollup_1m FINAL WHERE ProjectId = {p:String}"
    " AND Metric IN ('e2e', 'ttft', 'split_model') GROUP BY Route, Metric ORDER BY Metric", {"p": project}).to_pylist()
applied = Store(backend).migrate()
print(json.dumps({"today": today, "before": before, "applied": applied, "by_version": figures(["release", "prompt"]),
                  "by_route": figures(["route"]), "traces": releases()}))
"""


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    minute = (int(time.time()) // 3600 - 3) * 3600 + 5 * 60  # three hours ago: a minute, its hour, its day
    run = subprocess.run(
        [sys.executable, "-c", UPGRADE, str(tmp_path_factory.mktemp("upgrade-24") / "data"), str(minute)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_rollups_are_kept_by_release_and_prompt_version(upgraded: dict) -> None:
    """Today's schema: E2E and the split by each trace's release (no prompt version), TTFT by the call's release
    and prompt version, each exact (three values a group)."""
    e2e_1, e2e_2 = [1000.0, 1100.0, 1200.0], [1500.0, 1600.0, 1700.0]
    q = lambda v: [v[1], v[1] + 0.9 * (v[2] - v[1]), v[1] + 0.98 * (v[2] - v[1])]  # noqa: E731  p50, p95, p99
    assert upgraded["today"]["by_version"] == [
        ["1.0", "", "e2e", 3, pytest.approx(q(e2e_1))],
        ["1.0", "", "split_model", 3, [100.0] * 3],
        ["1.0", "p-1.0", "ttft", 3, [50.0] * 3],
        ["2.0", "", "e2e", 3, pytest.approx(q(e2e_2))],
        ["2.0", "", "split_model", 3, [250.0] * 3],
        ["2.0", "p-2.0", "ttft", 3, [125.0] * 3],
    ]
    assert [t["Release"] for t in upgraded["today"]["traces"]] == ["1.0"] * 3 + ["2.0"] * 3


def test_an_older_store_gets_its_releases_back_and_counts_each_group_once(upgraded: dict) -> None:
    assert upgraded["applied"] == [24]
    assert (
        [[r["Route"], r["Metric"], r["count"]] for r in upgraded["before"]]
        == [  # the old layout's groups
            row[:3] for row in upgraded["today"]["by_route"]
        ]
    )
    assert upgraded["traces"] == upgraded["today"]["traces"]  # each analysed trace's release, from its root span
    assert upgraded["by_version"] == upgraded["today"]["by_version"]
    assert upgraded["by_route"] == upgraded["today"]["by_route"]  # the old rows replaced, not counted beside the new
    assert [row[1:3] for row in upgraded["by_route"]] == [["e2e", 6], ["split_model", 6], ["ttft", 6]]
    assert upgraded["by_route"][0][3] == pytest.approx([1350.0, 1675.0, 1695.0])  # the six E2Es, each once
