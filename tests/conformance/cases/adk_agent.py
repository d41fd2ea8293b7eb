"""Google ADK: an ``Agent`` on its ``Gemini`` model (google-genai, ``base_url`` the fake, API key from
GOOGLE_API_KEY) with a plain function tool, run by a ``Runner`` on an ``InMemorySessionService``
(``run_async``; ``RunConfig(streaming_mode=StreamingMode.SSE)`` for a streamed answer). ADK's own
OpenTelemetry tracing, as its docs set it up: a global tracer provider exporting OTLP/HTTP. ADK's
telemetry schema is its env var ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN, read as ADK reads it: unset
(or 2) for the GenAI-semconv spans, 1 for the legacy ones (``adk_agent_schema_v1.py`` sets it)."""

import asyncio
import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import PROMPT, parse_case
from tests.conformance.cases.agent_loops import AGENT

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-adk"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
trace.set_tracer_provider(provider)
os.environ.setdefault("GOOGLE_API_KEY", "fake")

from google.adk.agents import Agent  # noqa: E402  (after the tracer provider, as ADK's docs order it)
from google.adk.agents.run_config import RunConfig, StreamingMode  # noqa: E402
from google.adk.models import Gemini  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402


def get_weather(query: str) -> str:
    """The current weather in a city.

    Args:
        query: the city
    """
    return case.get_weather(query)


weather_agent = Agent(
    name=AGENT,
    model=Gemini(model="gemini-fake-1", base_url=case.llm),
    instruction="Answer questions about the weather with the get_weather tool.",
    tools=[get_weather],
)
sessions = InMemorySessionService()
runner = Runner(app_name="conformance", agent=weather_agent, session_service=sessions)
run_config = RunConfig(streaming_mode=StreamingMode.SSE if case.stream else StreamingMode.NONE)
loop = asyncio.new_event_loop()  # one loop for both runs: the client's connections are kept


async def run_once() -> None:
    session = await sessions.create_session(app_name="conformance", user_id="user")
    message = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    async for _ in runner.run_async(user_id="user", session_id=session.id, new_message=message, run_config=run_config):
        pass


case.run(lambda: loop.run_until_complete(run_once()))
loop.close()
provider.shutdown()
case.finish()
