"""SDK overhead next to the bare OpenTelemetry SDK, measured side by side in one process.

Both sides run on the same TracerProvider with a batch processor and an exporter that
drops everything, so the figures are what the application thread pays per span, not
network time. Targets (issue 3): under 3 µs per streamed chunk, under 1.5x the bare SDK
per span.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import agentlat
from agentlat._scopes import tracer

ROUNDS = 5


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def best_ns_per_op(fn: Callable[[int], None], n: int) -> float:
    """The best of several rounds, in ns per operation (the least disturbed by the machine)."""
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - started) / n)
    return best


def bare_spans(n: int) -> None:
    t = tracer()
    for _ in range(n):
        with t.start_as_current_span("execute_tool search", attributes={"gen_ai.tool.name": "search"}):
            pass


def agentlat_spans(n: int) -> None:
    for _ in range(n):
        with agentlat.tool("search"):
            pass


def chunks(n: int) -> None:
    with agentlat.model_call("m") as call:
        for _ in range(n):
            call.chunk(1)


def run() -> list[tuple[str, float, str, str]]:
    """Rows of (figure, value, unit, target verdict)."""
    agentlat.init(service="bench", exporter=DropExporter(), options=agentlat.Options(instrument_clients=False))
    try:
        bare = best_ns_per_op(bare_spans, 20_000)
        ours = best_ns_per_op(agentlat_spans, 20_000)
        chunk = best_ns_per_op(chunks, 200_000)
    finally:
        agentlat.shutdown()
    ratio = ours / bare
    return [
        ("SDK: bare OpenTelemetry span", bare / 1000, "µs/span", "reference"),
        ("SDK: agentlat.tool span", ours / 1000, "µs/span", f"{ratio:.2f}x bare (target < 1.5x)"),
        ("SDK: ModelCall.chunk()", chunk / 1000, "µs/chunk", "target < 3 µs"),
    ]


if __name__ == "__main__":
    for figure, value, unit, target in run():
        print(f"{figure:<32} {value:>8.2f} {unit:<9} {target}")
