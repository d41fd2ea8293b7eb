"""One log line per request that fails (4xx at INFO, 5xx at WARNING), every request at DEBUG.

uvicorn's access log writes a line for every OTLP export, which buries everything else a
server says; ``agentlat serve --log-level debug`` shows them all again. A pure ASGI
middleware: it reads only the status the app sends and costs a request a few microseconds.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("agentlat.http")


class RequestLog:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app fails before it answers

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            level = logging.WARNING if status >= 500 else logging.INFO if status >= 400 else logging.DEBUG
            if log.isEnabledFor(level):
                client = scope.get("client") or ("-", 0)
                took = (time.perf_counter() - started) * 1000
                log.log(level, "%s %s %s -> %d (%.0f ms)", client[0], scope["method"], scope["path"], status, took)
