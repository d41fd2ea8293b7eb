"""OTLP/HTTP receiver: ``POST /v1/traces``, ``/v1/logs`` and ``/v1/metrics``, answering as the OTLP
specification says. The three take the same path and limits; only decoding and the response
message differ (``decode.SIGNALS``).

Content type and encoding are checked first (415), then the request waits for room
(``AdmissionGate``: 503 when the server already holds its limit of request bodies, the log is
full or the disk is low) before its body is read, within ``body_timeout`` (408) and a size limit
that also applies after decompression (413). Decoding runs off the event loop (400 with a
google.rpc.Status body when it fails), and the answer is sent only once the spans are in
the write-ahead log: 200 (with partial_success for rejected spans), or 429/503 with
Retry-After when the store is too far behind.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request, Response
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from agentlat.collector.ingest.admission import AdmissionGate, Overloaded
from agentlat.collector.ingest.decode import Signal
from agentlat.collector.ingest.otlp import DecodedBatch, OtlpDecodeError, TooManySpans
from agentlat.collector.ingest.pipeline import Backpressure
from agentlat.collector.requests import DECODE_CONCURRENCY, DecoderUnavailable, Ingestor, LogUnavailable
from agentlat.errors import AgentlatError
from agentlat.server.auth import AuthError

log = logging.getLogger("agentlat.collector")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
GUNZIP_STEP = 1024 * 1024  # bytes inflated between two checks of the admission gate
OVERLOAD_RETRY_AFTER = 1


@dataclass(frozen=True, slots=True)
class ReceiveLimits:
    max_body_bytes: int
    body_timeout: float  # seconds for the whole body to arrive
    max_decode_queue: int  # requests read and waiting for a decode slot


class RejectedRequest(AgentlatError):
    def __init__(self, status: int, code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class OtlpHttpReceiver:
    """One per app (on ``app.state.otlp_receiver``): the decode slots and the queue before them are shared by
    every request; ``server/routes/ingest.py`` routes the three signals here."""

    def __init__(
        self, ingestor: Ingestor, limits: ReceiveLimits, gate: AdmissionGate, project_of: Callable[[Request], str]
    ) -> None:
        self.ingestor, self.limits, self.gate, self.project_of = ingestor, limits, gate, project_of
        self.decoding = asyncio.Semaphore(DECODE_CONCURRENCY)
        self.waiting_to_decode = 0

    async def export(self, request: Request, signal: Signal) -> Response:
        response = await self._answer(request, signal)
        self.ingestor.metrics.requests.labels("http", str(response.status_code)).inc()
        return response

    async def _answer(self, request: Request, signal: Signal) -> Response:
        media = _media_type(request)
        try:
            if media is None:
                raise RejectedRequest(
                    415,
                    code_pb2.INVALID_ARGUMENT,
                    f"unsupported Content-Type {request.headers.get('content-type')!r}; send {PROTOBUF} or {JSON}",
                )
            project = _project(self.project_of, request)
            _check_room(self.ingestor)  # refuse before reading and decoding when the log is full
            return _success(media, signal, await self._admitted(request, media, project, signal.name))
        except RejectedRequest as rejected:
            return _failure(media or JSON, rejected)
        except ClientDisconnect:
            log.info("an OTLP client disconnected before sending its whole body; nothing was kept")
            return Response(status_code=499)

    async def _admitted(self, request: Request, media: str, project: str, signal: str) -> DecodedBatch:
        """Hold room for the body from before it is read until its spans are logged."""
        encoding = _encoding(request)
        held = await _admit(self.gate, _expected_size(request, self.limits.max_body_bytes))
        try:
            body = await _read_body(request, self.limits)
            if encoding == "gzip":
                body, inflated = _gunzip(body, self.limits.max_body_bytes, self.gate)
                held += inflated
            return await self._decode_and_record(body, media, project, signal)
        finally:
            self.gate.release(held)

    async def _decode_and_record(self, body: bytes, media: str, project: str, signal: str) -> DecodedBatch:
        if self.decoding.locked() and self.waiting_to_decode >= self.limits.max_decode_queue:
            raise _overloaded(
                f"{self.waiting_to_decode} requests already wait for decoding (AGENTLAT_MAX_DECODE_QUEUE)"
            )
        self.waiting_to_decode += 1
        try:
            await self.decoding.acquire()
        finally:
            self.waiting_to_decode -= 1
        try:
            _check_room(self.ingestor)  # again: the log may have filled while this request waited
            decoded = await _decode(self.ingestor, body, media, project, signal)
        finally:
            self.decoding.release()
        return await run_in_threadpool(_record, self.ingestor, decoded)


_AUTH_CODES = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 429: code_pb2.RESOURCE_EXHAUSTED}


def _project(project_of: Callable[[Request], str], request: Request) -> str:
    try:
        return project_of(request)
    except AuthError as exc:
        raise RejectedRequest(exc.status, _AUTH_CODES[exc.status], exc.message, exc.retry_after) from None


def _media_type(request: Request) -> str | None:
    value = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return value if value in (PROTOBUF, JSON) else None


def _encoding(request: Request) -> str:
    encoding = request.headers.get("content-encoding", "identity").strip().lower() or "identity"
    if encoding not in ("identity", "gzip"):
        raise RejectedRequest(
            415,
            code_pb2.INVALID_ARGUMENT,
            f"unsupported Content-Encoding {encoding!r}; use gzip or none",
        )
    return encoding


def _expected_size(request: Request, limit: int) -> int:
    """The room a body needs: its declared length, or the whole limit when it is sent in chunks."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit():
        if int(declared) > limit:
            raise _too_large(limit)
        return int(declared)
    return limit


