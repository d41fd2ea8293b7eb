"""Connection hygiene: slow, oversized and vanishing clients are cut off, and the server keeps serving.

A real ``agentlat serve`` with short timeouts, driven through raw sockets so that the test
controls every byte and when it is sent.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client import CollectorRegistry, Counter
from starlette.requests import ClientDisconnect

from agentlat.server.http_limits import HttpLimits, _guarded
from agentlat.server.otlp_grpc import TraceService
from tests.otlp_payloads import SpanSpec, otlp_protobuf
from tests.servers import AGENTLAT, ServerProcess, free_port, wait_for

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
ROUTE_FIRST = 1.0  # the protocol's body deadline waits this long past BODY_TIMEOUT for the route's own
MAX_BODY = 64 * 1024
SLACK = 1.0  # scheduling and polling tolerance on a loaded two-core machine
GET = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
PADDED_GET = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 40 + b"\r\n\r\n"  # longer than any deadline


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "AGENTLAT_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "AGENTLAT_BODY_TIMEOUT": str(BODY_TIMEOUT),
        "AGENTLAT_MAX_BODY_BYTES": str(MAX_BODY),
        "AGENTLAT_GRPC_PORT": str(free_port()),
    }
    proc = ServerProcess(tmp_path_factory.mktemp("slow-clients"), extra_env=env).start()
    yield proc
    proc.stop()


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    """One response (head and Content-Length body) off a connection that stays open."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or pytest.fail(f"closed mid-response: {data!r}")
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.lower().split(b":", 1) for line in head.split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        body += sock.recv(65536) or pytest.fail("closed mid-body")
    return head + b"\r\n\r\n" + body


def trickle(sock: socket.socket, data: bytes, gap: float) -> tuple[float, bytes]:
    """Send ``data`` a byte every ``gap`` s until the server answers or closes.
    Return the seconds from the first byte to the answer, and the answer (b"" for a bare close)."""
    start = time.monotonic()
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start, b""
        if select.select([sock], [], [], gap)[0]:
            return time.monotonic() - start, read_until_closed(sock)
    raise AssertionError("the server waited for the whole trickled request")


def status(reply: bytes) -> int | None:
    return int(reply.split(b" ", 2)[1]) if reply else None


@pytest.mark.parametrize("variable", ["AGENTLAT_HEADER_TIMEOUT", "AGENTLAT_KEEPALIVE_TIMEOUT", "AGENTLAT_MAX_HEADERS"])
def test_a_limit_not_above_zero_stops_the_start(tmp_path: Path, variable: str) -> None:
    env = {**os.environ, variable: "0"}
    serve = [AGENTLAT, "serve", "--data", str(tmp_path / "d")]
    result = subprocess.run(serve, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and f"{variable}=0" in result.stderr, result.stderr


# --- request heads ------------------------------------------------------------------------
@pytest.mark.parametrize("earlier_requests", [0, 1, 2], ids=["first request", "second", "third"])
def test_a_trickled_head_is_cut_at_the_header_timeout(server: ServerProcess, earlier_requests: int) -> None:
    with connect(server) as sock:
        for _ in range(earlier_requests):  # keep-alive: uvicorn's own timer stops at the next request's first byte
            sock.sendall(GET)
            assert read_response(sock).startswith(b"HTTP/1.1 200")
        elapsed, reply = trickle(sock, PADDED_GET, gap=0.5)
    assert HEADER_TIMEOUT - SLACK <= elapsed <= HEADER_TIMEOUT + SLACK
    assert status(reply) in (408, None), reply


def test_a_silent_connection_is_closed_at_the_header_timeout(server: ServerProcess) -> None:
    with connect(server) as sock:
        start = time.monotonic()
        reply = read_until_closed(sock)
    assert time.monotonic() - start <= HEADER_TIMEOUT + SLACK
    assert status(reply) in (408, None), reply


def get_with(fields: int, field_bytes: int = 1, end: bytes = b"\r\n") -> bytes:
    """A GET with ``fields`` header fields in all, the last ``field_bytes`` long."""
    extra = b"".join(b"X-Field-%d: 1\r\n" % i for i in range(fields - 3))
    return b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra + b"X-Big: " + b"b" * field_bytes + end


@pytest.mark.parametrize(
    ("request_bytes", "expected_status"),
    [
        (get_with(100) + b"\r\n", 200),
        (get_with(101) + b"\r\n", 431),
        (get_with(200) + b"\r\n", 431),
        (get_with(3, field_bytes=60_000) + b"\r\n", 200),
        (get_with(3, field_bytes=70_000) + b"\r\n", 431),  # arrives whole: h11 would take it
        (get_with(3, field_bytes=70_000, end=b""), 431),  # never finished
    ],
    ids=["100 fields", "101 fields", "200 fields", "60 kB head", "70 kB head", "70 kB of unfinished head"],
)
def test_header_limits(server: ServerProcess, request_bytes: bytes, expected_status: int) -> None:
    with connect(server) as sock:
        sock.sendall(request_bytes)
        reply = read_until_closed(sock)
    assert status(reply) == expected_status, reply[:200]


# --- request bodies -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "content_type"),
    [("/v1/traces", "application/x-protobuf"), ("/api/v1/keys", "application/json")],
)
def test_a_trickled_body_is_cut_at_the_body_timeout(server: ServerProcess, path: str, content_type: str) -> None:
    # /v1/traces answers with the receiver's own OTLP-shaped 408; other routes get the protocol's.
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {content_type}\r\nContent-Length: 1000\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(head.encode())
        start = time.monotonic()
        answered, reply = trickle(sock, b"x" * 1000, gap=1.0)
        closed = time.monotonic() - start
    assert status(reply) == 408, reply
    assert BODY_TIMEOUT - SLACK <= answered <= BODY_TIMEOUT + ROUTE_FIRST + SLACK
    assert closed <= BODY_TIMEOUT + ROUTE_FIRST + SLACK  # and the connection is not left draining the body


