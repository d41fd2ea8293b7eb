"""``GET /api/v1/compare`` on known traces in two releases, sent by the real OpenTelemetry SDK and exporter.

Release 1.0 (model m-1, prompt v3): 40 traces, i = 0..39, starting 50 min ago: E2E 1000 + 10 i ms, a model call
1-301 ms with TTFT 100 + i ms, then tool ``search`` for 200 ms. Release 2.0 (model m-2, prompt v4): 40 traces
starting 20 min ago, TTFT 150 + i, the tool 500 ms, E2E 1300 + 10 i. Each model call reads 1,000 input tokens,
800 of them from the cache in 1.0 and 200 in 2.0, and answers 100 + i output tokens in 1.0, 300 + i in 2.0.
So B - A is 50 ms of TTFT at every percentile, 300 ms of E2E and of the tool, and in the split 0 ms of model
time, 300 of tool time and 0 of orchestration (E2E - 300 - tool, 500 + 10 i on both sides); the hit rate 0.6
lower, 200 output tokens more a call. Every dimension (release, model, prompt version, before and after 35 min
ago) splits the same traces the same way, so each gives the same answer.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from agentlat.api.windows import iso
from agentlat.stream_stats import percentile
from tests.fake_llm_fixtures import export_to
from tests.servers import AGENTLAT, ServerProcess, wait_for
from tests.test_trace_analysis_e2e import FAST

MS = 1_000_000
MINUTE = 60 * 10**9
N = 40
RELEASES = {  # side: (version, model, prompt, minutes ago, TTFT base, tool ms, E2E base)
    "a": ("1.0", "m-1", "v3", 50, 100.0, 200.0, 1000.0),
    "b": ("2.0", "m-2", "v4", 20, 150.0, 500.0, 1300.0),
}
LEVERS = {"a": (800, 100), "b": (200, 300)}  # side: cache-read of 1,000 input tokens, output tokens base (+ i)


def _spans(side: str) -> list[ReadableSpan]:
    version, model, prompt, ago, ttft, tool_ms, e2e = RELEASES[side]
    cached, output = LEVERS[side]
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "shop", "service.version": version})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("compare-test")
    base = time.time_ns() - ago * MINUTE
    for i in range(N):
        start = base + i * 10 * MS * 1000  # one trace every 10 s
        route = {"agentlat.route": "/chat"}
        root = tracer.start_span("invoke_agent shop", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop", **route})  # fmt: skip
        inside = set_span_in_context(root)
        call = tracer.start_span(f"chat {model}", inside, SpanKind.CLIENT, start_time=start + MS, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.model": model,
            "gen_ai.response.time_to_first_chunk": (ttft + i) / 1000, "agentlat.prompt.version": prompt, **route,
            "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": cached,
            "gen_ai.usage.output_tokens": output + i,
        })  # fmt: skip
        call.end(end_time=start + 301 * MS)
        search = tracer.start_span("execute_tool search", context=inside, start_time=start + 301 * MS, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", **route})  # fmt: skip
        search.end(end_time=start + 301 * MS + int(tool_ms * MS))
        root.end(end_time=start + int((e2e + 10 * i) * MS))
    provider.shutdown()
    return list(memory.get_finished_spans())


@contextlib.contextmanager
def two_releases(workdir: Path) -> Iterator[ServerProcess]:
    """A real collector holding both releases' traces, analysed."""
    proc = ServerProcess(workdir, extra_env=FAST).start()
    try:
        export_to(proc, _spans("a") + _spans("b"))

        def analysed() -> bool:
            rows = proc.get("/api/v1/breakdown", group_by="route", window="2h", source="spans").json()["rows"]
            return bool(rows) and rows[0]["traces"] == 2 * N

        wait_for(analysed, timeout=60)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with two_releases(tmp_path_factory.mktemp("compare")) as proc:
        yield proc


def _p(values: list[float], level: float) -> float:
    return percentile(sorted(values), level)


TTFT = {side: [r[4] + i for i in range(N)] for side, r in RELEASES.items()}
E2E = {side: [r[6] + 10 * i for i in range(N)] for side, r in RELEASES.items()}


