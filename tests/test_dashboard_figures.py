"""The dashboard's pure parts: number formats, budget lookups and colours, URL windows, the
plotly figure builders and the tables pages build from API answers (read into the query API's
models, as the client reads them), and the client's errors."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, get_origin

import pytest
from pydantic import ValidationError

from agentlat.api.client import ApiClient, ApiError, Call
from agentlat.api.models import (
    AlertEvent,
    AlertRule,
    BreakdownRow,
    BudgetsResponse,
    DimensionsResponse,
    Finding,
    HeatmapResponse,
    PercentilesResponse,
    TimeseriesPoint,
    TraceAnalysis,
    TraceResponse,
    TracesResponse,
    VersionSeen,
)
from agentlat.api.windows import TimeRangeError
from agentlat.cli.dashboard import streamlit_command
from agentlat.dashboard import figures, fmt, ui
from agentlat.dashboard.budgets import LEVEL_COLOURS, NEUTRAL, BudgetBook, colour, level
from agentlat.dashboard.page_advisor import evidence_table
from agentlat.dashboard.page_budgets import records
from agentlat.dashboard.page_routes import cell_styles, table
from agentlat.dashboard.page_traces import dispatch_what_if, what_if
from agentlat.dashboard.state import Scope, describe_window, is_window, previous_window, step

WINDOW = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
BUDGETS = BudgetsResponse.model_validate({
    "file": "budgets.yaml", "type": None, "primary": None, "secondary": None, "service": "shop",
    "window": {"length": "1h", **WINDOW}, "status": "breach",
    "counts": {"pass": 0, "breach": 1, "insufficient": 1}, "min_samples": {"p50": 30, "p95": 10, "p99": 10},
    "thresholds": {
        "default": {"e2e": {"p50": 2000.0, "p95": 3000.0}},
        "routes": {"/checkout": {"e2e": {"p50": 1000.0, "p95": None}, "ttft": {"p95": 150.0}}},
        "agents": {},
    },
    "results": [
        {"dimension": "route", "name": "/checkout", "source": "route", "metric": "ttft", "percentile": "p95",
         "budget": 150.0, "actual": 190.25, "unit": "ms", "count": 20, "min_samples": 10, "status": "breach",
         "line": 9},
        {"dimension": "route", "name": "/search", "source": "default", "metric": "e2e", "percentile": "p50",
         "budget": 2000.0, "actual": None, "unit": "ms", "count": 0, "min_samples": 30, "status": "insufficient",
         "line": 5},
    ],
})  # fmt: skip


@pytest.mark.parametrize(
    ("value", "text"),
    [(1234.4, "1,234 ms"), (100.0, "100 ms"), (56.75, "56.8 ms"), (0.4249, "0.42 ms"), (None, "—"), (math.nan, "—")],
)
def test_ms(value: float | None, text: str) -> None:
    assert fmt.ms(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0 s"), (45, "45 s"), (89, "89 s"), (90, "2 min"), (600.4, "10 min"), (5399, "90 min"), (5400, "1.5 h"),
     (7200, "2 h"), (172_799, "48 h"), (172_800, "2 d"), (302_400, "3.5 d")],
)  # fmt: skip
def test_duration(seconds: float, text: str) -> None:
    assert fmt.duration(seconds) == text


def test_share_and_change() -> None:
    assert (fmt.share(0.125), fmt.share(None)) == ("12.5%", "—")
    # only nothing is 0.0% and only everything 100.0%: a part that is not zero never rounds away
    assert [fmt.share(v) for v in (0.0, 0.0004, 0.0005, 0.9994, 0.9995, 0.99999, 1.0)] == [
        "0.0%", "<0.1%", "0.1%", "99.9%", ">99.9%", ">99.9%", "100.0%",
    ]  # fmt: skip
    assert (fmt.saving(410.0), fmt.saving(None)) == ("-410 ms", "—")  # a decrease, read as a fall
    assert fmt.utc_time("2025-01-02T13:45:07.123456789Z") == "2025-01-02 13:45:07 UTC"
    assert fmt.change(1095.0, 900.0) == "+195 ms (+21.7%)"
    assert fmt.change(80.0, 100.0) == "-20.0 ms (-20.0%)"  # ASCII minus: Streamlit reads it as a fall
    assert fmt.change(5.0, 0.0) == "+5.00 ms" and fmt.change(None, 1.0) is None


def test_budget_lookup_prefers_the_route_and_honours_dropped_defaults() -> None:
    book = BudgetBook(BUDGETS)
    assert book and not BudgetBook()
    assert book.budget_ms("/checkout", "e2e", "p50") == 1000.0
    assert book.budget_ms("/checkout", "e2e", "p95") is None  # dropped for this route
    assert book.budget_ms("/search", "e2e", "p95") == 3000.0  # the default
    assert book.budget_ms("", "e2e", "p50") == 2000.0  # all routes: the default
    assert book.budget_ms("", "ttft", "p95") is None  # no default for TTFT: neutral
    assert book.budget_ms("/checkout", "ttft", "p95", service="other") is None  # the file budgets "shop"
    assert book.level(1095.0, "/checkout", "e2e", "p50") == "breach"
    assert book.level(1000.0, "/checkout", "e2e", "p50") == "ok"
    assert book.level(10.0, "/checkout", "itl", "p50") is None


def test_levels_and_colours() -> None:
    assert (level(None, 1.0), level(1.0, None), level(2.0, 1.0)) == (None, None, "breach")
    assert (colour("ok"), colour("breach"), colour(None)) == (LEVEL_COLOURS["ok"], LEVEL_COLOURS["breach"], NEUTRAL)
    [breach, insufficient] = BUDGETS.results
    assert (breach.name, breach.actual, breach.status) == ("/checkout", 190.25, "breach")
    assert (insufficient.actual, insufficient.source) == (None, "default")


def test_windows() -> None:
    """The query API's grammar (agentlat.api.windows): what it takes, the dashboard takes."""
    assert previous_window("1h", 10_000) == (10_000 - 7200, 10_000 - 3600)
    assert previous_window("90s", 10_000) == (10_000 - 180, 10_000 - 90)
    assert describe_window("1h") == "the last 1 hour" and describe_window("24h") == "the last 24 hours"
    assert describe_window("1s") == "the last 1 second"
    assert (step("24h"), step("2h"), step("90s"), step("30d")) == ("15m", "1m", "1m", "6h")
    assert is_window("7d") and not is_window("soon") and not is_window("0m")
    with pytest.raises(TimeRangeError, match="window='soon': expected a number and a unit"):
        previous_window("soon", 10_000)
    with pytest.raises(TimeRangeError, match="window='soon'"):
        describe_window("soon")
    assert Scope("1h", "", "/a").link(trace="t", sort="") == {"window": "1h", "route": "/a", "trace": "t"}