@pytest.mark.parametrize("path", ["/v1/traces", "/api/v1/keys"])
def test_a_client_gone_mid_body_leaves_no_traceback(server: ServerProcess, path: str) -> None:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    with connect(server) as sock:
        sock.sendall(head.encode() + b"{" * 2000)
        sock.shutdown(socket.SHUT_WR)  # the end of the stream, as a crashed client's
        read_until_closed(sock)  # the server has seen the end of the stream and let go of the connection
    # Served after the disconnect by the same event loop, so any traceback is already in the log.
    assert server.get("/healthz").status_code == 200
    log = server.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log


def test_client_disconnect_reaching_the_protocol_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    async def reads_a_stream(scope: Any, receive: Any, send: Any) -> None:
        raise ClientDisconnect()

    scope = {"type": "http", "method": "POST", "path": "/x", "client": ("127.0.0.1", 1), "headers": []}
    with caplog.at_level(logging.INFO, "agentlat.collector"):
        asyncio.run(_guarded(reads_a_stream, HttpLimits())(scope, _never, _never))
    assert "went away during POST /x" in caplog.text


async def _never(*args: Any) -> Any:
    raise AssertionError("not expected to be called")


# --- the connection cap -------------------------------------------------------------------
def test_connections_beyond_the_cap_get_503(tmp_path: Path) -> None:
    env = {"AGENTLAT_MAX_CONNECTIONS": "5", "AGENTLAT_KEEPALIVE_TIMEOUT": "60", "AGENTLAT_HEADER_TIMEOUT": "60"}
    server = ServerProcess(tmp_path, extra_env=env).start()
    try:
        with ExitStack() as stack:
            held = [stack.enter_context(closing(_connection(server))) for _ in range(5)]
            for conn in held:  # served, then left open and idle
                assert _get(conn) == 200
            with closing(_connection(server)) as extra:
                assert _get(extra) == 503
            assert _get(held[0]) == 200  # those inside the cap are still served
            held[1].close()
            wait_for(lambda: _fresh_get(server) == 200, timeout=10)
    finally:
        server.stop()


def _connection(server: ServerProcess) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)


def _get(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    return response.status


def _fresh_get(server: ServerProcess) -> int:
    with closing(_connection(server)) as conn:
        return _get(conn)


# --- OTLP/gRPC ----------------------------------------------------------------------------
def _export(server: ServerProcess, spans: list[SpanSpec], timeout: float = 30) -> None:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(otlp_protobuf(spans))
    with grpc.insecure_channel(f"127.0.0.1:{server.env['AGENTLAT_GRPC_PORT']}") as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=timeout)


@pytest.mark.parametrize(
    ("spans", "timeout", "expected"),
    [
        ([SpanSpec("big", attributes={"blob": "b" * (MAX_BODY + 1)})], 30, grpc.StatusCode.RESOURCE_EXHAUSTED),
        # A deadline a second gone: gRPC keeps time in milliseconds, so 1 µs or 0 rounds to a deadline
        # the reply can meet (7 calls in 10 did on loopback). The server's own check is the unit test below.
        ([SpanSpec("late")], -1.0, grpc.StatusCode.DEADLINE_EXCEEDED),
    ],
    ids=["message over the limit", "deadline too short"],
)
def test_grpc_refuses_and_keeps_serving(
    server: ServerProcess, spans: list[SpanSpec], timeout: float, expected: grpc.StatusCode
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _export(server, spans, timeout)
    assert raised.value.code() == expected
    after = SpanSpec("after")
    _export(server, [after])
    assert wait_for(lambda: server.get(f"/api/v1/traces/{after.trace_id}").json().get("spans"))


class _Aborted(Exception):
    pass


def _context(time_remaining: float, active: bool = True) -> SimpleNamespace:
    def abort_with_status(status: Any) -> None:
        raise _Aborted(status.code)

    return SimpleNamespace(
        time_remaining=lambda: time_remaining,
        is_active=lambda: active,
        invocation_metadata=lambda: (),
        abort_with_status=abort_with_status,
    )


@pytest.mark.parametrize(
    ("context", "expected"),
    [(_context(0.0), grpc.StatusCode.DEADLINE_EXCEEDED), (_context(5.0, active=False), grpc.StatusCode.CANCELLED)],
    ids=["deadline passed", "cancelled"],
)
def test_grpc_logs_nothing_for_a_caller_who_stopped_waiting(context: SimpleNamespace, expected: Any) -> None:
    accepted: list[Any] = []
    registry = CollectorRegistry()
    requests = Counter("requests", "", ["protocol", "status"], registry=registry)
    ingestor = SimpleNamespace(metrics=SimpleNamespace(requests=requests), accept=lambda *a: accepted.append(a))
    authenticator = SimpleNamespace(caller=lambda metadata, hint: SimpleNamespace(project="p"))
    service = TraceService(ingestor, authenticator)  # type: ignore[arg-type]
    with pytest.raises(_Aborted) as aborted:
        service.Export(trace_service_pb2.ExportTraceServiceRequest(), context)  # type: ignore[arg-type]
    assert aborted.value.args[0] == expected and accepted == []
    counted = {"protocol": "grpc", "status": code_pb2.Code.Name(expected.value[0])}
    assert registry.get_sample_value("requests_total", counted) == 1
