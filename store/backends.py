"""Two ways to reach ClickHouse behind one small interface: embedded chDB or a server.

Both take the same SQL with ClickHouse's server-side parameters (``{name:Type}``) and
exchange data as Arrow, so every query in ``queries.py`` runs unchanged on either.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import queue
import re
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from agentlat.errors import AgentlatError


class StoreError(AgentlatError):
    """The store rejected a statement or could not be reached."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; the caller may retry later."""


class StoreInUse(StoreError):
    """Another process has the embedded store's directory open (chDB opens one in one process only)."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir, self.pid = data_dir, pid
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"the embedded store at {data_dir} is open in {holder} (an agentlat server?): "
            "stop it, or pass --data with another directory"
        )


def holder_of(data_dir: Path) -> int | None:
    """The pid of another process that has ``data_dir`` open as a chDB store, else None.

    ClickHouse locks ``<data_dir>/status`` (flock) while it runs and writes its pid there; the
    lock is probed and released at once, so nothing is held. This process's own store is no obstacle.
    """
    status = data_dir / "status"
    try:
        with status.open("rb") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                match = re.match(rb"PID: (\d+)", file.read(64))
                pid = int(match.group(1)) if match else 0
                return None if pid == os.getpid() else pid
            fcntl.flock(file, fcntl.LOCK_UN)
    except FileNotFoundError:
        pass
    return None


Params = dict[str, Any]
Settings = Mapping[str, int]  # ClickHouse settings of one statement


class Backend(Protocol):
    name: str

    def execute(self, sql: str, params: Params | None = None) -> None: ...

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table: ...

    def insert_arrow(self, table: str, data: pa.Table, settings: Settings | None = None) -> None: ...

    def run_local(self, sql: str) -> pa.Table:
        """Run a statement that reads no table (it parses a file) on a ClickHouse engine in this process."""
        ...

    def close(self) -> None: ...


def to_arrow_stream(data: pa.Table) -> bytes:
    """A table as Arrow IPC stream bytes (the ``ArrowStream`` format of ClickHouse)."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return sink.getvalue()


