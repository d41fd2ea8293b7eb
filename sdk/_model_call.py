"""A model call that user code (or an auto-instrumentation) feeds stream chunks into.

Chunk times come from one monotonic clock anchored to the span's wall-clock start, so
TTFT, decode time and inter-token gaps are exact differences, immune to wall-clock jumps.
At the end the span gets TTFT, decode time, ITL statistics, stalls, tokens/s and usage,
and two child phase spans: ``prefill`` (request to first chunk) and ``decode`` (first to
last chunk), so a waterfall shows them.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from agentlat import semconv as sc
from agentlat._scopes import SpanScope, tracer
from agentlat.stream_stats import gap_stats

NS = 1_000_000_000
MAX_CHUNK_TIMES = 100_000  # bounded memory for endless streams; later chunks still count
DEFAULT_STALL_SECONDS = 0.5


def prefix_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass(slots=True)
class _StreamedToolCall:
    call_id: str | None
    name: str | None
    named_ns: int  # perf_counter_ns when its name appeared
    ready_ns: int | None = None  # perf_counter_ns when its arguments were complete


class ModelCall(SpanScope):
    kind = SpanKind.CLIENT

    def __init__(
        self,
        model: str,
        *,
        provider: str | None = None,
        operation: str = sc.OP_CHAT,
        stream: bool | None = None,
        stall_threshold_seconds: float = DEFAULT_STALL_SECONDS,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            f"{operation} {model}",
            {
                sc.GEN_AI_OPERATION_NAME: operation,
                sc.GEN_AI_PROVIDER_NAME: provider,
                sc.GEN_AI_REQUEST_MODEL: model,
                sc.GEN_AI_REQUEST_STREAM: stream,
                **(attributes or {}),
            },
        )
        self._stall_ns = int(stall_threshold_seconds * NS)
        self._reset_clock()

    def _reset_clock(self) -> None:
        self._wall0 = time.time_ns()
        self._mono0 = time.perf_counter_ns()
        self._chunk_times: list[int] = []
        self._chunks = 0
        self._last_chunk = 0
        self._chunk_tokens = 0
        self._usage: dict[str, int] = {}
        self._tool_calls: dict[str, _StreamedToolCall] = {}

    def _fresh(self) -> ModelCall:
        clone = super()._fresh()
        clone._reset_clock()
        return clone

    def _start_time_ns(self) -> int:
        self._reset_clock()
        return self._wall0

    def _end_time_ns(self) -> int:
        return self._wall0 + (time.perf_counter_ns() - self._mono0)

    # --- the hot path ---------------------------------------------------------------
    def chunk(self, tokens: int = 0) -> None:
        """Record that a stream chunk arrived now (carrying ``tokens`` output tokens, if known)."""
        now = time.perf_counter_ns()
        if self._chunks < MAX_CHUNK_TIMES:
            self._chunk_times.append(now)
        self._chunks += 1
        self._last_chunk = now
        self._chunk_tokens += tokens

    # --- what the response said -----------------------------------------------------
    def usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
        reasoning_tokens: int | None = None,
    ) -> None:
        """Token usage as the provider reported it. ``input_tokens`` includes cached ones."""
        given = {
            sc.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cache_read_tokens,
            sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: cache_creation_tokens,
            sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: reasoning_tokens,
        }
        self._usage.update({k: int(v) for k, v in given.items() if v is not None})

    def response_model(self, model: str) -> None:
        self.set(sc.GEN_AI_RESPONSE_MODEL, model)

    def prompt_prefix(self, text: str) -> None:
        """Record a hash of the prompt's stable prefix (system prompt, tool definitions).

        The advisor groups calls by it: identical prefixes that miss the prompt cache mean
        something dynamic sits before them.
        """
        self.set(sc.PROMPT_PREFIX_HASH, prefix_hash(text))

    def speculative(self, *, proposed: int, accepted: int) -> None:
        """Speculative decoding: draft tokens proposed and accepted in this call."""
        self.set(sc.SPECULATIVE_PROPOSED_TOKENS, int(proposed))
        self.set(sc.SPECULATIVE_ACCEPTED_TOKENS, int(accepted))

    # --- tool calls in the stream ---------------------------------------------------
    def tool_call_named(self, call_id: str | None, name: str | None, *, index: int = 0) -> None:
        """The model began a tool call: its name (or id) appeared in the stream now.

        ``index`` is the call's position in the message; it identifies the call when the
        stream gives no id. Only the first report of a call counts.
        """
        key = call_id or f"#{index}"
        if key not in self._tool_calls:
            self._tool_calls[key] = _StreamedToolCall(call_id, name, time.perf_counter_ns())
        elif name and not self._tool_calls[key].name:
            self._tool_calls[key].name = name

    def tool_call_ready(self, call_id: str | None = None, name: str | None = None, *, index: int = 0) -> None:
        """A tool call's arguments are complete in the stream now: the tool could start.

        A call never reported as named counts as named now (a provider that sends whole calls).
        """
        self.tool_call_named(call_id, name, index=index)
        streamed = self._tool_calls[call_id or f"#{index}"]
        if streamed.ready_ns is None:
            streamed.ready_ns = time.perf_counter_ns()

    # --- at the end -----------------------------------------------------------------
    def _before_end(self, span: Span) -> None:
        for key, value in self._usage.items():
            span.set_attribute(key, value)
        self._add_tool_call_events(span)
        if not self._chunks:
            return
        first = self._chunk_times[0]
        span.set_attribute(sc.GEN_AI_REQUEST_STREAM, True)
        span.set_attribute(sc.CHUNK_COUNT, self._chunks)
        span.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, (first - self._mono0) / NS)
        decode_ns = self._last_chunk - first
        span.set_attribute(sc.DECODE_DURATION, decode_ns / NS)
        self._set_gap_stats(span)
        output = self._usage.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS) or self._chunk_tokens
        if output and decode_ns > 0:
            span.set_attribute(sc.OUTPUT_TOKENS_PER_SECOND, output / (decode_ns / NS))
        self._phase_span(span, "prefill", self._mono0, first)
        self._phase_span(span, "decode", first, self._last_chunk)

    def _add_tool_call_events(self, span: Span) -> None:
        for streamed in self._tool_calls.values():
            moment = streamed.ready_ns if streamed.ready_ns is not None else streamed.named_ns
            attributes: dict[str, Any] = {sc.TOOL_CALL_NAMED_AT: (streamed.named_ns - self._mono0) / NS}
            if streamed.ready_ns is not None:
                attributes[sc.TOOL_CALL_READY_AT] = (streamed.ready_ns - self._mono0) / NS
            if streamed.call_id:
                attributes[sc.GEN_AI_TOOL_CALL_ID] = streamed.call_id
            if streamed.name:
                attributes[sc.GEN_AI_TOOL_NAME] = streamed.name
            span.add_event(sc.TOOL_CALL_EVENT, attributes, timestamp=self._wall0 + (moment - self._mono0))

    def _set_gap_stats(self, span: Span) -> None:
        stats = gap_stats(self._chunk_times, self._stall_ns)
        if stats is None:
            return
        span.set_attribute(sc.ITL_MEAN, stats.mean_ns / NS)
        span.set_attribute(sc.ITL_P50, stats.p50_ns / NS)
        span.set_attribute(sc.ITL_P95, stats.p95_ns / NS)
        span.set_attribute(sc.ITL_MAX, stats.max_ns / NS)
        span.set_attribute(sc.ITL_STALLS, stats.stalls)
        span.set_attribute(sc.ITL_STALL_THRESHOLD, self._stall_ns / NS)

    def _phase_span(self, parent: Span, phase: str, start_mono: int, end_mono: int) -> None:
        child = tracer().start_span(
            phase,
            context=trace.set_span_in_context(parent),
            start_time=self._wall0 + (start_mono - self._mono0),
            attributes={sc.PHASE: phase},
        )
        child.end(end_time=self._wall0 + (end_mono - self._mono0))
