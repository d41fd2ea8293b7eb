"""pydantic-ai: an ``Agent`` with a tool on its OpenAI Chat Completions model or its Anthropic model,
every agent instrumented (``Agent.instrument_all``) with an OpenTelemetry tracer provider that exports
OTLP/HTTP to the collector; ``run_sync`` for a whole answer, ``run_stream_sync`` (text streamed as it
arrives) for a streamed one."""

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings

from tests.conformance.case_kit import ANTHROPIC_MODEL, OPENAI_MODEL, PROMPT, parse_case
from tests.conformance.cases.agent_loops import AGENT

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": f"conformance-pydantic-ai-{case.provider}"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))


def get_weather(query: str) -> str:
    """The current weather in a city.

    Args:
        query: the city
    """
    return case.get_weather(query)


if case.provider == "anthropic":
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    model = AnthropicModel(ANTHROPIC_MODEL, provider=AnthropicProvider(base_url=case.llm, api_key="fake"))
else:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(OPENAI_MODEL, provider=OpenAIProvider(base_url=case.openai_base_url, api_key="fake"))
weather_agent = Agent(model, name=AGENT, tools=[get_weather])


def agent() -> None:
    if not case.stream:
        weather_agent.run_sync(PROMPT)
        return
    result = weather_agent.run_stream_sync(PROMPT)
    for _ in result.stream_text(delta=True):
        pass


case.run(agent)
provider.shutdown()
case.finish()
