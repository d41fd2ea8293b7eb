"""smolagents: a ``ToolCallingAgent`` on its ``OpenAIModel`` (Chat Completions), traced by OpenInference's
smolagents instrumentor (``SmolagentsInstrumentor().instrument(tracer_provider=...)``) and exported over
OTLP/HTTP, as OpenInference's docs set it up. The tool is a smolagents ``@tool``.

Whole mode: ``agent.run(PROMPT)`` (the model's ``generate``); stream mode: ``stream_outputs=True`` on the
agent (the model's ``generate_stream``) and ``agent.run(PROMPT, stream=True)`` iterated to its end.
smolagents sends a tool's answer back as a ``user`` message, so the fake (which answers in text only
after a ``role: tool`` message) asks for the tool at every step; after ``max_steps`` the agent asks the
model for a final answer with a plain ``generate`` call (no tools, never streamed)."""

from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from smolagents import OpenAIModel, ToolCallingAgent, tool

from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, parse_case
from tests.conformance.cases.agent_loops import AGENT

MAX_STEPS = 3

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-smolagents"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
SmolagentsInstrumentor().instrument(tracer_provider=provider)


@tool
def get_weather(query: str) -> str:
    """The current weather in a city.

    Args:
        query: the city
    """
    return case.get_weather(query)


model = OpenAIModel(model_id=OPENAI_MODEL, api_base=case.openai_base_url, api_key="fake")
weather_agent = ToolCallingAgent(
    tools=[get_weather], model=model, name=AGENT, max_steps=MAX_STEPS, stream_outputs=case.stream
)


def agent() -> None:
    if not case.stream:
        weather_agent.run(PROMPT)
        return
    for _ in weather_agent.run(PROMPT, stream=True):
        pass


case.run(agent)
provider.force_flush()
provider.shutdown()
case.finish()
