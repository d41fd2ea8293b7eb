"""A local HTTP receiver that answers like a Slack incoming webhook, for the notifier tests.

Each request takes the next scripted answer (then ``ok``): ``ok`` (200 ``ok``), ``429:N``
(429 ``rate_limited`` with ``Retry-After: N``), ``400:invalid_payload``,
``404:channel_not_found``, ``500:rollup_error``, ``503:unavailable`` or ``timeout`` (reads the
request, then hangs past the client's timeout and closes without answering: Slack never
processed it). Only requests answered 2xx count as delivered.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_PATH = "/services/T0AGENTLAT/B0ALERTS/s3cr3tW3bh00kT0k3n"


@dataclass
class Received:
    at: float  # time.monotonic() when the request arrived
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    answer: str


@dataclass
class FakeSlack:
    url: str = ""
    script: list[str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    hang_seconds: float = 1.5
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> str:
        with self.lock:
            return self.script.pop(0) if self.script else "ok"

    @property
    def delivered(self) -> list[dict[str, Any]]:
        return [r.body for r in self.received if r.answer == "ok"]


def _handler(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            answer = fake.answer()
            with fake.lock:
                fake.received.append(Received(time.monotonic(), self.path, dict(self.headers), body, answer))
            if answer == "timeout":
                time.sleep(fake.hang_seconds)
                self.close_connection = True
                return
            status, _, text = ("200:ok" if answer == "ok" else answer).partition(":")
            extra = {"Retry-After": text} if status == "429" else {}
            text = "rate_limited" if status == "429" else text
            self.send_response(int(status))
            for name, value in {"Content-Type": "text/plain", **extra}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text.encode())

    return Handler


@contextmanager
def fake_slack(*script: str) -> Iterator[FakeSlack]:
    """A receiver on 127.0.0.1 for the duration of the block; its webhook URL is ``fake.url``."""
    fake = FakeSlack(script=list(script))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}{SECRET_PATH}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
