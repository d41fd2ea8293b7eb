"""``GET /api/v1/dimensions`` against known traces on a real server: counts, exact
percentiles, prompt-cache hit rate, speculative acceptance and error rate per route, agent,
model and tool."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.dashboard_data import (
    CHECKOUT_E2E,
    CHECKOUT_ITL,
    CHECKOUT_TTFT,
    FAST,
    checkout_trace,
    exact,
    ingest,
    start_known_server,
)
from tests.otlp_payloads import MS
from tests.servers import ServerProcess, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from start_known_server(tmp_path_factory.mktemp("dimensions"))


def rows(server: ServerProcess, dimension: str, **params: str) -> dict[str, dict]:
    response = server.get("/api/v1/dimensions", dimension=dimension, window="1h", **params)
    assert response.status_code == 200, response.text
    return {row["name"]: row for row in response.json()["rows"]}


def stats(values: list[float]) -> dict:
    return {"count": len(values), **{f"p{round(q * 100)}": pytest.approx(exact(values, q)) for q in (0.5, 0.95, 0.99)}}


def flat(value: float, count: int) -> dict:
    return {"count": count, "p50": value, "p95": value, "p99": value}


def test_routes(known: ServerProcess) -> None:
    found = rows(known, "route")
    assert list(found) == ["/checkout", "/search"]  # most requests first
    checkout, search = found["/checkout"], found["/search"]
    assert (checkout["count"], checkout["errors"], checkout["error_rate"]) == (20, 0, 0.0)
    assert checkout["cache_hit_rate"] == pytest.approx(2500 / 20000) and checkout["spec_acceptance"] is None
    assert checkout["metrics"] == {
        "e2e": stats(CHECKOUT_E2E),
        "ttft": stats(CHECKOUT_TTFT),
        "itl": stats(CHECKOUT_ITL),
        "model": flat(300.0, 40),
        "tool": flat(200.0, 40),
    }
    assert (search["count"], search["errors"], search["error_rate"]) == (10, 1, 0.1)
    assert search["cache_hit_rate"] == pytest.approx(0.9) and search["spec_acceptance"] == pytest.approx(0.7)
    # phase spans and the vLLM server span are not extra model calls
    assert search["metrics"]["model"] == flat(200.0, 10) and search["metrics"]["ttft"] == flat(50.0, 10)


def test_models_tools_and_agents(known: ServerProcess) -> None:
    models = rows(known, "model")
    assert models["m1"]["count"] == 40 and models["m1"]["metrics"]["ttft"] == stats(CHECKOUT_TTFT)
    assert models["m2"]["metrics"]["decode"] == flat(150.0, 10)
    assert models["m2"]["spec_acceptance"] == pytest.approx(0.7)
    tools = rows(known, "tool")
    assert {name: (r["count"], r["errors"], r["error_rate"]) for name, r in tools.items()} == {
        "inventory": (20, 0, 0.0),
        "payment": (20, 0, 0.0),
        "web_search": (10, 2, 0.2),
    }
    assert tools["web_search"]["metrics"] == {"tool": flat(250.0, 10)}
    agents = rows(known, "agent")
    assert agents["checkout"]["metrics"]["agent"] == stats(CHECKOUT_E2E)
    assert (agents["search"]["count"], agents["search"]["errors"]) == (10, 1)


def test_filters_and_rollups(known: ServerProcess) -> None:
    assert list(rows(known, "tool", route="/search")) == ["web_search"]
    assert rows(known, "route", service="elsewhere") == {}
    body = known.get("/api/v1/dimensions", dimension="tool", window="1h", source="rollups").json()
    assert body["source"] == "rollups"
    assert {r["name"]: r["metrics"]["tool"]["p95"] for r in body["rows"]} == pytest.approx(
        {"inventory": 200.0, "payment": 200.0, "web_search": 250.0}
    )
    assert known.get("/api/v1/dimensions", dimension="route", window="24h").json()["source"] == "rollups"


@pytest.mark.parametrize("dimension", ["route", "agent", "model", "tool"])
def test_the_summary_from_rollups_matches_the_exact_one(known: ServerProcess, dimension: str) -> None:
    """Counts, errors and token ratios from the rollup counters equal the exact ones; percentiles agree."""
    exact = rows(known, dimension, source="spans")
    rolled = wait_for(
        lambda: (found := rows(known, dimension, source="rollups")) and len(found) == len(exact) and found
    )
    assert list(rolled) == list(exact)
    for name, row in rolled.items():
        expected = exact[name]
        plain = ("count", "errors", "error_rate", "cache_hit_rate", "spec_acceptance")
        assert {k: row[k] for k in plain} == {k: _close(expected[k], 1e-9) for k in plain}, name
        for metric, got in row["metrics"].items():
            want = expected["metrics"][metric]
            assert got == {k: _close(v, 0.05) for k, v in want.items()}, (name, metric)
            assert got["count"] == want["count"]


def _close(value: float | None, rel: float) -> object:
    return None if value is None else pytest.approx(value, rel=rel)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"dimension": "provider"}, "dimension='provider'"),
        ({"dimension": "route", "source": "rollups", "role": "tool"}, "not kept in rollups"),
        ({"dimension": "route", "source": "sometimes"}, "source"),
        ({"dimension": "route", "window": "forever"}, "window='forever'"),
        ({"dimension": "route", "group_by": "model"}, "group_by='model'"),
    ],
)
def test_errors(known: ServerProcess, params: dict, fragment: str) -> None:
    response = known.get("/api/v1/dimensions", **params)
    assert response.status_code == 400 and fragment in response.json()["error"]["message"]


def test_rollups_not_computed_yet(tmp_path: Path) -> None:
    """Spans stored, their minutes not rolled up yet: the summary from rollups has no row for them yet
    (not an error), the exact one has it."""
    server = ServerProcess(tmp_path, extra_env={**FAST, "AGENTLAT_ROLLUP_SETTLE": "3600"}).start()
    try:
        ingest(server, checkout_trace(time.time_ns() - 60_000 * MS, 1000.0, 100.0, 10.0, 250))
        wait_for(lambda: rows(server, "tool", source="spans").get("payment"))
        assert "/checkout" not in rows(server, "route", source="rollups")
        exact = rows(server, "route", source="spans")["/checkout"]
        assert exact["count"] == 1 and exact["cache_hit_rate"] == 0.25
        assert exact["metrics"]["e2e"] == {"count": 1, "p50": 1000.0, "p95": 1000.0, "p99": 1000.0}
    finally:
        server.stop()


def test_a_route_of_two_services_is_two_rows_with_group_by_service(tmp_path: Path) -> None:
    """Without group_by a route's name merges every service serving it; with group_by=service each service has
    its row, from the spans and from the rollups alike."""
    server = ServerProcess(tmp_path, extra_env=FAST).start()
    try:
        base = time.time_ns() - 3 * 60_000 * MS
        spans = [span for i in range(3) for span in checkout_trace(base + i * 2000 * MS, 1000.0, 100.0, 10.0, 250)]
        spans += [replace(span, service="web") for span in checkout_trace(base, 2000.0, 300.0, 10.0, None)]
        ingest(server, spans)

        def by_service(source: str) -> dict[tuple[str, str], dict]:
            body = server.get("/api/v1/dimensions", dimension="route", group_by="service", window="1h", source=source)
            assert body.json()["group_by"] == ["service"]
            return {(r["service"], r["name"]): r for r in body.json()["rows"]}

        def analysed_everywhere() -> bool:  # the web trace analysed and rolled up, not only its spans stored
            found = [by_service(source).get(("web", "/checkout"), {}) for source in ("spans", "rollups")]
            return all(row and row["metrics"]["e2e"]["p50"] is not None for row in found)

        assert wait_for(analysed_everywhere, timeout=60)
        for source in ("spans", "rollups"):
            found = by_service(source)
            assert list(found) == [("shop", "/checkout"), ("web", "/checkout")], source  # most requests first
            assert found["shop", "/checkout"]["count"] == 3 and found["web", "/checkout"]["count"] == 1
            assert found["web", "/checkout"]["metrics"]["e2e"]["p50"] == 2000.0
            assert found["web", "/checkout"]["metrics"]["ttft"]["p99"] == 300.0
        merged = server.get("/api/v1/dimensions", dimension="route", window="1h").json()
        assert merged["group_by"] == [] and "service" not in merged["rows"][0]
    finally:
        server.stop()
