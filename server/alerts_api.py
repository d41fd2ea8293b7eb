"""``/api/v1/alerts``: alert rules and their states, recent events with delivery status, and replays.

Every route is scoped to the caller's project. ``GET`` routes answer 404 (in the API's error
shape) while the server runs without a rules file; ``POST /api/v1/alerts/replay`` takes the
rules in its body, so ``agentlat alerts test`` can replay against a server's embedded store.

No ``from __future__ import annotations`` here: FastAPI resolves the route's annotations,
which name a dependency local to ``make_router``.
"""

import os
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from agentlat.alerts import message, views
from agentlat.alerts.evaluator import replay
from agentlat.alerts.receivers import receiver_names
from agentlat.alerts.rules import AlertRulesError
from agentlat.alerts.rules_file import parse_rules
from agentlat.alerts.service import AlertService, dashboard_url, receivers_summary
from agentlat.store import Store, parse_duration

NOT_CONFIGURED = (
    "alerting is not configured on this server: start it with `agentlat serve --alerts alerts.yaml` "
    "(or set AGENTLAT_ALERTS); examples/alerts.yaml is a complete rules file (docs/alerts.md)"
)
MAX_REPLAY_SECONDS = 30 * 86400


class ReplayRequest(BaseModel):
    """A rules file to replay over the stored data of the caller's project."""

    rules: str = Field(description="the rules file's YAML text")
    window: str = Field("24h", max_length=32, description="how far back to replay, e.g. 6h, 24h, 7d (at most 30d)")
    file: str = Field("<rules>", max_length=256, description="the file's name, used in validation messages")


def make_router(store: Store, service: AlertService | None, project_of: Callable[[Request], str]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["alerts"])
    Project = Annotated[str, Depends(project_of)]

    def configured() -> AlertService:
        if service is None:
            raise HTTPException(404, NOT_CONFIGURED)
        return service

    @router.get("/alerts", summary="alert rules, the state of each alert per label set, and recent events")
    async def alerts(project: Project) -> dict[str, Any]:
        running = configured()
        now = int(time.time())
        events = await run_in_threadpool(store.alerts.events, project, now - 86400, now + 1, 50)
        receivers = receivers_summary(running.config, running.environ)
        with running.evaluator.lock:
            engine, last = running.evaluator.engine, running.evaluator.last
            return views.status_document(engine, project, last, receivers, events)

    @router.get("/alerts/events", summary="state transitions and notifications (with delivery status)")
    async def events(
        project: Project,
        window: Annotated[str, Query(description="trailing window, e.g. 1h, 24h, 7d")] = "24h",
        limit: Annotated[int, Query(ge=1, le=10_000, description="most transitions and notifications")] = 500,
    ) -> dict[str, Any]:
        configured()
        end = int(time.time()) + 1
        start = end - parse_duration(window, "window")
        transitions = await run_in_threadpool(store.alerts.events, project, start, end, limit)
        sent = await run_in_threadpool(store.alerts.notifications, project, start, end, limit)
        return {
            "window": {"length": window, "start": message.iso(start), "end": message.iso(end)},
            "transitions": [views.event_dict(e) for e in transitions],
            "notifications": [views.notification_dict(n) for n in sent],
        }

    @router.post("/alerts/replay", summary="what the given rules would have fired over the stored data")
    async def replay_rules(project: Project, body: ReplayRequest) -> dict[str, Any]:
        seconds = parse_duration(body.window, "window", most=MAX_REPLAY_SECONDS, example="6h, 24h, 7d")
        try:
            config = await run_in_threadpool(parse_rules, body.rules, body.file)
        except AlertRulesError as exc:
            raise HTTPException(400, str(exc)) from None
        end = int(time.time())
        link = dashboard_url(config, os.environ)
        result = await run_in_threadpool(
            replay, store, config, receiver_names(config), link, end - seconds, end, [project]
        )
        return views.replay_document(result, body.window)

    return router
