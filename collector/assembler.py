"""Trace assembly: decide when a trace is complete enough to analyse, and analyse it.

Spans arrive in any order, from several services, late. The assembler watches every batch
the writer stores and keeps, per trace, when it is due:

- once its root span has arrived: ``grace_seconds`` after the last span arrived (each new
  span pushes it back), so children exported a little after their root still count;
- while no root has arrived: ``partial_timeout_seconds`` after its first span; it is then
  analysed as partial (flagged) with the earliest orphan standing in for the root;
- a span arriving for a trace already analysed schedules it again (late spans re-analyse;
  the newer row replaces the older one).

Due traces are read back from the store, so a trace's spans from many requests and
services are analysed together. The schedule lives in memory; after a restart,
``recover()`` schedules every trace that received spans after its last analysis.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from agentlat import semconv as sc
from agentlat.collector.analysis import SpanRecord, StreamedToolCall, TraceAnalysis, analyse
from agentlat.store import TRACE_ROW_SCHEMA, Store, StoreError

log = logging.getLogger("agentlat.collector")

NS_PER_MS = 1_000_000
RECENT_ROOTS = 200_000  # traces remembered as having a root, for late spans


@dataclass(slots=True)
class _Due:
    at: float
    root_seen: bool
    first_seen: float


class TraceAssembler:
    def __init__(
        self,
        store: Store,
        *,
        grace_seconds: float = 5.0,
        partial_timeout_seconds: float = 300.0,
        batch_size: int = 2000,  # traces per read-back query: fewer, larger queries cost less per span
        on_analysed: Callable[[list[int]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.grace = grace_seconds
        self.partial_timeout = partial_timeout_seconds
        self.batch_size = batch_size
        self.on_analysed = on_analysed
        self.clock = clock
        self.analysed = 0
        self._pending: dict[tuple[str, str], _Due] = {}
        self._with_root: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- scheduling -----------------------------------------------------------------
    def observe(self, batch: pa.Table) -> None:
        """Note the traces of a batch that just reached the store."""
        grouped = batch.group_by(["ProjectId", "TraceId"]).aggregate([("ParentSpanId", "min")])
        projects = grouped.column("ProjectId").to_pylist()
        traces = grouped.column("TraceId").to_pylist()
        has_root = [p == "" for p in grouped.column("ParentSpanId_min").to_pylist()]
        now = self.clock()
        with self._lock:
            for key, root in zip(zip(projects, traces, strict=True), has_root, strict=True):
                self._schedule(key, root or key in self._with_root, now)

    def _schedule(self, key: tuple[str, str], root: bool, now: float) -> None:
        due = self._pending.get(key) or _Due(0.0, False, now)
        due.root_seen = due.root_seen or root
        due.at = now + self.grace if due.root_seen else due.first_seen + self.partial_timeout
        self._pending[key] = due

    def recover(self, since_seconds: int = 86_400) -> int:
        """Schedule traces that got spans after their last analysis (the schedule was lost)."""
        keys = self.store.unanalysed_traces(since_seconds)
        now = self.clock()
        with self._lock:
            for key in keys:
                self._pending.setdefault(key, _Due(now + self.grace, True, now))
        if keys:
            log.info("scheduled %d traces left unanalysed by the last run", len(keys))
        return len(keys)

    def pending(self) -> int:
        return len(self._pending)

    def _take_due(self) -> dict[str, list[str]]:
        now = self.clock()
        by_project: dict[str, list[str]] = {}
        with self._lock:
            due = [key for key, d in self._pending.items() if d.at <= now][: self.batch_size]
            for key in due:
                if self._pending.pop(key).root_seen:
                    self._remember_root(key)
                by_project.setdefault(key[0], []).append(key[1])
        return by_project

    def _remember_root(self, key: tuple[str, str]) -> None:
        self._with_root[key] = None
        self._with_root.move_to_end(key)
        while len(self._with_root) > RECENT_ROOTS:
            self._with_root.popitem(last=False)

    # --- analysing ------------------------------------------------------------------
    def run_due(self) -> int:
        """Analyse every trace that is due now; return how many were analysed."""
        done = 0
        for project, trace_ids in self._take_due().items():
            done += self._analyse(project, trace_ids)
        return done

    def _analyse(self, project: str, trace_ids: list[str]) -> int:
        try:
            rows = self.store.analysis_input(project, trace_ids)
        except StoreError as exc:
            log.warning("cannot read traces for analysis, will retry: %s", exc)
            self._retry(project, trace_ids)
            return 0
        results = [(trace_id, analyse(records)) for trace_id, records in spans_by_trace(rows).items()]
        table = trace_rows(project, results, time.time_ns() // 1000)
        try:
            self.store.write_traces(table)
        except StoreError as exc:
            log.warning("cannot store trace analyses, will retry: %s", exc)
            self._retry(project, trace_ids)
            return 0
        self.analysed += len(results)
        if self.on_analysed is not None:
            self.on_analysed(sorted({a.start_ns // 60_000_000_000 * 60 for _, a in results}))
        return len(results)

    def _retry(self, project: str, trace_ids: Iterable[str]) -> None:
        later = self.clock() + max(self.grace, 1.0)
        with self._lock:
            for trace_id in trace_ids:
                self._pending.setdefault((project, trace_id), _Due(later, True, later))

    # --- the background thread ------------------------------------------------------
    def start(self, interval: float = 0.25) -> None:
        self._thread = threading.Thread(target=self._loop, args=(interval,), name="agentlat-assembler", daemon=True)
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                while self.run_due():
                    pass
            except Exception:  # a bug in analysis must not stop assembly of other traces
                log.exception("trace analysis failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def spans_by_trace(stored: pa.Table) -> dict[str, list[SpanRecord]]:
    """Stored spans (as ``Store.analysis_input`` returns them) as analysis input, by trace id.
    Built column by column: a dict per row would cost more than the query itself."""
    columns = [stored.column(name).to_pylist() for name in _RECORD_FIELDS]
    columns[_DEPENDS_ON] = [_call_ids(text) if text else () for text in columns[_DEPENDS_ON]]
    columns[_TOOL_CALLS] = [
        _streamed(start, events) if events else ()
        for start, events in zip(columns[_START], columns[_TOOL_CALLS], strict=True)
    ]
    spans: dict[str, list[SpanRecord]] = {}
    for trace_id, values in zip(stored.column("trace_id").to_pylist(), zip(*columns, strict=True), strict=True):
        spans.setdefault(trace_id, []).append(SpanRecord(*values))
    return spans


# ``Store.analysis_input`` names its columns after the SpanRecord fields.
_RECORD_FIELDS = [f.name for f in fields(SpanRecord)]
_DEPENDS_ON = _RECORD_FIELDS.index("depends_on")
_TOOL_CALLS = _RECORD_FIELDS.index("tool_calls")
_START = _RECORD_FIELDS.index("start_ns")


def _call_ids(text: str) -> tuple[str, ...]:
    """``agentlat.tool.depends_on`` as stored (not empty): a JSON list, or one id as plain text."""
    try:
        value = json.loads(text)
    except ValueError:
        return (text,)
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _streamed(start_ns: int, events: list[list[tuple[str, str]]]) -> tuple[StreamedToolCall, ...]:
    """A model span's ``agentlat.tool_call`` events (their attributes, as stored) as streamed tool calls; the
    offsets (seconds from the span's start) become unix ns, a value that is not a time is left out."""
    calls = []
    for pairs in events:
        attributes = dict(pairs)
        calls.append(
            StreamedToolCall(
                call_id=attributes.get(sc.GEN_AI_TOOL_CALL_ID, ""),
                name=attributes.get(sc.GEN_AI_TOOL_NAME, ""),
                named_ns=_offset(start_ns, attributes.get(sc.TOOL_CALL_NAMED_AT)),
                ready_ns=_offset(start_ns, attributes.get(sc.TOOL_CALL_READY_AT)),
            )
        )
    return tuple(calls)


def _offset(start_ns: int, seconds: str | None) -> int | None:
    try:
        value = float(seconds) if seconds is not None else math.nan
    except ValueError:
        return None
    return start_ns + round(value * 1e9) if 0 <= value < 1e6 else None


def _ms(ns: int) -> float:
    return ns / NS_PER_MS


def trace_rows(project: str, results: list[tuple[str, TraceAnalysis]], analysed_at_us: int) -> pa.Table:
    rows = [_row(project, trace_id, a, analysed_at_us) for trace_id, a in results]
    return pa.Table.from_pylist(rows, schema=TRACE_ROW_SCHEMA)


def _row(project: str, trace_id: str, a: TraceAnalysis, analysed_at_us: int) -> dict[str, Any]:
    return {
        "ProjectId": project,
        "TraceId": trace_id,
        "Start": a.start_ns,
        "ServiceName": a.service,
        "Route": a.route,
        "Agent": a.agent,
        "RootSpanId": a.root_span_id,
        "RootName": a.root_name,
        "Partial": int(a.partial),
        "E2eMs": _ms(a.e2e_ns),
        "ModelMs": _ms(a.model_ns),
        "ToolMs": _ms(a.tool_ns),
        "OrchestrationMs": _ms(a.orchestration_ns),
        "QueueMs": _ms(a.queue_ns),
        "PrefillMs": _ms(a.prefill_ns),
        "DecodeMs": _ms(a.decode_ns),
        "ModelSumMs": _ms(a.model_sum_ns),
        "ToolSumMs": _ms(a.tool_sum_ns),
        "Parallelism": a.parallelism,
        "ModelCalls": a.model_calls,
        "ToolCalls": a.tool_calls,
        "Errors": a.errors,
        "SpanCount": a.span_count,
        "FirstTtftMs": a.first_ttft_ms,
        "CacheHitRatio": a.cache_hit_ratio,
        "SpecAcceptance": a.spec_acceptance,
        "PrefetchHits": a.prefetch_hits,
        "PrefetchMisses": a.prefetch_misses,
        "PrefetchSavedMs": a.prefetch_saved_ms,
        "PrefetchWastedMs": a.prefetch_wasted_ms,
        "ServerMs": _ms(a.server_ns),
        "ClientWaitMs": _ms(a.client_wait_ns),
        "ParallelSavingMs": _ms(a.parallel_saving_ns),
        "DispatchSavingMs": _ms(a.dispatch_saving_ns),
        "DispatchDelaysMs": [_ms(c.delay_ns) for c in a.dispatched],
        "DispatchStreamedCalls": sum(c.while_streaming for c in a.dispatched),
        "CriticalPath": list(a.critical_path),
        "Details": json.dumps(_details(a), separators=(",", ":")),
        "AnalysedAt": analysed_at_us,
    }


def _details(a: TraceAnalysis) -> dict[str, Any]:
    """What the trace view needs to explain the split: path segments, what-ifs and streamed tool calls."""
    return {
        "segments": [[s.span_id, s.start_ns, s.end_ns, s.category, s.phase] for s in a.segments],
        "parallelisable": [
            {"span_ids": list(g.span_ids), "tools": list(g.tools), "saving_ms": _ms(g.saving_ns),
             "on_critical_path": g.on_critical_path}
            for g in a.parallelisable
        ],
        "dispatched": [
            {"span_id": c.span_id, "tool": c.tool, "call_id": c.call_id, "model_span_id": c.model_span_id,
             "ready_ns": c.ready_ns, "delay_ms": _ms(c.delay_ns), "while_streaming": c.while_streaming,
             "on_critical_path": c.on_critical_path}
            for c in a.dispatched
        ],
        "dispatch_groups": [
            {"model_span_id": g.model_span_id, "span_ids": list(g.span_ids), "tools": list(g.tools),
             "saving_ms": _ms(g.saving_ns), "on_critical_path": g.on_critical_path}
            for g in a.dispatch_groups
        ],
    }  # fmt: skip