def test_calls_and_errors() -> None:
    assert Call.of("/traces", sort="slowest", route="", limit=5, tool=None).params == (
        ("limit", "5"),
        ("sort", "slowest"),
    )
    error = pickle.loads(pickle.dumps(ApiError(404, "no budgets", "/api/v1/budgets", "http://h:1")))
    assert (error.status, error.message, str(error)) == (404, "no budgets", "/api/v1/budgets answered 404: no budgets")
    down = pickle.loads(pickle.dumps(ApiError(0, "connection refused", "/api/v1/groups", "http://h:1")))
    assert down.status == 0 and str(down).startswith("cannot reach agentlat at http://h:1 (connection refused); ")
    with ApiClient("http://127.0.0.1:9/") as client:  # nothing listens on port 9
        [answer] = client.fetch([Call.of("/groups", window="1h")])
    assert isinstance(answer, ApiError) and (answer.status, answer.path) == (0, "/api/v1/groups")


# What the fake server below answers, by path: a traces list with a column the store added (rows keep
# extras), a groups answer whose count is text, and a percentiles answer with keys no version has (at the top
# and in a part: what a newer server may add).
ODD_ANSWERS = {
    "/api/v1/traces": {"window": WINDOW, "traces": [
        {"trace_id": "ab" * 16, "start_ns": 1, "has_root": True, "duration_ns": 2_000_000, "root_name": "r",
         "service": "shop", "route": "/a", "agent": "x", "span_count": 3, "model_calls": 1, "tool_calls": 1,
         "errors": 0, "start": "2026-01-01T00:00:00Z", "duration_ms": 2.0, "new_column": 7}]},
    "/api/v1/groups": {"window": WINDOW, "filters": {}, "group_by": ["route"],
                       "rows": [{"group": {"route": "/a"}, "count": 3}, {"group": {"route": "/b"}, "count": "many"}]},
    "/api/v1/percentiles": {"metric": "e2e", "unit": "ms", "description": "", "source": "spans",
                            "window": {**WINDOW, "zone": "UTC"}, "filters": {}, "group_by": [], "rows": [],
                            "colour": "blue"},
}  # fmt: skip


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 that answers ``ODD_ANSWERS`` (and text for any other path)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            body = json.dumps(ODD_ANSWERS[path]).encode() if path in ODD_ANSWERS else b"<html>a proxy</html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_answers_are_models_that_pickle(odd_server: str) -> None:
    """The dashboard caches answers with st.cache_data, which pickles them."""
    with ApiClient(odd_server) as client:
        [answer] = client.fetch([Call.of("/traces", window="1h")])
    assert isinstance(answer, TracesResponse) and answer.traces[0].duration_ms == 2.0
    assert answer.traces[0].model_extra == {"new_column": 7}
    assert pickle.loads(pickle.dumps(answer)) == answer


