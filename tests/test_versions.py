"""``GET /api/v1/versions`` (deploy markers) and the compare answer's ``began``, on the two releases of
tests/test_compare_api.py sent through the real OpenTelemetry SDK and exporter: release 1.0 (prompt v3, model
m-1) from 50 min ago, release 2.0 (v4, m-2) from 20 min ago, 40 traces each, one every 10 s. Each value's first
and last seen are the earliest and latest start of a span carrying it, as the test sent them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from agentlat.api.windows import iso
from agentlat.dashboard.fmt import utc_time
from agentlat.store import MIGRATIONS, Store
from tests.fake_llm_fixtures import export_to
from tests.servers import AGENTLAT, ServerProcess, wait_for
from tests.span_tables import span_batch
from tests.test_compare_api import E2E, MINUTE, _p, _spans
from tests.test_dashboard_apptest import opener
from tests.test_trace_analysis_e2e import FAST

SIDES = {"a": "1.0", "b": "2.0"}


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, list[ReadableSpan]]]:
    proc = ServerProcess(tmp_path_factory.mktemp("versions"), extra_env=FAST).start()
    try:
        spans = _spans("a") + _spans("b")
        export_to(proc, spans)
        wait_for(lambda: len(proc.get("/api/v1/versions", window="2h").json()["versions"]) == 4, timeout=60)
        wait_for(lambda: _rolled_up(proc), timeout=90)  # every trace analysed and its minute rolled up
        yield proc, spans
    finally:
        proc.stop()


def _rolled_up(proc: ServerProcess) -> bool:
    rows = proc.get("/api/v1/breakdown", group_by="release", window="2h").json()["rows"]
    return sorted((r["group"]["release"], r["traces"]) for r in rows) == [("1.0", 40), ("2.0", 40)]


def _seen(spans: list[ReadableSpan], key: str, value: str, resource: bool = False) -> tuple[str, str]:
    starts = [s.start_time for s in spans if (s.resource.attributes if resource else s.attributes).get(key) == value]
    return iso(min(starts)), iso(max(starts))


def _expected(spans: list[ReadableSpan], start_ns: int) -> list[dict[str, object]]:
    found = []
    for dimension, key, value, resource in (
        ("release", "service.version", "1.0", True), ("prompt", "agentlat.prompt.version", "v3", False),
        ("release", "service.version", "2.0", True), ("prompt", "agentlat.prompt.version", "v4", False),
    ):  # fmt: skip
        first, last = _seen(spans, key, value, resource)
        found.append({"dimension": dimension, "service": "shop", "value": value, "first_seen": first,
                      "last_seen": last, "new": first >= iso(start_ns)})  # fmt: skip
    return found


def test_releases_and_prompt_versions_with_when_each_was_first_seen(sent: tuple[ServerProcess, list]) -> None:
    proc, spans = sent
    body = proc.get("/api/v1/versions", window="2h").json()
    assert body["versions"] == _expected(spans, time.time_ns() - 120 * MINUTE)
    assert all(v["new"] for v in body["versions"])  # every one began inside the 2 h: four deploy markers


def test_a_release_begun_before_the_window_is_there_but_not_new(sent: tuple[ServerProcess, list]) -> None:
    proc, spans = sent
    began = _seen(spans, "service.version", "2.0", resource=True)[0]
    start = iso(int(time.time_ns() - 18 * MINUTE))  # 2.0 began 20 min ago; 1.0 ended some 43 min ago
    body = proc.get("/api/v1/versions", start=start, dimension="release").json()
    assert [(v["value"], v["first_seen"], v["new"]) for v in body["versions"]] == [("2.0", began, False)]


def test_models_are_versions_too_and_a_route_scopes_the_services(sent: tuple[ServerProcess, list]) -> None:
    proc, _ = sent
    models = proc.get("/api/v1/versions", window="2h", dimension="model", route="/chat").json()["versions"]
    assert [(v["dimension"], v["value"]) for v in models] == [("model", "m-1"), ("model", "m-2")]
    assert proc.get("/api/v1/versions", window="2h", route="/elsewhere").json()["versions"] == []
    assert proc.get("/api/v1/versions", window="2h", service="other").json()["versions"] == []
    wrong = proc.get("/api/v1/versions", dimension="colour")
    assert wrong.status_code == 400 and "choose from ['release', 'prompt', 'model']" in wrong.json()["error"]["message"]


def test_compare_before_and_after_names_what_began_nearest_the_instant(sent: tuple[ServerProcess, list]) -> None:
    proc, spans = sent
    at = iso(time.time_ns() - 30 * MINUTE)  # 2.0 began 10 min after it (its model and prompt 1 ms later), 1.0 20 min
    began = proc.get("/api/v1/compare", dimension="time", at=at, window="2h").json()["began"]
    assert [(v["dimension"], v["value"]) for v in began] == [
        ("release", "2.0"), ("model", "m-2"), ("prompt", "v4"),  # 10 min and 10 min + 1 ms after the instant
        ("model", "m-1"), ("prompt", "v3"), ("release", "1.0"),  # 20 min - 1 ms and 20 min before it
    ]  # fmt: skip
    assert began[0] == _expected(spans, 0)[2]


def test_the_backfill_finds_what_the_view_found(embedded_store: Store) -> None:
    """Migration 23's backfill reads stored spans as its view reads inserted ones: the same rows."""
    project, n = "versions-backfill", 6
    batch = span_batch({
        "Timestamp": pa.array([(1_800_000_000 + 60 * i) * 10**9 for i in range(n)], pa.timestamp("ns", tz="UTC")),
        "TraceId": pa.array([f"vb-{i}" for i in range(n)]), "SpanId": pa.array([f"s{i}" for i in range(n)]),
        "ProjectId": pa.array([project] * n), "ServiceName": pa.array(["bot"] * n),
        "Model": pa.array(["m-1", "m-1", "m-2", "", "", ""]),
        "ResourceAttributes": pa.array([[("service.version", "1.0")]] * 3 + [[("service.version", "1.1")]] * 3,
                                       pa.map_(pa.string(), pa.string())),
    }, n)  # fmt: skip
    embedded_store.insert_spans(batch)
    query = (
        "SELECT Dimension, ServiceName, Value, min(FirstSeen) AS f, max(LastSeen) AS l FROM agentlat_versions"
        " WHERE ProjectId = {p:String} GROUP BY Dimension, ServiceName, Value ORDER BY Dimension, Value"
    )
    by_view = embedded_store.backend.query_arrow(query, {"p": project}).to_pylist()
    delete = "ALTER TABLE agentlat_versions DELETE WHERE ProjectId = {p:String} SETTINGS mutations_sync = 1"
    embedded_store.backend.execute(delete, {"p": project})
    [backfill] = [s for m in MIGRATIONS if m.version == 23 for s in m.statements if s.startswith("INSERT")]
    embedded_store.backend.execute(backfill)
    assert embedded_store.backend.query_arrow(query, {"p": project}).to_pylist() == by_view
    assert [(r["Dimension"], r["Value"]) for r in by_view] == [
        ("model", "m-1"), ("model", "m-2"), ("release", "1.0"), ("release", "1.1"),
    ]  # fmt: skip


