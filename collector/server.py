"""Run the collector app under uvicorn with a start-up banner that says where to look."""

from __future__ import annotations

from pathlib import Path

import uvicorn
from rich.console import Console

from agentlat.collector.app import create_app
from agentlat.collector.config import Settings


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
) -> None:
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
    app = create_app(settings)
    base = f"http://{settings.host}:{settings.port}"
    grpc = f"{settings.host}:{settings.grpc_port}" if settings.grpc_port else "off"
    keys = "required" if settings.keys_required else "off (loopback only)"
    console.print(
        f"[bold green]agentlat[/] collector on [bold]{base}[/]\n"
        f"  OTLP/HTTP  {base}/v1/traces  (set OTEL_EXPORTER_OTLP_ENDPOINT={base})\n"
        f"  OTLP/gRPC  {grpc}\n"
        f"  query API  {base}/api/v1  (docs: {base}/docs)\n"
        f"  metrics    {base}/metrics\n"
        f"  store      {app.state.store.description}\n"
        f"  API keys   {keys}"
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=log_level, log_config=None)
