"""Connection hygiene for the HTTP server: deadlines for a request's head and body, header limits.

uvicorn's h11 protocol has a keep-alive timer, but the first byte of the next request cancels
it and nothing bounds the head or body after that, so a client sending a byte a second holds a
connection for ever; h11 bounds only the size of a head still incomplete. ``limited_protocol``
makes an H11Protocol subclass, given to uvicorn as ``http=``, that adds:

- a request head must be complete within ``header_timeout`` s of its first byte (the first
  request of a connection: of the connection's opening);
- its body must be complete within ``body_timeout`` s of the head, plus a second so that a
  route's own deadline (OTLP's, in the receiver) answers first in its own shape;
- past either, 408 (or only a close, once an answer has started);
- a head of more than ``max_headers`` fields or ``max_header_bytes`` bytes gets 431;
- a client that goes away mid-request ends its request quietly, without a traceback.

Between requests uvicorn's own keep-alive timer applies.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import h11
from starlette.requests import ClientDisconnect
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope

log = logging.getLogger("agentlat.collector")

ROUTE_FIRST = 1.0  # seconds the body deadline waits past body_timeout for a route's own answer
Phase = Literal["head", "body"]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100

    def uvicorn_options(self) -> dict[str, Any]:
        """The options that make uvicorn enforce these limits."""
        return {
            "http": limited_protocol(self),
            "h11_max_incomplete_event_size": self.max_header_bytes,
            "ws": "none",  # no WebSocket routes: an upgrade stays on this protocol, under these limits
        }


def limited_protocol(limits: HttpLimits) -> type[H11Protocol]:
    """An H11Protocol class enforcing ``limits``, for ``uvicorn.Config(http=...)``."""
    return type("LimitedH11Protocol", (LimitedH11Protocol,), {"limits": limits})


class LimitedH11Protocol(H11Protocol):
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.app = _guarded(self.app, self.limits)
        self._phase: Phase | None = None  # what the running deadline waits for
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow(head_started=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request may have started, or part of its head be waiting already.
        self._follow(head_started=bool(self.conn.trailing_data[0]))

    def send_400_response(self, msg: str) -> None:
        # h11 refuses a head it could not parse, or one still incomplete past its size limit
        # (h11_max_incomplete_event_size, set to max_header_bytes by uvicorn_options).
        if len(self.conn.trailing_data[0]) > self.limits.max_header_bytes:
            self._refuse(431, f"the request head is larger than {self.limits.max_header_bytes} bytes")
        else:
            super().send_400_response(msg)

    def _follow(self, head_started: bool) -> None:
        """Keep the deadline in step with what the client is sending."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._arm("body")
        elif state is h11.IDLE and head_started:
            self._arm("head")
        else:  # request received (or none started: uvicorn's keep-alive timer is in charge)
            self._disarm()

    def _arm(self, phase: Phase) -> None:
        if self._phase == phase:
            return
        self._disarm()
        self._phase = phase
        delay = self.limits.header_timeout if phase == "head" else self.limits.body_timeout + ROUTE_FIRST
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, None

    def _expired(self) -> None:
        phase = self._phase
        self._deadline, self._phase = None, None
        if self.transport.is_closing():
            return
        what = "request head" if phase == "head" else "request body"
        limit = self.limits.header_timeout if phase == "head" else self.limits.body_timeout
        message = f"the {what} did not arrive within {limit:g} s"
        log.info("%s: %s; closing the connection", _peer(self.client), message)
        cycle = self.cycle if phase == "body" else None
        if cycle is None or not cycle.response_started:
            self._refuse(408, message)
        else:
            self.transport.close()
        if cycle is not None:
            # The request's app sees a disconnect, and whatever it still sends goes nowhere.
            cycle.disconnected = True
            cycle.message_event.set()

    def _refuse(self, status: int, message: str) -> None:
        """Answer outside h11 (which has no request to answer before a head is parsed), then close."""
        body = message.encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"content-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def _guarded(app: ASGI3Application, limits: HttpLimits) -> ASGI3Application:
    """``app`` behind the header limits h11 cannot check, and quiet when the client goes away."""

    async def guarded(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        problem = _head_problem(scope, limits)
        if problem is not None:
            await _answer(send, 431, problem)
            return
        try:
            await app(scope, receive, send)
        except ClientDisconnect:
            # Nobody is left to answer, and uvicorn would log this as the application's failure.
            client, method, path = scope.get("client"), scope.get("method"), scope.get("path")
            log.info("%s: the client went away during %s %s", _peer(client), method, path)

    return guarded


def _head_problem(scope: Scope, limits: HttpLimits) -> str | None:
    # A head that arrived whole in one read is parsed by h11 whatever its size, so both limits are checked here.
    headers = scope.get("headers", [])
    if len(headers) > limits.max_headers:
        return f"the request has {len(headers)} header fields, more than {limits.max_headers}"
    target = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
    if target + sum(len(name) + len(value) + 4 for name, value in headers) > limits.max_header_bytes:
        return f"the request head is larger than {limits.max_header_bytes} bytes"
    return None


async def _answer(send: ASGISendCallable, status: int, message: str) -> None:
    body = message.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers, "trailers": False})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _peer(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