async def _admit(gate: AdmissionGate, size: int) -> int:
    try:
        return await gate.admit(size)
    except Overloaded as exc:
        raise _overloaded(str(exc)) from None


def _overloaded(reason: str) -> RejectedRequest:
    return RejectedRequest(503, code_pb2.UNAVAILABLE, reason, retry_after=OVERLOAD_RETRY_AFTER)


async def _read_body(request: Request, limits: ReceiveLimits) -> bytes:
    chunks, size = [], 0
    try:
        async with asyncio.timeout(limits.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise _too_large(limits.max_body_bytes)
                chunks.append(chunk)
    except TimeoutError:
        raise RejectedRequest(
            408,
            code_pb2.DEADLINE_EXCEEDED,
            f"the body did not arrive within {limits.body_timeout:g} s (AGENTLAT_BODY_TIMEOUT)",
        ) from None
    return b"".join(chunks)


def _gunzip(body: bytes, limit: int, gate: AdmissionGate) -> tuple[bytes, int]:
    """Inflate step by step, taking room from the gate for each step; return the body and the room taken."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    parts: list[bytes] = []
    taken = 0
    try:
        pending = body
        while not inflater.eof:
            part = _inflate(inflater, pending)
            pending = inflater.unconsumed_tail
            if not part and not pending and not inflater.eof:
                raise RejectedRequest(400, code_pb2.INVALID_ARGUMENT, "gzip body is truncated")
            if taken + len(part) > limit:
                raise _too_large(limit, after_decompression=True)
            taken += _grow(gate, len(part))
            parts.append(part)
    except BaseException:
        gate.release(taken)
        raise
    return b"".join(parts), taken


def _inflate(inflater: zlib._Decompress, pending: bytes) -> bytes:
    try:
        return inflater.decompress(pending, GUNZIP_STEP)
    except zlib.error as exc:
        raise RejectedRequest(400, code_pb2.INVALID_ARGUMENT, f"body is not valid gzip: {exc}") from None


def _grow(gate: AdmissionGate, size: int) -> int:
    try:
        return gate.grow(size)
    except Overloaded as exc:
        raise _overloaded(str(exc)) from None


def _too_large(limit: int, after_decompression: bool = False) -> RejectedRequest:
    where = " after decompression" if after_decompression else ""
    return RejectedRequest(
        413,
        code_pb2.RESOURCE_EXHAUSTED,
        f"body is larger than {limit} bytes{where}; send smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)",
    )


def _check_room(ingestor: Ingestor) -> None:
    try:
        ingestor.pipeline.check_room()
    except Backpressure as exc:
        raise RejectedRequest(503, code_pb2.UNAVAILABLE, str(exc), retry_after=exc.retry_after) from None


async def _decode(ingestor: Ingestor, body: bytes, media: str, project: str, signal: str) -> DecodedBatch:
    blank = not body.strip()
    try:
        return await ingestor.decode(b"" if blank else body, blank or media == PROTOBUF, project, signal)
    except OtlpDecodeError as exc:
        raise RejectedRequest(400, code_pb2.INVALID_ARGUMENT, str(exc)) from None
    except TooManySpans as exc:
        raise RejectedRequest(413, code_pb2.RESOURCE_EXHAUSTED, str(exc)) from None
    except DecoderUnavailable as exc:
        raise RejectedRequest(503, code_pb2.UNAVAILABLE, str(exc), retry_after=1) from None


def _record(ingestor: Ingestor, decoded: DecodedBatch) -> DecodedBatch:
    try:
        return ingestor.record(decoded, "http")
    except Backpressure as exc:
        raise RejectedRequest(503, code_pb2.UNAVAILABLE, str(exc), retry_after=exc.retry_after) from None
    except LogUnavailable:
        raise RejectedRequest(
            503, code_pb2.UNAVAILABLE, "the collector cannot write its log; retry later", retry_after=10
        ) from None


def _success(media: str, signal: Signal, decoded: DecodedBatch) -> Response:
    return _respond(200, media, signal.respond(decoded))


def _failure(media: str, rejected: RejectedRequest) -> Response:
    status = status_pb2.Status(code=rejected.code, message=rejected.message)
    headers = {"Retry-After": str(rejected.retry_after)} if rejected.retry_after else None
    return _respond(rejected.status, media, status, headers)


def _respond(status: int, media: str, message, headers: dict[str, str] | None = None) -> Response:
    if media == PROTOBUF:
        content = message.SerializeToString()
    else:
        content = json_format.MessageToJson(message, indent=None).encode()
    return Response(content=content, status_code=status, media_type=media, headers=headers)
