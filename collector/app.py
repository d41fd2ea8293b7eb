"""The collector's FastAPI application: OTLP receiver, query API and health checks.

``create_app`` takes its parts as arguments (a store, a pipeline factory) so tests and
other deployments can swap one without monkeypatching.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentlat import __version__
from agentlat.collector import api, receiver
from agentlat.collector.assembler import TraceAssembler
from agentlat.collector.config import Settings
from agentlat.collector.otlp import Limits
from agentlat.collector.pipeline import IngestPipeline
from agentlat.collector.rollups import RollupScheduler, minutes_of
from agentlat.collector.wal import WriteAheadLog
from agentlat.store import Store, StoreError, StoreUnavailable, open_store

log = logging.getLogger("agentlat.collector")

DEFAULT_PROJECT = "default"


def default_project(request: Request) -> str:
    """Without API keys every caller is in the default project."""
    return DEFAULT_PROJECT


def create_app(
    settings: Settings,
    store: Store | None = None,
    project_of: Callable[[Request], str] = default_project,
) -> FastAPI:
    store = store or open_store(settings.data_dir, settings.clickhouse_url, settings.ttl_days)
    pipeline = IngestPipeline(
        store,
        WriteAheadLog(settings.resolved_wal_dir),
        max_pending_bytes=settings.max_pending_bytes,
        batch_rows=settings.batch_rows,
        flush_interval=settings.flush_interval,
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

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pipeline.start()
        assembler.recover()
        assembler.start()
        rollups.start()
        log.info("store: %s; write-ahead log: %s", store.description, settings.resolved_wal_dir)
        yield
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
    app.state.store = store
    app.state.pipeline = pipeline
    app.state.assembler = assembler
    app.state.rollups = rollups
    config = receiver.ReceiverConfig(settings.max_body_bytes, Limits())
    app.include_router(receiver.make_router(pipeline, config, project_of))
    app.include_router(api.make_router(store, project_of))
    _add_health(app, store, pipeline)
    _add_error_handlers(app)
    return app


def _add_health(app: FastAPI, store: Store, pipeline: IngestPipeline) -> None:
    @app.get("/healthz", tags=["health"], summary="the process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="the store answers and the writer runs")
    async def readyz() -> JSONResponse:
        problems = []
        try:
            store.ping()
        except StoreError as exc:
            problems.append(f"store: {exc}")
        if not pipeline.writer_alive():
            problems.append("writer: not running")
        body = {
            "status": "ok" if not problems else "unavailable",
            "problems": problems,
            "pending_bytes": pipeline.pending_bytes,
        }
        return JSONResponse(body, status_code=200 if not problems else 503)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return _error(400, "; ".join(parts))

    @app.exception_handler(StoreUnavailable)
    async def store_down(request: Request, exc: StoreUnavailable) -> JSONResponse:
        return _error(503, f"the store is unavailable: {exc}", {"Retry-After": "5"})

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        log.error("query failed: %s", exc)
        return _error(500, "the query failed in the store; see the server log")
