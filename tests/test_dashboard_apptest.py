"""Every dashboard page under Streamlit's AppTest against a real server holding known traces:
the numbers shown (tiles, table cells, chart data), empty states and a server that is down."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from agentlat.dashboard import figures, fmt
from agentlat.dashboard.page_advisor import NO_FINDINGS
from agentlat.dashboard.page_budgets import NO_ALERTS
from tests.dashboard_data import (
    ALL_E2E,
    ALL_ITL,
    ALL_TTFT,
    CHECKOUT_E2E,
    CHECKOUT_MISSES,
    CHECKOUT_TTFT,
    exact,
    start_known_server,
)
from tests.otlp_payloads import MS
from tests.servers import ServerProcess, free_port
from tests.test_trace_analysis_e2e import FAST as FAST_ANALYSIS
from tests.test_trace_analysis_e2e import analysis as analysed
from tests.test_trace_analysis_e2e import ingest, planner_trace

pytestmark = pytest.mark.slow

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")
OpenPage = Callable[..., AppTest]


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from start_known_server(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with no data and no budgets file."""
    server = ServerProcess(tmp_path_factory.mktemp("empty-dashboard")).start()
    yield server
    server.stop()


def opener(url: str, monkeypatch: pytest.MonkeyPatch) -> OpenPage:
    monkeypatch.setenv("AGENTLAT_API", url)

    def open_page(page: str = "", **params: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params.update({"window": "1h", **params})
        at.run()
        if page:
            at.switch_page(page).run()
        assert not at.exception, [e.message for e in at.exception]
        return at

    return open_page


@pytest.fixture
def page(known: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> OpenPage:
    return opener(known.url, monkeypatch)


def metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def charts(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def traces_of(chart: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {trace.get("name", ""): trace for trace in chart["data"]}


def markdown(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown]


def digest(server: ServerProcess, metric: str, **params: str) -> dict[str, float]:
    """The server's t-digest percentiles from the rollups: what the Overview's tiles show."""
    [row] = server.get("/api/v1/percentiles", metric=metric, source="rollups", **{"window": "1h", **params}).json()[
        "rows"
    ]
    return row


def tile(row: dict[str, float], pct: str, previous: float, values: list[float]) -> tuple[str, str]:
    """A tile's value and change; the digest must stay near the exact percentile of the known values."""
    assert row[pct] == pytest.approx(exact(values, int(pct[1:]) / 100), rel=0.05)
    return fmt.ms(row[pct]), fmt.change(row[pct], previous)


# --- Overview -------------------------------------------------------------------------
def test_overview_tiles_with_change_and_budget_status(page: OpenPage, known: ServerProcess) -> None:
    at = page()
    shown = metrics(at)
    e2e, ttft, itl = (digest(known, m) for m in ("e2e", "ttft", "itl"))
    assert (e2e["count"], ttft["count"], itl["count"]) == (30, 30, 30)
    for pct in ("p50", "p95", "p99"):  # the hour before holds 900 ms E2E, 80 ms TTFT and 8 ms ITL only
        assert shown[f"E2E {pct}"] == tile(e2e, pct, 900.0, ALL_E2E)
        assert shown[f"TTFT {pct}"] == tile(ttft, pct, 80.0, ALL_TTFT)
        assert shown[f"ITL {pct}"] == tile(itl, pct, 8.0, ALL_ITL)
    # all routes: the budgets file's default (e2e p50 2 s, p95 3 s); no TTFT or ITL default
    assert markdown(at).count(":green-badge[within budget 2,000 ms]") == 1
    assert markdown(at).count(":green-badge[within budget 3,000 ms]") == 1
    assert not [m for m in markdown(at) if "budget" in m and "badge" in m and "within budget" not in m]


def test_the_tiles_read_every_metric_at_once_as_each_alone(known: ServerProcess) -> None:
    """The Overview's one rollup read for E2E, TTFT and ITL gives each metric's row as its own read does."""
    together = known.get("/api/v1/percentiles", metric="e2e,ttft,itl", source="rollups", window="1h").json()
    assert together["source"] == "rollups"
    assert together["rows"] == [digest(known, m) for m in ("e2e", "ttft", "itl")]


def test_breakdown_splits_the_p50_p95_p99_requests(known: ServerProcess) -> None:
    """``at``: per percentile, the mean split of the traces ranked within half a percentile point of it. Of the
    20 /checkout traces (E2E 1000 + 10 i: model 600, tool 400, orchestration 10 i) that is ranks 9-10 for p50,
    17-19 for p95 and 18-19 for p99."""
    body = known.get("/api/v1/breakdown", group_by="route", window="1h").json()
    found = {row["group"]["route"]: row["at"] for row in body["rows"]}
    assert found["/checkout"] == {
        "p50": {"traces": 2, "e2e": 1095.0, "model": 600.0, "tool": 400.0, "orchestration": pytest.approx(95.0)},
        "p95": {"traces": 3, "e2e": 1180.0, "model": 600.0, "tool": 400.0, "orchestration": pytest.approx(180.0)},
        "p99": {"traces": 2, "e2e": 1185.0, "model": 600.0, "tool": 400.0, "orchestration": pytest.approx(185.0)},
    }
    search = {"e2e": 500.0, "model": 200.0, "tool": 250.0, "orchestration": pytest.approx(50.0)}
    assert found["/search"] == {"p50": {"traces": 2, **search}, "p95": {"traces": 2, **search},
                                "p99": {"traces": 2, **search}}  # fmt: skip
    # by model, which traces do not keep: the rollup split only
    by_model = known.get("/api/v1/breakdown", group_by="model", window="1h").json()
    assert by_model["rows"] and all("at" not in row for row in by_model["rows"])


def test_heatmap_counts_each_interval_in_latency_buckets(known: ServerProcess) -> None:
    """/checkout's 20 traces (E2E 1,000 to 1,190 ms, TTFT 100 to 195 ms) start in one minute, /search's 10
    (E2E 500 ms, TTFT 50 ms) in the next: every value counted exactly in its bucket."""
    e2e = known.get("/api/v1/heatmap", metric="e2e", step="1m", window="1h").json()
    assert [(b["lower_ms"], b["upper_ms"]) for b in e2e["buckets"]] == [(500, 630), (630, 800), (800, 1000),
                                                                       (1000, 1250)]  # fmt: skip
    assert [(c["count"], c["exact"], c["counts"]) for c in e2e["columns"]] == [
        (20, True, [0, 0, 0, 20]),
        (10, True, [10, 0, 0, 0]),
    ]
    minutes = [c["t"] for c in e2e["columns"]]
    assert minutes[0].endswith(":00Z") and fmt_minutes_apart(*minutes) == 1
    ttft = known.get("/api/v1/heatmap", metric="ttft", step="1m", window="1h", route="/checkout").json()
    assert [b["lower_ms"] for b in ttft["buckets"]] == [100, 125, 160]
    assert [c["counts"] for c in ttft["columns"]] == [[5, 7, 8]]  # 100-120, 125-155, 160-195 ms
    hour = known.get("/api/v1/heatmap", metric="e2e", step="1h", window="3h").json()
    assert sum(sum(c["counts"]) for c in hour["columns"]) == len(ALL_E2E) + 10  # the hour before: 10 of 900 ms
    assert known.get("/api/v1/heatmap", metric="nope").status_code == 400


def fmt_minutes_apart(first: str, second: str) -> float:
    return (datetime.fromisoformat(second) - datetime.fromisoformat(first)).total_seconds() / 60


def test_overview_split_and_series(page: OpenPage, known: ServerProcess) -> None:
    split, series = charts(page())
    parts = traces_of(split)
    levels = ["p50", "p95", "p99"]
    assert parts["model"]["y"] == [["/checkout"] * 3 + ["/search"] * 3, levels * 2]  # most requests first
    assert parts["model"]["x"] == [600.0] * 3 + [200.0] * 3 and parts["tool"]["x"] == [400.0] * 3 + [250.0] * 3
    assert parts["orchestration"]["x"] == pytest.approx([95.0, 180.0, 185.0, 50.0, 50.0, 50.0])
    assert parts["orchestration"]["text"][2] == "185 ms · 15.6%"
    api = known.get("/api/v1/timeseries", metric="e2e", step="1m", window="1h").json()["series"][0]["points"]
    lines = traces_of(series)
    for name in ("p50", "p95", "p99"):  # above: the percentiles per minute
        assert lines[name]["y"] == [p[name] for p in api]
    assert sum(p["count"] for p in api) == len(ALL_E2E)
    assert [point[0] for point in lines["p99"]["customdata"]] == [p["t"] for p in api]  # a click opens its minute
    *_, cells, clickable = series["data"]  # below: the distribution per minute
    assert series["layout"]["yaxis2"]["ticktext"] == ["500 ms to 630 ms", "630 ms to 800 ms", "800 ms to 1,000 ms",
                                                      "1,000 ms to 1,250 ms"]  # fmt: skip
    filled = sorted((col, row, n) for row, counts in enumerate(cells["z"]) for col, n in enumerate(counts) if n)
    assert [(row, n) for _, row, n in filled] == [(3, 20), (0, 10)] and filled[1][0] == filled[0][0] + 1
    assert [c[0] for c in clickable["customdata"]] == [p["t"] for p in api]  # one marker per filled cell


def test_overview_of_one_route_is_coloured_by_its_budget(page: OpenPage, known: ServerProcess) -> None:
    at = page(route="/checkout", series="ttft")
    shown = metrics(at)
    assert shown["E2E p50"] == tile(digest(known, "e2e", route="/checkout"), "p50", 900.0, CHECKOUT_E2E)
    assert shown["TTFT p95"] == tile(digest(known, "ttft", route="/checkout"), "p95", 80.0, CHECKOUT_TTFT)
    badges = markdown(at)
    assert ":red-badge[over budget 1,000 ms]" in badges  # E2E p50 1,095 ms
    assert ":green-badge[within budget 1,500 ms]" in badges  # E2E p95 1,180.5 ms
    assert ":red-badge[over budget 150 ms]" in badges  # TTFT p95 190.25 ms
    [_, series] = charts(at)
    assert series["layout"]["yaxis"]["title"]["text"] == "TTFT (ms)"
    assert [s["y0"] for s in series["layout"]["shapes"]] == [150.0]  # the TTFT p95 budget line


def test_filters_live_in_the_url(page: OpenPage, known: ServerProcess) -> None:
    at = page(route="/search")
    assert at.selectbox(key="route").value == "/search"  # the link's filter is applied
    assert sorted(at.selectbox(key="route").options) == ["/checkout", "/search", "all routes"]
    at.selectbox(key="window").set_value("6h").run()
    at.selectbox(key="route").set_value("/checkout").run()
    assert (at.query_params["window"], at.query_params["route"]) == ("6h", "/checkout")
    six_hours = digest(known, "e2e", route="/checkout", window="6h")
    assert six_hours["count"] == 30  # the hour before too
    assert metrics(at)["E2E p50"][0] == fmt.ms(six_hours["p50"])


# --- Routes & models ------------------------------------------------------------------
def test_routes_table(page: OpenPage, known: ServerProcess) -> None:
    at = page("page_routes.py")
    frame = at.dataframe[0].value.set_index("route")
    body = known.get("/api/v1/dimensions", dimension="route", window="1h", source="rollups").json()
    api = {row["name"]: row["metrics"] for row in body["rows"]}
    for route in ("/checkout", "/search"):
        for metric, label in (("e2e", "E2E"), ("ttft", "TTFT"), ("itl", "ITL"), ("model", "model call")):
            shown = [frame.loc[route, f"{label} {p}"] for p in ("p50", "p95", "p99")]
            assert shown == [api[route][metric][p] for p in ("p50", "p95", "p99")]
    assert frame.loc["/checkout", "E2E p50"] == pytest.approx(exact(CHECKOUT_E2E, 0.5), rel=0.05)
    assert frame.loc["/checkout", "requests"] == 20 and frame.loc["/search", "requests"] == 10
    assert frame.loc["/search", "E2E p99"] == 500.0 and frame.loc["/search", "tool call p95"] == 250.0
    assert frame.loc["/checkout", "cache hit"] == pytest.approx(0.125)
    assert frame.loc["/search", "spec. acceptance"] == pytest.approx(0.7)
    assert frame.loc["/search", "error rate"] == pytest.approx(0.1)
    assert frame.loc["/search", "traces"] == "traces?window=1h&service=shop&route=%2Fsearch&sort=slowest"
    assert set(frame["service"]) == {"shop"}
    shown = at.dataframe[0].proto
    assert shown.placeholder == fmt.DASH  # a missing value (no speculation on /checkout) is a dash, not "None"
    config = json.loads(shown.columns)
    assert config["route"]["pinned"] and config["service"]["pinned"]  # kept in view when scrolling sideways


def test_prompt_cache_page(page: OpenPage, known: ServerProcess) -> None:
    at = page("page_cache.py")
    frame = at.dataframe[0].value.set_index("route")
    checkout, search = frame.loc["/checkout"], frame.loc["/search"]
    assert (checkout["model"], checkout["calls"], checkout["misses"]) == ("m1", 20, 10)
    assert checkout["hit rate"] == pytest.approx(0.125) and search["hit rate"] == pytest.approx(0.9)
    assert checkout["main reason"] == "system prompt changed within 30 B (40%)"  # 4 of 10 misses, at byte 29
    assert checkout["TTFT hit"] == pytest.approx(statistics.mean(CHECKOUT_TTFT[0::2]))
    assert checkout["TTFT miss"] == pytest.approx(statistics.mean(CHECKOUT_TTFT[1::2]))
    assert (checkout["input cost hit"], checkout["input cost miss"]) == (pytest.approx(750 + 250 * 0.25), 1000)
    assert (search["misses"], search["main reason"]) == (0, fmt.DASH)
    reasons = at.table[0].value.loc[("/checkout", "m1")]
    assert (reasons["cold (first call)"], reasons["expired"], reasons["unknown"]) == (1, 2, 1)
    assert reasons["system prompt changed"] == "4 (at 29, p95 29 B)" and reasons["tool definitions changed"] == (
        "2 (at 12, p95 12 B)"
    )
    groups = known.get("/api/v1/cache", window="1h").json()["groups"]
    assert {g["group"]["route"]: g["misses_by_reason"] for g in groups}["/checkout"] == CHECKOUT_MISSES
    [chart] = charts(at)
    bars = {trace["name"]: sum(trace["y"]) for trace in chart["data"] if trace["type"] == "bar"}
    assert bars == {"prefix changed": 6, "expired": 2, "unknown": 1, "cold (first call)": 1}


def test_tools_sorted_by_error_rate(page: OpenPage) -> None:
    frame = page("page_routes.py", dim="tool", order="error rate").dataframe[0].value
    assert list(frame["tool"]) == ["web_search", "inventory", "payment"]
    assert list(frame["error rate"]) == pytest.approx([0.2, 0.0, 0.0])
    assert list(frame["calls"]) == [10, 20, 20] and list(frame["tool call p99"]) == [250.0, 200.0, 200.0]
    assert "cache hit" not in frame and "spec. acceptance" not in frame  # tools report neither
    assert frame.loc[0, "traces"] == "traces?window=1h&service=shop&tool=web_search&sort=slowest"


# --- Trace explorer -------------------------------------------------------------------
def test_slowest_trace_waterfall_split_and_what_if(page: OpenPage) -> None:
    at = page("page_traces.py")
    listed, split, what_if = (d.value for d in at.dataframe)
    assert len(listed) == 30
    assert list(listed["E2E"][:3]) == [1190.0, 1180.0, 1170.0] and listed.loc[0, "route"] == "/checkout"
    assert metrics(at)["E2E"][0] == "1,190 ms"
    assert split.values.tolist() == [
        ["model", "600 ms", "50.4%", "600 ms"],
        ["tool", "400 ms", "33.6%", "400 ms"],
        ["orchestration", "190 ms", "16.0%", "—"],
    ]
    assert what_if.values.tolist() == [["inventory, payment", "200 ms", "990 ms", "yes"]]
    assert metrics(at)["E2E with parallel tool calls"] == ("990 ms", "-200 ms")  # a saving reads as a fall
    [waterfall] = charts(at)
    bars = traces_of(waterfall)
    # the critical path strip's segments first, then the spans
    assert bars["model"]["base"] == [0.0, 700.0, 0.0, 700.0] and bars["model"]["x"] == [300.0] * 4
    assert bars["tool"]["base"] == [300.0, 500.0, 300.0, 500.0] and bars["tool"]["x"] == [200.0] * 4
    assert bars["model"]["marker"]["line"]["width"] == [0, 0, 1.5, 1.5]  # spans on the path are outlined
    assert bars["orchestration"]["base"] == [1000.0] and bars["orchestration"]["x"] == pytest.approx([190.0])


def selected(at: AppTest) -> tuple[list[int], list[str]]:
    """The trace list's selected rows and their trace ids."""
    table = at.dataframe[0]
    rows = json.loads(table.proto.selection_default)["selection"]["rows"]
    return rows, [table.value.loc[r, "trace id"] for r in rows]


def test_the_selection_follows_the_trace_not_the_row(page: OpenPage, known: ServerProcess) -> None:
    slowest = [t["trace_id"] for t in known.get("/api/v1/traces", sort="slowest", window="1h").json()["traces"]]
    assert selected(page("page_traces.py")) == ([0], [slowest[0]])  # the first trace, shown and selected
    chosen = slowest[2]
    assert selected(page("page_traces.py", trace=chosen)) == ([2], [chosen])  # a trace the URL names is selected
    at = page("page_traces.py", trace=chosen, sort="recent")  # the rows reorder: the selection moves with the trace
    rows, ids = selected(at)
    assert ids == [chosen] and rows != [2]
    assert at.dataframe[0].proto.id != page("page_traces.py", trace=chosen).dataframe[0].proto.id


def test_search_trace_shows_model_phases(page: OpenPage, known: ServerProcess) -> None:
    *_, failed = known.get("/api/v1/traces", route="/search", sort="recent").json()["traces"]  # the first one
    at = page("page_traces.py", trace=failed["trace_id"], sort="recent", tool="web_search")
    assert len(at.dataframe[0].value) == 10
    [waterfall] = charts(at)
    bars = traces_of(waterfall)
    assert bars["queue"]["base"] == [10.0] and bars["queue"]["x"] == [10.0]  # vLLM server span phases
    assert bars["prefill"]["base"] == pytest.approx([0.0, 0.0, 20.0])  # path strip, phase span, server phase
    assert bars["decode"]["x"] == pytest.approx([150.0, 140.0, 150.0])  # strip, server phase, phase span
    labels = [label.replace("\u00a0", " ").rstrip() for label in waterfall["layout"]["yaxis"]["ticktext"]]
    assert labels[:3] == ["critical path", "invoke_agent search (error)", "  chat m2"]
    assert "  execute_tool web_search" in labels


def test_streamed_tool_calls_tick_the_model_bar_and_show_their_what_if(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ServerProcess(tmp_path, extra_env=FAST_ANALYSIS).start()
    try:
        spans = planner_trace(time.time_ns() - 60_000 * MS, "/planner")
        ingest(server, spans)
        analysed(server, spans[0].trace_id)
        at = opener(server.url, monkeypatch)("page_traces.py", trace=spans[0].trace_id)
    finally:
        server.stop()
    assert metrics(at)["E2E starting tools as they stream"] == ("1,590 ms", "-410 ms")
    dispatch = at.dataframe[-1].value
    assert dispatch.values.tolist() == [["a 710 ms, b 410 ms", "410 ms", "1,590 ms", "yes"]]
    [waterfall] = charts(at)
    ticks = traces_of(waterfall)["arguments complete"]
    assert ticks["x"] == pytest.approx([300.0, 600.0]) and ticks["y"] == [2, 2]  # on the model call's bar


# --- Budgets & alerts, Advisor --------------------------------------------------------
def test_budgets_against_actuals(page: OpenPage) -> None:
    at = page("page_budgets.py")
    frame = at.dataframe[0].value
    checkout = frame[frame["route"] == "/checkout"]
    assert checkout[["metric", "percentile", "budget", "actual", "status"]].values.tolist() == [
        ["ttft", "p95", "≤ 150 ms", "190 ms", "breach"],  # 190.25
        ["e2e", "p50", "≤ 1,000 ms", "1,095 ms", "breach"],
        ["e2e", "p95", "≤ 1,500 ms", "1,180 ms", "pass"],  # 1,180.5
    ]
    search = frame[frame["route"] == "/search"]
    assert search[["metric", "percentile", "budget", "actual", "status", "declared in"]].values.tolist() == [
        ["e2e", "p50", "≤ 2,000 ms", "500 ms", "pass", "default"],
        ["e2e", "p95", "≤ 3,000 ms", "500 ms", "pass", "default"],
        ["cache_hit_rate", "min", "≥ 95.0%", "90.0%", "breach", "route"],  # 1,800 of 2,000 input tokens read
    ]
    [alerts] = at.info
    assert alerts.value.startswith(NO_ALERTS)


def test_advisor_ranks_findings_with_evidence(page: OpenPage, known: ServerProcess) -> None:
    findings = known.get("/api/v1/advice", window="1h").json()["findings"]
    assert [f["kind"] for f in findings] == ["parallel_tools", "prompt_cache"]
    at = page("page_advisor.py")
    titles = [m for m in markdown(at) if m.startswith("#### ")]
    assert titles == [f"#### {i}. {f['title']}" for i, f in enumerate(findings, start=1)]
    saves = [m.value for m in at.metric if m.label == "Saves per request"]
    assert saves == ["200 ms", fmt.ms(findings[1]["saving_ms_per_request"])]
    assert [m.value for m in at.metric if m.label == "Saved over the window"] == ["4.0 s", "0.1 s"]
    ranking, parallel, cache = charts(at)
    assert ranking["data"][0]["x"] == pytest.approx([4.0, findings[1]["total_saving_s"]])
    assert parallel["data"][0]["y"] == [200.0]
    assert cache["data"][0]["y"] == pytest.approx([145.0, 150.0])  # TTFT with a cache hit, on a miss


def test_compare_two_models_says_each_difference_and_how_sure_it_is(page: OpenPage) -> None:
    """m1 serves /checkout (TTFT 100 + 5 i, E2E 1000 + 10 i, 20 traces), m2 /search (TTFT 50, E2E 500, 10 traces):
    B - A is exact, and with 20 and 10 samples no interval can be drawn."""
    at = page("page_compare.py", dimension="model", a="m1", b="m2")
    frame = at.dataframe[0].value
    found = {row["figure"]: row for row in frame.to_dict("records")}
    assert [found["TTFT p50"][k] for k in ("A", "B", "B - A", "95 % interval", "samples A / B", "verdict")] == [
        "148 ms", "50.0 ms", "-97.5 ms", "—", "20 / 10", "too few samples",  # 147.5
    ]  # fmt: skip
    assert [found["E2E p50"][k] for k in ("A", "B", "B - A")] == ["1,095 ms", "500 ms", "-595 ms"]
    assert found["ITL p50"]["B - A"] == "-14.5 ms"  # 19.5 against 5
    assert "No difference the data is sure of" in markdown(at)[0]
    [chart] = charts(at)
    bars = chart["data"][0]
    assert dict(zip(bars["y"], bars["x"], strict=True))["E2E p50"] == pytest.approx(-595.0)
    assert set(bars["marker"]["color"]) == {figures.VERDICT_COLOURS["too_few_samples"]}
    levers = {row["lever"]: row for row in at.dataframe[1].value.to_dict("records")}
    # m1's 20 first calls read 250 of 1,000 tokens from the cache on every other one: 12.5 %; m2's 10, 1,800 of 2,000
    hits = levers["cache hit rate"]
    assert [hits[k] for k in ("A", "B", "B - A", "samples A / B", "verdict")] == [
        "12.5%", "90.0%", "+77.5 pts", "20 / 10", "too few samples",  # an interval needs 20 calls a side
    ]  # fmt: skip
    assert [levers["speculative acceptance"][k] for k in ("A", "B", "verdict")] == ["—", "70.0%", "no data"]


def test_compare_needs_two_values(page: OpenPage) -> None:
    at = page("page_compare.py", dimension="release")  # the known spans carry no service.version
    assert "Fewer than two releases" in at.info[0].value and not at.dataframe


# --- no data, no budgets, no server ---------------------------------------------------
@pytest.mark.parametrize(
    ("page_file", "shown"),
    [
        ("", "No traces in the last 1 hour"),
        ("page_routes.py", "No routes in the last 1 hour"),
        ("page_traces.py", "No traces in the last 1 hour"),
    ],
)
def test_empty_states_say_how_to_send_data(
    empty: ServerProcess, monkeypatch: pytest.MonkeyPatch, page_file: str, shown: str
) -> None:
    [info] = opener(empty.url, monkeypatch)(page_file).info
    assert shown in info.value
    assert "agentlat.init(" in info.value and f"OTEL_EXPORTER_OTLP_ENDPOINT={empty.url}" in info.value


def test_without_budgets_or_findings(empty: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    open_page = opener(empty.url, monkeypatch)
    budgets, alerts = open_page("page_budgets.py").info
    assert "Budgets are not configured" in budgets.value and "--budgets FILE" in budgets.value
    assert alerts.value.startswith(NO_ALERTS)
    [advice] = open_page("page_advisor.py").success
    assert advice.value == NO_FINDINGS.format(window="the last 1 hour")


@pytest.mark.parametrize(
    "page_file", ["", "page_routes.py", "page_cache.py", "page_traces.py", "page_budgets.py", "page_advisor.py"]
)
def test_server_down(monkeypatch: pytest.MonkeyPatch, page_file: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    errors = opener(url, monkeypatch)(page_file).error
    assert errors and all(f"Cannot reach agentlat at {url}" in e.value for e in errors)