def test_an_answer_that_does_not_fit_its_model_is_an_api_error(odd_server: str) -> None:
    with ApiClient(odd_server) as client:
        groups, percentiles, text = client.fetch(
            [Call.of("/groups"), Call.of("/percentiles", metric="e2e"), Call.of("/traces/" + "ab" * 16)]
        )
        with pytest.raises(ApiError, match=r"does not fit GroupsResponse at rows\.1\.count"):
            client.get("/api/v1/groups")  # the command line's reads too
    assert isinstance(groups, ApiError) and (groups.status, groups.path) == (200, "/api/v1/groups")
    assert str(groups).startswith(
        "/api/v1/groups answered 200: the answer does not fit GroupsResponse at rows.1.count: Input should be a "
        "valid integer, unable to parse string as an integer (got 'many'); the server runs another version of "
        "agentlat than this client ("
    )
    assert str(groups).endswith("): run the same version on both")
    assert isinstance(percentiles, PercentilesResponse) and percentiles.model_dump() == {
        "metric": "e2e", "unit": "ms", "description": "", "source": "spans", "window": WINDOW, "filters": {},
        "group_by": [], "rows": [],
    }  # fmt: skip
    with pytest.raises(ValidationError, match="colour"):  # what the server checks its own answers against
        PercentilesResponse.model_validate(ODD_ANSWERS["/api/v1/percentiles"])
    assert isinstance(text, ApiError) and text.message == "not JSON: '<html>a proxy</html>'"
    assert pickle.loads(pickle.dumps(groups)).message == groups.message


def test_streamlit_command_binds_loopback() -> None:
    command = streamlit_command(8599)
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("dashboard/app.py")
    pairs = dict(zip(command[5::2], command[6::2], strict=False))
    assert pairs["--server.address"] == "127.0.0.1" and pairs["--server.port"] == "8599"
    assert pairs["--server.headless"] == "true" and pairs["--browser.gatherUsageStats"] == "false"
    assert pairs["--server.fileWatcherType"] == "none" and pairs["--server.runOnSave"] == "false"
    assert pairs["--client.showErrorLinks"] == "false"


def test_the_browser_code_preloaded_is_in_the_installed_streamlit() -> None:
    """A Streamlit upgrade that renames its chart or table chunks must fail here, not silently stop preloading."""
    chunks = ui.lazy_chunks()
    assert [name.split(".")[0] for name in chunks] == ["PlotlyChart", "DataFrame"]
    assert all(name.endswith(".js") for name in chunks)


def test_each_script_run_is_logged_on_request(tmp_path, monkeypatch) -> None:
    log = tmp_path / "runs.jsonl"
    ui.log_run("overview", 100.0, 100.5)  # not asked for: nothing written
    assert not log.exists()
    monkeypatch.setenv(ui.TIMINGS_ENV, str(log))
    ui.log_run("overview", 100.0, 100.5)
    ui.log_run("routes", 200.0, 200.25)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["page"], r["start"], r["sidebar"], r["fetch_ms"]) for r in runs] == [
        ("overview", 100.0, 100.5, 0.0),
        ("routes", 200.0, 200.25, 0.0),
    ]
    assert all(r["end"] >= r["sidebar"] for r in runs)


# --- figures --------------------------------------------------------------------------
def stats(mean: float) -> dict[str, float | int]:
    return {"count": 10, "p50": mean, "p95": mean, "p99": mean, "mean": mean}


def at(e2e: float, model: float, tool: float, traces: int = 2) -> dict[str, float | int]:
    return {"traces": traces, "e2e": e2e, "model": model, "tool": tool, "orchestration": e2e - model - tool}


BREAKDOWN = [
    BreakdownRow.model_validate(row)
    for row in (
        {"group": {"route": "/a"}, "e2e": stats(1000.0), "model": stats(600.0), "tool": stats(300.0),
         "orchestration": stats(100.0), "traces": 10, "share": {"model": 0.6, "tool": 0.3, "orchestration": 0.1},
         "at": {"p50": at(1000.0, 600.0, 300.0), "p95": at(3000.0, 600.0, 2399.5, 1),
                "p99": at(9000.0, 600.0, 8399.0)}},
        {"group": {"route": "/b"}, "e2e": stats(200.0), "model": stats(200.0), "traces": 10,  # rollups without tools
         "share": {"model": 1.0, "tool": 0.0, "orchestration": 0.0}},  # no split per percentile: the mean
    )
]  # fmt: skip


