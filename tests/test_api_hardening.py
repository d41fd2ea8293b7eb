"""The query API against hostile input: clear 400s for bad times, bodies refused before they cost
memory or stall the event loop, and a schema-driven fuzz of every operation with no 5xx allowed."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from tests.budget_data import SERVICE, known_spans
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for
from tests.test_auth import bearer, create_key

MIB = 1024 * 1024
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
RULES = """\
receivers:
  team: {type: webhook, url: "http://127.0.0.1:9/never"}
rules:
  - {alert: Slow, type: threshold, metric: ttft, percentile: p95, threshold: 3600s, window: 5m}
"""
# Ten levels of YAML aliases: a 500-byte rules file whose value would print as 10^10 characters.
ALIASES = ", ".join(["&l0 [x,x,x,x,x,x,x,x,x,x]"] + [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)])
ACCEPTED = "expected a time from 1970-01-01T00:00:00Z to 2100-01-01T00:00:00Z"


class Guarded:
    """A server that requires keys, with a budgets file, alert rules and some data; ``admin`` is its key."""

    def __init__(self, server: ServerProcess, admin: str) -> None:
        self.server, self.admin = server, admin
        self.url = server.url

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, headers=bearer(self.admin), timeout=30)

    def post(self, path: str, key: str | None = "admin", **kwargs: Any) -> httpx.Response:
        headers = {**kwargs.pop("headers", {}), **(bearer(self.admin) if key else {})}
        return httpx.post(f"{self.url}{path}", headers=headers, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    workdir = tmp_path_factory.mktemp("guarded")
    rules = workdir / "alerts.yaml"
    rules.write_text(RULES)
    admin = create_key(workdir, "--admin", "--name", "hardening")
    env = {
        "AGENTLAT_REQUIRE_KEYS": "1",
        "AGENTLAT_RATE_LIMIT": "0",
        "AGENTLAT_BUDGETS": str(EXAMPLES / "budgets.yaml"),
        "AGENTLAT_ALERTS": str(rules),
    }
    server = ServerProcess(workdir, extra_env=env).start()
    g = Guarded(server, admin)
    assert g.post("/v1/traces", content=otlp_protobuf(known_spans()), headers=PROTOBUF).status_code == 200
    wait_for(lambda: g.get("/api/v1/traces", service=SERVICE, window="2h").json()["traces"])
    yield g
    server.stop()


# --- time parameters ----------------------------------------------------------------------------

RANGE_ROUTES = [
    "percentiles",
    "samples",
    "breakdown",
    "groups",
    "timeseries",
    "heatmap",
    "dimensions",
    "cache",
    "advice",
    "compare",
    "compare/values",
    "versions",
    "traces",
    "metric_points",
]
WINDOW_ROUTES = ["budgets", "alerts/events"]
WINDOW_CASES = [
    ({"window": "0s"}, "window='0s': expected a number and a unit s|m|h|d, from 1s to 400d"),
    ({"window": "401d"}, "window='401d'"),
    ({"window": "9" * 40 + "d"}, "from 1s to 400d"),
    ({"window": "soon"}, "window='soon'"),
    ({"window": ""}, "window=''"),
]
TIME_CASES = [
    *WINDOW_CASES,
    ({"start": "1e308"}, f"start='1e308': {ACCEPTED}"),
    ({"end": "inf"}, f"end='inf': {ACCEPTED}"),
    ({"start": "-1e12"}, f"start='-1e12': {ACCEPTED}"),
    ({"end": "1e20"}, f"end='1e20': {ACCEPTED}"),
    ({"start": "nan"}, f"start='nan': {ACCEPTED}"),
    ({"start": "1969-12-31T23:59:59Z"}, ACCEPTED),
    ({"start": "0001-01-01"}, ACCEPTED),
    ({"end": "9999-12-31T23:59:59"}, ACCEPTED),
    ({"start": "0001-01-01T00:00:00+01:00"}, ACCEPTED),  # an OverflowError in datetime
    ({"end": "9999-12-31T23:59:59-01:00"}, ACCEPTED),
    ({"start": "2100-01-01T00:00:01Z"}, ACCEPTED),
    ({"start": "", "end": "7"}, "begins before 1970-01-01T00:00:00Z"),
    ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "must be before end"),
    ({"start": "x" * 5000}, "... (5,000 characters): expected a time"),
]
CASES = [(route, params, fragment) for route in RANGE_ROUTES for params, fragment in TIME_CASES] + [
    (route, params, fragment) for route in WINDOW_ROUTES for params, fragment in WINDOW_CASES
]


@pytest.mark.parametrize(("route", "params", "fragment"), CASES)
def test_bad_times_are_a_400_that_says_what_is_accepted(
    guarded: Guarded, route: str, params: dict[str, str], fragment: str
) -> None:
    response = guarded.get(f"/api/v1/{route}", **params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == 400 and fragment in error["message"]
    assert len(error["message"]) < 600


def test_the_table_covers_every_route_with_a_time_parameter(guarded: Guarded) -> None:
    spec = guarded.get("/openapi.json").json()
    timed = {
        path.removeprefix("/api/v1/")
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method == "get" and {p["name"] for p in operation.get("parameters", [])} & {"start", "end", "window"}
    }
    assert timed == set(RANGE_ROUTES) | set(WINDOW_ROUTES)


@pytest.mark.parametrize(
    ("route", "params", "fragment"),
    [
        ("timeseries", {"step": "0m"}, "step='0m'"),
        ("timeseries", {"step": "9" * 40 + "m"}, "from 1s to 400d"),
        ("timeseries", {"step": "90s"}, "whole minutes"),
        ("traces", {"limit": "9" * 5000}, "limit"),
        ("traces/" + "g" * 32, {}, "32 hex"),
    ],
)
def test_other_parameters_are_a_400(guarded: Guarded, route: str, params: dict[str, str], fragment: str) -> None:
    response = guarded.get(f"/api/v1/{route}", **params)
    assert response.status_code == 400 and fragment in response.json()["error"]["message"]


def test_good_times_answer(guarded: Guarded) -> None:
    for params in ({"start": "0", "end": "4102444800"}, {"start": "1970-01-01", "end": "2100-01-01T00:00:00Z"}):
        assert guarded.get("/api/v1/traces", **params).status_code == 200
    body = guarded.get("/api/v1/traces", start=str(time.time() - 7200), service=SERVICE).json()
    assert body["traces"]


@pytest.mark.parametrize("value", ["\\", "a\\", "tab\there", "new\nline", "quote'", "nul\x00", "\u202e"])
def test_filter_values_are_plain_values(guarded: Guarded, value: str) -> None:
    for route in ("percentiles", "traces", "dimensions", "groups", "advice"):
        response = guarded.get(f"/api/v1/{route}", service=value, route=value)
        assert response.status_code == 200, (route, response.text)


# --- request bodies -----------------------------------------------------------------------------


def rss_bytes(server: ServerProcess) -> int:
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    [line] = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024


def zeros(total: int, chunk: int = MIB) -> Iterator[bytes]:
    block = b"0" * chunk
    for _ in range(total // chunk):
        yield block


def test_an_anonymous_body_is_refused_before_it_is_read(guarded: Guarded) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", guarded.server.port, timeout=5)
    connection.putrequest("POST", "/api/v1/keys")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(200 * MIB))
    connection.endheaders(b'{"project": "')  # and no more of the body: the answer must not wait for it
    response = connection.getresponse()
    error = json.loads(response.read())["error"]
    connection.close()
    assert response.status == 401 and error["status"] == 401 and "API key" in error["message"]


def test_a_200_mib_anonymous_body_costs_no_memory(guarded: Guarded) -> None:
    before = rss_bytes(guarded.server)
    started = time.monotonic()
    response = guarded.post(
        "/api/v1/keys", key=None, content=zeros(200 * MIB), headers={"Content-Length": str(200 * MIB)}
    )
    assert response.status_code in (401, 413)
    assert time.monotonic() - started < 20
    assert rss_bytes(guarded.server) - before < 50 * MIB


def test_an_oversize_declared_body_is_a_413(guarded: Guarded) -> None:
    response = guarded.post("/api/v1/alerts/replay", json={"rules": "x" * (2 * MIB)})
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["status"] == 413 and "larger than the limit of 1,048,576 bytes" in error["message"]


def test_an_oversize_chunked_body_is_a_413(guarded: Guarded) -> None:
    response = guarded.post(
        "/api/v1/alerts/replay", content=zeros(3 * MIB, 64 * 1024), headers={"Content-Type": "application/json"}
    )
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"rules": "rules: [1]", "window": "9" * 100_000}, "at most 32 characters"),
        ({"rules": "rules: [1]", "window": "31d"}, "from 1s to 30d"),
        ({"rules": "rules: " + "9" * 5000}, "not valid YAML"),
        ({"rules": "rules: " + "[" * 5000 + "]" * 5000}, "not valid YAML"),
        ({"rules": "rules: !!timestamp '2026-13-45'"}, "not valid YAML"),
        ({"rules": "rules: [" + "x" * 500_000 + "]"}, "got 'xxxx"),
        ({"rules": f"rules: [[{ALIASES}]]"}, "expected a mapping"),
    ],
)
def test_bad_replays_are_a_short_400(guarded: Guarded, body: dict[str, str], fragment: str) -> None:
    response = guarded.post("/api/v1/alerts/replay", json=body)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert fragment in message and len(message) < 1100


def test_ingest_answers_while_a_large_replay_is_parsed(guarded: Guarded) -> None:
    rule = "  - {alert: A, type: threshold, metric: ttft, percentile: p95, window: 5m, x: [1, 2]}\n"
    body = json.dumps({"rules": "rules:\n" + rule * 11_000})
    assert len(body) < MIB  # allowed, and seconds of YAML parsing
    done = threading.Event()
    replay: list[httpx.Response] = []
    replay_seconds: list[float] = []

    def send_replay() -> None:
        started = time.monotonic()
        replay.append(guarded.post("/api/v1/alerts/replay", content=body, headers={"Content-Type": "application/json"}))
        replay_seconds.append(time.monotonic() - started)
        done.set()

    thread = threading.Thread(target=send_replay)
    thread.start()
    latencies = []
    while not done.is_set():
        probe = otlp_protobuf([SpanSpec("execute_tool probe", service="hardening-probe")])
        started = time.monotonic()
        assert guarded.post("/v1/traces", content=probe, headers=PROTOBUF).status_code == 200
        latencies.append(time.monotonic() - started)
    thread.join()
    assert replay[0].status_code == 400 and "rules[0].x: unknown field" in replay[0].text  # parsed in full
    # A parse that held the event loop would keep one probe waiting for most of the replay; on a busy
    # 2-core host a probe may still take a second, as ingest shares the GIL with the parsing thread.
    assert len(latencies) >= 3 and max(latencies) < replay_seconds[0] / 3, (replay_seconds, latencies)


def test_one_request_takes_one_rate_limit_token(tmp_path: Path) -> None:
    key = create_key(tmp_path, "--project", "limited")
    env = {"AGENTLAT_REQUIRE_KEYS": "1", "AGENTLAT_RATE_LIMIT": "0.01"}  # a burst of 1 token, refilled in 100 s
    server = ServerProcess(tmp_path, extra_env=env).start()
    try:
        statuses = [httpx.get(f"{server.url}/api/v1/traces", headers=bearer(key), timeout=30).status_code
                    for _ in range(2)]  # fmt: skip
    finally:
        server.stop()
    assert statuses == [200, 429]


# --- schema-driven fuzz -------------------------------------------------------------------------

FUZZ_EXAMPLES = 100  # per operation and generation mode: the whole run takes about half a minute on 2 cores
FILTERS = ("service", "route", "agent", "model", "tool", "provider", "span_name", "release", "prompt", "project")
HOSTILE = ("\\", "\t", "\n", "'", "\x00", "%", "{f0:String}", "1e308", "nan", "-1", "9" * 30)


def query_extras() -> st.SearchStrategy[dict[str, str]]:
    """Filter values and times beyond what the schema describes (filters are read from the query string)."""
    text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20))
    instant = st.one_of(
        text,
        st.floats().map(repr),
        st.integers().map(str),
        st.datetimes(timezones=st.timezones() | st.none()).map(lambda d: d.isoformat()),
    )
    filters = st.dictionaries(st.sampled_from(FILTERS), text, max_size=3)
    times = st.fixed_dictionaries({}, optional={"start": instant, "end": instant})
    return st.builds(lambda f, t: {**f, **t}, filters, times)


def test_fuzz_every_operation_without_a_5xx(guarded: Guarded) -> None:
    """Positive and negative cases of every operation in /openapi.json, with hostile filters and times added."""
    schema = schemathesis.openapi.from_url(f"{guarded.url}/openapi.json")
    headers = bearer(guarded.admin)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        takes_window = "window" in {p.name for p in operation.query}
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(mode), extra=query_extras() if takes_window else st.just({}))
            @settings(max_examples=FUZZ_EXAMPLES, derandomize=True, database=None, deadline=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
            def call(case: Any, extra: dict[str, str]) -> None:
                if extra:
                    case.query = {**(case.query or {}), **extra}
                response = case.call(base_url=guarded.url, headers=headers, timeout=30)
                if response.status_code >= 500:
                    failures.append(f"{response.status_code} {case.method} {case.formatted_path} "
                                    f"query={case.query!r} body={case.body!r:.300}: {response.text[:300]}")  # fmt: skip

            try:
                call()
            except Unsatisfiable:  # nothing in this operation can be made invalid (negative mode)
                continue
    assert not failures, "\n".join(failures)