def _asks() -> dict[str, dict[str, str]]:
    at = iso(time.time_ns() - 35 * MINUTE)
    return {
        "release": {"a": "1.0", "b": "2.0"},
        "model": {"a": "m-1", "b": "m-2"},
        "prompt": {"a": "v3", "b": "v4"},
        "time": {"at": at},
    }


def _differences(comparison: dict[str, Any]) -> dict[str, tuple[float | None, str]]:
    return {d["statistic"]: (d["difference"], d["status"]) for d in comparison["differences"]}


@pytest.mark.parametrize("dimension", ["release", "model", "prompt", "time"])
def test_two_sides_differ_by_what_was_timed(server: ServerProcess, dimension: str) -> None:
    response = server.get("/api/v1/compare", dimension=dimension, window="2h", route="/chat", **_asks()[dimension])
    assert response.status_code == 200, response.text
    body = response.json()
    ttft, e2e = body["metrics"]["ttft"], body["metrics"]["e2e"]
    for side in "ab":
        assert (ttft[side]["count"], e2e[side]["count"]) == (N, N)
        assert ttft[side]["p50"] == pytest.approx(_p(TTFT[side], 0.5))
        assert e2e[side]["p99"] == pytest.approx(_p(E2E[side], 0.99))
    # 40 a side: enough for p50's interval (30), too few for p95's (200) and p99's (1,000)
    assert _differences(ttft) == {
        "p50": (pytest.approx(50.0), "slower"), "p95": (pytest.approx(50.0), "too_few_samples"),
        "p99": (pytest.approx(50.0), "too_few_samples"),
    }  # fmt: skip
    [p50] = [d for d in ttft["differences"] if d["statistic"] == "p50"]
    assert 0 < p50["low"] <= 50.0 <= p50["high"]
    assert all(d["low"] is None and d["high"] is None for d in ttft["differences"][1:])
    assert _differences(e2e)["p50"] == (pytest.approx(300.0), "slower")
    assert body["metrics"]["itl"]["a"]["count"] == 0 and _differences(body["metrics"]["itl"])["p50"] == (
        None,
        "no_data",
    )
    split = {part: _differences(c)["mean"] for part, c in body["split"].items()}
    assert split == {
        "model": (pytest.approx(0.0, abs=1e-6), "no_clear_change"), "tool": (pytest.approx(300.0), "slower"),
        "orchestration": (pytest.approx(0.0, abs=1e-6), "no_clear_change"),
    }  # fmt: skip
    assert body["split"]["tool"]["a"]["mean"] == pytest.approx(200.0)
    assert _differences(body["tools"]["search"])["p50"] == (pytest.approx(300.0), "slower")
    assert body["min_samples"] == {"p50": 30, "p95": 200, "p99": 1000, "mean": 30}
    levers = body["levers"]
    hits = levers["cache_hit_rate"]  # 800 of 1,000 tokens against 200: -0.6, from 40 calls a side
    assert (hits["unit"], hits["statistic"], hits["a"], hits["b"]) == (
        "ratio", "ratio", {"count": N, "value": pytest.approx(0.8)}, {"count": N, "value": pytest.approx(0.2)},
    )  # fmt: skip
    assert (hits["difference"], hits["status"]) == (pytest.approx(-0.6), "lower")
    assert hits["low"] == pytest.approx(-0.6) and hits["high"] == pytest.approx(-0.6)  # every call alike: no spread
    output = levers["output_tokens"]  # 100 + i against 300 + i: +200 a call
    assert (output["a"]["value"], output["difference"], output["status"]) == (
        pytest.approx(119.5), pytest.approx(200.0), "higher",
    )  # fmt: skip
    assert levers["spec_acceptance"]["status"] == "no_data"  # no call proposed draft tokens
    serial = levers["serial_tools_ms"]  # one tool a trace: nothing to run in parallel on either side
    assert (serial["a"]["count"], serial["difference"], serial["status"]) == (N, 0.0, "no_clear_change")
    assert levers["dispatch_delay_ms"]["status"] == "no_data"  # no streamed tool calls


