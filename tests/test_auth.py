"""API keys: a project's key sees and writes only its project, through every route."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from google.rpc import code_pb2, status_pb2

from agentlat.server.auth import RateLimiter
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import AGENTLAT, ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def create_key(workdir: Path, *args: str) -> str:
    """A key created offline in the store the workdir's server will use (embedded or ClickHouse)."""
    store = ServerProcess(workdir).store_args()
    result = subprocess.run([AGENTLAT, "keys", "create", *store, *args], capture_output=True, text=True,
                            timeout=120, check=True)  # fmt: skip
    return result.stdout.strip()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Keyed:
    def __init__(self, server: ServerProcess, keys: dict[str, str], traces: dict[str, str]) -> None:
        self.server, self.keys, self.traces = server, keys, traces

    def get(self, path: str, key: str | None, **params: str) -> httpx.Response:
        headers = bearer(self.keys[key]) if key else {}
        return httpx.get(f"{self.server.url}{path}", params=params, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    workdir = tmp_path_factory.mktemp("keys")
    keys = {
        "admin": create_key(workdir, "--admin", "--name", "ops"),
        "a": create_key(workdir, "--project", "alpha"),
        "b": create_key(workdir, "--project", "beta"),
    }
    server = ServerProcess(workdir, extra_env={"AGENTLAT_REQUIRE_KEYS": "1", "AGENTLAT_RATE_LIMIT": "1000"}).start()
    traces = {}
    for project, service in (("a", "svc-alpha"), ("b", "svc-beta")):
        spec = SpanSpec(
            f"invoke_agent {project}-only-agent",
            service=service,
            attributes={"gen_ai.operation.name": "invoke_agent", "marker": f"{project}-stored-marker"},
        )
        response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf([spec]),
                              headers={**PROTOBUF, **bearer(keys[project])}, timeout=30)  # fmt: skip
        assert response.status_code == 200
        traces[project] = spec.trace_id
    k = Keyed(server, keys, traces)
    for project in ("a", "b"):
        wait_for(lambda p=project: k.get(f"/api/v1/traces/{traces[p]}", p).status_code == 200)
    yield k
    server.stop()


def test_requests_without_a_valid_key_are_refused(keyed: Keyed) -> None:
    response = httpx.post(f"{keyed.server.url}/v1/traces", content=b"", headers=PROTOBUF, timeout=30)
    assert response.status_code == 401
    assert status_pb2.Status.FromString(response.content).code == code_pb2.UNAUTHENTICATED
    for headers in ({}, bearer("alk_000000000000_not-a-real-secret-xxxxxx"), {"x-agentlat-key": "garbage"}):
        answer = httpx.get(f"{keyed.server.url}/api/v1/traces", headers=headers, timeout=30)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert "API key" in answer.json()["error"]["message"]


def test_each_key_sees_only_its_project(keyed: Keyed) -> None:
    for mine, theirs in (("a", "b"), ("b", "a")):
        listed = keyed.get("/api/v1/traces", mine, window="2h").json()["traces"]
        assert [t["trace_id"] for t in listed] == [keyed.traces[mine]]
        assert keyed.get(f"/api/v1/traces/{keyed.traces[theirs]}", mine).status_code == 404
        assert keyed.get("/api/v1/traces", mine, project="beta" if mine == "a" else "alpha").status_code == 403


def test_admin_key_chooses_a_project(keyed: Keyed) -> None:
    listed = keyed.get("/api/v1/traces", "admin", project="beta", window="2h").json()["traces"]
    assert [t["trace_id"] for t in listed] == [keyed.traces["b"]]
    assert keyed.get("/api/v1/traces", "admin", window="2h").json()["traces"] == []  # default project


def _fill(path: str, trace_id: str) -> str:
    return path.replace("{trace_id}", trace_id).replace("{key_id}", "000000000000")


def test_no_route_leaks_another_project(keyed: Keyed) -> None:
    """Walk every GET route of the OpenAPI spec with A's key, aimed at B's data."""
    spec = keyed.get("/openapi.json", "a").json()
    beta_trace = keyed.traces["b"]
    walked = 0
    for path, operations in spec["paths"].items():
        if "get" not in operations:
            continue
        for params in ({}, {"service": "svc-beta", "window": "2h"}, {"project": "beta"}):
            response = keyed.get(_fill(path, beta_trace), "a", **params)
            walked += 1
            # Only B's stored data carries these; a request may echo its own filters.
            for marker in ("b-only-agent", "b-stored-marker"):
                assert marker not in response.text, (path, params)
            if params.get("service") and response.status_code == 200 and "rows" in response.json():
                assert all(row.get("count", 0) == 0 for row in response.json()["rows"]), (path, params)
            if "project" in params and path.startswith("/api/"):
                assert response.status_code in (403, 404), (path, response.status_code)
    assert walked >= 3 * 8
    # Writing as A never lands in B: A's write with B's project header is refused.
    refused = httpx.post(
        f"{keyed.server.url}/v1/traces",
        content=otlp_protobuf([SpanSpec("x")]),
        headers={**PROTOBUF, **bearer(keyed.keys["a"]), "x-agentlat-project": "beta"},
        timeout=30,
    )
    assert refused.status_code == 403
    assert status_pb2.Status.FromString(refused.content).code == code_pb2.PERMISSION_DENIED


