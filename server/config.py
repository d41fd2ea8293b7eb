"""Server settings: command-line argument, then environment variable, then default."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentlat.errors import ConfigError

MIB = 1024 * 1024
DEFAULT_DATA_DIR = Path(".agentlat/data")


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 4318
    data_dir: Path = DEFAULT_DATA_DIR
    clickhouse_url: str | None = None
    wal_dir: Path | None = None
    max_body_bytes: int = 20 * MIB
    max_api_body_bytes: int = 1 * MIB
    max_pending_bytes: int = 256 * MIB
    max_inflight_bytes: int = 64 * MIB  # OTLP/HTTP request bodies held at once (docs/reliability.md)
    admission_wait: float = 0.5  # seconds a request may wait for room before it gets 503
    max_decode_queue: int = 16  # requests read and waiting for a decode slot
    body_timeout: float = 30.0  # seconds for a request body to arrive in full
    min_free_bytes: int = 256 * MIB  # below this free on the log's or store's disk, new data gets 503
    batch_rows: int = 50_000
    flush_interval: float = 1.0
    decode_workers: int | None = None  # processes parsing OTLP/JSON, logs, metrics (0: server threads; None: auto)
    ttl_days: int = 180
    trace_grace_seconds: float = 5.0
    trace_settle_seconds: float = 1.0  # for a trace whose every span's parent has arrived (at most the grace)
    partial_trace_timeout_seconds: float = 300.0
    rollup_settle_seconds: float = 5.0
    require_keys: bool = False
    rate_limit: float = 200.0  # requests per second per API key; 0 turns the limit off
    header_timeout: float = 10.0  # seconds for a request head to arrive, from its first byte
    keepalive_timeout: float = 5.0  # seconds an idle keep-alive connection stays open
    max_connections: int = 1000  # open HTTP connections served; requests beyond get 503 (0: no cap)
    max_header_bytes: int = 64 * 1024  # size of a request head (431 beyond)
    max_headers: int = 100  # header fields in a request (431 beyond)
    grpc_port: int = 4317  # 0 turns OTLP/gRPC off
    budgets_path: Path | None = None  # latency budgets served at /api/v1/budgets
    alerts_path: Path | None = None  # alert rules evaluated in the server (docs/alerts.md)

    @property
    def resolved_wal_dir(self) -> Path:
        if self.wal_dir is not None:
            return self.wal_dir
        if self.clickhouse_url:
            return Path(".agentlat/wal")
        return self.data_dir.parent / f"{self.data_dir.name}.wal"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def keys_required(self) -> bool:
        """Keys are required beyond loopback, or when asked for."""
        return self.require_keys or not self.is_loopback

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from AGENTLAT_* variables, with explicit (non-None) overrides on top."""
        env: dict[str, Any] = {}
        for name, var, parse in _ENV:
            raw = os.environ.get(var)
            if raw not in (None, ""):
                env[name] = _parse(var, raw, parse)
        given = {k: v for k, v in overrides.items() if v is not None}
        settings = replace(cls(), **{**env, **given})
        if settings.clickhouse_url and "data_dir" in given:
            raise ConfigError("--data and --clickhouse are alternatives; pass one of them")
        return settings


def _boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _count(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


_EXPECTED = {
    int: "whole number",
    _count: "whole number, 0 or more",
    float: "number",
    _boolean: "boolean (1/0, true/false)",
}


def _parse(var: str, raw: str, parse: Any) -> Any:
    try:
        return parse(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not a valid {_EXPECTED.get(parse, parse.__name__)}") from None


_ENV: tuple[tuple[str, str, Any], ...] = (
    ("host", "AGENTLAT_HOST", str),
    ("port", "AGENTLAT_PORT", int),
    ("data_dir", "AGENTLAT_DATA", Path),
    ("clickhouse_url", "AGENTLAT_CLICKHOUSE_URL", str),
    ("wal_dir", "AGENTLAT_WAL", Path),
    ("max_body_bytes", "AGENTLAT_MAX_BODY_BYTES", int),
    ("max_api_body_bytes", "AGENTLAT_MAX_API_BODY_BYTES", int),
    ("max_pending_bytes", "AGENTLAT_MAX_PENDING_BYTES", int),
    ("max_inflight_bytes", "AGENTLAT_MAX_INFLIGHT_BYTES", _count),
    ("admission_wait", "AGENTLAT_ADMISSION_WAIT", float),
    ("max_decode_queue", "AGENTLAT_MAX_DECODE_QUEUE", _count),
    ("body_timeout", "AGENTLAT_BODY_TIMEOUT", float),
    ("min_free_bytes", "AGENTLAT_MIN_FREE_BYTES", _count),
    ("ttl_days", "AGENTLAT_TTL_DAYS", int),
    ("flush_interval", "AGENTLAT_FLUSH_INTERVAL", float),
    ("batch_rows", "AGENTLAT_BATCH_ROWS", int),
    ("decode_workers", "AGENTLAT_DECODE_WORKERS", _count),
    ("trace_grace_seconds", "AGENTLAT_TRACE_GRACE", float),
    ("trace_settle_seconds", "AGENTLAT_TRACE_SETTLE", float),
    ("partial_trace_timeout_seconds", "AGENTLAT_PARTIAL_TRACE_TIMEOUT", float),
    ("rollup_settle_seconds", "AGENTLAT_ROLLUP_SETTLE", float),
    ("require_keys", "AGENTLAT_REQUIRE_KEYS", _boolean),
    ("rate_limit", "AGENTLAT_RATE_LIMIT", float),
    ("header_timeout", "AGENTLAT_HEADER_TIMEOUT", float),
    ("keepalive_timeout", "AGENTLAT_KEEPALIVE_TIMEOUT", float),
    ("max_connections", "AGENTLAT_MAX_CONNECTIONS", _count),
    ("max_header_bytes", "AGENTLAT_MAX_HEADER_BYTES", int),
    ("max_headers", "AGENTLAT_MAX_HEADERS", int),
    ("grpc_port", "AGENTLAT_GRPC_PORT", int),
    ("budgets_path", "AGENTLAT_BUDGETS", Path),
    ("alerts_path", "AGENTLAT_ALERTS", Path),
)
