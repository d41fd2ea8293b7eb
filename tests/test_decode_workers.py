"""Decoding in worker processes gives what decoding in a thread gives, errors included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from agentlat.collector.ingest import Ingestor
from agentlat.collector.otlp import DecodedBatch, Limits, OtlpDecodeError, TooManySpans
from tests.otlp_payloads import SpanSpec, new_trace_id, otlp_json, otlp_protobuf
from tests.servers import ServerProcess, wait_for

LIMITS = Limits(max_spans=5)


def _ingestor(decode_workers: int) -> Ingestor:
    # decode() needs neither the pipeline nor the metrics
    return Ingestor(cast(Any, None), LIMITS, cast(Any, None), decode_workers=decode_workers)


@pytest.fixture(scope="module")
def workers() -> Iterator[Ingestor]:
    ingestor = _ingestor(1)
    yield ingestor
    ingestor.close()


def _decode(ingestor: Ingestor, body: bytes, protobuf: bool) -> DecodedBatch:
    return asyncio.run(ingestor.decode(body, protobuf, "proj"))


def _spans(count: int) -> list[SpanSpec]:
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 12, "x": "y" * 20_000}
    return [SpanSpec("chat", attributes=attributes) for _ in range(count)]


@pytest.mark.parametrize("protobuf", [True, False], ids=["protobuf", "json"])
def test_a_worker_decodes_as_a_thread_does(workers: Ingestor, protobuf: bool) -> None:
    spans = _spans(3)
    body = otlp_protobuf(spans) if protobuf else json.dumps(otlp_json(spans)).encode()
    got, want = _decode(workers, body, protobuf), _decode(_ingestor(0), body, protobuf)
    assert (got.accepted, got.rejected, got.errors) == (want.accepted, want.rejected, want.errors) == (3, 0, [])
    assert got.batch.equals(want.batch)
    assert got.batch.column("IngestFlags").to_pylist() == [["truncated:x"]] * 3


def test_errors_come_back_from_a_worker(workers: Ingestor) -> None:
    with pytest.raises(OtlpDecodeError):
        _decode(workers, b"\xff\xff\xff", True)
    with pytest.raises(TooManySpans):
        _decode(workers, otlp_protobuf(_spans(6)), True)


def test_a_server_with_decode_workers_stores_what_it_acknowledges(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, extra_env={"AGENTLAT_DECODE_WORKERS": "2"}).start()
    try:
        trace_id = new_trace_id()
        spans = [SpanSpec("chat", trace_id=trace_id, attributes={"gen_ai.operation.name": "chat"}) for _ in range(4)]
        response = httpx.post(
            f"{server.url}/v1/traces",
            content=otlp_protobuf(spans),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        found = wait_for(lambda: server.get(f"/api/v1/traces/{spans[0].trace_id}").json().get("spans"))
        assert sorted(s["span_id"] for s in found) == sorted(
            s.span_id for s in spans if s.trace_id == spans[0].trace_id
        )
    finally:
        server.stop()
