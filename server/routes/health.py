"""``/healthz`` (the process is up), ``/readyz`` (the store answers and the writer runs) and
``/metrics`` (the collector's own metrics in Prometheus text format, admin keys only when keys are on)."""

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import Health, Readiness
from agentlat.collector.ingest.pipeline import IngestPipeline
from agentlat.collector.metrics import CONTENT_TYPE, CollectorMetrics
from agentlat.server.routes.deps import AuthenticatorDep, StoreDep, caller_of
from agentlat.store import StoreError

router = APIRouter(tags=["health"])
PING_TIMEOUT = 5  # seconds the store has to answer /readyz


async def get_pipeline(request: Request) -> IngestPipeline:
    return request.app.state.pipeline


async def get_metrics(request: Request) -> CollectorMetrics:
    return request.app.state.metrics


@router.get("/healthz", summary="the process is up", response_model=Health)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="the store answers and the writer runs",
    responses={200: {"model": Readiness}, 503: {"model": Readiness, "description": "not ready: see problems"}},
)
async def readyz(store: StoreDep, pipeline: Annotated[IngestPipeline, Depends(get_pipeline)]) -> JSONResponse:
    problems = []
    try:
        await asyncio.wait_for(run_in_threadpool(store.ping), timeout=PING_TIMEOUT)
    except TimeoutError:
        problems.append(f"store: no answer within {PING_TIMEOUT} s")
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


@router.get("/metrics", summary="the collector's own metrics (Prometheus text format)")
async def prometheus(
    request: Request, authenticator: AuthenticatorDep, metrics: Annotated[CollectorMetrics, Depends(get_metrics)]
) -> Response:
    if authenticator.keys is not None and not caller_of(request).admin:
        raise HTTPException(403, "metrics need an admin key")
    return Response(metrics.render(), media_type=CONTENT_TYPE)
