"""LlamaIndex: a ``FunctionAgent`` (llama_index.core.agent.workflow) on ``OpenAILike`` (Chat Completions),
traced by OpenInference's LlamaIndex instrumentor (``LlamaIndexInstrumentor().instrument(tracer_provider=...)``)
and exported over OTLP/HTTP, as OpenInference's docs set it up. The tool is a plain function, which the agent
wraps in a ``FunctionTool`` and runs in a thread with the caller's context copied.

Whole mode: ``FunctionAgent(streaming=False)``, the run awaited (the model's ``achat_with_tools``); stream
mode: ``streaming=True`` (``astream_chat_with_tools``), the handler's ``stream_events()`` read to its end,
then the handler awaited."""

import asyncio

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai_like import OpenAILike
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, TOOL_DESCRIPTION, parse_case
from tests.conformance.cases.agent_loops import AGENT

case = parse_case()
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-llamaindex"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
LlamaIndexInstrumentor().instrument(tracer_provider=provider)


def get_weather(query: str) -> str:
    """The current weather in a city."""
    return case.get_weather(query)


assert get_weather.__doc__ == TOOL_DESCRIPTION
llm = OpenAILike(
    model=OPENAI_MODEL,
    api_base=case.openai_base_url,
    api_key="fake",
    is_chat_model=True,
    is_function_calling_model=True,
)
weather_agent = FunctionAgent(name=AGENT, tools=[get_weather], llm=llm, streaming=case.stream)


async def run() -> None:
    handler = weather_agent.run(user_msg=PROMPT)
    if case.stream:
        async for _ in handler.stream_events():
            pass
    await handler


# One event loop for both runs, as a service has: the client's pooled connections belong to the loop that opened
# them, and a second asyncio.run() would retry its first request on a dead one.
loop = asyncio.new_event_loop()


def agent() -> None:
    loop.run_until_complete(run())


case.run(agent)
loop.close()
provider.force_flush()
provider.shutdown()
case.finish()
