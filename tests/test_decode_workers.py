"""Decoding in worker processes gives what decoding in a thread gives, errors included. Workers take
what costs CPU before a request is logged (OTLP/JSON, logs, metrics); a protobuf trace request is only
checked, in the server's threads, and decoded by the engine when it is stored."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2
from google.rpc.status_pb2 import Status

from agentlat.collector.ingest.otlp import (
    DecodedBatch,
    Limits,
    OtlpDecodeError,
    TooManySpans,
    parse_json,
    parse_protobuf,
)
from agentlat.collector.requests import DECODE_CONCURRENCY, Ingestor, default_decode_workers
from agentlat.errors import ConfigError
from agentlat.server.config import Settings
from agentlat.shared.gc_tuning import YOUNG_THRESHOLD
from bench.ingest import trace_spans
from tests.otlp_payloads import SpanSpec, new_trace_id, otlp_json, otlp_protobuf
from tests.servers import ServerProcess, spawned_workers, wait_for
from tests.worker_probe import gc_thresholds, imported_modules

LIMITS = Limits(max_spans=5)


def _ingestor(decode_workers: int) -> Ingestor:
    # decode() needs neither the pipeline nor the metrics
    return Ingestor(cast(Any, None), LIMITS, cast(Any, None), decode_workers=decode_workers)


@pytest.fixture(scope="module")
def workers() -> Iterator[Ingestor]:
    ingestor = _ingestor(1)
    yield ingestor
    ingestor.close()


def _decode(ingestor: Ingestor, body: bytes, protobuf: bool, signal: str = "traces") -> DecodedBatch:
    return asyncio.run(ingestor.decode(body, protobuf, "proj", signal))


def _spans(count: int) -> list[SpanSpec]:
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 12, "x": "y" * 20_000}
    return [SpanSpec("chat", attributes=attributes) for _ in range(count)]


def _json(spans: list[SpanSpec]) -> bytes:
    return json.dumps(otlp_json(spans)).encode()


def test_a_worker_decodes_as_a_thread_does(workers: Ingestor) -> None:
    """An OTLP/JSON trace request comes back checked and serialized as protobuf, as a thread makes it."""
    spans = _spans(3)
    got, want = _decode(workers, _json(spans), False), _decode(_ingestor(0), _json(spans), False)
    assert (got.accepted, got.rejected, got.errors) == (want.accepted, want.rejected, want.errors) == (3, 0, [])
    assert (got.batch.body, got.batch.project, got.batch.spans) == (want.batch.body, "proj", 3)
    assert parse_protobuf(got.batch.body) == parse_json(_json(spans))


def test_a_protobuf_trace_request_is_checked_without_a_worker(workers: Ingestor) -> None:
    ingestor = _ingestor(1)
    try:
        body = otlp_protobuf(_spans(2))
        decoded = _decode(ingestor, body, True)
        assert (decoded.accepted, decoded.batch.body) == (2, body)  # logged as it came
        assert ingestor._pool is None
    finally:
        ingestor.close()


def test_errors_come_back_from_a_worker(workers: Ingestor) -> None:
    with pytest.raises(OtlpDecodeError):
        _decode(workers, b"{not json", False)
    with pytest.raises(TooManySpans):
        _decode(workers, _json(_spans(6)), False)


# What a worker must not import: the store and its engines, the HTTP stack, what only the server's
# threads use, and pandas (which pyarrow would import on its first pa.array() of a list).
NOT_IN_A_WORKER = (
    "chdb", "clickhouse_connect", "agentlat.store", "agentlat.server", "agentlat.collector.ingest.pipeline",
    "agentlat.collector.metrics", "fastapi", "starlette", "uvicorn", "prometheus_client", "polars", "pandas",
)  # fmt: skip


def test_a_worker_imports_only_what_decoding_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker started as the server starts it, after decoding 1,000 GenAI spans, has imported
    neither the store nor chDB nor anything else the decoder does not use (collector/ingest/decode.py)."""
    # A spawned worker first re-runs its parent's main module: here pytest's. An empty one stands in for the
    # server's (the `agentlat` script, whose imports bench/decode_worker_footprint.py measures in a real server's
    # worker).
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    ingestor = Ingestor(cast(Any, None), Limits(), cast(Any, None), decode_workers=1)
    try:
        rng = random.Random(7)
        spans = [span for _ in range(100) for span in trace_spans(rng, time.time_ns())]
        assert _decode(ingestor, _json(spans), False).accepted == 1000  # so what decoding imports late counts too
        pool = ingestor._executor()
        assert pool is not None
        modules = set(pool.submit(imported_modules).result(timeout=60))
    finally:
        ingestor.close()
    assert {"agentlat.collector.ingest.decode", "agentlat.shared.columns", "pyarrow"} <= modules
    heavy = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_IN_A_WORKER))
    assert heavy == []