def test_split_bars_stack_the_parts_of_the_p50_p95_p99_requests() -> None:
    fig = figures.split_bars(BREAKDOWN)
    bars = {t.name: t for t in fig.data}
    assert list(bars) == ["model", "tool", "orchestration"] and fig.layout.barmode == "stack"
    assert [list(level) for level in bars["model"].y] == [["/a", "/a", "/a", "/b"], ["p50", "p95", "p99", "mean"]]
    assert fig.layout.yaxis.autorange == "reversed"  # the API's order (most requests first), p50 to p99, top down
    assert bars["model"].x == (600.0, 600.0, 600.0, 200.0) and bars["tool"].x == (300.0, 2399.5, 8399.0, 0.0)
    assert bars["orchestration"].x == (100.0, 0.5, 1.0, 0.0)
    # shares never round a part away: 0.5 ms of 3 s is "<0.1%", not "0.0%", and no other part reads 100%
    assert bars["orchestration"].text == ("100 ms · 10.0%", "0.50 ms · <0.1%", "1.00 ms · <0.1%", "")
    assert bars["model"].text == ("600 ms · 60.0%", "600 ms · 20.0%", "600 ms · 6.7%", "200 ms · 100.0%")
    assert bars["tool"].text[3] == "" and bars["tool"].marker.color == figures.COLOURS["tool"]
    # labels never rotate nor shrink below a legible size: one that does not fit is hidden, and in the hover
    assert {t.textangle for t in fig.data} == {0} and {t.textposition for t in fig.data} == {"inside"}
    assert (fig.layout.uniformtext.minsize, fig.layout.uniformtext.mode) == (figures.MIN_TEXT, "hide")
    assert bars["orchestration"].hovertext[1] == "/a · p95 request<br>orchestration: 0.50 ms (<0.1%) of 3,000 ms"
    assert bars["tool"].hovertext[0] == "/a · p50 requests (mean of 2)<br>tool: 300 ms (30.0%) of 1,000 ms"


CHART_WINDOW = ("2025-12-31T23:00:00Z", "2026-01-01T00:10:00Z")


def test_percentile_lines_and_budget_lines() -> None:
    points = [TimeseriesPoint(t="2026-01-01T00:00:00Z", count=3, p50=1.0, p95=2.0, p99=3.0)]
    fig = figures.over_time(points, "TTFT", CHART_WINDOW, 300, {"p95": 150.0})
    assert fig.layout.xaxis.range == CHART_WINDOW  # the whole window
    assert [(t.name, t.y) for t in fig.data] == [("p50", (1.0,)), ("p95", (2.0,)), ("p99", (3.0,))]
    assert fig.data[0].x == (datetime(2026, 1, 1, 0, 2, 30, tzinfo=UTC),)  # the middle of its 5 minutes
    assert [list(c) for c in fig.data[2].customdata] == [["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"]]
    assert [s.y0 for s in fig.layout.shapes] == [150.0]
    assert fig.layout.annotations[0].text == "p95 budget 150 ms"
    assert "yaxis2" not in fig.layout  # no distribution: no second row


def _seen(value: str, first: str, new: bool = True, service: str = "bot") -> VersionSeen:
    return VersionSeen(dimension="release", service=service, value=value, first_seen=first, last_seen=first, new=new)


