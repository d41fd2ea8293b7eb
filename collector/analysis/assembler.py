"""Trace assembly: decide when a trace is complete enough to analyse, and analyse it.

Spans arrive in any order, from several services, late. The assembler watches every batch
the writer stores and keeps, per trace, when it is due:

- once its root span has arrived and every span's parent has too (the tree the collector holds
  is closed): ``settle_seconds`` after the last span arrived (at most ``grace_seconds``);
- once its root span has arrived while some span's parent has not: ``grace_seconds`` after the
  last span arrived (each new span pushes it back), so spans exported a little after their
  children (another service's, a batch exporter's next round) still count;
- while no root has arrived: ``partial_timeout_seconds`` after its first span; it is then
  analysed as partial (flagged) with the earliest orphan standing in for the root;
- a span arriving for a trace already analysed schedules it again (late spans re-analyse;
  the newer row replaces the older one).

A trace's spans from many requests and services are analysed together. Each stored batch's
analysis input is held in memory (up to ``held_bytes``) until its traces have been analysed; a
due trace is analysed from memory when the store holds exactly the span rows held for it (the
trace time index counts them: no span from another collector, an earlier run or a retried
insert is missing) and no span id repeats among them; every other trace is read back from the
store. The schedule lives in memory; after a restart, ``recover()`` schedules every trace that
received spans after its last analysis.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from agentlat import semconv as sc
from agentlat.collector.analysis.critical_path import SpanRecord, StreamedToolCall, TraceAnalysis, analyse
from agentlat.collector.analysis.flat_traces import split_flat
from agentlat.store import TRACE_ROW_SCHEMA, Store, StoreError, analysis_input_of

log = logging.getLogger("agentlat.collector")

NS_PER_MS = 1_000_000
RECENT_ROOTS = 200_000  # traces remembered as having a root, for late spans


HELD_BYTES = 64 * 1024 * 1024  # analysis input held in memory: ~300 B a span, so ~4.5 s of spans at 50k spans/s


class _Held:
    """A stored batch's analysis input, held until each of its traces has been taken for analysis."""

    __slots__ = ("spans", "waiting")

    def __init__(self, spans: pa.Table, traces: int) -> None:
        self.spans: pa.Table | None = spans  # None once let go to bound memory: its traces are read back
        self.waiting = traces


@dataclass(slots=True)
class _Due:
    at: float
    root_seen: bool
    first_seen: float
    held: list[_Held] = field(default_factory=list)  # the batches holding its spans since it was last taken


@dataclass(slots=True)
class _Open:
    """A trace some of whose spans' parents have not arrived: the span ids seen, the parent ids missing."""

    seen: set[str]
    missing: set[str]


