"""OTLP/HTTP trace receiver: ``POST /v1/traces``, answering as the OTLP specification says.

Content type and encoding are checked first (415), the body is read with a size limit
that also applies after decompression (413), decoding runs off the event loop (400 with a
google.rpc.Status body when it fails), and the answer is sent only once the spans are in
the write-ahead log: 200 (with partial_success for rejected spans), or 429/503 with
Retry-After when the store is too far behind.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.concurrency import run_in_threadpool

from agentlat.collector.auth import AuthError
from agentlat.collector.ingest import DECODE_CONCURRENCY, DecoderUnavailable, Ingestor, LogUnavailable
from agentlat.collector.otlp import DecodedBatch, OtlpDecodeError, TooManySpans
from agentlat.collector.pipeline import Backpressure

log = logging.getLogger("agentlat.collector")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class RejectedRequest(Exception):
    def __init__(self, status: int, code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


def make_router(ingestor: Ingestor, max_body_bytes: int, project_of: Callable[[Request], str]) -> APIRouter:
    router = APIRouter()
    decoding = asyncio.Semaphore(DECODE_CONCURRENCY)

    @router.post("/v1/traces", tags=["ingest"], summary="OTLP/HTTP trace export")
    async def export_traces(request: Request) -> Response:
        response = await _export(request, ingestor, max_body_bytes, project_of, decoding)
        ingestor.metrics.requests.labels("http", str(response.status_code)).inc()
        return response

    return router


async def _export(
    request: Request,
    ingestor: Ingestor,
    max_body_bytes: int,
    project_of: Callable[[Request], str],
    decoding: asyncio.Semaphore,
) -> Response:
    media = _media_type(request)
    try:
        if media is None:
            raise RejectedRequest(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Type {request.headers.get('content-type')!r}; send {PROTOBUF} or {JSON}",
            )
        project = _project(project_of, request)
        _check_room(ingestor)  # refuse before reading and decoding when the log is full
        body = await _read_body(request, max_body_bytes)
        async with decoding:
            _check_room(ingestor)  # again: the log may have filled while this request waited
            decoded = await _decode(ingestor, body, media, project)
            decoded = await run_in_threadpool(_record, ingestor, decoded)
        return _success(media, decoded)
    except RejectedRequest as rejected:
        return _failure(media or JSON, rejected)


_AUTH_CODES = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 429: code_pb2.RESOURCE_EXHAUSTED}


def _project(project_of: Callable[[Request], str], request: Request) -> str:
    try:
        return project_of(request)
    except AuthError as exc:
        raise RejectedRequest(exc.status, _AUTH_CODES[exc.status], exc.message, exc.retry_after) from None


def _media_type(request: Request) -> str | None:
    value = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return value if value in (PROTOBUF, JSON) else None


async def _read_body(request: Request, limit: int) -> bytes:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        raise RejectedRequest(
            415,
            code_pb2.INVALID_ARGUMENT,
            f"unsupported Content-Encoding {encoding!r}; use gzip or none",
        )
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    return _gunzip(body, limit) if encoding == "gzip" else body


def _gunzip(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise RejectedRequest(400, code_pb2.INVALID_ARGUMENT, f"body is not valid gzip: {exc}") from None
    if len(out) > limit:
        raise _too_large(limit, after_decompression=True)
    if not inflater.eof:
        raise RejectedRequest(400, code_pb2.INVALID_ARGUMENT, "gzip body is truncated")
    return out


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


async def _decode(ingestor: Ingestor, body: bytes, media: str, project: str) -> DecodedBatch:
    blank = not body.strip()
    try:
        return await ingestor.decode(b"" if blank else body, blank or media == PROTOBUF, project)
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


def _success(media: str, decoded: DecodedBatch) -> Response:
    message = ExportTraceServiceResponse()
    if decoded.rejected:
        message.partial_success.rejected_spans = decoded.rejected
        message.partial_success.error_message = decoded.error_message()
    return _respond(200, media, message)


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
