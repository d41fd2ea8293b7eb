"""Run the collector app under uvicorn with a start-up banner that says where to look."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from rich.console import Console

from agentlat.errors import ConfigError
from agentlat.server.app import create_app
from agentlat.server.config import Settings
from agentlat.server.http_limits import HttpLimits
from agentlat.shared.gc_tuning import tune_for_throughput

log = logging.getLogger("agentlat.collector")


def run_server(
    *,
    host: str | None = None,
    port: int | None = None,
    grpc_port: int | None = None,
    budgets_path: Path | None = None,
    alerts_path: Path | None = None,
    data_dir: Path | None = None,
    clickhouse_url: str | None = None,
    require_keys: bool = False,
    log_level: str = "info",
    console: Console,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve until stopped. The banner is printed once the server answers ``/readyz`` (by
    ``announce`` when given: ``agentlat up`` adds what it runs beside)."""
    settings = Settings.from_env(
        host=host,
        port=port,
        grpc_port=grpc_port,
        budgets_path=budgets_path,
        alerts_path=alerts_path,
        data_dir=data_dir,
        clickhouse_url=clickhouse_url,
        require_keys=require_keys or None,
    )
    options = http_options(settings)  # before the store opens: a bad limit is a start-up error
    app = create_app(settings)
    text = banner(settings, app.state.store.description)
    show = announce or (lambda banner_text: console.print(banner_text, soft_wrap=True))  # whole lines, for logs
    when_ready(f"{local_url(settings)}/readyz", lambda: show(text))
    tune_for_throughput()
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level=log_level, log_config=None, access_log=False, **options
    )


def local_url(settings: Settings) -> str:
    """Where this machine reaches the server (loopback when it binds every address)."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}"


def banner(settings: Settings, store: str) -> str:
    base = f"http://{settings.host}:{settings.port}"
    grpc = f"{settings.host}:{settings.grpc_port}" if settings.grpc_port else "off"
    keys = "required" if settings.keys_required else "off (loopback only)"
    extras = [
        f"  budgets    {settings.budgets_path.resolve()}  (GET {base}/api/v1/budgets)" if settings.budgets_path else "",
        f"  alerts     {settings.alerts_path.resolve()}  (GET {base}/api/v1/alerts)" if settings.alerts_path else "",
    ]
    return "\n".join([
        f"[bold green]agentlat[/] collector on [bold]{base}[/]",
        f"  OTLP/HTTP  {base}/v1/traces, /v1/logs, /v1/metrics  (set OTEL_EXPORTER_OTLP_ENDPOINT={base})",
        f"  OTLP/gRPC  {grpc}",
        f"  query API  {base}/api/v1  (docs: {base}/docs)",
        f"  metrics    {base}/metrics",
        f"  store      {store}",
        f"  API keys   {keys}",
        *filter(None, extras),
    ])  # fmt: skip


def when_ready(url: str, then: Callable[[], None], timeout: float = 120.0) -> None:
    """Call ``then`` from a daemon thread once ``url`` answers 200 (a warning if it never does)."""

    def wait() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    then()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        log.warning("not ready after %.0f s: %s does not answer 200", timeout, url)

    threading.Thread(target=wait, name="agentlat-banner", daemon=True).start()


def http_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the connection limits: timeouts, header limits and the connection cap."""
    _check_positive(settings)
    limits = HttpLimits(
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
    )
    # uvicorn answers 503 once the open connections, this one included, reach limit_concurrency.
    # Its backlog (2048) stays: connections not yet accepted cost the kernel, not this process.
    cap = settings.max_connections + 1 if settings.max_connections else None
    return {**limits.uvicorn_options(), "timeout_keep_alive": settings.keepalive_timeout, "limit_concurrency": cap}


_POSITIVE = {
    "header_timeout": "AGENTLAT_HEADER_TIMEOUT",
    "keepalive_timeout": "AGENTLAT_KEEPALIVE_TIMEOUT",
    "body_timeout": "AGENTLAT_BODY_TIMEOUT",
    "max_inflight_bytes": "AGENTLAT_MAX_INFLIGHT_BYTES",
    "max_header_bytes": "AGENTLAT_MAX_HEADER_BYTES",
    "max_headers": "AGENTLAT_MAX_HEADERS",
}


def _check_positive(settings: Settings) -> None:
    for name, var in _POSITIVE.items():
        value = getattr(settings, name)
        if value <= 0:
            raise ConfigError(f"{var}={value!r} is not valid: expected a number above 0")
