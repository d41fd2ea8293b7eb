"""OpenInference's openai or anthropic instrumentation, set up as its docs say (Phoenix's ``register()``
does the same): an OpenInference ``TracerProvider`` registered globally and exporting OTLP/HTTP, then
``OpenAIInstrumentor().instrument(tracer_provider=...)`` (or ``AnthropicInstrumentor``). The agent and
the tool are its tracer's ``@tracer.agent`` and ``@tracer.tool`` decorators (span kinds AGENT and TOOL)."""

from typing import Any

from openinference.instrumentation import TracerProvider
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import TOOL, TOOL_DESCRIPTION, parse_case
from tests.conformance.cases.agent_loops import AGENT, agent_loop, client_of

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": f"conformance-openinference-{case.provider}"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
trace.set_tracer_provider(provider)
if case.provider == "anthropic":
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument(tracer_provider=provider)
else:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("weather-app")
client = client_of(case)


@tracer.tool(name=TOOL, description=TOOL_DESCRIPTION)
def get_weather(query: str) -> str:
    return case.get_weather(query)


def run_tool(name: str, arguments: dict[str, Any], call_id: str) -> str:
    assert name == TOOL, name
    return get_weather(**arguments)


@tracer.agent(name=AGENT)
def agent() -> str:
    case.note_trace()
    return agent_loop(case, client, run_tool)


case.run(agent)
provider.shutdown()
case.finish()
