"""What an OTLP decode worker process runs: a request body to what is logged of it, for each signal: the
checked request for traces (``otlp.TraceRequest``, decoded in bulk when stored), an Arrow batch
for logs and metrics.

The server's ``Ingestor`` (``ingest.py``) sends bodies to a pool of spawned worker processes,
and each worker imports this module to unpickle ``decode``. So this module imports only what
decoding needs: protobuf, the OTLP messages, pyarrow and the collector's decoder and
normaliser. Never the store, chDB, the write-ahead log, metrics or the HTTP server: each
worker would pay for them in memory and start-up CPU (tests/test_decode_workers.py checks).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agentlat.collector.ingest import otlp_signals
from agentlat.collector.ingest.otlp import DecodedBatch, Limits, logged_form, parse_json, parse_protobuf
from agentlat.shared.gc_tuning import tune_for_throughput
from agentlat.shared.processes import exit_with_parent


@dataclass(frozen=True, slots=True)
class Signal:
    """One kind of OTLP export (traces, logs, metrics): how it is decoded and answered."""

    name: str
    noun: str  # what its records are called in messages
    parse_protobuf: Any  # bytes -> Export*ServiceRequest
    parse_json: Any
    to_batch: Any  # (request, project, received_ns, limits) -> DecodedBatch of what is logged
    response: type[Message]  # Export*ServiceResponse
    rejected_field: str  # the count in the response's partial_success
    invalid_reason: str  # label of the rejected counter for records rejected one by one

    def respond(self, decoded: DecodedBatch) -> Message:
        """The success answer: partial_success set only when records were rejected."""
        message = self.response()
        if decoded.rejected:
            setattr(message.partial_success, self.rejected_field, decoded.rejected)
            message.partial_success.error_message = decoded.error_message()
        return message


SIGNALS: dict[str, Signal] = {
    "traces": Signal(
        "traces", "spans", parse_protobuf, parse_json, logged_form, ExportTraceServiceResponse, "rejected_spans",
        "invalid_span",
    ),
    "logs": Signal(
        "logs", "log records", otlp_signals.parse_logs_protobuf, otlp_signals.parse_logs_json,
        otlp_signals.logs_to_batch, ExportLogsServiceResponse, "rejected_log_records", "invalid_record",
    ),
    "metrics": Signal(
        "metrics", "data points", otlp_signals.parse_metrics_protobuf, otlp_signals.parse_metrics_json,
        otlp_signals.metrics_to_batch, ExportMetricsServiceResponse, "rejected_data_points", "invalid_point",
    ),
}  # fmt: skip


def decode(
    body: bytes, protobuf: bool, project: str, received_ns: int, limits: Limits, signal: str = "traces"
) -> DecodedBatch:
    """A request body to what is logged of it; raise OtlpDecodeError or TooManySpans. Runs in a worker, or for
    protobuf traces (a check, not a decode) in a thread of the server. A trace request that came as protobuf
    is logged as it came."""
    kind = SIGNALS[signal]
    request = kind.parse_protobuf(body) if protobuf else kind.parse_json(body)
    if signal == "traces" and protobuf:
        return logged_form(request, project, received_ns, limits, body)
    return kind.to_batch(request, project, received_ns, limits)


def start_worker(parent: int) -> None:
    """A decode worker's initializer: end with ``parent`` (the server), keep pandas out, and collect
    garbage as the server does (gc_tuning.py: each request's spans would set off young collections).

    pyarrow imports pandas, when it is installed, the first time ``pa.array()`` is given a list,
    only to ask whether the list is a pandas object: 30 to 50 MiB and 0.15 to 0.3 s of CPU for a
    module this process never uses. Unimportable here, it is taken by pyarrow as not installed.
    """
    exit_with_parent(parent)
    sys.meta_path.insert(0, _WithoutPandas())
    tune_for_throughput()


class _WithoutPandas:
    """A meta path finder that fails every import of pandas (pyarrow's import of it runs from
    Cython, which takes a ``None`` in ``sys.modules`` for the module, so that cannot block it)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"pandas is not used in a decode worker ({name})", name=name)
        return None
