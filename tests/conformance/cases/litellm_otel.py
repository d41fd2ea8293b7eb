"""LiteLLM: the shared agent loop making its Chat Completions calls with ``litellm.completion`` (model
``openai/gpt-fake-1``, ``api_base`` the fake; ``stream=True`` read chunk by chunk in stream mode), traced by
LiteLLM's built-in OpenTelemetry callback at its default settings: ``litellm.callbacks = ["otel"]``, with
OTEL_EXPORTER=otlp_http and OTEL_ENDPOINT the collector's /v1/traces, as LiteLLM's docs set it up. LiteLLM
has no agent or tool span, so those are the user's, opened with the OpenTelemetry tracer under the GenAI
conventions' names on the SDK tracer provider the case sets globally (service.name conformance-litellm).
LiteLLM finds that global SDK provider and exports through it (OTEL_ENDPOINT serves a provider of its own).

LiteLLM records a call after it has finished, in its success handler: a span ``litellm_request`` (``chat
gpt-fake-1`` under OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: ``litellm_semconv.py``) from
the call's start to the handler's run, with model, tokens and a stream flag (``llm.is_streaming``), and a
``raw_gen_ai_request`` child (the HTTP request, its usage as a Python repr, cache reads included); no TTFT nor
chunk timing (its TTFT is a metric only), no cache reads on the request span. The
handler takes as parent, in order: ``metadata["litellm_parent_otel_span"]`` of the call, a ``traceparent``
header of a proxied request, else the current span of the context it runs in, and with a parent it opens
no span of its own but writes the call's attributes onto that parent (unless USE_OTEL_LITELLM_REQUEST_SPAN
is true). Where it runs decides the trace:

- a streamed sync call: on LiteLLM's logging thread (a thread pool, no context), after the stream: each
  call is the root of a trace of its own, ending 9-11 ms after the model's last byte; the agent's trace
  holds the agent and tool spans only;
- a whole sync call: inline, in the caller's context: no ``litellm_request``; the call's attributes land on
  the user's agent span (the first call's stay: an agent still, by its name), the ``raw_gen_ai_request`` spans
  (the calls) under it; under the latest conventions not even those.

To get one span a call inside the agent's trace, in both cases, pass the parent and ask for the span:
``metadata={"litellm_parent_otel_span": trace.get_current_span()}`` on each call, and
USE_OTEL_LITELLM_REQUEST_SPAN=true. This case does neither: it runs LiteLLM as its defaults leave it, and
notes the traces of LiteLLM's spans that end apart from the agent's (``model_trace_ids``) for the test."""

import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conformance.case_kit import OPENAI_MODEL, Case, parse_case
from tests.conformance.cases.agent_loops import OPENAI_TOOLS, ChatStream, genai_agent

case = parse_case()
os.environ.setdefault("OTEL_EXPORTER", "otlp_http")
os.environ.setdefault("OTEL_ENDPOINT", case.traces_endpoint)
provider = TracerProvider(resource=Resource.create({"service.name": "conformance-litellm"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=case.traces_endpoint)))
trace.set_tracer_provider(provider)

import litellm  # noqa: E402  (after the tracer provider: LiteLLM's callback reuses a global SDK provider)

litellm.callbacks = ["otel"]


class LiteLLMTraces(SpanProcessor):
    """Notes the trace of every span LiteLLM's tracer ends during the measured run: the model calls' own
    traces, which the case cannot see from its agent (the test reads them as ``model_trace_ids``)."""

    def __init__(self, case: Case) -> None:
        self.case = case

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        measured = self.case.measured_from_ns and (span.start_time or 0) >= self.case.measured_from_ns
        if measured and scope is not None and scope.name == "litellm" and span.context:
            trace_id = f"{span.context.trace_id:032x}"
            if trace_id not in self.case.model_trace_ids + self.case.trace_ids:
                self.case.model_trace_ids.append(trace_id)


provider.add_span_processor(LiteLLMTraces(case))


def litellm_chat(options: dict[str, str], messages: list[dict], stream: bool) -> dict:
    """One Chat Completions call through ``litellm.completion``; a streamed answer is assembled as it is read."""
    kwargs = {"model": f"openai/{OPENAI_MODEL}", "messages": messages, "tools": OPENAI_TOOLS, **options}
    if not stream:
        return litellm.completion(**kwargs).choices[0].message.model_dump(exclude_none=True)
    answer = ChatStream()
    for chunk in litellm.completion(**kwargs, stream=True, stream_options={"include_usage": True}):
        answer.add(chunk)
    return answer.message()


tracer = trace.get_tracer("weather-app")
options = {"api_base": case.openai_base_url, "api_key": "fake"}
case.run(genai_agent(case, options, lambda n, a: tracer.start_as_current_span(n, attributes=a), litellm_chat))
provider.force_flush()
provider.shutdown()
case.finish()
