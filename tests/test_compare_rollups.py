"""Comparing two sides beyond the exact reads' 7 days, from the rollups (issue 40).

Large sides: 2,000 traces a release over four days each (release 1.0 from 8.5 days ago, 2.0 from 4.5), each a root
agent run of 1 s holding one model call of d ms, d evenly from 100 to 300 in 1.0 and 50 ms more in 2.0, its TTFT
d / 2, its cache reading 800 (1.0) or 200 (2.0) of 1,000 input tokens. The rollups keep digests of them, so the
percentiles' intervals come from the ranks a quantile's interval spans, the means' from the sides' variances:
expected from the known distributions. Small sides (40 values, tests/test_compare_api.py's releases through a real
collector): the rollups keep every value, and the answer is the exact one."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from agentlat.collector.analysis.assembler import spans_by_trace, trace_rows
from agentlat.collector.analysis.critical_path import analyse
from agentlat.store import SpanFilter, Store
from agentlat.store.compare import Sides
from tests.servers import AGENTLAT, ServerProcess
from tests.span_tables import span_batch
from tests.test_compare_api import two_releases
from tests.test_dashboard_apptest import opener

PROJECT, N, MS, DAY_NS = "compare-rollups", 2_000, 1_000_000, 86_400 * 10**9
Z = 1.959963984540054
NOW_NS = (time.time_ns() // (3600 * 10**9) - 1) * 3600 * 10**9
STARTS = {"1.0": NOW_NS - int(8.5 * DAY_NS), "2.0": NOW_NS - int(4.5 * DAY_NS)}
CALL_MS = {release: 100 + 200 * np.arange(N) / (N - 1) + (50 if release == "2.0" else 0) for release in STARTS}
CACHED = {"1.0": 800, "2.0": 200}


def _spans(release: str) -> pa.Table:
    starts = STARTS[release] + np.arange(N) * (4 * DAY_NS // N)
    n = 2 * N
    call_ms = CALL_MS[release]
    is_call = np.tile([False, True], N)
    return span_batch({
        "Timestamp": pa.array(np.repeat(starts, 2) + is_call * MS, pa.timestamp("ns", tz="UTC")),
        "TraceId": pa.array(np.repeat([f"{release}-{i}" for i in range(N)], 2)),
        "SpanId": pa.array(np.where(is_call, "call", "root")), "ParentSpanId": pa.array(np.where(is_call, "root", "")),
        "ProjectId": pa.array([PROJECT] * n), "ServiceName": pa.array(["shop"] * n),
        "Route": pa.array(["/chat"] * n), "Role": pa.array(np.where(is_call, "model", "agent")),
        "Model": pa.array(np.where(is_call, "m", "")),
        "Duration": pa.array(np.where(is_call, np.repeat(call_ms, 2) * MS, 1000 * MS).astype(np.uint64)),
        "TtftMs": pa.array(np.where(is_call, np.repeat(call_ms / 2, 2), np.nan), pa.float64(), mask=~is_call),
        "InputTokens": pa.array(np.where(is_call, 1000, 0), pa.uint32(), mask=~is_call),
        "CacheReadTokens": pa.array(np.where(is_call, CACHED[release], 0), pa.uint32(), mask=~is_call),
        "ResourceAttributes": pa.array([[("service.version", release)]] * n, pa.map_(pa.string(), pa.string())),
    }, n)  # fmt: skip


@pytest.fixture(scope="module")
def rolled_up(embedded_store: Store) -> Store:
    minutes: set[int] = set()
    for release in STARTS:
        batch = _spans(release)
        embedded_store.insert_spans(batch)
        ids = [f"{release}-{i}" for i in range(N)]
        found = spans_by_trace(embedded_store.analysis_input(PROJECT, ids))
        embedded_store.write_traces(trace_rows(PROJECT, [(t, analyse(s)) for t, s in found.items()], 1))
        minutes |= {ns // 60_000_000_000 * 60 for ns in batch.column("Timestamp").cast(pa.int64()).to_pylist()}
    ordered = sorted(minutes)
    for i in range(0, len(ordered), 500):
        embedded_store.rollup(ordered[i : i + 500], version=1)
    return embedded_store


WINDOW = SpanFilter(PROJECT, NOW_NS - 9 * DAY_NS, NOW_NS)


def _by_statistic(comparison: dict) -> dict:
    return {d["statistic"]: d for d in comparison["differences"]}


def _quantile_half_width(level: float, spread_ms: float) -> float:
    """The half-width of a 95 % interval of an evenly spread side's quantile: the ranks it spans, in ms."""
    return Z * math.sqrt(level * (1 - level) / N) * spread_ms