def test_deploy_markers_are_releases_new_in_the_window_those_a_minute_apart_one_line() -> None:
    versions = [
        _seen("1.3", "2025-12-31T20:00:00Z", new=False),  # began before the window: no marker
        _seen("1.4.1", "2025-12-31T23:20:00Z"),
        _seen("2.0", "2025-12-31T23:20:30Z", service="api"),  # 30 s later: the same marker
        _seen("1.4.2", "2025-12-31T23:40:00Z"),
    ]
    markers = figures.deploy_markers(versions)
    assert [(m.at, m.label) for m in markers] == [
        ("2025-12-31T23:20:00Z", "release 1.4.1, 2.0"), ("2025-12-31T23:40:00Z", "release 1.4.2"),
    ]  # fmt: skip
    assert markers[0].hover.split("<br>") == [
        "release 1.4.1 of bot first seen 2025-12-31 23:20:00 UTC",
        "release 2.0 of api first seen 2025-12-31 23:20:30 UTC",
    ]
    points = [TimeseriesPoint(t="2026-01-01T00:00:00Z", count=3, p50=1.0, p95=2.0, p99=3.0)]
    fig = figures.over_time(points, "TTFT", CHART_WINDOW, 300, markers=markers)
    lines = [s for s in fig.layout.shapes if s.line.dash == "dot"]
    assert [(s.x0, s.yref, s.y0, s.y1) for s in lines] == [
        (datetime(2025, 12, 31, 23, minute, tzinfo=UTC), "paper", 0, 1) for minute in (20, 40)
    ]
    assert [a.text for a in fig.layout.annotations] == ["release 1.4.1, 2.0", "release 1.4.2"]
    many = [_seen(f"0.{i}", f"2025-12-31T23:{i:02d}:00Z") for i in range(20)]
    assert [m.label for m in figures.deploy_markers(many)] == [f"release 0.{i}" for i in range(8, 20)]  # the newest 12


def test_distribution_cells_on_the_same_time_axis() -> None:
    points = [TimeseriesPoint(t=t, count=12, p50=1.0, p95=2.0, p99=3.0) for t in ("2026-01-01T00:00:00Z",
              "2026-01-01T00:10:00Z")]  # fmt: skip
    body = HeatmapResponse.model_validate({
        "metric": "e2e", "unit": "ms", "step_seconds": 600, "filters": {},
        "window": {"start": "2025-12-31T23:50:05Z", "end": "2026-01-01T00:20:00Z"},
        "buckets": [{"lower_ms": 500, "upper_ms": 630}, {"lower_ms": 630, "upper_ms": 800},
                    {"lower_ms": 1e6, "upper_ms": None}],
        "columns": [{"t": "2026-01-01T00:00:00Z", "count": 12, "exact": True, "counts": [2, 0, 10]},
                    {"t": "2026-01-01T00:10:00Z", "count": 200, "exact": False, "counts": [0, 200, 0]}],
    })  # fmt: skip
    fig = figures.over_time(points, "E2E", (body.window.start, body.window.end), 600, None, body)
    *_, cells, markers = fig.data
    # every interval overlapping the window, the partial first one included, as columns; an empty cell blank
    assert [x.minute for x in cells.x] == [55, 5, 15] and [list(r) for r in cells.z] == [
        [None, 2, None], [None, None, 200], [None, 10, None]]  # fmt: skip
    assert fig.layout.yaxis2.ticktext == ("500 ms to 630 ms", "630 ms to 800 ms", "≥ 1,000,000 ms")
    assert (cells.xaxis, markers.xaxis) == ("x2", "x2") and fig.layout.xaxis.matches == "x2"  # one time axis
    assert markers.y == (0, 2, 1) and list(markers.customdata[2]) == ["2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z"]
    assert markers.hovertext[0] == (
        "00:00 to 00:10 UTC<br>E2E 500 ms to 630 ms<br>2 requests<br>click for the slowest traces of this interval"
    )
    assert "200 estimated requests" in markers.hovertext[2]


def span(span_id: str, parent: str, name: str, start: int, ms: int, role: str = "other", **extra: Any) -> dict:
    derived = {"Role": role, **extra.pop("derived", {})}
    return {"trace_id": "t", "span_id": span_id, "parent_span_id": parent, "name": name, "kind": "Internal",
            "service": "shop", "start_ns": start * 1_000_000, "duration_ns": ms * 1_000_000,
            "status_code": extra.pop("status", "Unset"), "status_message": "",
            "attributes": extra.pop("attributes", {}), "resource": {}, "scope_name": "", "scope_version": "",
            "flags": [], "start": "2026-01-01T00:00:00Z", "duration_ms": float(ms), "events": [],
            "derived": derived}  # fmt: skip


def analysis(**fields: Any) -> dict[str, Any]:
    """A trace's analysis as ``/traces/{id}`` answers it: ``fields`` over zeros and empty values."""
    zero = {int: 0, float: 0.0, bool: False, str: ""}  # lists empty, the optional numbers null
    blank = {name: zero.get(info.annotation, [] if get_origin(info.annotation) is list else None)
             for name, info in TraceAnalysis.model_fields.items()}  # fmt: skip
    return {**blank, "trace_id": "t", "analysed_at": "2026-01-01T00:00:01Z", **fields}


