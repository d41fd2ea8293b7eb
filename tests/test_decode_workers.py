"""Decoding in worker processes gives what decoding in a thread gives, errors included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest

from agentlat.collector.ingest import Ingestor
from agentlat.collector.otlp import DecodedBatch, Limits, OtlpDecodeError, TooManySpans
from tests.otlp_payloads import SpanSpec, otlp_json, otlp_protobuf

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
