"""agentlat's own SDK: init() auto-instruments the openai client; the agent and tool are scoped by hand."""

from typing import Any

import agentlat
from tests.conformance.case_kit import parse_case
from tests.conformance.cases.agent_loops import AGENT, agent_loop, client_of

case = parse_case()
agentlat.init(service="conformance-agentlat", endpoint=case.collector)
client = client_of(case)


def run_tool(name: str, arguments: dict[str, Any], call_id: str) -> str:
    with agentlat.tool(name, call_id=call_id):
        return case.get_weather(arguments["query"])


def agent() -> None:
    with agentlat.agent(AGENT, route="/weather"):
        case.note_trace()
        agent_loop(case, client, run_tool)


case.run(agent)
agentlat.shutdown()
case.finish()
