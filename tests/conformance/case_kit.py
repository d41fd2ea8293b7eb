"""What every conformance case script shares: its arguments, the timed tool, the answer file.

A case script runs one agent the way a user of its instrumentation would write it, in an
interpreter of its own (another virtualenv for OpenLIT), so each instrumentation's global
patches and tracer provider stay out of the others' way. It may import only the standard
library, opentelemetry-api and its own instrumentation: agentlat is not installed there.

    case = parse_case()              # --collector URL --llm URL --stream 0|1 --out FILE [--provider P]
    case.run(agent)                  # agent(): one agent run, with case.get_weather as its tool
    ... flush the instrumentation ...
    case.finish()                    # writes the tool's own clock and the trace id for the test

``run`` runs the agent twice and measures the second run: a service answers many requests, and
the first call of a process pays one-off costs (a client building its response classes takes
about 4 ms on the first chunk) that are not the latency of any later request.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OPENAI_MODEL = "gpt-fake-1"
ANTHROPIC_MODEL = "claude-fake-1"
TOOL = "get_weather"
TOOL_SECONDS = 0.2
PROMPT = "What is the weather in Paris? Use the get_weather tool."
TOOL_DESCRIPTION = "The current weather in a city."
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "the city"}},
    "required": ["query"],
}


@dataclass
class Case:
    collector: str  # base URL of the agentlat collector: OTLP/HTTP goes to {collector}/v1/traces
    llm: str  # base URL of the fake model server (OpenAI base_url is {llm}/v1)
    stream: bool
    out: str
    provider: str = "openai"  # the client a case drives, where it can drive either: openai | anthropic
    # the tool's own clock per call; "remote": True where the case called it over a transport (MCP)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)
    # the traces of model calls exported apart from the agent's (LiteLLM's), where the case can see them
    model_trace_ids: list[str] = field(default_factory=list)
    measured_from_ns: int = 0  # when the measured run began; 0 during the warm-up

    @property
    def traces_endpoint(self) -> str:
        return f"{self.collector}/v1/traces"

    @property
    def openai_base_url(self) -> str:
        return f"{self.llm}/v1"

    def get_weather(self, query: str) -> str:
        """The tool: sleeps TOOL_SECONDS, timed by its own clock (the ground truth of tool time)."""
        start = time.time_ns()
        self.note_trace()
        time.sleep(TOOL_SECONDS)
        if self.measured_from_ns:
            self.tool_calls.append({"name": TOOL, "query": query, "start_ns": start, "end_ns": time.time_ns()})
        return f"Sunny and 21 C in {query}."

    def run(self, agent: Callable[[], object]) -> None:
        """A warm-up run, then the measured one."""
        agent()
        self.measured_from_ns = time.time_ns()
        agent()

    def note_trace(self, trace_id: int | None = None) -> None:
        """Remember the trace this run belongs to: the given id, else the current OpenTelemetry span's."""
        if not self.measured_from_ns:
            return
        if trace_id is None:
            from opentelemetry import trace

            context = trace.get_current_span().get_span_context()
            trace_id = context.trace_id if context.is_valid else None
        if trace_id:
            self.trace_ids.append(f"{trace_id:032x}")

    def finish(self) -> None:
        with open(self.out, "w") as f:
            json.dump(
                {
                    "tool_calls": self.tool_calls,
                    "trace_ids": self.trace_ids,
                    "model_trace_ids": self.model_trace_ids,
                    "measured_from_ns": self.measured_from_ns,
                },
                f,
            )


def parse_case() -> Case:
    parser = argparse.ArgumentParser()
    parser.add_argument("--collector", required=True)
    parser.add_argument("--llm", required=True)
    parser.add_argument("--stream", type=int, choices=(0, 1), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    args = parser.parse_args()
    return Case(args.collector, args.llm, bool(args.stream), args.out, args.provider)