def test_a_worker_collects_young_garbage_as_rarely_as_the_server(workers: Ingestor) -> None:
    """Each request's spans would set off young collections at CPython's default threshold (shared/gc_tuning.py)."""
    pool = workers._executor()
    assert pool is not None
    assert pool.submit(gc_thresholds).result(timeout=60)[0] == YOUNG_THRESHOLD


def test_a_server_with_decode_workers_stores_what_it_acknowledges(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_DECODE_WORKERS": "2"}).start()
    try:
        trace_id = new_trace_id()
        spans = [SpanSpec("chat", trace_id=trace_id, attributes={"gen_ai.operation.name": "chat"}) for _ in range(4)]
        response = _post(server, spans)
        assert response.status_code == 200, response.text
        found = wait_for(lambda: server.get(f"/api/v1/traces/{spans[0].trace_id}").json().get("spans"))
        assert sorted(s["span_id"] for s in found) == sorted(
            s.span_id for s in spans if s.trace_id == spans[0].trace_id
        )
    finally:
        server.stop()


@pytest.mark.parametrize(("cores", "workers"), [(1, 0), (2, 2), (8, DECODE_CONCURRENCY)])
def test_by_default_one_worker_per_concurrent_decode_when_a_second_core_exists(
    monkeypatch: pytest.MonkeyPatch, cores: int, workers: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert default_decode_workers() == workers
    monkeypatch.delattr(os, "sched_getaffinity")  # as on macOS
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert default_decode_workers() == workers


def test_the_worker_count_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTLAT_DECODE_WORKERS", raising=False)
    assert Settings.from_env().decode_workers is None  # the default: default_decode_workers()
    monkeypatch.setenv("AGENTLAT_DECODE_WORKERS", "0")
    assert Settings.from_env().decode_workers == 0
    monkeypatch.setenv("AGENTLAT_DECODE_WORKERS", "-1")
    with pytest.raises(ConfigError, match=r"AGENTLAT_DECODE_WORKERS='-1' is not a valid whole number, 0 or more"):
        Settings.from_env()


def _post(server: ServerProcess, spans: list[SpanSpec]) -> httpx.Response:
    """OTLP/JSON, which workers parse (protobuf trace requests never reach them)."""
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.url}/v1/traces", content=_json(spans), headers=headers, timeout=60)


def _stored_span_ids(server: ServerProcess, trace_id: str) -> list[str]:
    return sorted(s["span_id"] for s in server.get(f"/api/v1/traces/{trace_id}").json().get("spans", []))


def test_a_dead_worker_costs_its_request_a_503_and_is_replaced(tmp_path: Path) -> None:
    marker = f"AGENTLAT_TEST_DECODE_{os.getpid()}"
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_DECODE_WORKERS": "1", marker: "1"}).start()
    try:
        assert _post(server, [SpanSpec("first")]).status_code == 200  # starts the worker
        [worker] = spawned_workers(marker)
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: worker not in spawned_workers(marker))

        lost = _post(server, [SpanSpec("lost")])
        assert (lost.status_code, lost.headers["Retry-After"]) == (503, "1")
        status = json_format.Parse(lost.content, Status())
        assert (status.code, status.message) == (
            code_pb2.UNAVAILABLE,
            "a decode worker died while decoding this request; retry it",
        )
        assert "a decode worker process died; starting new workers" in " ".join(server.log().split())

        trace_id = new_trace_id()
        spans = [SpanSpec(f"retried {i}", trace_id=trace_id) for i in range(3)]
        assert _post(server, spans).status_code == 200
        wait_for(lambda: _stored_span_ids(server, trace_id) == sorted(s.span_id for s in spans))
        [replacement] = spawned_workers(marker)
        assert replacement != worker
    finally:
        server.stop()
    wait_for(lambda: not spawned_workers(marker), timeout=20)


def test_workers_exit_when_the_server_is_killed_outright(tmp_path: Path) -> None:
    marker = f"AGENTLAT_TEST_DECODE_KILL_{os.getpid()}"
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_DECODE_WORKERS": "2", marker: "1"}).start()
    try:
        assert _post(server, [SpanSpec("one")]).status_code == 200
        assert spawned_workers(marker)
    finally:
        server.kill()
    wait_for(lambda: not spawned_workers(marker), timeout=20, interval=0.5)
