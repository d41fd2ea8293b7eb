"""Acknowledged spans survive a clean restart and a kill -9 of the collector."""

from __future__ import annotations

import time

import httpx

from agentlat.collector.ingest.otlp import Limits, logged_form, parse_protobuf, to_batch
from agentlat.collector.ingest.wal import WriteAheadLog
from agentlat.store import to_arrow_stream
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import ServerProcess, wait_for

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def send(server: ServerProcess, count: int, service: str) -> int:
    acknowledged = 0
    for i in range(count):
        spans = [SpanSpec(f"op {i}.{j}", service=service) for j in range(10)]
        response = httpx.post(f"{server.url}/v1/traces", content=otlp_protobuf(spans), headers=PROTOBUF, timeout=30)
        acknowledged += 10 if response.status_code == 200 else 0
    return acknowledged


def stored(server: ServerProcess, service: str) -> int:
    body = server.get("/api/v1/percentiles", metric="span", service=service, window="2h").json()
    return sum(row["count"] for row in body["rows"])


def test_data_survives_a_clean_restart(fresh_server: ServerProcess) -> None:
    fresh_server.start()
    acknowledged = send(fresh_server, 5, "restart-svc")
    assert acknowledged == 50
    wait_for(lambda: stored(fresh_server, "restart-svc") == 50)
    fresh_server.stop()
    fresh_server.start()
    assert stored(fresh_server, "restart-svc") == 50


def test_kill_9_loses_nothing_acknowledged(fresh_server: ServerProcess) -> None:
    # A long flush interval keeps acknowledged batches in the log only, so the restart
    # must replay them.
    fresh_server.env["AGENTLAT_FLUSH_INTERVAL"] = "60"
    fresh_server.start()
    acknowledged = send(fresh_server, 8, "crash-svc")
    assert acknowledged == 80
    fresh_server.kill()
    fresh_server.env["AGENTLAT_FLUSH_INTERVAL"] = "0.1"
    fresh_server.start()
    assert wait_for(lambda: stored(fresh_server, "crash-svc") == 80)
    assert "replaying 8 logged" in fresh_server.log()
    fresh_server.stop()
    fresh_server.start()  # a second start replays nothing twice
    assert stored(fresh_server, "crash-svc") == 80


def test_a_log_of_decoded_span_batches_from_an_earlier_version_replays(fresh_server: ServerProcess) -> None:
    """Earlier versions logged each request's spans decoded, as an Arrow IPC stream; this one logs trace
    requests as they came. A log holding both kinds, left unstored by a crash, is replayed whole."""
    now = time.time_ns()
    old = [SpanSpec(f"old {i}", service="earlier-version-svc") for i in range(3)]
    new = [SpanSpec(f"new {i}", service="this-version-svc") for i in range(4)]
    wal = WriteAheadLog(fresh_server.workdir / "data.wal")
    wal.append(to_arrow_stream(to_batch(parse_protobuf(otlp_protobuf(old)), "default", now, Limits()).batch))
    wal.append(logged_form(parse_protobuf(otlp_protobuf(new)), "default", now, Limits()).batch.to_record())
    wal.close()
    fresh_server.start()
    assert wait_for(
        lambda: (stored(fresh_server, "earlier-version-svc"), stored(fresh_server, "this-version-svc")) == (3, 4)
    )
    assert "replaying 2 logged" in fresh_server.log()
