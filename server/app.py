"""The collector's FastAPI application: OTLP receiver, query API, keys and health checks.

``create_app`` takes its parts as arguments (settings, optionally a store) so tests and
other deployments can swap one without monkeypatching. It is the composition root: the
only place that also mounts routes of the alerts package.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentlat import __version__
from agentlat.alerts.service import AlertService
from agentlat.api.windows import TimeRangeError
from agentlat.budgets.model import Budgets
from agentlat.collector.analysis.assembler import TraceAssembler
from agentlat.collector.analysis.rollups import RollupScheduler, minutes_of
from agentlat.collector.ingest.admission import AdmissionGate
from agentlat.collector.ingest.diskspace import DiskGuard
from agentlat.collector.ingest.otlp import Limits
from agentlat.collector.ingest.pipeline import IngestPipeline
from agentlat.collector.ingest.wal import WriteAheadLog
from agentlat.collector.metrics import CollectorMetrics
from agentlat.collector.requests import Ingestor, default_decode_workers
from agentlat.errors import ConfigError
from agentlat.server.api_guard import ApiGuard
from agentlat.server.auth import Authenticator, AuthError, KeyRing, RateLimiter
from agentlat.server.config import Settings
from agentlat.server.otlp_grpc import start_grpc_server
from agentlat.server.otlp_http import OtlpHttpReceiver, ReceiveLimits
from agentlat.server.request_log import RequestLog
from agentlat.server.routes import ROUTERS
from agentlat.server.routes.budgets import watch_budgets
from agentlat.server.routes.deps import caller_of, project_of
from agentlat.shared.yamlfile import WatchedFile
from agentlat.store import Store, StoreError, StoreUnavailable, open_store

log = logging.getLogger("agentlat.collector")


def make_authenticator(settings: Settings, store: Store) -> Authenticator:
    """Keys are checked when required; refuse to start when they are required but none exist."""
    if not settings.keys_required:
        return Authenticator(None)
    keys = KeyRing(store)
    if keys.load() == 0:
        raise ConfigError(
            f"API keys are required (binding {settings.host}) but none exist. Create an admin key first: "
            f"agentlat keys create --admin --project default --data {settings.data_dir}"
        )
    return Authenticator(keys, RateLimiter(settings.rate_limit, burst=max(settings.rate_limit * 2, 1)))


def _local_directories(settings: Settings) -> list[Path]:
    """Where data lands on this machine's disks: the log, and the embedded store's directory."""
    return [settings.resolved_wal_dir] + ([] if settings.clickhouse_url else [settings.data_dir])


@dataclass
class ServerParts:
    """What one server runs: the ingest path and its background threads, alerting, and the
    objects the routers' dependencies read from ``app.state`` (server/routes/deps.py)."""

    settings: Settings
    store: Store
    authenticator: Authenticator
    budgets: WatchedFile[Budgets] | None
    pipeline: IngestPipeline
    assembler: TraceAssembler
    rollups: RollupScheduler
    alerting: AlertService | None
    metrics: CollectorMetrics
    ingestor: Ingestor
    otlp_receiver: OtlpHttpReceiver

    def start(self) -> Any:
        """Start the background work; returns the gRPC server when one is configured."""
        self.pipeline.start()
        self.assembler.recover()
        self.assembler.start()
        self.rollups.start()
        settings = self.settings
        grpc_server = None
        if settings.grpc_port:
            grpc_server = start_grpc_server(
                settings.host, settings.grpc_port, self.ingestor, self.authenticator, settings.max_body_bytes
            )
        if self.alerting is not None:
            self.alerting.start()
        log.info("store: %s; write-ahead log: %s", self.store.description, settings.resolved_wal_dir)
        return grpc_server

    def stop(self, grpc_server: Any) -> None:
        if self.alerting is not None:
            self.alerting.stop()
        if grpc_server is not None:
            grpc_server.stop(grace=5).wait()
        self.ingestor.close()
        self.pipeline.stop()
        self.assembler.stop()
        self.rollups.stop()
        self.store.close()


