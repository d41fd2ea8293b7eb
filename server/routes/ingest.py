"""``POST /v1/traces``, ``/v1/logs`` and ``/v1/metrics``: OTLP/HTTP export, one route per signal.

What a request goes through (content type, admission, body limits, decoding, the write-ahead
log) is the app's ``OtlpHttpReceiver`` (``server/otlp_http.py``); the three routes only name
their signal.
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from agentlat.collector.requests import SIGNALS
from agentlat.server.otlp_http import OtlpHttpReceiver

router = APIRouter(tags=["ingest"])


async def get_receiver(request: Request) -> OtlpHttpReceiver:
    return request.app.state.otlp_receiver


Receiver = Annotated[OtlpHttpReceiver, Depends(get_receiver)]


@router.post("/v1/traces", summary="OTLP/HTTP trace export")
async def export_traces(request: Request, receiver: Receiver) -> Response:
    return await receiver.export(request, SIGNALS["traces"])


@router.post("/v1/logs", summary="OTLP/HTTP log export (GenAI events kept, other records counted)")
async def export_logs(request: Request, receiver: Receiver) -> Response:
    return await receiver.export(request, SIGNALS["logs"])


@router.post("/v1/metrics", summary="OTLP/HTTP metric export (gen_ai.* points kept, others counted)")
async def export_metrics(request: Request, receiver: Receiver) -> Response:
    return await receiver.export(request, SIGNALS["metrics"])
