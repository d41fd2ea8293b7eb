"""The hand-written agent loop the third-party cases share: ask the model, run the tool it asks for,
ask again with the result, until it answers in text. Application code, as a user writes it against
the plain openai and anthropic clients; each case wraps it in its instrumentation's own agent and
tool spans (``run_tool`` is where the tool span opens). Imports only the standard library here, and
the client the caller passes in: the OpenLIT case runs it in a virtualenv of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from tests.conformance.case_kit import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    PROMPT,
    TOOL,
    TOOL_DESCRIPTION,
    TOOL_PARAMETERS,
    Case,
)

RunTool = Callable[[str, dict[str, Any], str], str]  # (tool name, arguments, call id) -> result text
# (span name, attributes) -> a context manager that opens the user's own span: an OpenTelemetry tracer's, Logfire's
OpenSpan = Callable[[str, dict[str, Any]], AbstractContextManager[Any]]
# (client, messages, stream) -> the answer's message: one Chat Completions call, the openai client's unless a case
# makes it another way (LiteLLM's completion)
Chat = Callable[[Any, list[dict[str, Any]], bool], dict[str, Any]]
AGENT = "weather_agent"

OPENAI_TOOLS = [
    {"type": "function", "function": {"name": TOOL, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}
]
ANTHROPIC_TOOLS = [{"name": TOOL, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}]
MAX_TOKENS = 256


class ChatStream:
    """A streamed Chat Completions answer assembled chunk by chunk, the way application code does it (sync or
    async: the caller feeds each chunk as it reads it)."""

    def __init__(self) -> None:
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        for choice in chunk.choices:
            self.content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = self.calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                entry["id"] = call.id or entry["id"]
                entry["function"]["name"] += call.function.name or ""
                entry["function"]["arguments"] += call.function.arguments or ""

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            message["tool_calls"] = list(self.calls.values())
        return message


def openai_chat(client: Any, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One Chat Completions call; a streamed answer is assembled as it is read."""
    kwargs = {"model": OPENAI_MODEL, "messages": messages, "tools": OPENAI_TOOLS}
    if not stream:
        return client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
    answer = ChatStream()
    for chunk in client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
        answer.add(chunk)
    return answer.message()


def openai_agent(client: Any, stream: bool, run_tool: RunTool, chat: Chat = openai_chat) -> str:
    """The agent loop over Chat Completions; returns the final answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        message = chat(client, messages, stream)
        messages.append(message)
        if not message.get("tool_calls"):
            return message.get("content") or ""
        for call in message["tool_calls"]:
            result = run_tool(call["function"]["name"], json.loads(call["function"]["arguments"]), call["id"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def anthropic_message(client: Any, messages: list[dict[str, Any]], stream: bool) -> list[dict[str, Any]]:
    """One Messages call; returns the answer's content blocks. A stream is read event by event."""
    kwargs = {"model": ANTHROPIC_MODEL, "max_tokens": MAX_TOKENS, "messages": messages, "tools": ANTHROPIC_TOOLS}
    if not stream:
        return [block.model_dump(exclude_none=True) for block in client.messages.create(**kwargs).content]
    blocks: dict[int, dict[str, Any]] = {}
    arguments: dict[int, str] = {}
    for event in client.messages.create(**kwargs, stream=True):
        if event.type == "content_block_start":
            blocks[event.index] = event.content_block.model_dump(exclude_none=True)
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            blocks[event.index]["text"] += event.delta.text
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            arguments[event.index] = arguments.get(event.index, "") + event.delta.partial_json
    for index, text in arguments.items():
        blocks[index]["input"] = json.loads(text)
    return [blocks[index] for index in sorted(blocks)]


def anthropic_agent(client: Any, stream: bool, run_tool: RunTool) -> str:
    """The agent loop over Messages; returns the final answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    while True:
        content = anthropic_message(client, messages, stream)
        messages.append({"role": "assistant", "content": content})
        calls = [block for block in content if block["type"] == "tool_use"]
        if not calls:
            return "".join(block.get("text", "") for block in content)
        results = [
            {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": run_tool(call["name"], call["input"], call["id"]),
            }
            for call in calls
        ]
        messages.append({"role": "user", "content": results})


def client_of(case: Case) -> Any:
    """The plain client of the case's provider, pointed at the fake model."""
    if case.provider == "anthropic":
        import anthropic

        return anthropic.Anthropic(base_url=case.llm, api_key="fake", max_retries=0)
    import openai

    return openai.OpenAI(base_url=case.openai_base_url, api_key="fake", max_retries=0)


def agent_loop(case: Case, client: Any, run_tool: RunTool, chat: Chat = openai_chat) -> str:
    """The agent loop over the case's provider (``chat`` makes its Chat Completions calls)."""
    if case.provider == "anthropic":
        return anthropic_agent(client, case.stream, run_tool)
    return openai_agent(client, case.stream, run_tool, chat)


def genai_agent(case: Case, client: Any, open_span: OpenSpan, chat: Chat = openai_chat) -> Callable[[], None]:
    """The agent loop in the user's own agent and tool spans under the GenAI conventions' names: what a
    user of an instrumentation that records model calls only writes (Logfire, OpenLLMetry without
    traceloop-sdk, OpenLIT)."""

    def run_tool(name: str, arguments: dict[str, Any], call_id: str) -> str:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
        with open_span(f"execute_tool {name}", attributes):
            return case.get_weather(arguments["query"])

    def agent() -> None:
        with open_span(f"invoke_agent {AGENT}", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}):
            case.note_trace()
            agent_loop(case, client, run_tool, chat)

    return agent
