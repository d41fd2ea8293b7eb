"""LangGraph's prebuilt ReAct agent on ChatOpenAI, traced by OpenInference's LangChain instrumentor
and exported over OTLP/HTTP, as OpenInference's docs set it up."""

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, TOOL_DESCRIPTION, parse_case

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-langgraph"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
LangChainInstrumentor().instrument(tracer_provider=provider)


@tool
def get_weather(query: str) -> str:
    """The current weather in a city."""
    # OpenInference's LangChain tracer does not make its spans current (it never attaches a
    # context from a callback); its get_current_span() is how code inside a run finds its span.
    span = get_current_span()
    case.note_trace(span.get_span_context().trace_id if span is not None else None)
    return case.get_weather(query)


assert get_weather.description == TOOL_DESCRIPTION
model = ChatOpenAI(
    base_url=case.openai_base_url,
    api_key="fake",
    model=OPENAI_MODEL,
    streaming=case.stream,
    stream_usage=True,
    max_retries=0,
)
graph = create_react_agent(model, [get_weather], name="weather_agent")


def agent() -> None:
    graph.invoke({"messages": [{"role": "user", "content": PROMPT}]})


case.run(agent)
provider.force_flush()
provider.shutdown()
case.finish()
