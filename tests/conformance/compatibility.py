"""What each instrumentation users already run records, so what agentlat must report from it (else
null): the single table that the conformance suite runs (test_conformance.py) and that the
compatibility table in docs/attributes.md and the README is checked against.

Each entry: the case script under ``cases/``, the table's row name, what a streamed and a whole
run must give, the client it drives, and the virtualenv it needs ("" for the project's own; a Node case,
``cases/<script>.mjs``, runs on the Node.js and npm packages of envs.node_modules())."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tests.conformance.harness import OWN_TRACES, UNRECORDED, UNTIMED, Expect

AGENT = "weather_agent"


@dataclass(frozen=True)
class Instrumentation:
    script: str
    row: str  # its row in the compatibility table
    stream: Expect
    whole: Expect
    provider: str = "openai"  # the client the script drives, for scripts that can drive either
    virtualenv: str = ""  # a name for tests/conformance/envs.py, else the project's interpreter (a .py script)

    @property
    def ident(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.row.lower()).strip("-")


def records(**what: bool) -> Expect:
    """What a streamed run records (nothing unless named); a whole run has no stream timing to record."""
    return Expect(
        agent=AGENT, **{"ttft": False, "decode": False, "itl": False, "tokens": False, "cache": False, **what}
    )


def same(expect: Expect, **changes: object) -> tuple[Expect, Expect]:
    return expect, replace(expect, **changes)


# LiteLLM's streamed calls, each a trace of its own, their spans ended by its logging thread
litellm = records(tokens=True, model_spans=OWN_TRACES, tolerance_ms={"modelTailMs": 15.0})

INSTRUMENTATIONS: tuple[Instrumentation, ...] = (
    # agentlat's SDK: init() instruments the openai client; agent and tool scoped by hand.
    Instrumentation(
        "agentlat_openai",
        "agentlat SDK (openai)",
        *same(records(ttft=True, decode=True, itl=True, tokens=True, cache=True)),
    ),
    # LangGraph create_react_agent on ChatOpenAI, OpenInference's LangChain instrumentor: every run of
    # the graph as a span; the stream flag among the invocation parameters; no chunk timing.
    Instrumentation(
        "langgraph_openinference",
        "LangGraph + OpenInference (langchain)",
        *same(records(tokens=True, cache=True)),
    ),
    # OpenAI Agents SDK + OpenInference: workflow, agent, turns, calls, tools; no stream flag nor
    # chunk timing; cache reads on streamed Chat Completions calls only inside output.value, and
    # dropped by the instrumentor on whole ones.
    Instrumentation(
        "openai_agents_openinference",
        "OpenAI Agents SDK + OpenInference (Chat Completions)",
        *same(records(tokens=True, cache=True, streaming_flag=False), cache=False),
    ),
    Instrumentation(
        "openai_agents_responses_openinference",
        "OpenAI Agents SDK + OpenInference (Responses)",
        *same(records(tokens=True, cache=True, streaming_flag=False)),
    ),
    # pydantic-ai Agent.instrument_all(): GenAI names; on a stream the time to the first chunk
    # (gen_ai.client.operation.time_to_first_chunk) and no stream flag; no decode or ITL.
    Instrumentation("pydantic_ai_agent", "pydantic-ai (openai)", *same(records(ttft=True, tokens=True, cache=True))),
    Instrumentation(
        "pydantic_ai_agent",
        "pydantic-ai (anthropic)",
        *same(records(ttft=True, tokens=True, cache=True)),
        provider="anthropic",
    ),
    # Logfire's integrations: model calls only (agent and tool are the user's logfire.spans with GenAI
    # attributes). A streamed call's span ends at the response headers; a log at the stream's end
    # holds its duration, tokens and cache reads. No stream flag, no chunk timing.
    Instrumentation(
        "logfire_clients",
        "Logfire (openai)",
        *same(records(streaming_flag=False), tokens=True, cache=True),
    ),
    Instrumentation(
        "logfire_clients",
        "Logfire (anthropic)",
        *same(records(streaming_flag=False), tokens=True, cache=True),
        provider="anthropic",
    ),
    # OpenLLMetry openai: one event per SSE chunk, narrowed to the content chunks.
    Instrumentation(
        "openllmetry_clients",
        "OpenLLMetry (openai)",
        *same(records(ttft=True, decode=True, itl=True, tokens=True, cache=True)),
    ),
    # OpenLLMetry anthropic: no chunk events; on a stream one output token too many (it adds
    # message_delta's running total to message_start's), so tokens are checked on whole calls only.
    Instrumentation(
        "openllmetry_clients",
        "OpenLLMetry (anthropic)",
        *same(records(cache=True), tokens=True),
        provider="anthropic",
    ),
    # OpenInference openai: a first-token event (TTFT), the span ends when the stream is consumed
    # (decode); no per-chunk timing. anthropic: no first-token event.
    Instrumentation(
        "openinference_clients",
        "OpenInference (openai)",
        *same(records(ttft=True, decode=True, tokens=True, cache=True)),
    ),
    Instrumentation(
        "openinference_clients",
        "OpenInference (anthropic)",
        *same(records(tokens=True, cache=True)),
        provider="anthropic",
    ),
    # smolagents ToolCallingAgent + OpenInference: run ({agent}.run), steps, model calls (generate,
    # generate_stream: streamed by its name) and tools; tokens on every model span; no chunk timing, and
    # cache reads only inside a Python repr in output.value (not read). Its own virtualenv.
    Instrumentation(
        "smolagents_openinference",
        "smolagents + OpenInference",
        *same(records(tokens=True)),
        virtualenv="smolagents",
    ),
    # LlamaIndex FunctionAgent on OpenAILike + OpenInference's LlamaIndex instrumentor (its own virtualenv): a span
    # per traced method, kind by the object (FunctionAgent.run and its steps CHAIN: no agent, its name only inside
    # output.value reprs), OpenAILike._prepare_chat_with_tools (kind LLM, no call: role other), each call twice,
    # OpenAILike.achat/astream_chat around the OpenAI class's own. The outer view (the call here) has the stream
    # flag (by its name) and, on whole calls, cache reads from output.value; the inner one the first-token event
    # and, on whole calls, the token counts. A stream's spans end when it is returned, before its first chunk, and
    # nothing times the rest of the stream (the agent's step reads it): a streamed run's split is incomplete.
    Instrumentation(
        "llamaindex_openinference",
        "LlamaIndex + OpenInference",
        replace(records(), agent="", model_spans=UNTIMED),
        replace(records(cache=True), agent=""),
        virtualenv="llamaindex",
    ),
    # Google ADK 2.13's own tracing (its own virtualenv: it wants opentelemetry <= 1.44), through google-genai:
    # GenAI names, tokens and cache reads on generate_content; no stream flag nor chunk timing. Schema v2 (the
    # default) roots the run in invoke_workflow; v1 (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1) in "invocation",
    # with call_llm wrappers (no operation name: role other) that stay open while the tool runs.
    Instrumentation(
        "adk_agent",
        "Google ADK (schema v2)",
        *same(records(tokens=True, cache=True, streaming_flag=False)),
        virtualenv="adk",
    ),
    Instrumentation(
        "adk_agent_schema_v1",
        "Google ADK (schema v1)",
        *same(records(tokens=True, cache=True, streaming_flag=False)),
        virtualenv="adk",
    ),
    # A tool called over MCP (the mcp SDK 2.x's own spans; the server in its own process over stdio) inside
    # the user's execute_tool span: one call seen three times. Model calls by OpenLLMetry's openai.
    Instrumentation(
        "mcp_agent",
        "MCP (mcp SDK) + OpenLLMetry (openai)",
        *same(records(ttft=True, decode=True, itl=True, tokens=True, cache=True)),
    ),
    # LiteLLM's built-in "otel" callback (its own virtualenv): tokens and a stream flag, no chunk timing. A streamed
    # call's success handler runs on LiteLLM's logging thread, with no context: its litellm_request span is the
    # root of a trace of its own (the agent's trace: split incomplete), ending 9-11 ms after the stream. A whole
    # call's handler runs in the caller's context: no span of its own, the call's attributes (gen_ai.operation.name
    # chat included) written onto the current span, the user's invoke_agent span (an agent still: its name says
    # so), and its raw_gen_ai_request span (the HTTP request, with usage and cache reads) inside it. Under the latest
    # GenAI conventions (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental) a stream's span is "chat {model}"
    # and a whole call leaves no span of its interval at all: split incomplete.
    Instrumentation(
        "litellm_otel",
        "LiteLLM (otel callback)",
        litellm,
        records(tokens=True, cache=True),
        virtualenv="litellm",
    ),
    Instrumentation(
        "litellm_semconv",
        "LiteLLM (otel callback, latest GenAI semconv)",
        *same(litellm, model_spans=UNRECORDED, tolerance_ms={}),
        virtualenv="litellm",
    ),
    # Vercel AI SDK 6 (Node, cases/vercel_ai.mjs: Node.js from PyPI and npm packages of its own, envs.node_modules()),
    # its own telemetry: the streamText/generateText run (the agent, named by its functionId), a doStream/doGenerate
    # span per step, ai.toolCall spans beside them (children of the run); tokens and cache reads on every call; on a
    # stream, ai.response.msToFirstChunk (TTFT) and msToFinish (decode's end). A streamed step that calls a tool holds
    # its finish chunk until the tool's result is in: its doStream span and msToFinish end with the tool, so such a
    # step states no decode, and the tool's start (ai.toolCall.id, named in ai.response.toolCalls) ends its stream.
    Instrumentation(
        "vercel_ai",
        "Vercel AI SDK 6 (Node)",
        *same(records(ttft=True, decode=True, tokens=True, cache=True, decode_with_tools=False)),
    ),
    # OpenLIT 1.44 (its own virtualenv: it wants openai<3): time_to_first_token on a stream, its clock
    # started when the call returns the stream (2.5-4 ms short); its time_per_output_token averages
    # every chunk's gap and is no ITL; cache reads on whole calls only.
    Instrumentation(
        "openlit_openai",
        "OpenLIT (openai)",
        *same(records(ttft=True, tokens=True, tolerance_ms={"TtftMs": 6.0}), cache=True),
        virtualenv="openlit",
    ),
)