class TraceAssembler:
    def __init__(
        self,
        store: Store,
        *,
        grace_seconds: float = 5.0,
        settle_seconds: float = 1.0,
        partial_timeout_seconds: float = 300.0,
        batch_size: int = 2000,  # traces per analysis pass: fewer, larger queries cost less per span
        held_bytes: int = HELD_BYTES,
        on_analysed: Callable[[list[int]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.grace = grace_seconds
        self.settle = min(settle_seconds, grace_seconds)
        self.partial_timeout = partial_timeout_seconds
        self.batch_size = batch_size
        self.held_bytes = held_bytes
        self.on_analysed = on_analysed
        self.clock = clock
        self.analysed = 0
        self.analysed_at = 0.0  # unix time the last analyses were written (0: none yet)
        self.read_back = 0  # traces of those analysed that were read back from the store
        self._pending: dict[tuple[str, str], _Due] = {}
        self._open: dict[tuple[str, str], _Open] = {}  # traces waiting for a parent
        self._held: dict[_Held, None] = {}  # oldest first
        self._held_total = 0
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
        held = self._held_input(batch, len(traces))
        with self._lock:
            waiting = set(self._open)
        links = _links(batch, waiting)
        now = self.clock()
        with self._lock:
            for key, root in zip(zip(projects, traces, strict=True), has_root, strict=True):
                if key in links:
                    self._link(key, *links[key])
                due = self._schedule(key, root or key in self._with_root, now)
                if held is not None:
                    due.held.append(held)
            if held is not None:
                self._hold(held)

    def _link(self, key: tuple[str, str], spans: list[str], parents: list[str]) -> None:
        """Count a batch's spans of a trace against the parents it waits for."""
        opened = self._open.setdefault(key, _Open(set(), set()))
        opened.seen.update(spans)
        opened.missing.update(parents)
        opened.missing -= opened.seen
        if not opened.missing:
            del self._open[key]

    def _held_input(self, batch: pa.Table, traces: int) -> _Held | None:
        """The batch's analysis input to hold, or None: its traces are read back."""
        if self.held_bytes <= 0:
            return None
        try:
            spans = analysis_input_of(batch).append_column("project", batch.column("ProjectId"))
        except (KeyError, TypeError, pa.ArrowException) as exc:  # a batch logged by another version
            log.warning("cannot hold a stored batch for analysis, its traces will be read back: %r", exc)
            return None
        return _Held(spans, traces)

    def _schedule(self, key: tuple[str, str], root: bool, now: float) -> _Due:
        due = self._pending.get(key) or _Due(0.0, False, now)
        due.root_seen = due.root_seen or root
        wait = self.grace if key in self._open else self.settle
        due.at = now + wait if due.root_seen else due.first_seen + self.partial_timeout
        self._pending[key] = due
        return due

    def _hold(self, held: _Held) -> None:
        """Keep a batch's analysis input; past the budget, let the oldest go (their traces are read back)."""
        assert held.spans is not None
        self._held[held] = None
        self._held_total += held.spans.nbytes
        while self._held_total > self.held_bytes:
            self._let_go(next(iter(self._held)))

    def _let_go(self, held: _Held) -> None:
        if held.spans is not None:
            del self._held[held]
            self._held_total -= held.spans.nbytes
            held.spans = None

    def _taken(self, held: list[_Held]) -> None:
        """A trace holding spans in these batches was analysed, or will be read back."""
        with self._lock:
            for batch in held:
                batch.waiting -= 1
                if batch.waiting == 0:
                    self._let_go(batch)

    def held_bytes_now(self) -> int:
        """Bytes of analysis input held in memory."""
        return self._held_total

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

    def _take_due(self) -> dict[str, dict[str, list[_Held]]]:
        """Due traces by project: each trace's id and the batches holding its spans."""
        now = self.clock()
        by_project: dict[str, dict[str, list[_Held]]] = {}
        with self._lock:
            due = [key for key, d in self._pending.items() if d.at <= now][: self.batch_size]
            for key in due:
                taken = self._pending.pop(key)
                self._open.pop(key, None)  # a span arriving later schedules it again, after the grace
                if taken.root_seen:
                    self._remember_root(key)
                by_project.setdefault(key[0], {})[key[1]] = taken.held
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
        for project, traces in self._take_due().items():
            try:
                done += self._analyse(project, traces)
            finally:
                for held in traces.values():
                    self._taken(held)
        return done

    def _analyse(self, project: str, traces: dict[str, list[_Held]]) -> int:
        try:
            inputs = self._inputs_of(project, traces)
        except StoreError as exc:
            log.warning("cannot read traces for analysis, will retry: %s", exc)
            self._retry(project, traces)
            return 0
        table, minutes = analysis_rows(project, inputs, time.time_ns() // 1000)
        try:
            self.store.write_traces(table)
        except StoreError as exc:
            log.warning("cannot store trace analyses, will retry: %s", exc)
            self._retry(project, traces)
            return 0
        self.analysed += table.num_rows
        self.analysed_at = time.time()
        if self.on_analysed is not None:
            self.on_analysed(minutes)
        return table.num_rows

    def _inputs_of(self, project: str, traces: dict[str, list[_Held]]) -> list[pa.Table]:
        """The traces' analysis input: from memory where the store holds exactly the rows held, else read back."""
        held = _held_spans(project, traces)
        complete = self._complete_in_memory(project, held) if held is not None else []
        inputs = [held.filter(pc.is_in(held.column("trace_id"), pa.array(complete)))] if complete else []
        in_memory = set(complete)
        missing = [trace_id for trace_id in traces if trace_id not in in_memory]
        if missing:
            read = self.store.analysis_input(project, missing)
            self.read_back += pc.count_distinct(read.column("trace_id")).as_py()
            inputs.append(read)
        return inputs

    def _complete_in_memory(self, project: str, held: pa.Table) -> list[str]:
        """The held traces whose stored span rows are exactly the rows held, none with a repeated span id."""
        counts = held.group_by("trace_id").aggregate([("span_id", "count"), ("span_id", "count_distinct")])
        trace_ids = counts.column("trace_id").to_pylist()
        stored = self.store.stored_spans(project, trace_ids)
        rows, distinct = counts.column("span_id_count").to_pylist(), counts.column("span_id_count_distinct").to_pylist()
        return [t for t, n, d in zip(trace_ids, rows, distinct, strict=True) if stored.get(t) == n == d]

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


def _links(batch: pa.Table, waiting: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """Per trace of the batch that has a span whose parent is not in it, or that already waits for a parent:
    the span ids the batch holds of it and the parent ids it names that the batch does not hold."""
    project, trace = batch.column("ProjectId"), batch.column("TraceId")
    span, parent = batch.column("SpanId"), batch.column("ParentSpanId")
    trace_key = pc.binary_join_element_wise(project, trace, "\n")
    dangling = pc.and_(
        pc.not_equal(parent, ""),
        pc.invert(pc.is_in(pc.binary_join_element_wise(trace_key, parent, "\n"),
                           value_set=pc.binary_join_element_wise(trace_key, span, "\n"))),
    )  # fmt: skip
    keys = set(pc.unique(trace_key.filter(dangling)).to_pylist()) | {f"{p}\n{t}" for p, t in waiting}
    if not keys:
        return {}
    selected = pc.is_in(trace_key, value_set=pa.array(list(keys), pa.string()))
    rows = batch.select(["ProjectId", "TraceId", "SpanId", "ParentSpanId"]).filter(selected)
    links: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for row, lacks in zip(rows.to_pylist(), dangling.filter(selected).to_pylist(), strict=True):
        spans, parents = links.setdefault((row["ProjectId"], row["TraceId"]), ([], []))
        spans.append(row["SpanId"])
        if lacks:
            parents.append(row["ParentSpanId"])
    return links


def _held_spans(project: str, traces: dict[str, list[_Held]]) -> pa.Table | None:
    """The held analysis input of these traces of one project, or None when no trace has all its held
    batches still in memory."""
    wanted: dict[_Held, list[str]] = {}
    for trace_id, held in traces.items():
        if held and all(batch.spans is not None for batch in held):
            for batch in held:
                wanted.setdefault(batch, []).append(trace_id)
    parts = []
    for batch, trace_ids in wanted.items():
        spans = batch.spans
        if spans is None:  # let go since (another thread's budget): its traces are read back
            continue
        ours = pc.equal(spans.column("project"), project)
        parts.append(spans.filter(pc.and_(ours, pc.is_in(spans.column("trace_id"), pa.array(trace_ids)))))
    return pa.concat_tables(parts).drop_columns(["project"]) if parts else None


def spans_by_trace(spans: pa.Table) -> dict[str, list[SpanRecord]]:
    """Analysis input (``Store.analysis_input`` or ``analysis_input_of``) as span records, by trace id.
    Built column by column, values derived in Arrow: a dict or a test per row would cost more than the query
    itself. Columns that are empty on nearly every span are converted only where they hold something."""
    n, roles = spans.num_rows, spans.column("role")
    is_model, is_tool = pc.equal(roles, sc.ROLE_MODEL), pc.equal(roles, sc.ROLE_TOOL)
    derived = {
        "is_server_span": pc.fill_null(pc.not_equal(spans.column("is_server_span"), 0), False),
        "error": pc.fill_null(pc.equal(spans.column("status"), "Error"), False),
        "response_id": pc.fill_null(pc.if_else(is_model, spans.column("response_id"), ""), ""),
    }
    column = {name: spans.column(name).to_pylist() for name in _PLAIN_COLUMNS}
    column |= {name: values.to_pylist() for name, values in derived.items()}
    column["depends_on"] = [()] * n
    for i, text in _where(spans.column("depends_on"), _non_empty_text(spans.column("depends_on"))):
        column["depends_on"][i] = _call_ids(text)
    column["args_ready_ns"] = [None] * n
    args_ready = spans.column("args_ready")
    for i, text in _where(args_ready, pc.and_(_non_empty_text(args_ready), is_tool)):
        column["args_ready_ns"][i] = _unix_ns(text)
    column["tool_calls"] = [()] * n
    calls = spans.column("tool_calls")
    for i, events in _where(calls, pc.and_(pc.greater(pc.list_value_length(calls), 0), is_model)):
        column["tool_calls"][i] = _streamed(column["start_ns"][i], events)
    column["answer_tool_calls"] = [()] * n
    asked = spans.column("answer_tool_calls")
    for i, text in _where(asked, pc.and_(_non_empty_text(asked), is_model)):
        column["answer_tool_calls"][i] = tuple(text.split())
    records = map(SpanRecord, *(column[name] for name in _RECORD_FIELDS))
    by_trace: dict[str, list[SpanRecord]] = {}
    for trace_id, record in zip(spans.column("trace_id").to_pylist(), records, strict=True):
        by_trace.setdefault(trace_id, []).append(record)
    return by_trace


def _non_empty_text(texts: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.greater(pc.binary_length(texts), 0)


def _where(values: pa.ChunkedArray, mask: pa.ChunkedArray) -> Iterable[tuple[int, Any]]:
    """(row, its value) of each row where ``mask`` holds (null counts as not)."""
    rows = pc.indices_nonzero(pc.fill_null(mask, False))
    return zip(rows.to_pylist(), values.take(rows).to_pylist(), strict=True)


_RECORD_FIELDS = [f.name for f in fields(SpanRecord)]
_DERIVED_FIELDS = (
    *("is_server_span", "error", "response_id", "depends_on", "args_ready_ns", "tool_calls", "answer_tool_calls"),
)
_PLAIN_COLUMNS = [name for name in _RECORD_FIELDS if name not in _DERIVED_FIELDS]  # as the input holds them
_INT64 = re.compile(r"[+-]?[0-9]{1,19}")


def _unix_ns(text: str) -> int | None:
    """``agentlat.tool.args_ready_time`` as stored: an integer of unix ns, else nothing."""
    value = int(text) if _INT64.fullmatch(text) else None
    return value if value is not None and -(2**63) <= value < 2**63 else None


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
    """One row of the traces table per analysis, built column by column (a dict per row costs twice as much)."""
    analyses = [a for _, a in results]
    columns: dict[str, Any] = {
        "ProjectId": [project] * len(analyses),
        "TraceId": [trace_id for trace_id, _ in results],
        "Partial": [int(a.partial) for a in analyses],
        **{column: list(map(attrgetter(attribute), analyses)) for column, attribute in _AS_IS.items()},
        **{column: _in_ms(analyses, attribute) for column, attribute in _IN_MS.items()},
        "DispatchDelaysMs": [[_ms(c.delay_ns) for c in a.dispatched] for a in analyses],
        "DispatchStreamedCalls": [sum(c.while_streaming for c in a.dispatched) for a in analyses],
        "SplitComplete": [int(a.split_complete) for a in analyses],
        "SeenAgainSpanIds": [[span_id for span_id, _ in a.seen_again] for a in analyses],
        "CriticalPath": [list(a.critical_path) for a in analyses],
        "Details": [orjson.dumps(_details(a)) for a in analyses],  # UTF-8 bytes: Arrow takes them as strings
        "AnalysedAt": [analysed_at_us] * len(analyses),
    }
    return pa.table([pa.array(columns[f.name], f.type) for f in TRACE_ROW_SCHEMA], schema=TRACE_ROW_SCHEMA)


def analysis_rows(project: str, inputs: Iterable[pa.Table], analysed_at_us: int) -> tuple[pa.Table, list[int]]:
    """The traces table's rows of every trace in these analysis inputs (each whole traces), and the minutes
    (unix seconds) whose rollups they change. Flat traces are analysed in columnar form (``flat_traces``), the
    others one by one by the reference, ``critical_path.analyse``."""
    tables, results = [], []
    for spans in inputs:
        flat, rest = split_flat(spans, project, analysed_at_us)
        tables.append(flat)
        results.extend((trace_id, analyse(records)) for trace_id, records in spans_by_trace(rest).items())
    tables.append(trace_rows(project, results, analysed_at_us))
    table = pa.concat_tables(tables)
    return table, _minutes_to_roll_up(table, [a for _, a in results])


def _minutes_to_roll_up(table: pa.Table, analyses: list[TraceAnalysis]) -> list[int]:
    """The minutes (unix seconds) whose rollups the analyses change: each trace's start, and the minutes of
    the spans the reference found seen again, which the span rollups now leave out (a flat trace has none)."""
    starts = pc.cast(table.column("Start"), pa.int64()).to_pylist() + [s for a in analyses for _, s in a.seen_again]
    return sorted({start // 60_000_000_000 * 60 for start in starts})


# Columns of the traces table taken as the analysis gives them, and those it gives in ns.
_AS_IS = {
    "Start": "start_ns", "ServiceName": "service", "Route": "route", "Agent": "agent", "Release": "release",
    "RootSpanId": "root_span_id",
    "RootName": "root_name", "Parallelism": "parallelism", "ModelCalls": "model_calls",
    "ToolCalls": "tool_calls", "Errors": "errors", "SpanCount": "span_count", "FirstTtftMs": "first_ttft_ms",
    "CacheHitRatio": "cache_hit_ratio", "SpecAcceptance": "spec_acceptance", "PrefetchHits": "prefetch_hits",
    "PrefetchMisses": "prefetch_misses", "PrefetchSavedMs": "prefetch_saved_ms",
    "PrefetchWastedMs": "prefetch_wasted_ms",
}  # fmt: skip
_IN_MS = {
    "E2eMs": "e2e_ns", "ModelMs": "model_ns", "ToolMs": "tool_ns", "OrchestrationMs": "orchestration_ns",
    "QueueMs": "queue_ns", "PrefillMs": "prefill_ns", "DecodeMs": "decode_ns", "ModelSumMs": "model_sum_ns",
    "ToolSumMs": "tool_sum_ns", "ServerMs": "server_ns", "ClientWaitMs": "client_wait_ns",
    "ParallelSavingMs": "parallel_saving_ns", "DispatchSavingMs": "dispatch_saving_ns",
}  # fmt: skip


def _in_ms(analyses: list[TraceAnalysis], attribute: str) -> list[float]:
    return [_ms(ns) for ns in map(attrgetter(attribute), analyses)]


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