def test_the_cli_names_what_began_nearest_the_instant(sent: tuple[ServerProcess, list]) -> None:
    proc, spans = sent
    at = iso(time.time_ns() - 30 * MINUTE)
    result = subprocess.run([AGENTLAT, "compare", "--at", at, "--window", "2h", "--api", proc.url],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    began = utc_time(_seen(spans, "service.version", "2.0", resource=True)[0])
    lines = result.stdout.split("Began in the window:\n", 1)[1].splitlines()
    assert lines[0] == f"  release 2.0 of shop first seen {began}, 10 min after the instant"
    assert lines[1].startswith("  model m-2 of shop first seen") and len(lines) == 5  # the nearest five of six


@pytest.mark.parametrize("source", ["spans", "rollups"])
def test_releases_and_prompt_versions_are_dimensions(sent: tuple[ServerProcess, list], source: str) -> None:
    """The same figures exact from the spans and from the rollups, which keep releases and prompt versions."""
    proc, _ = sent
    body = proc.get("/api/v1/dimensions", dimension="release", window="2h", source=source).json()
    assert body["source"] == source
    found = {r["name"]: (r["count"], r["metrics"]["e2e"]["p50"], r["metrics"]["ttft"]["p50"]) for r in body["rows"]}
    assert found == {"1.0": (40, 1195.0, 119.5), "2.0": (40, 1495.0, 169.5)}
    prompts = proc.get("/api/v1/dimensions", dimension="prompt", window="2h", source=source).json()["rows"]
    assert {r["name"]: (r["count"], r["metrics"]["ttft"]["p50"]) for r in prompts} == {
        "v3": (40, 119.5),
        "v4": (40, 169.5),
    }
    e2e = proc.get("/api/v1/percentiles", metric="e2e", group_by="release", window="2h", source=source).json()
    assert {r["group"]["release"]: (r["count"], r["p50"], r["p99"]) for r in e2e["rows"]} == {
        release: (40, _p(E2E[side], 0.5), pytest.approx(_p(E2E[side], 0.99))) for side, release in SIDES.items()
    }
    filtered = proc.get("/api/v1/percentiles", metric="ttft", release="2.0", prompt="v4", window="2h", source=source)
    [row] = filtered.json()["rows"]
    assert (row["count"], row["p50"]) == (40, 169.5)


def test_the_split_per_release_from_the_rollups(sent: tuple[ServerProcess, list]) -> None:
    """Each analysed trace carries its root's release, so the split and its p50/p95/p99 are kept per release."""
    proc, _ = sent
    rows = proc.get("/api/v1/breakdown", group_by="release", window="2h").json()["rows"]
    found = {r["group"]["release"]: (r["traces"], r["e2e"]["p50"], r["at"]["p50"]["e2e"]) for r in rows}
    assert found == {"1.0": (40, 1195.0, 1195.0), "2.0": (40, 1495.0, 1495.0)}
    means = {r["group"]["release"]: tuple(r[part]["mean"] for part in ("model", "tool", "orchestration")) for r in rows}
    # the model call 1 to 301 ms, then the tool for 200 (1.0) or 500 ms (2.0), the rest orchestration
    assert means == {"1.0": pytest.approx((300.0, 200.0, 695.0)), "2.0": pytest.approx((300.0, 500.0, 695.0))}
    slowest = proc.get("/api/v1/traces", release="2.0", window="2h", sort="slowest", limit=100).json()["traces"]
    assert len(slowest) == 40 and slowest[0]["duration_ms"] == pytest.approx(1300.0 + 390)


def test_the_routes_page_lists_releases_and_links_their_traces(
    sent: tuple[ServerProcess, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, _ = sent
    at = opener(proc.url, monkeypatch)("page_routes.py", dim="release")
    [frame] = [element.value for element in at.dataframe]
    assert list(frame["release"]) == ["1.0", "2.0"] and list(frame["requests"]) == [40, 40]
    assert list(frame["E2E p50"]) == [1195.0, 1495.0]
    assert list(frame["traces"])[1] == "traces?window=1h&service=shop&release=2.0&sort=slowest"
    assert any("from per-minute rollups (exact up to 128 values" in c.value for c in at.caption)


def test_top_by_release(sent: tuple[ServerProcess, list]) -> None:
    proc, _ = sent
    result = subprocess.run([AGENTLAT, "top", "--by", "release", "--window", "2h", "--json", "--api", proc.url],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert (body["by"], body["latency"]) == ("release", "e2e")
    rows = {r["name"]: (r["count"], r["latency_ms"]["p50"], r["ttft_ms"]["p50"], r["split"]) for r in body["rows"]}
    assert {k: v[:3] for k, v in rows.items()} == {"1.0": (40, 1195.0, 119.5), "2.0": (40, 1495.0, 169.5)}
    assert {k: v[3]["tool"]["mean_ms"] for k, v in rows.items()} == {"1.0": 200.0, "2.0": 500.0}


def test_the_trace_explorer_filters_by_release(
    sent: tuple[ServerProcess, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, _ = sent
    at = opener(proc.url, monkeypatch)("page_traces.py", release="2.0", sort="slowest")
    [box] = [t for t in at.text_input if t.label == "Release"]
    assert box.value == "2.0"
    listed = at.dataframe[0].value
    assert len(listed) == 40  # release 2.0's traces only, of the 80
    assert min(listed["E2E"]) == pytest.approx(1300.0)  # 2.0's E2E: 1300 + 10 i ms
