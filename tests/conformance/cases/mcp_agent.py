"""An agent whose tool is called over the Model Context Protocol, traced by the mcp SDK's own spans.

mcp 2.x (``mcp`` on PyPI) traces natively: opentelemetry-api is one of its dependencies, its client
opens a CLIENT span ``MCP send {method} {name}`` per request and injects the W3C trace context into
``params._meta``, and its server's ``OpenTelemetryMiddleware`` (on by default) opens a SERVER span under
it. A user only sets up a tracer provider on each side. (OpenLLMetry's opentelemetry-instrumentation-mcp
0.62 fails on mcp 2.x at ``instrument()``, and OpenInference's openinference-instrumentation-mcp only
propagates context, which mcp 2.x does itself.)

The tool lives in an ``MCPServer`` (mcp_weather_server.py, its own process and service) that the agent
launches and talks to over stdio through the SDK's ``Client``, one session for the agent's life. The
agent loop is application code on the plain ``AsyncOpenAI`` client, its model calls traced by
OpenLLMetry's openai instrumentation; the agent and tool spans are the user's own under the GenAI
conventions' names, the ``execute_tool`` span around ``call_tool``. The tool's own clock comes back
from the server through a file."""

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio.from_thread
import openai
from mcp import Client, StdioServerParameters
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, parse_case
from tests.conformance.cases.agent_loops import AGENT, ChatStream

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-mcp-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument()
tracer = trace.get_tracer("weather-app")
llm = openai.AsyncOpenAI(base_url=case.openai_base_url, api_key="fake", max_retries=0)
calls = Path(tempfile.mkdtemp()) / "tool_calls.jsonl"
server_script = str(Path(__file__).with_name("mcp_weather_server.py"))
server = StdioServerParameters(
    command=sys.executable,
    args=[server_script, "--collector", case.collector, "--calls", str(calls)],
    env=dict(os.environ),
)


async def chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One Chat Completions call; a streamed answer is assembled the way application code does it."""
    kwargs = {"model": OPENAI_MODEL, "messages": messages, "tools": tools}
    if not case.stream:
        return (await llm.chat.completions.create(**kwargs)).choices[0].message.model_dump(exclude_none=True)
    answer = ChatStream()
    async for chunk in await llm.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
        answer.add(chunk)
    return answer.message()


async def agent(mcp: Client) -> None:
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT}", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
    ):
        case.note_trace()
        listed = (await mcp.list_tools()).tools
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in listed
        ]
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        while (message := await chat(messages, tools)).get("tool_calls"):
            messages.append(message)
            for call in message["tool_calls"]:
                name = call["function"]["name"]
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call["id"],
                }
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
                    result = await mcp.call_tool(name, json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result.content[0].text})


with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server)) as mcp:
    case.run(lambda: portal.call(agent, mcp))
for line in calls.read_text().splitlines():  # the server has exited (and flushed its spans)
    call = json.loads(line)
    if call["start_ns"] >= case.measured_from_ns:
        case.trace_ids.append(call.pop("trace_id"))  # the trace the tool saw: the agent's, if context propagated
        case.tool_calls.append({**call, "remote": True})  # timed in the server: the agent waits for the round trip
provider.shutdown()
case.finish()