@pytest.mark.parametrize("sides", [Sides("release", "1.0", "2.0"), Sides("time", at_ns=STARTS["2.0"])],
                         ids=["release", "before-after"])  # fmt: skip
def test_percentiles_from_digests_with_their_rank_intervals(rolled_up: Store, sides: Sides) -> None:
    found = rolled_up.compare(sides, WINDOW, from_rollups=True)
    ttft = _by_statistic(found["metrics"]["ttft"])
    assert found["metrics"]["ttft"]["a"]["count"] == found["metrics"]["ttft"]["b"]["count"] == N
    for statistic, level in (("p50", 0.5), ("p95", 0.95)):
        half = math.hypot(_quantile_half_width(level, 100), _quantile_half_width(level, 100))  # TTFT spans 100 ms
        d = ttft[statistic]
        assert d["difference"] == pytest.approx(25.0, abs=1.0), statistic  # the t-digest's estimates
        assert d["low"] == pytest.approx(25.0 - half, abs=1.0) and d["high"] == pytest.approx(25.0 + half, abs=1.0)
        assert d["status"] == "slower"
    assert ttft["p99"]["status"] == "slower"  # 2,000 a side: more than p99's 1,000
    e2e = _by_statistic(found["metrics"]["e2e"])
    assert e2e["p50"]["difference"] == pytest.approx(0.0, abs=1e-6) and e2e["p50"]["status"] == "no_clear_change"


@pytest.mark.parametrize("sides", [Sides("release", "1.0", "2.0"), Sides("time", at_ns=STARTS["2.0"])],
                         ids=["release", "before-after"])  # fmt: skip
def test_means_of_the_split_with_the_sides_variances(rolled_up: Store, sides: Sides) -> None:
    found = rolled_up.compare(sides, WINDOW, from_rollups=True)
    [model] = found["split"]["model"]["differences"]
    assert found["split"]["model"]["a"]["mean"] == pytest.approx(200.0)  # sums and counts: exact
    assert model["difference"] == pytest.approx(50.0)
    sd = np.std(CALL_MS["1.0"], ddof=1)
    half = Z * math.sqrt(2 * sd**2 / N)
    assert model["low"] == pytest.approx(50.0 - half, rel=0.02) and model["high"] == pytest.approx(50 + half, rel=0.02)
    [orchestration] = found["split"]["orchestration"]["differences"]
    assert orchestration["difference"] == pytest.approx(-50.0) and orchestration["status"] == "faster"


def test_levers_from_hourly_sums(rolled_up: Store) -> None:
    found = rolled_up.compare(Sides("release", "1.0", "2.0"), WINDOW, from_rollups=True)
    hits = found["levers"]["cache_hit_rate"]
    assert (hits["a"], hits["b"]) == ({"count": N, "value": 0.8}, {"count": N, "value": 0.2})
    assert hits["difference"] == pytest.approx(-0.6) and hits["status"] == "lower"  # 96 hours a side, all alike
    assert hits["low"] == pytest.approx(-0.6) and hits["high"] == pytest.approx(-0.6)
    assert found["levers"]["spec_acceptance"]["status"] == "no_data"
    assert "output_tokens" not in found["levers"] and found["not_in_rollups"] == ["output_tokens"]


def test_a_prompt_or_model_side_leaves_out_what_traces_do_not_keep(rolled_up: Store) -> None:
    found = rolled_up.compare(Sides("model", "m", "other"), WINDOW, from_rollups=True)
    assert list(found["metrics"]) == ["ttft", "itl"] and found["split"] == {} and found["tools"] == {}
    assert found["metrics"]["ttft"]["a"]["count"] == 2 * N and found["metrics"]["ttft"]["b"]["count"] == 0
    assert {d["status"] for d in found["metrics"]["ttft"]["differences"]} == {"no_data"}
    assert found["not_in_rollups"] == ["e2e", "split", "tools", "serial_tools_ms", "dispatch_delay_ms", "output_tokens"]
    assert list(found["levers"]) == ["cache_hit_rate", "spec_acceptance"]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with two_releases(tmp_path_factory.mktemp("compare-rollups")) as proc:
        yield proc


