"""``/api/v1/alerts``: alert rules and their states, recent events with delivery status, and replays.

Every route is scoped to the caller's project. ``GET`` routes answer 404 (in the API's error
shape) while the server runs without a rules file; ``POST /api/v1/alerts/replay`` takes the
rules in its body, so ``agentlat alerts test`` can replay against a server's embedded store.
"""

import os
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from agentlat.alerts import message, views
from agentlat.alerts.evaluator import replay, replay_seconds
from agentlat.alerts.receivers import receiver_names
from agentlat.alerts.rules import AlertRulesError
from agentlat.alerts.rules_file import parse_rules
from agentlat.alerts.service import AlertService, dashboard_url, receivers_summary
from agentlat.api.models import AlertEventsResponse, AlertsResponse, ReplayResponse
from agentlat.api.windows import parse_duration
from agentlat.server.routes.deps import QUERY_ERRORS, Project, StoreDep, errors

router = APIRouter(prefix="/api/v1", tags=["alerts"], responses=QUERY_ERRORS)

NOT_CONFIGURED = (
    "alerting is not configured on this server: start it with `agentlat serve --alerts alerts.yaml` "
    "(or set AGENTLAT_ALERTS); examples/alerts.yaml is a complete rules file (docs/alerts.md)"
)


class ReplayRequest(BaseModel):
    """A rules file to replay over the stored data of the caller's project."""

    rules: str = Field(description="the rules file's YAML text")
    window: str = Field("24h", max_length=32, description="how far back to replay, e.g. 6h, 24h, 7d (at most 30d)")
    file: str = Field("<rules>", max_length=256, description="the file's name, used in validation messages")


async def alert_service(request: Request) -> AlertService | None:
    return request.app.state.alerting


Service = Annotated[AlertService | None, Depends(alert_service)]


def configured(service: AlertService | None) -> AlertService:
    if service is None:
        raise HTTPException(404, NOT_CONFIGURED)
    return service


@router.get(
    "/alerts",
    summary="alert rules, the state of each alert per label set, and recent events",
    response_model=AlertsResponse,
    responses=errors(404),
)
async def alerts(project: Project, store: StoreDep, service: Service) -> dict[str, Any]:
    running = configured(service)
    now = int(time.time())
    events = await run_in_threadpool(store.alerts.events, project, now - 86400, now + 1, 50)
    receivers = receivers_summary(running.config, running.environ)
    with running.evaluator.lock:
        engine, last = running.evaluator.engine, running.evaluator.last
        return views.status_document(engine, project, last, receivers, events)


@router.get(
    "/alerts/events",
    summary="state transitions and notifications (with delivery status)",
    response_model=AlertEventsResponse,
    responses=errors(404),
)
async def events(
    project: Project,
    store: StoreDep,
    service: Service,
    window: Annotated[str, Query(description="trailing window, e.g. 1h, 24h, 7d")] = "24h",
    limit: Annotated[int, Query(ge=1, le=10_000, description="most transitions and notifications")] = 500,
) -> dict[str, Any]:
    configured(service)
    end = int(time.time()) + 1
    start = end - parse_duration(window, "window")
    transitions = await run_in_threadpool(store.alerts.events, project, start, end, limit)
    sent = await run_in_threadpool(store.alerts.notifications, project, start, end, limit)
    return {
        "window": {"length": window, "start": message.iso(start), "end": message.iso(end)},
        "transitions": [views.event_dict(e) for e in transitions],
        "notifications": [views.notification_dict(n) for n in sent],
    }


@router.post(
    "/alerts/replay",
    summary="what the given rules would have fired over the stored data",
    response_model=ReplayResponse,
)
async def replay_rules(project: Project, store: StoreDep, body: ReplayRequest) -> dict[str, Any]:
    seconds = replay_seconds(body.window)
    try:
        config = await run_in_threadpool(parse_rules, body.rules, body.file)
    except AlertRulesError as exc:
        raise HTTPException(400, str(exc)) from None
    end = int(time.time())
    link = dashboard_url(config, os.environ)
    result = await run_in_threadpool(replay, store, config, receiver_names(config), link, end - seconds, end, [project])
    return views.replay_document(result, body.window)