def build_parts(settings: Settings, store: Store) -> ServerParts:
    """Wire the ingest path: log → writer → store, then trace analysis and rollups on what was written."""
    authenticator = make_authenticator(settings, store)
    budgets = watch_budgets(settings.budgets_path)  # a broken budgets file stops the server here
    # Spans the store's TTL would drop at once are rejected (partial_success), not logged and stored.
    limits = Limits(retention_days=store.spans_retention_days() or 0)
    pipeline = IngestPipeline(
        store,
        WriteAheadLog(settings.resolved_wal_dir),
        max_pending_bytes=settings.max_pending_bytes,
        batch_rows=settings.batch_rows,
        flush_interval=settings.flush_interval,
        disk=DiskGuard(_local_directories(settings), settings.min_free_bytes),
        limits=limits,
    )
    rollups = RollupScheduler(store, settle_seconds=settings.rollup_settle_seconds)
    assembler = TraceAssembler(
        store,
        grace_seconds=settings.trace_grace_seconds,
        settle_seconds=settings.trace_settle_seconds,
        partial_timeout_seconds=settings.partial_trace_timeout_seconds,
        on_analysed=rollups.mark,
    )
    pipeline.on_written(assembler.observe)
    pipeline.on_written(lambda batch: rollups.mark(minutes_of(batch)))
    alerting = AlertService(store, settings.alerts_path) if settings.alerts_path else None
    metrics = CollectorMetrics(pipeline, assembler, rollups)
    workers = default_decode_workers() if settings.decode_workers is None else settings.decode_workers
    ingestor = Ingestor(pipeline, limits, metrics, workers)
    gate = AdmissionGate(settings.max_inflight_bytes, settings.admission_wait)
    metrics.inflight_bytes.set_function(lambda: gate.used)
    receive = ReceiveLimits(settings.max_body_bytes, settings.body_timeout, settings.max_decode_queue)
    receiver = OtlpHttpReceiver(ingestor, receive, gate, project_of)
    return ServerParts(
        settings, store, authenticator, budgets, pipeline, assembler, rollups, alerting, metrics, ingestor, receiver
    )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    parts: ServerParts = app.state.parts
    grpc_server = parts.start()
    yield
    parts.stop(grpc_server)


def create_app(settings: Settings, store: Store | None = None) -> FastAPI:
    store = store or open_store(settings.data_dir, settings.clickhouse_url, settings.ttl_days)
    parts = build_parts(settings, store)
    app = FastAPI(
        title="agentlat",
        version=__version__,
        description="OTLP trace receiver and latency query API for LLM agents.",
        lifespan=_lifespan,
    )
    app.state.parts = parts
    for name in ("store", "authenticator", "budgets", "alerting", "pipeline", "metrics", "otlp_receiver"):
        setattr(app.state, name, getattr(parts, name))  # what the routers' dependencies read
    for router in ROUTERS:
        app.include_router(router)
    _add_error_handlers(app)
    app.add_middleware(ApiGuard, authenticate=caller_of, max_body_bytes=settings.max_api_body_bytes)
    app.add_middleware(RequestLog)  # outermost: it sees the status of every answer, the guard's included
    return app


MAX_MESSAGE_CHARS = 1000  # an error never echoes a large input back


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    if len(message) > MAX_MESSAGE_CHARS:
        message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message):,} characters)"
    return JSONResponse({"error": {"status": status, "message": message}}, status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AuthError)
    async def auth_error(request: Request, exc: AuthError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        if exc.status == 401:
            headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
        return _error(exc.status, exc.message, headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return _error(400, "; ".join(parts))

    @app.exception_handler(TimeRangeError)
    async def time_range_error(request: Request, exc: TimeRangeError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(StoreUnavailable)
    async def store_down(request: Request, exc: StoreUnavailable) -> JSONResponse:
        return _error(503, f"the store is unavailable: {exc}", {"Retry-After": "5"})

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        log.error("query failed: %s", exc)
        return _error(500, "the query failed in the store; see the server log")
