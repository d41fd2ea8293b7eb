"""OpenLLMetry's openai or anthropic instrumentation (opentelemetry-instrumentation-openai / -anthropic),
set up as its README says: an OpenTelemetry SDK tracer provider exporting OTLP/HTTP, then
``OpenAIInstrumentor().instrument()`` (or ``AnthropicInstrumentor``). Its @workflow/@agent/@tool
decorators live in traceloop-sdk, not in the instrumentation, so the agent and tool spans are opened
with the plain OpenTelemetry tracer under the GenAI conventions' names."""

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import parse_case
from tests.conformance.cases.agent_loops import client_of, genai_agent

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": f"conformance-openllmetry-{case.provider}"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
trace.set_tracer_provider(provider)
if case.provider == "anthropic":
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument()
else:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
tracer = trace.get_tracer("weather-app")
agent = genai_agent(case, client_of(case), lambda name, attrs: tracer.start_as_current_span(name, attributes=attrs))
case.run(agent)
provider.shutdown()
case.finish()