def test_keys_created_and_revoked_through_the_api(keyed: Keyed) -> None:
    admin = bearer(keyed.keys["admin"])
    created = httpx.post(f"{keyed.server.url}/api/v1/keys", json={"project": "gamma", "name": "ci"}, headers=admin,
                         timeout=30).json()  # fmt: skip
    assert created["project"] == "gamma" and created["key"].startswith(f"alk_{created['key_id']}_")
    assert httpx.get(f"{keyed.server.url}/api/v1/traces", headers=bearer(created["key"]), timeout=30).status_code == 200
    listed = httpx.get(f"{keyed.server.url}/api/v1/keys", headers=admin, timeout=30).json()["keys"]
    assert {k["project"] for k in listed} == {"default", "alpha", "beta", "gamma"}
    assert all("hash" not in str(k).lower() and "secret" not in str(k).lower() for k in listed)
    assert keyed.get("/api/v1/keys", "a").status_code == 403
    revoke = httpx.delete(f"{keyed.server.url}/api/v1/keys/{created['key_id']}", headers=admin, timeout=30)
    assert revoke.status_code == 200
    assert httpx.get(f"{keyed.server.url}/api/v1/traces", headers=bearer(created["key"]), timeout=30).status_code == 401


def test_keys_cli_through_the_api(keyed: Keyed) -> None:
    """``agentlat keys ... --api`` reads the API's answers: the new key, the list, the revocation."""
    env = {**os.environ, "AGENTLAT_API_KEY": keyed.keys["admin"], "COLUMNS": "200"}

    def keys(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([AGENTLAT, "keys", *args, "--api", keyed.server.url], capture_output=True, text=True,
                              env=env, timeout=120, check=True)  # fmt: skip

    created = keys("create", "--project", "delta", "--name", "cli")
    key = created.stdout.strip()
    key_id = key.split("_")[1]
    assert f"Created key {key_id} for project 'delta'" in created.stderr
    listed = keys("list").stdout
    assert key_id in listed and "delta" in listed and "cli" in listed and key not in listed
    assert f"Revoked key {key_id}." in keys("revoke", key_id).stderr
    assert key_id not in keys("list").stdout


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    key = create_key(tmp_path, "--project", "rl")
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_REQUIRE_KEYS": "1", "AGENTLAT_RATE_LIMIT": "2"}).start()
    try:
        codes = [httpx.get(f"{server.url}/api/v1/traces", headers=bearer(key), timeout=30) for _ in range(8)]
        limited = [r for r in codes if r.status_code == 429]
        assert limited and all(int(r.headers["retry-after"]) >= 1 for r in limited)
        assert [r.status_code for r in codes[:4]] == [200] * 4  # a burst of 2x the rate passes
    finally:
        server.stop()


def test_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2, burst=2, clock=lambda: now[0])
    assert [limiter.retry_after("k") for _ in range(3)] == [None, None, 1]
    now[0] = 0.5
    assert limiter.retry_after("k") is None and limiter.retry_after("k") == 1
    assert limiter.retry_after("other") is None


def test_public_bind_without_keys_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run([AGENTLAT, "serve", "--host", "0.0.0.0", "--data", str(tmp_path / "d")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2
    assert "API keys are required" in result.stderr and "agentlat keys create --admin" in result.stderr


def test_keys_cli_lists_and_revokes_offline(tmp_path: Path) -> None:
    key = create_key(tmp_path, "--project", "p1", "--name", "laptop")
    key_id = key.split("_")[1]
    listed = subprocess.run([AGENTLAT, "keys", "list", "--data", str(tmp_path / "data")], capture_output=True,
                            text=True, timeout=120, check=True, env={"COLUMNS": "200", "PATH": ""}).stdout  # fmt: skip
    assert key_id in listed and "laptop" in listed
    subprocess.run([AGENTLAT, "keys", "revoke", key_id, "--data", str(tmp_path / "data")], check=True, timeout=120,
                   capture_output=True)  # fmt: skip
    listed = subprocess.run([AGENTLAT, "keys", "list", "--data", str(tmp_path / "data")], capture_output=True,
                            text=True, timeout=120, check=True).stdout  # fmt: skip
    assert key_id not in listed


def test_keys_list_without_a_store_says_where_it_looked_and_creates_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLAT_DATA", "AGENTLAT_CLICKHOUSE_URL")}
    result = subprocess.run([AGENTLAT, "keys", "list"], capture_output=True, text=True, cwd=tmp_path, env=env,
                            timeout=120)  # fmt: skip
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert f"no agentlat store at {tmp_path.resolve() / '.agentlat' / 'data'}" in message
    assert "agentlat keys list --api http://127.0.0.1:4318" in message
    assert list(tmp_path.iterdir()) == []  # no empty store made in passing


def test_keys_on_a_store_a_server_holds_point_to_the_server(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path).start()
    try:
        for args in (["list"], ["revoke", "abc123"], ["create", "--project", "p"]):
            result = subprocess.run([AGENTLAT, "keys", *args, *server.store_args()], capture_output=True,
                                    text=True, timeout=120)  # fmt: skip
            assert result.returncode == 2, result.stderr
            message = " ".join(result.stderr.split())
            assert server.process is not None
            assert f"is open in process {server.process.pid}, a running agentlat server" in message, message
            assert f"agentlat keys {' '.join(args[:2] if args[0] == 'revoke' else args[:1])} --api" in message
            assert "DB::Exception" not in result.stderr
    finally:
        server.stop()
