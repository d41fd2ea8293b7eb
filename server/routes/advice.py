"""``GET /api/v1/advice``: the advisor's findings, which latency lever each route should pull."""

from typing import Annotated, Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import AdviceResponse
from agentlat.collector.analysis.advisor import advise, route_evidence
from agentlat.server.routes.deps import QUERY_ERRORS, Filter, SourceRule, StoreDep, source, window_of

router = APIRouter(prefix="/api/v1", tags=["query"], responses=QUERY_ERRORS)

Source = Annotated[
    SourceRule,
    source("evidence exact from the spans, or from the rollups (medians estimated); auto: rollups for windows over 6h"),
]


@router.get(
    "/advice",
    summary="which latency lever each route should pull, ranked by expected saving",
    response_model=AdviceResponse,
)
async def advice(store: StoreDep, where: Filter, rule: Source, route: str | None = None) -> dict[str, Any]:
    use_rollups = rule.rollups()
    evidence = await run_in_threadpool(store.advice_evidence, where, use_rollups)
    findings = advise([route_evidence(name, facts) for name, facts in evidence.items()])
    return {
        "source": SourceRule.name(use_rollups),
        "window": window_of(where),
        "findings": [f.as_dict() for f in findings if route in (None, "", f.route)],
    }
