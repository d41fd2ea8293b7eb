"""A test double of the ClickHouse HTTP interface, served by chDB. Not a part of agentlat.

No ClickHouse server can be installed where these tests run, so this module answers the
subset of ClickHouse's HTTP protocol (https://clickhouse.com/docs/interfaces/http) that
clickhouse-connect uses, with chDB (the same SQL engine, in process) behind it:

- ``/ping``, ``/replicas_status`` and ``GET /`` without a query answer ``Ok.``;
- the statement is the ``query`` URL parameter, the body, or both (the body then continues
  the statement, as ClickHouse reads them), or the ``query`` field of a multipart form;
- ``param_<name>`` values bind ``{name:Type}`` placeholders (passed to chDB as they come:
  clickhouse-connect sends them in ClickHouse's escaped text form, arrays as literals);
  ``database`` selects the database; ``default_format`` is the output format when the
  statement names none; a parameter that is a ClickHouse setting applies to that request
  only; anything else (query_id, session_id, wait_end_of_query, client_protocol_version,
  credentials, unknown names) is accepted and ignored;
- ``INSERT ... FORMAT <fmt>`` followed by data streams the data into chDB in that format;
- chunked request bodies and Content-Encoding gzip/deflate/zstd/lz4 are decoded; responses
  are compressed when ``enable_http_compression`` is on and the client accepts a codec;
- answers carry the headers clickhouse-connect reads (X-ClickHouse-Query-Id, -Format,
  -Timezone, -Summary, -Server-Display-Name); errors answer as ClickHouse does: an HTTP
  error status, ``X-ClickHouse-Exception-Code`` and a ``Code: N. DB::Exception: ...`` body.

Known differences, none of which agentlat relies on: one chDB session serves every request,
one statement at a time (a ``SET`` or ``USE`` sent as a statement outlives its request);
sessions and credentials are not checked; GET requests are not made read-only; results are
buffered (as with ``wait_end_of_query=1``); Native output has no block info, so clients see
a server without ``client_protocol_version`` support (protocol version 0).

Run it: ``python -m tests.clickhouse_shim --port 8123 --data /tmp/ch`` (it owns that chDB
directory); tests use ``ClickHouseShim`` to start, kill and restart it.
"""

from __future__ import annotations

import argparse
import email.parser
import gzip
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

CODECS: dict[str, tuple[Any, Any]] = {
    "gzip": (gzip.compress, gzip.decompress),
    "deflate": (zlib.compress, zlib.decompress),
}
try:
    import lz4.frame

    CODECS["lz4"] = (lz4.frame.compress, lz4.frame.decompress)
except ImportError:  # pragma: no cover - clickhouse-connect then does not offer lz4 either
    pass
try:
    from backports import zstd

    CODECS["zstd"] = (zstd.compress, zstd.decompress)
except ImportError:  # pragma: no cover
    pass

# The head of ``INSERT INTO t [(columns)] FORMAT fmt``; the data starts after the first newline.
INSERT = re.compile(rb"\s*(INSERT\s+INTO\s+(?:TABLE\s+)?[^\s(]+\s*(?:\([^)]*\))?)\s*FORMAT\s+(\w+)[ \t]*\r?\n?", re.I)
TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.I)
RESULT_STATEMENT = re.compile(r"\s*\(*\s*(SELECT|WITH|SHOW|DESC|DESCRIBE|EXISTS|EXPLAIN|CHECK)\b", re.I)
ERROR_CODE = re.compile(r"Code: (\d+)\. ")
# ClickHouse's HTTP status per exception code (HTTPHandler.cpp); everything else is 500.
STATUS_OF_CODE = {
    **dict.fromkeys((46, 47, 50, 60, 63, 73, 81, 115), 404),  # UNKNOWN_{FUNCTION,IDENTIFIER,TYPE,TABLE,...}
    **dict.fromkeys((6, 27, 36, 42, 43, 53, 62, 117), 400),  # CANNOT_PARSE_*, BAD_ARGUMENTS, SYNTAX_ERROR, ...
    164: 403,  # READONLY
}
BINARY_FORMATS = {"native", "arrow", "arrowstream", "parquet", "orc", "rowbinary", "rowbinarywithnamesandtypes"}