@pytest.mark.parametrize("sides", [{"dimension": "release", "a": "1.0", "b": "2.0"}, {"dimension": "time"}],
                         ids=["release", "before-after"])  # fmt: skip
def test_small_sides_from_the_rollups_are_the_exact_answer(small: ServerProcess, sides: dict) -> None:
    """40 values a side: the rollups keep each one, so beyond 7 days the answer is the spans' own."""
    if sides["dimension"] == "time":
        sides = {**sides, "at": _minute_iso(time.time_ns() - 35 * 60 * 10**9)}
    exact = small.get("/api/v1/compare", window="2h", **sides).json()
    rolled = small.get("/api/v1/compare", window="8d", **sides).json()
    assert (exact["source"], rolled["source"]) == ("spans", "rollups")
    for part in ("metrics", "split", "tools"):
        assert rolled[part] == exact[part], part
    assert _by_statistic(rolled["metrics"]["e2e"])["p50"]["status"] == "slower"
    hits = rolled["levers"]["cache_hit_rate"]
    assert (hits["a"]["count"], hits["b"]["count"], hits["difference"]) == (40, 40, pytest.approx(-0.6))
    assert hits["status"] == "too_few_samples"  # a few minutes a side: fewer than 20 hours to resample
    assert rolled["not_in_rollups"] == ["output_tokens"] and exact["not_in_rollups"] == []


def test_a_rollup_instant_is_its_minute(small: ServerProcess) -> None:
    at_ns = time.time_ns() - 35 * 60 * 10**9
    body = small.get("/api/v1/compare", window="8d", dimension="time", at=_minute_iso(at_ns, seconds=17)).json()
    assert body["at"] == _minute_iso(at_ns)


def _minute_iso(ns: int, seconds: int = 0) -> str:
    minute = ns // 60_000_000_000 * 60 + seconds
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(minute))


def test_the_cli_and_the_page_say_the_answer_came_from_the_rollups(
    small: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    ask = [AGENTLAT, "compare", "--release", "1.0", "2.0", "--window", "8d", "--api", small.url]
    result = subprocess.run(ask, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("│")}  # fmt: skip
    assert rows["TTFT p50"][:3] == ["120 ms", "170 ms", "+50.0 ms"]  # 119.5 and 169.5: every value kept
    assert rows["cache hit rate"][4:] == ["40 / 40", "too few samples"]
    assert "output tokens (a call)" not in rows
    said = " ".join(result.stdout.split())  # the caption, unwrapped
    assert "From the rollups (a window beyond 7 days)" in said
    assert "Not kept by the rollups for a release: output tokens (a call)." in said
    at = opener(small.url, monkeypatch)("page_compare.py", window="30d", dimension="release", a="1.0", b="2.0")
    frame = {row["figure"]: row for row in at.dataframe[0].value.to_dict("records")}
    assert (frame["E2E p50"]["B - A"], frame["E2E p50"]["verdict"]) == ("+300 ms", "slower")
    assert any("From the rollups" in c.value and "output tokens (a call)" in c.value for c in at.caption)


def test_an_instant_whose_minute_starts_before_the_window_is_refused(small: ServerProcess) -> None:
    start = (time.time_ns() - 8 * 86_400 * 10**9) // 60_000_000_000 * 60 + 30  # half a minute in
    end = start + 8 * 86_400 + 60
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 10))
    iso_start, iso_end = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) for t in (start, end))
    response = small.get("/api/v1/compare", dimension="time", at=at, start=iso_start, end=iso_end)
    assert response.status_code == 400
    assert "its minute starts before the window; choose a later instant" in response.json()["error"]["message"]


def test_a_filter_the_rollups_do_not_keep_is_refused_beyond_7_days(small: ServerProcess) -> None:
    response = small.get("/api/v1/compare", dimension="release", a="1.0", b="2.0", window="8d", provider="openai")
    assert response.status_code == 400
    assert "filters ['provider'] are not kept in rollups" in response.json()["error"]["message"]
    kept = small.get("/api/v1/compare", dimension="release", a="1.0", b="2.0", window="8d", route="/elsewhere")
    assert kept.status_code == 200 and kept.json()["metrics"]["ttft"]["a"]["count"] == 0
