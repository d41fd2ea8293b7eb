"""``agentlat.init()``: one line that wires OpenTelemetry to an agentlat collector.

Settings resolve as: argument, then environment variable, then default. ``init`` joins a
TracerProvider the application already set up (adding agentlat's processors to it) or
installs its own. Export runs in OpenTelemetry's batch processor thread with a bounded
queue: with the collector down, spans past the queue are dropped, and the application
neither blocks nor sees an exception.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from agentlat._context import ContextProcessor, propagate_into_thread_pools, restore_thread_pools
from agentlat._safety import guarded

log = logging.getLogger("agentlat")

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"


@dataclass(frozen=True, slots=True)
class Options:
    """Less common settings of ``init``."""

    max_queue_size: int = 2048  # spans held while the collector is slow or down
    max_export_batch_size: int = 512
    schedule_delay_seconds: float = 1.0
    export_timeout_seconds: float = 10.0
    instrument_clients: bool = True  # openai and anthropic, when installed
    # Ask OpenAI chat streams for usage (stream_options.include_usage) where the caller did not, hiding
    # the extra usage-only chunk from the caller; off: such streams report no token counts.
    openai_stream_usage: bool = False
    propagate_into_threads: bool = True
    # The prompt-cache lifetime (seconds) of a provider where your account's differs from the provider's default
    # and the request does not say (an OpenAI organisation with extended retention: {"openai": 86400}): what the
    # collector judges a miss "expired" against.
    prompt_cache_ttl_s: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _State:
    provider: TracerProvider
    processors: list[SpanProcessor]
    service: str
    endpoint: str
    instrumented: list[str]


_lock = threading.Lock()
_state: _State | None = None


def resolve_endpoint(endpoint: str | None) -> str:
    for candidate in (endpoint, os.environ.get("AGENTLAT_ENDPOINT"), os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        if candidate:
            return candidate.rstrip("/")
    return DEFAULT_ENDPOINT


def init(
    service: str | None = None,
    *,
    endpoint: str | None = None,
    version: str | None = None,
    environment: str | None = None,
    exporter: SpanExporter | None = None,
    options: Options | None = None,
) -> None:
    """Send this process's agent spans to agentlat. Safe to call more than once.

    ``service`` defaults to OTEL_SERVICE_NAME; ``endpoint`` to AGENTLAT_ENDPOINT, then
    OTEL_EXPORTER_OTLP_ENDPOINT, then http://127.0.0.1:4318. ``exporter`` replaces the OTLP
    exporter (an in-memory one in tests, say).
    """
    global _state
    options = options or Options()
    with _lock:
        if _state is not None:
            return
        service = service or os.environ.get("OTEL_SERVICE_NAME") or "unknown_service"
        resolved = resolve_endpoint(endpoint)
        provider = _provider(service, version, environment)
        if not getattr(provider, "_agentlat_context", False):
            provider.add_span_processor(ContextProcessor())
            provider._agentlat_context = True  # type: ignore[attr-defined]
        processors: list[SpanProcessor] = [_batch(exporter or _otlp(resolved, options), options)]
        provider.add_span_processor(processors[0])
        _state = _State(provider, processors, service, resolved, [])
    if options.propagate_into_threads:
        propagate_into_thread_pools()
    if options.instrument_clients:
        _state.instrumented = _instrument_clients(options) or []
    log.debug("agentlat: sending spans of %s to %s", service, resolved)


def _provider(service: str, version: str | None, environment: str | None) -> TracerProvider:
    """The application's TracerProvider if it set one up, else a new global one."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    attributes = {"service.name": service}
    if version:
        attributes["service.version"] = version
    if environment:
        attributes["deployment.environment"] = environment
        attributes["deployment.environment.name"] = environment
    provider = TracerProvider(resource=Resource.create(attributes))
    trace.set_tracer_provider(provider)
    return provider


def _otlp(endpoint: str, options: Options) -> SpanExporter:
    # Imported here: the exporter takes 60 ms to import, which a caller passing its own exporter,
    # and every server command, need not pay.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=options.export_timeout_seconds)


def _batch(exporter: SpanExporter, options: Options) -> BatchSpanProcessor:
    return BatchSpanProcessor(
        exporter,
        max_queue_size=options.max_queue_size,
        max_export_batch_size=options.max_export_batch_size,
        schedule_delay_millis=options.schedule_delay_seconds * 1000,
        export_timeout_millis=options.export_timeout_seconds * 1000,
    )


@guarded
def _instrument_clients(options: Options) -> list[str]:
    from agentlat.instrument import instrument_installed_clients
    from agentlat.instrument._wrapper import PROMPTS

    PROMPTS.ttl_s = dict(options.prompt_cache_ttl_s)
    return instrument_installed_clients(stream_usage=options.openai_stream_usage)


def flush(timeout_seconds: float = 10.0) -> bool:
    """Export everything finished so far; True when it all went out in time."""
    state = _state
    if state is None:
        return True
    return all(p.force_flush(int(timeout_seconds * 1000)) for p in state.processors)


def shutdown() -> None:
    """Flush and stop exporting. ``init`` may be called again afterwards (the service name
    and resource of the first call stay, as OpenTelemetry keeps one provider per process)."""
    global _state
    with _lock:
        state, _state = _state, None
    if state is None:
        return
    # The provider stays (OpenTelemetry allows one global provider per process); only
    # agentlat's exporting processor stops.
    for processor in state.processors:
        processor.force_flush()
        processor.shutdown()
    restore_thread_pools()
    if state.instrumented:
        _uninstrument_clients(state.instrumented)


@guarded
def _uninstrument_clients(libraries: list[str]) -> None:
    from agentlat.instrument import uninstrument_clients

    uninstrument_clients(libraries)