TRACE = TraceResponse.model_validate(
    {
        "trace_id": "t",
        "analysis": analysis(
            start_ns=0,
            critical_path=["r", "m", "t2"],
            segments=[
                {"span_id": "m", "start_ns": 0, "end_ns": 100_000_000, "category": "model", "phase": "prefill"},
                {"span_id": "t2", "start_ns": 100_000_000, "end_ns": 300_000_000, "category": "tool", "phase": ""},
            ],
        ),
        "spans": [
            span("t1", "r", "execute_tool a", 100, 50, "tool", status="Error"),
            span("r", "", "invoke_agent x", 0, 300, "agent"),
            span("m", "r", "chat m", 0, 100, "model", derived={"QueueMs": 10.0, "PrefillMs": 20.0, "DecodeMs": 70.0}),
            span("t2", "r", "execute_tool b", 100, 200, "tool"),
            span("p", "m2", "prefill", 400, 5, "model", attributes={"agentlat.phase": "prefill"}),
        ],
        "events": [],
    }
)


def test_waterfall_orders_the_tree_and_marks_the_critical_path() -> None:
    data = figures.waterfall_data(TRACE)
    # children by start time, the longer first on a tie; an orphan starts its own tree
    tree = ["invoke_agent x", "  chat m", "  execute_tool b", "  execute_tool a (error)", "prefill"]
    assert data.labels == ["critical path", *tree]
    strip = [(b.category, b.start_ms, b.length_ms) for b in data.bars if b.row == 0]
    assert strip == [("prefill", 0.0, 100.0), ("tool", 100.0, 200.0)]
    model = [(b.category, b.start_ms, b.length_ms, b.on_path) for b in data.bars if b.row == 2]
    assert model == [("model", 0.0, 100.0, True), ("queue", 0.0, 10.0, True), ("prefill", 10.0, 20.0, True),
                     ("decode", 30.0, 70.0, True)]  # fmt: skip
    assert [(b.category, b.on_path) for b in data.bars if b.row in (4, 5)] == [("tool", False), ("prefill", False)]


def test_waterfall_figure_fades_spans_off_the_path() -> None:
    fig = figures.waterfall(TRACE)
    tools = next(t for t in fig.data if t.name == "tool")
    assert tools.base == (100.0, 100.0, 100.0) and tools.x == (200.0, 200.0, 50.0)  # strip, b, a
    assert tools.marker.opacity == (1.0, 1.0, 0.35) and tools.marker.line.width == (0, 1.5, 0)
    assert fig.layout.barmode == "overlay" and {t.width for t in fig.data} == {0.7}
    ticks = fig.layout.yaxis.ticktext
    assert ticks[0].rstrip("\u00a0") == "critical\u00a0path" and len(set(map(len, ticks))) == 1  # one width
    assert ticks[2].startswith("\u00a0\u00a0chat\u00a0m")
    assert figures.tick_labels(["x" * 60])[0] == "x" * 47 + "…"


def _streamed_event(call_id: str, name: str, ready_s: float) -> dict[str, Any]:
    attributes = {"gen_ai.tool.call.id": call_id, "gen_ai.tool.name": name, "agentlat.tool_call.ready_at": str(ready_s)}
    return {"name": "agentlat.tool_call", "time_ns": round(ready_s * 1e9), "attributes": attributes}


def _dispatched(span_id: str, tool: str, call_id: str, ready_ms: int, delay_ms: float, **extra: Any) -> dict:
    return {"span_id": span_id, "tool": tool, "call_id": call_id, "model_span_id": "m", "ready_ns": ready_ms * 10**6,
            "delay_ms": delay_ms, "while_streaming": False, "on_critical_path": True, **extra}  # fmt: skip


# The model call m (10-1010 ms) streams A (arguments complete 300 ms into it) and B (600 ms); tool c only gave
# its own ready moment (900 ms since the trace started); a and b start after the message.
PLANNER = TraceResponse.model_validate({
    "trace_id": "t",
    "analysis": analysis(
        e2e_ms=2000.0,
        dispatch_saving_ms=410.0,
        dispatched=[_dispatched("a", "search", "A", 310, 710.0), _dispatched("b", "fetch", "B", 610, 410.0),
                    _dispatched("c", "sql", "C", 900, 5.0, while_streaming=True)],
        dispatch_groups=[{"model_span_id": "m", "span_ids": ["a", "b", "c"], "tools": ["search", "fetch", "sql"],
                          "saving_ms": 410.0, "on_critical_path": True}],
    ),
    "spans": [
        span("r", "", "invoke_agent planner", 0, 2000, "agent"),
        {**span("m", "r", "chat m", 10, 1000, "model"),
         "events": [_streamed_event("A", "search", 0.3), _streamed_event("B", "fetch", 0.6),
                    {"name": "gen_ai.choice", "time_ns": 0, "attributes": {}}]},
        span("a", "r", "execute_tool search", 1020, 400, "tool"),
    ],
    "events": [],
})  # fmt: skip


