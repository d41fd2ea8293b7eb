"""The collector's FastAPI application: OTLP receiver, query API, keys and health checks.

``create_app`` takes its parts as arguments (settings, optionally a store) so tests and
other deployments can swap one without monkeypatching. It is the composition root: the
only place that also mounts routes of the alerts package.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from agentlat import __version__
from agentlat.alerts.service import AlertService
from agentlat.api.models import Health, Readiness
from agentlat.api.windows import TimeRangeError
from agentlat.collector.admission import AdmissionGate
from agentlat.collector.assembler import TraceAssembler
from agentlat.collector.diskspace import DiskGuard
from agentlat.collector.ingest import Ingestor, default_decode_workers
from agentlat.collector.metrics import CONTENT_TYPE, CollectorMetrics
from agentlat.collector.otlp import Limits
from agentlat.collector.pipeline import IngestPipeline
from agentlat.collector.rollups import RollupScheduler, minutes_of
from agentlat.collector.wal import WriteAheadLog
from agentlat.errors import ConfigError
from agentlat.server import otlp_http as receiver
from agentlat.server.api_guard import ApiGuard
from agentlat.server.auth import Authenticator, AuthError, KeyRing, RateLimiter
from agentlat.server.config import Settings
from agentlat.server.otlp_grpc import start_grpc_server
from agentlat.server.routes import ROUTERS
from agentlat.server.routes.budgets import watch_budgets
from agentlat.server.routes.deps import caller_of, project_of
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


def create_app(settings: Settings, store: Store | None = None) -> FastAPI:
    store = store or open_store(settings.data_dir, settings.clickhouse_url, settings.ttl_days)
    authenticator = make_authenticator(settings, store)
    budgets = watch_budgets(settings.budgets_path)  # a broken budgets file stops the server here

    pipeline = IngestPipeline(
        store,
        WriteAheadLog(settings.resolved_wal_dir),
        max_pending_bytes=settings.max_pending_bytes,
        batch_rows=settings.batch_rows,
        flush_interval=settings.flush_interval,
        disk=DiskGuard(_local_directories(settings), settings.min_free_bytes),
    )

    rollups = RollupScheduler(store, settle_seconds=settings.rollup_settle_seconds)
    assembler = TraceAssembler(
        store,
        grace_seconds=settings.trace_grace_seconds,
        partial_timeout_seconds=settings.partial_trace_timeout_seconds,
        on_analysed=rollups.mark,
    )
    pipeline.on_written(assembler.observe)
    pipeline.on_written(lambda batch: rollups.mark(minutes_of(batch)))
    alerting = AlertService(store, settings.alerts_path) if settings.alerts_path else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pipeline.start()
        assembler.recover()
        assembler.start()
        rollups.start()
        grpc_server = None
        if settings.grpc_port:
            grpc_server = start_grpc_server(
                settings.host, settings.grpc_port, app.state.ingestor, authenticator, settings.max_body_bytes
            )
        if alerting is not None:
            alerting.start()
        log.info("store: %s; write-ahead log: %s", store.description, settings.resolved_wal_dir)
        yield
        if alerting is not None:
            alerting.stop()
        if grpc_server is not None:
            grpc_server.stop(grace=5).wait()
        ingestor.close()
        pipeline.stop()
        assembler.stop()
        rollups.stop()
        store.close()

    app = FastAPI(
        title="agentlat",
        version=__version__,
        description="OTLP trace receiver and latency query API for LLM agents.",
        lifespan=lifespan,
    )
    # What the routers' dependencies read (server/routes/deps.py).
    app.state.store = store
    app.state.authenticator = authenticator
    app.state.budgets = budgets
    app.state.alerting = alerting
    app.state.pipeline = pipeline
    app.state.assembler = assembler
    app.state.rollups = rollups
    metrics = CollectorMetrics(pipeline, assembler, rollups)
    workers = default_decode_workers() if settings.decode_workers is None else settings.decode_workers
    # Spans the store's TTL would drop at once are rejected (partial_success), not logged and stored.
    ingestor = Ingestor(pipeline, Limits(retention_days=store.spans_retention_days() or 0), metrics, workers)
    app.state.ingestor = ingestor
    gate = AdmissionGate(settings.max_inflight_bytes, settings.admission_wait)
    metrics.inflight_bytes.set_function(lambda: gate.used)
    limits = receiver.ReceiveLimits(settings.max_body_bytes, settings.body_timeout, settings.max_decode_queue)
    app.include_router(receiver.make_router(ingestor, limits, gate, project_of))
    for router in ROUTERS:
        app.include_router(router)
    _add_health(app, store, pipeline)
    _add_metrics(app, metrics, authenticator)
    _add_error_handlers(app)
    app.add_middleware(ApiGuard, authenticate=caller_of, max_body_bytes=settings.max_api_body_bytes)
    return app


def _add_health(app: FastAPI, store: Store, pipeline: IngestPipeline) -> None:
    @app.get("/healthz", tags=["health"], summary="the process is up", response_model=Health)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="the store answers and the writer runs",
        responses={200: {"model": Readiness}, 503: {"model": Readiness, "description": "not ready: see problems"}},
    )
    async def readyz() -> JSONResponse:
        problems = []
        try:
            await asyncio.wait_for(run_in_threadpool(store.ping), timeout=5)
        except TimeoutError:
            problems.append("store: no answer within 5 s")
        except StoreError as exc:
            problems.append(f"store: {exc}")
        pipeline.ensure_writer()
        writer = pipeline.writer_state()
        if writer != "running":
            problems.append(f"writer: {writer}")
        if shortage := pipeline.disk.shortage() if pipeline.disk else None:
            problems.append(shortage)
        body = {
            "status": "ok" if not problems else "unavailable",
            "problems": problems,
            "pending_bytes": pipeline.pending_bytes,
            "writer": writer,
        }
        return JSONResponse(body, status_code=200 if not problems else 503)


def _add_metrics(app: FastAPI, metrics: CollectorMetrics, authenticator: Authenticator) -> None:
    @app.get("/metrics", tags=["health"], summary="the collector's own metrics (Prometheus text format)")
    async def prometheus(request: Request) -> Response:
        if authenticator.keys is not None and not caller_of(request).admin:
            raise HTTPException(403, "metrics need an admin key")
        return Response(metrics.render(), media_type=CONTENT_TYPE)


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
