"""A guard in front of the query API (``/api/``): the caller is authenticated, then the body read with a limit.

FastAPI reads and parses a request's body before it resolves the route's dependencies, so
without this an anonymous caller could make the server hold and parse any amount of JSON
before the 401. Here, before a byte of the body is read, the API key is checked (401, 403
or 429) and a declared ``Content-Length`` over the limit is refused (413); a chunked body is
counted as it arrives and refused past the limit. The body, at most the limit, is then
handed to the app. The authenticated caller is kept in the request's state, so the route
reuses it instead of authenticating (and spending a rate-limit token) again.

Refusals are answered by the app's own exception handlers, so they have the API's error shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentlat.server.auth import Caller

PREFIX = "/api/"
_CALLER = "agentlat_caller"


def known_caller(request: Request) -> Caller | None:
    """The caller the guard authenticated for this request, if it did."""
    return request.scope.get("state", {}).get(_CALLER)


class ApiGuard:
    """Pure ASGI middleware; ``authenticate`` raises ``AuthError`` (it may block: it runs in a thread)."""

    def __init__(self, app: ASGIApp, authenticate: Callable[[Request], Caller], max_body_bytes: int) -> None:
        self.app, self.authenticate, self.max_body_bytes = app, authenticate, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            caller = await run_in_threadpool(self.authenticate, request)
            scope.setdefault("state", {})[_CALLER] = caller
            body = await self._body(request, receive)
        except Exception as exc:  # AuthError, 413, StoreUnavailable...: answered as if a route had raised it
            await _answer(scope, exc, receive, send)
            return
        if body is None:  # the client went away
            return
        await self.app(scope, _replay(body, receive), send)

    async def _body(self, request: Request, receive: Receive) -> bytes | None:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise self._too_large()
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> HTTPException:
        limit = f"{self.max_body_bytes:,} bytes"
        return HTTPException(413, f"the request body is larger than the limit of {limit} (AGENTLAT_MAX_API_BODY_BYTES)")


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body read already, then what the client sends next (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _answer(scope: Scope, exc: Exception, receive: Receive, send: Send) -> None:
    """Answer ``exc`` with the app's handler for its type, as if a route had raised it."""
    handlers: dict[Any, Callable[..., Any]] = getattr(scope.get("app"), "exception_handlers", {})
    handler = next((handlers[cls] for cls in type(exc).__mro__ if cls in handlers), None)
    if handler is None:
        raise exc
    response = handler(Request(scope, receive), exc)
    if inspect.isawaitable(response):
        response = await response
    await response(scope, receive, send)