def test_waterfall_marks_where_streamed_tool_calls_were_ready() -> None:
    data = figures.waterfall_data(PLANNER)
    assert data.labels[2] == "  chat m"
    assert [(m.row, m.at_ms) for m in data.marks] == [(2, 310.0), (2, 610.0), (2, 900.0)]
    assert data.marks[0].hover == (
        "search A: arguments complete at +300 ms into the call<br>tool started 710 ms later, after the message ended"
    )
    assert data.marks[2].hover == "sql C: arguments complete<br>tool started 5.00 ms later, while the model streamed"
    fig = figures.waterfall(PLANNER)
    [ticks] = [t for t in fig.data if t.name == "arguments complete"]
    assert ticks.x == (310.0, 610.0, 900.0) and ticks.y == (2, 2, 2) and ticks.mode == "markers"
    assert [t for t in figures.waterfall(TRACE).data if t.name == "arguments complete"] == []  # nothing streamed


def test_dispatch_what_if_table() -> None:
    assert dispatch_what_if(PLANNER.analysis).values.tolist() == [
        ["search 710 ms, fetch 410 ms, sql 5.00 ms", "410 ms", "1,590 ms", "yes"]
    ]
    assert dispatch_what_if(TraceAnalysis.model_validate(analysis(e2e_ms=1.0))).empty


def test_dispatch_finding_evidence() -> None:
    evidence = {"streamed_tool_calls": 40, "dispatch_delay_p50_ms": 275.0, "dispatched_while_streaming": 0.25,
                "traces_that_would_gain": 20, "mean_saving_ms": 150.0}  # fmt: skip
    dispatch = finding("tool_dispatch", 150.0, evidence)
    assert figures.evidence_values(dispatch) == [("median dispatch delay", 275.0), ("E2E saved per request", 150.0)]
    assert evidence_table(dispatch).values.tolist() == [
        ["streamed tool calls", "40"],
        ["dispatch delay p50", "275 ms"],
        ["dispatched while streaming", "25.0%"],
        ["traces that would gain", "20"],
        ["mean saving", "150 ms"],
    ]


def finding(kind: str, saving_ms: float, evidence: dict[str, Any], route: str = "/a", requests: int = 10) -> Finding:
    return Finding(kind=kind, route=route, title=kind, lever="change it", evidence=evidence,
                   saving_ms_per_request=saving_ms, requests=requests,
                   total_saving_s=saving_ms * requests / 1000, applies_to=requests, applies_to_unit="requests",
                   saving_basis=f"{saving_ms:.0f} ms per request, averaged over all {requests} requests")  # fmt: skip


def test_budget_bars_and_evidence() -> None:
    fig = figures.budget_bars(BUDGETS.results)
    [bars] = fig.data
    assert bars.y == ("/checkout · ttft p95",) and bars.x == pytest.approx((190.25 / 150 * 100,))
    assert bars.marker.color == (LEVEL_COLOURS["breach"],)  # the verdict without data has no bar
    speculation = finding("speculative_decoding", 50.0, {"long_calls": 30, "decode_ms": 900.0, "assumed_speedup": 1.5})
    assert figures.evidence_values(speculation) == [("decode now", 900.0), ("with speculation (assumed)", 600.0)]
    assert figures.evidence(speculation).layout.title.text == "saves 50.0 ms per request"
    other = finding("new_rule", 1.0, {"wait_ms": 5, "calls": 3})
    assert figures.evidence_values(other) == [("wait_ms", 5.0)]
    ranking = figures.savings_ranking([finding("parallel_tools", 100.0, {}, requests=40)])
    assert ranking.data[0].y == ("/a · parallel tools",) and ranking.data[0].text == ("4.0 s",)


# --- page tables ----------------------------------------------------------------------
DIMENSIONS = DimensionsResponse.model_validate({
    "dimension": "route", "unit": "ms", "source": "rollups", "window": WINDOW, "filters": {"service": "shop"},
    "metrics": ["e2e", "itl"],
    "group_by": ["service"],
    "rows": [
        {"service": "shop", "name": "/checkout", "count": 20, "errors": 0, "error_rate": 0.0, "cache_hit_rate": 0.125,
         "spec_acceptance": None, "metrics": {"e2e": {"count": 20, "p50": 1095.0, "p95": 1180.5, "p99": 1188.1},
                                              "itl": {"count": 0, "p50": None, "p95": None, "p99": None}}},
        {"service": "web", "name": "/checkout", "count": 5, "errors": 0, "error_rate": 0.0, "cache_hit_rate": None,
         "spec_acceptance": None, "metrics": {"e2e": {"count": 5, "p50": 1095.0, "p95": 1180.5, "p99": 1188.1},
                                              "itl": {"count": 0, "p50": None, "p95": None, "p99": None}}},
    ],
})  # fmt: skip