def from_arrow_stream(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


class ChdbBackend:
    """In-process ClickHouse. A data directory can be open in one process only.

    chDB runs one statement at a time per connection handle, and handles to the same data
    directory run in parallel, so the backend keeps a small pool of handles: a dashboard's
    concurrent queries and the ingest writer's inserts do not wait for each other.
    """

    name = "chdb"

    def __init__(self, data_dir: Path, connections: int = 4) -> None:
        import chdb

        data_dir.mkdir(parents=True, exist_ok=True)
        if (pid := holder_of(data_dir)) is not None:
            raise StoreInUse(data_dir, pid)  # before chDB prints its own lock error on stderr
        try:
            handles = [chdb.connect(str(data_dir)) for _ in range(max(connections, 1))]
        except Exception as exc:
            raise StoreError(
                f"cannot open the embedded store at {data_dir}: {exc}. "
                "Is another agentlat server using this data directory? "
                "Stop it or pass --data with another directory."
            ) from None
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        for handle in handles:
            self._idle.put(handle)
        self._size = len(handles)
        self.data_dir = data_dir
        _open_chdb_stores.add(self)

    @contextmanager
    def _handle(self) -> Iterator[Any]:
        handle = self._idle.get()
        try:
            yield handle
        finally:
            self._idle.put(handle)

    def execute(self, sql: str, params: Params | None = None) -> None:
        self._run(sql, "Null", params)

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table:
        raw = self._run(sql, "ArrowStream", params)
        payload = raw.bytes()
        if not payload:
            return pa.table({})
        return from_arrow_stream(payload)

    def insert_arrow(self, table: str, data: pa.Table, settings: Settings | None = None) -> None:
        # Not chDB's send_insert: when a part cannot be written (a full disk) it still reports the
        # rows written and they are lost silently. INSERT ... SELECT from the Arrow table raises.
        arrow_batch = data  # noqa: F841 - chDB's Python() table function finds it by name in this frame
        columns = ", ".join(f"`{name}`" for name in data.column_names)
        clause = ", ".join(f"{name} = {int(value)}" for name, value in (settings or {}).items())
        with self._handle() as handle:
            try:
                handle.query(
                    f"INSERT INTO {table} ({columns}) SELECT * FROM Python(arrow_batch)"
                    + (f" SETTINGS {clause}" if clause else "")
                )
            except Exception as exc:
                raise _chdb_error(f"insert into {table} failed: {exc}") from None

    def run_local(self, sql: str) -> pa.Table:
        return self.query_arrow(sql)

    def _run(self, sql: str, fmt: str, params: Params | None) -> Any:
        bound = {k: _chdb_param(v) for k, v in (params or {}).items()}
        with self._handle() as handle:
            try:
                return handle.query(sql, fmt, params=bound)
            except Exception as exc:
                _discard_partial_result(handle)
                raise _chdb_error(str(exc)) from None

    def close(self) -> None:
        """Close every handle, waiting for statements still running. Later calls fail with StoreError."""
        handles = [self._idle.get() for _ in range(self._size)]
        for handle in handles:
            handle.close()
            self._idle.put(handle)
        _open_chdb_stores.discard(self)


# chDB runs one data directory per process: work that reads no table runs on an open embedded store's
# engine when there is one (run_local_chdb).
_open_chdb_stores: weakref.WeakSet[ChdbBackend] = weakref.WeakSet()


def run_local_chdb(sql: str) -> pa.Table:
    """Run a statement that reads no table on chDB in this process: an open embedded store's engine, else
    an in-memory one opened for the statement (~30 ms), so that a store opened later may take its path."""
    for store in list(_open_chdb_stores):
        return store.query_arrow(sql)
    import chdb

    connection = chdb.connect(":memory:")
    try:
        payload = connection.query(sql, "ArrowStream").bytes()
    except Exception as exc:
        raise _chdb_error(str(exc)) from None
    finally:
        connection.close()
    return from_arrow_stream(payload) if payload else pa.table({})


def _discard_partial_result(handle: Any) -> None:
    """After a statement fails while its ArrowStream result is being written, chDB 4.4 hands what it had
    written to the handle's next statement instead of that statement's own result: a statement that
    answers nothing takes it here."""
    with contextlib.suppress(Exception):  # an unusable handle: its next statement reports that
        handle.query("SELECT 1", "Null")


# chDB raises plain exceptions; these say "not now" (the disk is full) rather than "never".
_CHDB_TRANSIENT = ("No space left on device", "NOT_ENOUGH_SPACE", "Cannot reserve", "Not enough space")


def _chdb_error(message: str) -> StoreError:
    transient = any(marker in message for marker in _CHDB_TRANSIENT)
    return (StoreUnavailable if transient else StoreError)(message)


def _chdb_param(value: Any) -> Any:
    """chDB takes arrays as ClickHouse literals and strings in the Escaped format (clickhouse-connect does both).

    Unescaped, a backslash, tab or newline in a filter value failed the query (a 500).
    """
    if isinstance(value, list | tuple):
        return "[" + ",".join(_quote(v) for v in value) + "]"
    if isinstance(value, str):
        return "".join("\\" + c if c in "\\\t\n" else c for c in value)
    return value


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


class ClickHouseBackend:
    """A ClickHouse server or cluster through clickhouse-connect (HTTP interface).

    The database named in the URL is created when it does not exist yet (as the OpenTelemetry
    Collector's ClickHouse exporter does), so a fresh server needs no manual step.

    Calls are not serialised: without a session id clickhouse-connect's client is thread-safe,
    and a slow insert must not hold up queries and health checks behind it.
    """

    name = "clickhouse"

    def __init__(self, url: str) -> None:
        from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

        try:
            try:
                self._client = _connect(url)
            except DatabaseError as exc:
                if getattr(exc, "code", None) != _UNKNOWN_DATABASE or isinstance(exc, OperationalError):
                    raise
                _create_database(url)
                self._client = _connect(url)
        except OperationalError as exc:
            raise StoreUnavailable(
                f"cannot reach ClickHouse at {_redact(url)}: {exc}. "
                "Check the URL (http://user:password@host:8123/database) and that the server is up."
            ) from None
        except DatabaseError as exc:
            raise StoreError(f"ClickHouse at {_redact(url)} refused the connection: {exc}") from None

    def execute(self, sql: str, params: Params | None = None) -> None:
        self._call(self._client.command, sql, parameters=params or None)

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table:
        return self._call(self._client.query_arrow, sql, parameters=params or None)

    def insert_arrow(self, table: str, data: pa.Table, settings: Settings | None = None) -> None:
        self._call(self._client.insert_arrow, table, data, settings=dict(settings or {}))

    def run_local(self, sql: str) -> pa.Table:
        return run_local_chdb(sql)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            raise StoreUnavailable(str(exc)) from None
        except DatabaseError as exc:
            if getattr(exc, "code", None) in _TRANSIENT_CODES:
                raise StoreUnavailable(str(exc)) from None
            raise StoreError(str(exc)) from None

    def close(self) -> None:
        self._client.close()


_UNKNOWN_DATABASE = 81
# Server errors that say "not now" rather than "never": overload, timeouts, replicas or Keeper away.
_TRANSIENT_CODES = frozenset(
    {
        159,  # TIMEOUT_EXCEEDED
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS
        999,  # KEEPER_EXCEPTION
    }
)


def _connect(url: str) -> Any:
    import clickhouse_connect

    # Arguments in the URL's query string (compress=, connect_timeout=, ...) take precedence.
    return clickhouse_connect.get_client(dsn=url, autogenerate_session_id=False)


def _create_database(url: str) -> None:
    """``CREATE DATABASE IF NOT EXISTS`` for the database the URL names, through a client without one."""
    from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

    from clickhouse_connect.driver.binding import quote_identifier

    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "database"]
    database = dict(parse_qsl(parts.query)).get("database") or unquote(parts.path[1:].split("/")[0])
    client = _connect(parts._replace(path="/", query=urlencode(query)).geturl())
    try:
        client.command(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
    finally:
        client.close()


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a message or a log."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
