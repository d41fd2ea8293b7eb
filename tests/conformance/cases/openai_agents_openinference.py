"""The OpenAI Agents SDK on its Chat Completions model, traced by OpenInference's OpenAI Agents
instrumentor and exported over OTLP/HTTP, as OpenInference's docs set it up.

The instrumentor replaces the SDK's own trace processors by default (``exclusive_processor``), so
nothing is exported to OpenAI's tracing backend; ``set_tracing_disabled`` is not called, since it
would stop the SDK's traces reaching OpenInference's processor too.
``openai_agents_responses_openinference`` runs the same agent on the Responses model."""

import asyncio

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, TOOL_DESCRIPTION, parse_case


def main(responses: bool) -> None:
    case = parse_case()
    provider = TracerProvider(resource=Resource.create({"service.name": "conformance-openai-agents"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    @function_tool
    def get_weather(query: str) -> str:
        """The current weather in a city.

        Args:
            query: the city
        """
        return case.get_weather(query)

    assert get_weather.description == TOOL_DESCRIPTION
    client = AsyncOpenAI(base_url=case.openai_base_url, api_key="fake", max_retries=0)
    model_class = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    weather_agent = Agent(
        name="weather_agent",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=model_class(model=OPENAI_MODEL, openai_client=client),
        # The SDK asks a stream for its usage by default only from api.openai.com; the fake stands in for it.
        model_settings=ModelSettings(include_usage=True),
    )

    async def run() -> None:
        if not case.stream:
            await Runner.run(weather_agent, PROMPT)
            return
        result = Runner.run_streamed(weather_agent, PROMPT)
        async for _ in result.stream_events():
            pass

    with asyncio.Runner() as loop:  # one event loop, as in a service: the client's connections live in it
        case.run(lambda: loop.run(run()))
    provider.force_flush()
    provider.shutdown()
    case.finish()


if __name__ == "__main__":
    main(responses=False)
