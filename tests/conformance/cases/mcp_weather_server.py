"""The MCP server of the mcp_agent case, launched by the agent over stdio: an ``MCPServer`` (mcp 2.x's
FastMCP) exposing ``get_weather``, with an OpenTelemetry SDK tracer provider exporting OTLP/HTTP. That
is all mcp 2.x asks for: its ``OpenTelemetryMiddleware``, on by default, opens a SERVER span per
request under the trace context the client put in ``params._meta``. The tool's own clock (and the
trace it saw) is appended to --calls, one JSON line per call, for the agent's script to read back."""

import argparse
import json

from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import TOOL, TOOL_DESCRIPTION, Case

parser = argparse.ArgumentParser()
parser.add_argument("--collector", required=True)
parser.add_argument("--calls", required=True)
args = parser.parse_args()

provider = TracerProvider(resource=Resource.create({"service.name": "conformance-mcp-server"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{args.collector}/v1/traces")))
trace.set_tracer_provider(provider)
case = Case(args.collector, "", False, args.calls)
case.measured_from_ns = 1  # the server cannot tell the warm-up from the measured run: it records every call
server = MCPServer("weather")


@server.tool(name=TOOL, description=TOOL_DESCRIPTION)
def get_weather(query: str) -> str:
    answer = case.get_weather(query)
    with open(args.calls, "a") as f:
        f.write(
            json.dumps({**case.tool_calls.pop(), "trace_id": case.trace_ids.pop() if case.trace_ids else None}) + "\n"
        )
    return answer


server.run("stdio")
provider.shutdown()
