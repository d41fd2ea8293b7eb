"""agentlat's own SDK: init() auto-instruments the openai client; the agent and tool are scoped by hand."""

import json

import openai

import agentlat
from tests.conformance.case_kit import OPENAI_MODEL, PROMPT, TOOL, TOOL_DESCRIPTION, TOOL_PARAMETERS, parse_case

case = parse_case()
agentlat.init(service="conformance-agentlat", endpoint=case.collector)
client = openai.OpenAI(base_url=case.openai_base_url, api_key="fake", max_retries=0)
tools = [
    {"type": "function", "function": {"name": TOOL, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}}
]


def complete(messages: list) -> dict:
    """One chat call; a streamed answer is assembled the way application code does it."""
    kwargs = {"model": OPENAI_MODEL, "messages": messages, "tools": tools}
    if not case.stream:
        return client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    for chunk in client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                entry["id"] = call.id or entry["id"]
                entry["function"]["name"] += call.function.name or ""
                entry["function"]["arguments"] += call.function.arguments or ""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls.values())
    return message


def agent() -> None:
    with agentlat.agent("weather_agent", route="/weather"):
        case.note_trace()
        messages = [{"role": "user", "content": PROMPT}]
        while True:
            message = complete(messages)
            messages.append(message)
            if not message.get("tool_calls"):
                return
            for call in message["tool_calls"]:
                with agentlat.tool(call["function"]["name"], call_id=call["id"]):
                    result = case.get_weather(json.loads(call["function"]["arguments"])["query"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


case.run(agent)
agentlat.shutdown()
case.finish()