class ClickHouseException(Exception):
    def __init__(self, message: str) -> None:
        text = message[message.find("Code: ") :] if "Code: " in message else message
        match = ERROR_CODE.match(text)
        self.code = int(match.group(1)) if match else 1001  # STD_EXCEPTION
        self.text = text if match else f"Code: 1001. DB::Exception: {text}. (STD_EXCEPTION)"
        super().__init__(self.text)


class Engine:
    """The chDB session behind the server; statements run one at a time."""

    def __init__(self, data_dir: Path) -> None:
        import chdb

        data_dir.mkdir(parents=True, exist_ok=True)
        self.conn = chdb.connect(str(data_dir))
        self.lock = threading.Lock()
        self.database = "default"
        self.changed: dict[str, str] = {}  # settings this session holds away from their defaults
        rows = self.conn.query("SELECT name, value FROM system.settings", "JSONEachRow").bytes().splitlines()
        self.defaults = {row["name"]: row["value"] for row in map(json.loads, rows)}
        self.version, self.timezone = self.conn.query("SELECT version(), timezone()", "TSV").bytes().decode().split()

    def run(self, statement: bytes, params: dict[str, str]) -> tuple[bytes, str | None, dict[str, Any]]:
        """Execute one statement; return its output, output format (None: no result set) and summary."""
        binds = {k.removeprefix("param_"): v for k, v in params.items() if k.startswith("param_")}
        settings = {k: v for k, v in params.items() if k in self.defaults}
        with self.lock:
            try:
                self._use(params.get("database") or "default")
                self._apply(settings)
                insert = INSERT.match(statement)
                if insert:
                    head, fmt = insert.group(1).decode(), insert.group(2).decode()
                    with self.conn.send_insert(head, fmt) as inserter:
                        inserter.append(statement[insert.end() :])
                        done = inserter.finish()
                    return b"", None, {"written_rows": done.rows_written, "written_bytes": done.bytes_written}
                sql = statement.decode()
                named = TRAILING_FORMAT.search(sql)
                fmt = named.group(1) if named else params.get("default_format") or "TabSeparated"
                result = self.conn.query(sql, fmt, params=binds)
            except Exception as exc:
                raise ClickHouseException(str(exc)) from None
        summary = {
            "read_rows": result.rows_read(),
            "read_bytes": result.bytes_read(),
            "written_rows": result.rows_written(),
            "written_bytes": result.bytes_written(),
            "elapsed_ns": int(result.elapsed() * 1e9),
        }
        return result.bytes(), fmt if RESULT_STATEMENT.match(sql) else None, summary

    def _use(self, database: str) -> None:
        if database != self.database:
            self.conn.query("USE `" + database.replace("\\", "\\\\").replace("`", "\\`") + "`", "TSV")
            self.database = database

    def _apply(self, settings: dict[str, str]) -> None:
        """Make the session's settings those of this request (names are checked against system.settings)."""
        for name in [n for n in self.changed if n not in settings]:
            self.conn.query(f"SET {name} = DEFAULT", "TSV")
            del self.changed[name]
        for name, value in settings.items():
            if self.changed.get(name, self.defaults[name]) != value:
                self.conn.query(f"SET {name} = '" + value.replace("\\", "\\\\").replace("'", "\\'") + "'", "TSV")
                self.changed[name] = value

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clickhouse-connect's connection pool expects
    server: Server

    def do_HEAD(self) -> None:
        self._send(200, b"", {"Content-Type": "text/plain; charset=UTF-8"})

    def do_GET(self) -> None:
        self._handle(b"")

    def do_POST(self) -> None:
        self._handle(self._read_body())

    def log_message(self, format: str, *args: Any) -> None:  # requests are not logged
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self, body: bytes) -> None:
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if url.path in ("/ping", "/replicas_status") or (url.path == "/" and not body and not params.get("query")):
            return self._send(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
        engine = self.server.engine
        headers = {
            "X-ClickHouse-Query-Id": params.get("query_id") or str(uuid.uuid4()),
            "X-ClickHouse-Timezone": engine.timezone,
            "X-ClickHouse-Server-Display-Name": socket.gethostname(),
        }
        try:
            if url.path != "/":
                raise ClickHouseException(f"Code: 1002. DB::Exception: no handler for {url.path}. (UNKNOWN_EXCEPTION)")
            body = self._decode(body, params)
            query = params.pop("query", "").encode()
            output, fmt, summary = engine.run(query + b"\n" + body if query and body else query or body, params)
        except ClickHouseException as exc:
            headers.update({"X-ClickHouse-Exception-Code": str(exc.code), "Content-Type": "text/plain; charset=UTF-8"})
            trailer = "" if "(version " in exc.text else f" (version {engine.version})"
            text = f"{exc.text}{trailer}\n".encode()
            return self._send(STATUS_OF_CODE.get(exc.code, 500), text, headers)
        summary.update(total_rows_to_read=0, result_rows=0, result_bytes=len(output))
        headers["X-ClickHouse-Summary"] = json.dumps({k: str(v) for k, v in summary.items()})
        headers["Content-Type"] = _content_type(fmt)
        if fmt:
            headers["X-ClickHouse-Format"] = fmt
        compression = params.get("enable_http_compression", engine.defaults.get("enable_http_compression", "0"))
        accepted = [c.strip() for c in self.headers.get("Accept-Encoding", "").split(",")]
        codec = next((c for c in accepted if c in CODECS), None) if compression in ("1", "true") else None
        if codec and output:
            output, headers["Content-Encoding"] = CODECS[codec][0](output), codec
        self._send(200, output, headers)

    def _decode(self, body: bytes, params: dict[str, str]) -> bytes:
        """Undo Content-Encoding; move the fields of a multipart form into ``params``."""
        encoding = self.headers.get("Content-Encoding", "identity").lower()
        if encoding not in ("identity", "", *CODECS):
            raise ClickHouseException(f"Code: 1001. DB::Exception: unsupported Content-Encoding {encoding}.")
        body = CODECS[encoding][1](body) if encoding in CODECS else body
        content_type = self.headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data"):
            return body
        form = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        for part in form.get_payload():
            if part.get_filename():
                raise ClickHouseException("Code: 48. DB::Exception: external data is not supported. (NOT_IMPLEMENTED)")
            params[part.get_param("name", header="content-disposition")] = part.get_payload(decode=True).decode()
        return b""

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _content_type(fmt: str | None) -> str:
    name = (fmt or "").lower()
    if name in BINARY_FORMATS:
        return "application/octet-stream"
    if name.startswith("json"):
        return "application/json; charset=UTF-8"
    if name.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    return "text/plain; charset=UTF-8"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, engine: Engine) -> None:
        self.engine = engine
        super().__init__((host, port), Handler)


class ClickHouseShim:
    """The shim in a subprocess on 127.0.0.1, for tests: start, kill, start again on the same port and data."""

    def __init__(self, data_dir: Path, port: int, log_path: Path) -> None:
        self.data_dir, self.port, self.log_path = data_dir, port, log_path
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ClickHouseShim:
        cmd = [sys.executable, "-m", "tests.clickhouse_shim", "--port", str(self.port), "--data", str(self.data_dir)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, cwd=Path(__file__).parent.parent, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the ClickHouse shim exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/ping", timeout=1).text == "Ok.\n":
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the ClickHouse shim did not answer /ping within {timeout}s: {self.log()}")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--data", type=Path, required=True, help="chDB data directory (owned by this process)")
    args = parser.parse_args(argv)
    engine = Engine(args.data)
    server = Server(args.host, args.port, engine)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"ClickHouse shim (chDB {engine.version}) on http://{args.host}:{args.port}, data {args.data}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        engine.close()


if __name__ == "__main__":
    main()