def test_routes_table_and_budget_colours() -> None:
    frame = table(DIMENSIONS, Scope("1h"))
    # ITL has no samples and nothing reports speculation: no columns for them
    columns = ["route", "service", "requests", "cache hit", "error rate", "E2E p50", "E2E p95", "E2E p99", "traces"]
    assert list(frame.columns) == columns
    # one route of two services: two rows, each opening its own service's traces
    assert frame[["route", "service", "requests"]].values.tolist() == [
        ["/checkout", "shop", 20],
        ["/checkout", "web", 5],
    ]
    assert frame.loc[0, "traces"] == "traces?window=1h&service=shop&route=%2Fcheckout&sort=slowest"
    assert frame.loc[1, "traces"] == "traces?window=1h&service=web&route=%2Fcheckout&sort=slowest"
    styles = cell_styles(frame, DIMENSIONS, BudgetBook(BUDGETS))
    assert styles.loc[0, "E2E p50"] == f"color: {LEVEL_COLOURS['breach']}; font-weight: 600"
    assert (styles.loc[1] == "").all()  # the budgets file is service shop's: web's row stays neutral
    assert styles.loc[0, "E2E p95"] == "" and styles.loc[0, "E2E p99"] == ""  # dropped budget, no budget
    assert (cell_styles(frame, DIMENSIONS, BudgetBook()) == "").all().all()  # no budgets: neutral


def test_what_if_table() -> None:
    groups = [
        {"span_ids": ["1", "2"], "tools": ["a", "b"], "saving_ms": 200.0, "on_critical_path": True},
        {"span_ids": ["3", "4"], "tools": ["c", "d"], "saving_ms": 0.0, "on_critical_path": False},
    ]
    parallel = TraceAnalysis.model_validate(analysis(e2e_ms=1000.0, parallelisable=groups))
    assert what_if(parallel).values.tolist() == [
        ["a, b", "200 ms", "800 ms", "yes"],
        ["c, d", "0.00 ms", "1,000 ms", "no"],
    ]
    assert what_if(TraceAnalysis.model_validate(analysis(e2e_ms=1.0))).empty


def test_alert_records_read_as_people_write_them() -> None:
    rule = AlertRule.model_validate({
        "alert": "p99 drift", "severity": "warning", "type": "drift", "metric": "e2e", "percentile": "p99",
        "condition": "E2E p99 up 50%", "window": "1h", "by": ["route"], "match": {"route": "/chat"}, "for": "5m",
        "keep_firing_for": "0s", "min_samples": 20, "line": 3, "state": "inactive",
        "inactive": 1, "pending": 0, "firing": 0, "resolved": 0,
    })  # fmt: skip
    [row] = records([rule]).to_dict("records")
    assert list(row)[:3] == ["alert", "severity", "type"] and row["percentile"] == "p99"  # the API's keys, in order
    assert (row["by"], row["match"], row["for"]) == ("route", "route=/chat", "5m")
    event = AlertEvent.model_validate({
        "time": "2026-01-02T13:45:07.123456Z", "alert": "p99 drift", "severity": "warning",
        "labels": {"route": "/chat", "service": "shop"}, "from": "pending", "to": "firing", "value": None,
        "reference": 2.5, "count": 40, "summary": "",
    })  # fmt: skip
    [row] = records([event]).to_dict("records")
    assert (row["time"], row["labels"]) == ("2026-01-02 13:45:07 UTC", "route=/chat, service=shop")
    assert row["value"] is None  # the table shows the placeholder, a dash
    assert records([]).empty


def test_the_table_pages_imports_are_warmed_up_in_the_background() -> None:
    """The Overview does not import pandas or its Styler (~0.5 s); after a process's first page they are imported
    in the background, so the first switch to a table page does not wait for them."""
    script = textwrap.dedent(
        """
        import sys
        from agentlat.dashboard import page_overview, ui
        before = [name for name in ui.WARM_UP if name in sys.modules]
        ui.warm_up()
        ui.await_warm_up()
        print(before, [name for name in ui.WARM_UP if name in sys.modules])
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == f"[] {list(ui.WARM_UP)}"