def test_a_side_with_no_spans_has_no_figures(server: ServerProcess) -> None:
    body = server.get("/api/v1/compare", dimension="release", a="1.0", b="9.9", window="2h").json()
    ttft = body["metrics"]["ttft"]
    assert (ttft["a"]["count"], ttft["b"]["count"], ttft["b"]["p50"]) == (N, 0, None)
    assert {d["status"] for d in ttft["differences"]} == {"no_data"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dimension": "colour", "a": "x", "b": "y"}, "dimension='colour': choose from"),
        ({"dimension": "release", "a": "1.0"}, "give a= and b=, different"),
        ({"dimension": "release", "a": "1.0", "b": "1.0"}, "give a= and b=, different"),
        ({"dimension": "time"}, "give at=, not a= or b="),
        ({"dimension": "time", "at": "2001-01-01T00:00:00Z"}, "must fall inside the window"),
        ({"dimension": "time", "at": "soon"}, "at='soon': expected a time"),
    ],
)
def test_a_question_it_cannot_answer_gets_a_clear_error(server: ServerProcess, params: dict, message: str) -> None:
    response = server.get("/api/v1/compare", **params)
    assert response.status_code == 400 and message in response.json()["error"]["message"], response.text


def test_docs_list_the_route() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "`GET /api/v1/compare`" in readme


def _agentlat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTLAT, *args], capture_output=True, text=True, timeout=120)


def test_the_cli_prints_each_difference_and_the_apis_answer_as_json(server: ServerProcess) -> None:
    ask = ["compare", "--release", "1.0", "2.0", "--route", "/chat", "--window", "2h", "--api", server.url]
    result = _agentlat(*ask)
    assert result.returncode == 0, result.stderr
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("│")}  # fmt: skip
    assert rows["TTFT p50"][:3] == ["120 ms", "170 ms", "+50.0 ms"]  # 119.5 and 169.5, as the dashboard rounds
    assert rows["TTFT p50"][4:] == ["40 / 40", "slower"]
    assert rows["TTFT p95"][3:] == ["—", "40 / 40", "too few samples"]
    assert rows["tool time (mean a trace)"][:3] == ["200 ms", "500 ms", "+300 ms"]
    assert rows["model time (mean a trace)"][2:] == ["±0.00 ms", "±0.00 ms to ±0.00 ms", "40 / 40", "no clear change"]
    assert rows["tool search p50"][2] == "+300 ms"
    assert rows["cache hit rate"] == ["80.0%", "20.0%", "-60.0 pts", "-60.0 pts to -60.0 pts", "40 / 40", "lower"]
    assert rows["output tokens (a call)"][:3] == ["119.5", "319.5", "+200.0"]
    assert rows["output tokens (a call)"][5] == "higher"
    assert rows["speculative acceptance"] == ["—", "—", "—", "—", "0 / 0", "no data"]
    as_json = json.loads(_agentlat(*ask, "--json").stdout)
    served = server.get("/api/v1/compare", dimension="release", a="1.0", b="2.0", route="/chat", window="2h").json()
    assert {**as_json, "window": None} == {**served, "window": None}  # the same answer, a moment apart
    wrong = _agentlat("compare", "--release", "1.0", "2.0", "--model", "x", "y", "--api", server.url)
    assert wrong.returncode == 2 and "give exactly one of --release A B, --model A B" in wrong.stderr


def test_the_values_there_are_to_compare_come_first_seen_first(server: ServerProcess) -> None:
    found = {}
    for dimension in ("release", "model", "prompt"):
        body = server.get("/api/v1/compare/values", dimension=dimension, window="2h", route="/chat").json()
        found[dimension] = [(v["value"], v["spans"]) for v in body["values"]]
        first, second = body["values"]
        assert first["first_seen"] < first["last_seen"] < second["first_seen"] < second["last_seen"]
    assert found == {
        "release": [("1.0", 3 * N), ("2.0", 3 * N)],  # the agent, model and tool spans of each trace
        "model": [("m-1", N), ("m-2", N)],
        "prompt": [("v3", N), ("v4", N)],
    }
    wrong = server.get("/api/v1/compare/values", dimension="time")
    assert wrong.status_code == 400 and "choose from ['release', 'model', 'prompt']" in wrong.json()["error"]["message"]
