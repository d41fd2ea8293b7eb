"""Exact, explainable split of one trace's end-to-end time, and the tool calls that could run in parallel.

Pure: no I/O, no logging. ``analyse(spans)`` takes the ``SpanRecord`` values of one trace in any
order (several services, late or missing spans) and returns a frozen ``TraceAnalysis``. Iterative
throughout (no recursion, any depth) and O(n log n). Imports nothing from agentlat but ``semconv``.

Assembly
  * Duplicate span ids: the record that ends last wins (ties: the longer one). ``end < start`` is
    read as zero length.
  * A client model call that states a stream lasting past its end (start + TTFT, plus decode when known, later
    than its end: the call returned the stream and something else read it) is stretched to what it states, before
    duplicates are weighed. Decode it does not state stays unknown. Statements that are not finite or exceed a
    day are none.
  * A span whose parent id is its own or is not in the trace is an orphan. A parent cycle is broken
    at its earliest-starting span (ties: the longest), which becomes an orphan.
  * Root: the earliest-starting span with parent ``''`` (ties: longest, then span id). With none the
    trace is ``partial`` and the earliest-starting orphan is the root. Every other parentless span
    is attached under the root.
  * E2E is the root's duration. For a partial trace it is max end - min start over all spans; the
    root's window is widened to that, and its own time outside its real interval (time of the
    missing parent) is orchestration.
  * A stream record (role ``stream``: a span or log that times a model call's stream apart from the
    call's own span, which ended when the response headers came; Logfire's "streaming response ...
    took ...s" log, a zero-length sibling of the call emitted when the stream ends) states the
    interval [end - decode_ms, end] (or from its own start, if earlier). It becomes a model phase
    span over that interval (phase ``stream``, so never a model call), and it stretches the model
    call it times to its end: its parent, if that is a client model call, else the sibling client
    model call that ended last at or before the stated start (1 ms of slack; it must have started
    by then), provided no other sibling started in between. The stretched call takes the record's
    token counts it lacks. A record that times no call is model time over its interval alone.

Critical path
  A span's reach is its end, or the latest reach of its children of the same service when one
  outlives it (a framework's step that returns a stream ends before the model call inside it has
  finished streaming); a child from another service, or a server span, that outlives its parent is
  clock skew, and is clamped. Walk from the root over its window. For a span S walked over
  [lo, hi], with cursor = hi: each child stands for [its start, its reach], clamped to [lo, hi]
  (clock skew between services), and those clamped to zero length are dropped. Repeatedly take,
  among the children that started before the cursor, the one that ends last (ties: the one that
  started first), walk it over its clamped interval cut at the cursor, and set cursor = its start.
  Children that start at or after the cursor ran beside a chosen one and are skipped: that is what
  parallel means. One that overlapped the chosen one (it began
  earlier and ended after the chosen one began: a tool dispatched while the model call's stream still
  ran, a span ended late by a logging thread) is on the path until the chosen one began. Time in
  [lo, hi] not covered by a chosen child is S's own time: one ``PathSegment``. A chosen child that is
  transparent (its role is neither model nor tool, and it is no phase or server span) walks the
  siblings whose clamped interval lies inside its own as if they were its children: frameworks
  record a step and the work it waits for as siblings (LangChain's ``call_model`` encloses the
  ``RunnableSequence`` that holds the model call), and a span that lost its async context is
  attached to an ancestor beside the span it ran in. Known work inside a span that has no category
  of its own is what that span waited for. The segments tile
  [start_ns, start_ns + e2e_ns) exactly; ``critical_path`` lists the walked spans by start time.

Attribution
  A segment belongs to the nearest ancestor-or-self that is a model or tool span (a model call's
  phase spans and server spans count as model; a model call inside a tool counts as model), else
  to orchestration, so model_ns + tool_ns + orchestration_ns == e2e_ns. Model segments inside a
  ``queue``/``prefill``/``decode`` phase span (or its descendants) also count in queue_ns etc.
  A client model call whose stream is known to have ended before its own end is skipped in that search for time
  at or after its stream's end: the span stayed open past its stream, and that time is what runs in it or what
  encloses it, never model time for being inside a model span. Its stream's end is known from what it states
  (start + TTFT + decode), or from the tools its answer asked for (``answer_tool_calls``): an answer ends with its
  tool calls, so when the first tool span of each of those call ids started after the call and ended by its end
  (Vercel AI's doStream holds its answer's finish until the tools have returned), the stream had ended by the
  latest of their starts; the earlier of the two. Walked past that end, the call adopts the siblings that lie
  inside it and end after it, as a span of no category does: the tools it waited for run beside it, not in it.

Plain sums and counts
  A client model call has role model, is not a server span and is not a phase span, and no client
  model call holds it, directly or through spans of no category (neither model, tool, phase nor
  server): a call inside another is the same client call wrapped by two instrumentations
  (OpenInference's span around the anthropic SDK's own, a framework's step between them) and counts
  once, as the outer one (a call made inside a phase span of another, a guard model during decode,
  or inside a tool inside it, counts).
  Two client model calls with the same response id (``gen_ai.response.id``) are one call seen by
  two instrumentations that do not nest (OpenLLMetry's anthropic span, which it never makes
  current, beside the anthropic SDK's own): the one that starts first counts (ties: the longer).
  Server spans never add model calls. A tool call is a tool span, but for one inside a tool span of the same
  call: the nearest tool ancestor, with no model span between, has the same tool name and no other call id
  (an MCP server's ``tools/call`` span inside the client's, that inside the user's ``execute_tool``): that is
  the outer call seen again and counts once, as the outer one (a sub-tool of another name counts).
  seen_again lists the spans that per-span figures (the store's call percentiles, token sums, error counts)
  leave out so that each call counts once there too: every tool span seen again, and of each model request's
  spans all but one, the one stating the most of TTFT, decode and the token counts (ties: the outer one,
  then the first to start), since a wrapper often records the call's timing and the inner span its usage.
  model_sum_ns / tool_sum_ns are plain sums of client model call / tool call durations (nested calls count in
  both; a model call to its stream's end where it states an earlier one). split_complete is False for a trace
  with an agent span and no model span (an agent asks a model, so its calls were exported as traces of their
  own), and for one with a client model call whose first chunk (start + TTFT) came more than 1 ms after its end
  and that states no decode (it returned its stream, someone else read it, and nothing times the stream's end):
  its model and orchestration time are unknown (the store leaves it out of the split's rollups). The trace's
  first TTFT and its cache and speculative ratios take each request's figures from whichever of its spans states
  them, the one stating the most first.
  parallelism = (model_sum_ns + tool_sum_ns) / (model_ns + tool_ns), 1.0 when the denominator is 0. A server
  span joins the nearest client model call above it (outermost server spans only); server_ns sums joined server
  spans and client_wait_ns sums, per joined model call, max(0, call duration - its server time). Cache and
  speculative ratios use each client model call's own pair of numbers, else its joined server
  span's. Prefetch outcomes and errors count over all spans.

Parallelisable tool calls
  Among the children of one span, taken by start time, tool calls t1, t2, ... form a serial run
  when each starts at or after the previous one ended, no other sibling that is a client model call
  or contains one starts strictly between the starts of consecutive members (it would consume the
  earlier result and decide the next call), and no member's depends_on names the tool_call_id of
  an earlier member. Siblings are never ancestors of each other. Each maximal run of two or more is
  a ``ParallelGroup``. Its saving is sum - max of the members' walked (clamped) durations, counted
  only when every member is on the critical path (else 0): running them together would shorten
  E2E by that much, which never exceeds the split's model_ns + tool_ns.

Streamed tool-call dispatch
  A model span's ``tool_calls`` are the tool calls it streamed (the SDK's ``agentlat.tool_call`` events:
  when each one's name appeared and its arguments were complete, its ready moment). A tool span is linked
  to the model span that streamed a call with its ``tool_call_id`` and a ready moment (the first such span
  in start order); else, when it has ``args_ready_ns`` (``agentlat.tool.args_ready_time``), to the client
  model call that was streaming then (start <= ready <= end; the latest to start, ties: the first in span
  order), if any: the model span's record wins over the tool's own. Per linked tool T of model span M:
  its dispatch delay is max(0, T's start - ready), and it was dispatched while streaming when it started
  before M ended. A tool lasts from its start to its reach.
  What-if, per M with linked tools G: had each member started at its ready moment (or, when it depends_on
  another tool's output, once that tool is done: an earlier member at its what-if end, any other tool at
  its reach), independent members together, member T would end at end'(T) = start'(T) + its duration. The
  group's tools are done at F = the latest walked end (at most its reach) among the members on the critical path
  (none on it: saving 0); they would be done at F' = max(M's end, every end'(T), and the end of every other span that
  ended after M and by F and is neither M nor a member nor an ancestor or descendant of one: work that the
  next step may have waited for as well). The group saves [max(F', root start), F) of the critical path,
  and the trace the union of its groups' stretches (dispatch_saving_ns). Bounds: a group saves at most the
  dispatch delay of the on-path member whose walked end is F (F - F' <= reach - (ready + duration)); the
  union never exceeds E2E; and nothing is saved when every linked tool started at its ready moment.
  Cost: one pass over the spans when none has streamed tool calls or args_ready_ns (nearly every trace);
  else, per model span with linked tools, a walk back over the spans ending in (its end, F].
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields, make_dataclass, replace
from itertools import compress, pairwise, starmap
from operator import attrgetter, itemgetter
from typing import TypeVar

from agentlat import semconv as sc

__all__ = [
    "DispatchGroup",
    "DispatchedCall",
    "ParallelGroup",
    "PathSegment",
    "SpanRecord",
    "StreamedToolCall",
    "TraceAnalysis",
    "analyse",
]

MODEL, TOOL, ORCHESTRATION = sc.ROLE_MODEL, sc.ROLE_TOOL, "orchestration"
PHASES = ("queue", "prefill", "decode")


@dataclass(slots=True)  # not frozen: a frozen 30-field __init__ costs more than analysing the span
class SpanRecord:
    """One span of a trace, already normalised (roles and units as ``agentlat.collector.normalise`` gives them)."""

    span_id: str
    parent_span_id: str  # '' for a root
    name: str
    service: str
    start_ns: int
    end_ns: int
    role: str  # 'model' | 'tool' | 'agent' | 'other'
    is_server_span: bool = False  # vLLM/SGLang server-side span of a model call
    error: bool = False
    route: str = ""
    agent: str = ""
    model: str = ""
    tool: str = ""
    tool_call_id: str = ""
    depends_on: tuple[str, ...] = ()  # tool call ids whose output this tool call consumed
    phase: str = ""  # 'queue' | 'prefill' | 'decode' on the SDK's child phase spans of a model call
    ttft_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    spec_proposed_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    prefetch_outcome: str = ""  # '' | 'hit' | 'miss' | 'cancelled'
    prefetch_saved_ms: float | None = None
    prefetch_wasted_ms: float | None = None
    response_id: str = ""  # gen_ai.response.id: two model calls with the same one are one call
    tool_calls: tuple[StreamedToolCall, ...] = ()  # on a model span: the tool calls it streamed
    answer_tool_calls: tuple[str, ...] = ()  # on a model span: the ids of the tool calls its answer asked for
    args_ready_ns: int | None = None  # on a tool span: when its arguments were complete in the stream (unix ns)
    release: str = ""  # its service's version (service.version): the trace's is its root's


@dataclass(frozen=True, slots=True)
class StreamedToolCall:
    """A tool call a model streamed, as its model span records it (unix ns; ``None`` when not reported)."""

    call_id: str
    name: str
    named_ns: int | None  # its name first appeared in the stream
    ready_ns: int | None  # its arguments were complete: the tool could start


@dataclass(frozen=True, slots=True)
class PathSegment:
    """[start_ns, end_ns) on the critical path is span_id's own time, attributed to category."""

    span_id: str
    start_ns: int
    end_ns: int
    category: str  # 'model' | 'tool' | 'orchestration'
    phase: str = ""  # 'queue' | 'prefill' | 'decode' for model time inside a phase span


@dataclass(frozen=True, slots=True)
class ParallelGroup:
    """Tool calls that ran one after another though none consumed another's output."""

    span_ids: tuple[str, ...]
    tools: tuple[str, ...]
    saving_ns: int  # E2E saved by running them together; 0 unless all are on the critical path
    on_critical_path: bool


@dataclass(frozen=True, slots=True)
class DispatchedCall:
    """A tool span linked to the streamed tool call it ran."""

    span_id: str
    tool: str
    call_id: str
    model_span_id: str  # the model call that streamed it
    ready_ns: int  # its arguments were complete (unix ns)
    delay_ns: int  # tool start - ready, 0 when it started earlier
    while_streaming: bool  # started before its model call ended
    on_critical_path: bool


@dataclass(frozen=True, slots=True)
class DispatchGroup:
    """The tools one model call streamed, and the E2E saved had each started when its arguments were complete."""

    model_span_id: str
    span_ids: tuple[str, ...]
    tools: tuple[str, ...]
    saving_ns: int  # 0 unless a member is on the critical path
    on_critical_path: bool


@dataclass(frozen=True, slots=True)
class TraceAnalysis:
    """Where one trace's time went; every rule is in the module docstring. Times in ns unless named ``_ms``."""

    root_span_id: str
    root_name: str
    partial: bool
    start_ns: int
    e2e_ns: int
    service: str
    route: str
    agent: str
    release: str
    model_ns: int
    tool_ns: int
    orchestration_ns: int
    queue_ns: int
    prefill_ns: int
    decode_ns: int
    critical_path: tuple[str, ...]
    segments: tuple[PathSegment, ...]
    model_sum_ns: int
    tool_sum_ns: int
    parallelism: float
    model_calls: int
    split_complete: bool  # False: its model calls' time is not all in it, so model and orchestration are unknown
    tool_calls: int
    errors: int
    span_count: int
    first_ttft_ms: float | None
    cache_hit_ratio: float | None
    spec_acceptance: float | None
    prefetch_hits: int
    prefetch_misses: int
    prefetch_saved_ms: float
    prefetch_wasted_ms: float
    server_ns: int
    client_wait_ns: int
    parallelisable: tuple[ParallelGroup, ...]
    parallel_saving_ns: int
    dispatched: tuple[DispatchedCall, ...]
    dispatch_groups: tuple[DispatchGroup, ...]
    dispatch_saving_ns: int
    # spans that are a counted call seen again, as (span id, start ns): the span rollups leave them out
    seen_again: tuple[tuple[str, int], ...]


_T = TypeVar("_T")


def _quick_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A constructor for the frozen slotted dataclass ``cls``, three times as fast as ``cls`` itself: a mutable
    twin of it (the same fields, so the same slots) that turns into a ``cls`` once built, equal, hashable and
    frozen like any other. A frozen ``__init__`` sets each field through ``object.__setattr__``; building a
    trace's path segments and its analysis that way took a sixth of ``analyse()``. Not for a class that needs its
    own ``__init__`` (``__post_init__``, a default factory)."""
    if hasattr(cls, "__post_init__") or any(f.default_factory is not MISSING for f in fields(cls)):
        raise TypeError(f"{cls.__name__} needs its own __init__")

    def become(built: object) -> None:
        built.__class__ = cls

    return make_dataclass(
        f"_Mutable{cls.__name__}",
        [(f.name, f.type, field(default=f.default)) for f in fields(cls)],
        namespace={"__post_init__": become},
        slots=True,
    )


_segment = _quick_constructor(PathSegment)
_trace_analysis = _quick_constructor(TraceAnalysis)


@dataclass(slots=True)
class _Tree:
    spans: list[SpanRecord]  # deduplicated, sorted by (start, -end, span id): index order is the tie-break
    parent: list[int]  # -1 for the root
    children: list[list[int]]  # in index order
    order: list[int]  # breadth-first from the root: parents before children
    root: int
    partial: bool
    lo: int  # the root's window
    hi: int
    is_call: list[bool]  # per span: a client model call
    is_tool: list[bool]
    reach: list[int]  # per span: its end, or later if a child of its service outlives it
    stream_end: list[int | None]  # per model span: when its stream ended, where known and before the span's end


def analyse(spans: Sequence[SpanRecord]) -> TraceAnalysis:
    """Split one trace's E2E into model, tool and orchestration time along its critical path."""
    if not spans:
        raise ValueError("analyse() needs the spans of one trace; got none")
    tree = _assemble(spans)
    links = _dispatch_links(tree) if any(s.tool_calls or s.args_ready_ns is not None for s in tree.spans) else {}
    segments, split, windows = _walk(tree)
    views = _views(tree) if sum(map(_is_client_call, tree.spans)) > sum(tree.is_call) else {}
    groups = _parallel_groups(tree, windows)
    root, ordered = tree.spans[tree.root], tree.spans
    model_sum, tool_sum = _model_sum(tree), _sum(ordered, tree.is_tool)
    on_path = split[MODEL] + split[TOOL]
    path = sorted((lo, depth, i) for i, (lo, _, depth) in windows.items())
    return _trace_analysis(
        root_span_id=root.span_id,
        root_name=root.name,
        partial=tree.partial,
        start_ns=tree.lo,
        e2e_ns=tree.hi - tree.lo,
        service=root.service or _first(ordered, "service"),
        route=root.route or _first(ordered, "route"),
        agent=root.agent or _first(ordered, "agent"),
        release=root.release,  # as exact reads give E2E: by the root span's own release
        model_ns=split[MODEL],
        tool_ns=split[TOOL],
        orchestration_ns=split[ORCHESTRATION],
        queue_ns=split["queue"],
        prefill_ns=split["prefill"],
        decode_ns=split["decode"],
        critical_path=tuple(ordered[i].span_id for _, _, i in path),
        segments=tuple(segments),
        model_sum_ns=model_sum,
        tool_sum_ns=tool_sum,
        parallelism=(model_sum + tool_sum) / on_path if on_path > 0 else 1.0,
        model_calls=sum(tree.is_call),
        split_complete=_split_complete(spans),
        tool_calls=sum(tree.is_tool),
        errors=sum(s.error for s in ordered),
        span_count=len(ordered),
        first_ttft_ms=_first_ttft(tree, views),
        parallelisable=tuple(groups),
        parallel_saving_ns=sum(g.saving_ns for g in groups),
        seen_again=_seen_again(tree, views),
        **_dispatch(tree, windows, links),
        **_prefetch(ordered),
        **_server_join(tree, views),
    )


# --- assembly ---------------------------------------------------------------------------


def _assemble(spans: Sequence[SpanRecord]) -> _Tree:
    ordered = _fold_streams(_dedupe(spans))
    parent = _parents(ordered)
    orphans = [i for i, p in enumerate(parent) if p == -1]  # never empty once cycles are broken
    roots = [i for i in orphans if not ordered[i].parent_span_id]
    root = min(roots or orphans)
    for i in orphans:
        if i != root:
            parent[i] = root
    children: list[list[int]] = [[] for _ in ordered]
    for i, p in enumerate(parent):
        if p != -1:
            children[p].append(i)
    order = [root]
    for i in order:  # grows while iterating: breadth-first
        order.extend(children[i])
    partial = not roots
    lo = min(s.start_ns for s in ordered) if partial else ordered[root].start_ns
    hi = max(s.end_ns for s in ordered) if partial else ordered[root].end_ns
    is_call = _client_calls(ordered, parent, order)
    reach = [s.end_ns for s in ordered]
    for i in reversed(order):  # children before parents
        p = parent[i]
        if p != -1 and reach[i] > reach[p] and _same_clock(ordered[i], ordered[p]):
            reach[p] = reach[i]
    is_tool = _tool_calls(ordered, parent, order)
    stream_end = _stream_ends(ordered)
    return _Tree(ordered, parent, children, order, root, partial, lo, hi, is_call, is_tool, reach, stream_end)


def _dedupe(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    best: dict[str, SpanRecord] = {}
    for span in spans:
        if span.end_ns < span.start_ns:
            span = replace(span, end_ns=span.start_ns)
        if span.ttft_ms is not None:
            span = _stretched(span)
        old = best.get(span.span_id)
        if old is None or _wins(span, old):
            best[span.span_id] = span
    return sorted(best.values(), key=_span_order)


def _span_order(span: SpanRecord) -> tuple[int, int, str]:
    return span.start_ns, -span.end_ns, span.span_id


STREAM = sc.ROLE_STREAM
_STREAM_SLACK_NS = 1_000_000  # a stated start may round to just before its call's end
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


def _fold_streams(ordered: list[SpanRecord]) -> list[SpanRecord]:
    """Stream records as model phase spans over the interval they state, each call they time
    stretched to the stream's end (module docstring, Assembly); re-sorted as ``_dedupe`` sorts."""
    records = [i for i, s in enumerate(ordered) if s.role == STREAM]
    if not records:  # nearly every trace
        return ordered
    index = {s.span_id: i for i, s in enumerate(ordered)}
    kin: dict[str, list[int]] = {}  # parent id -> children that are not stream records
    for i, s in enumerate(ordered):
        if s.role != STREAM:
            kin.setdefault(s.parent_span_id, []).append(i)
    spans = list(ordered)
    for r in records:  # in sorted order, so the first record to fill a call's tokens is fixed
        record, stated = ordered[r], ordered[r].decode_ms
        stated_ns = round(stated * 1e6) if stated is not None and 0 < stated < 1e12 else 0  # NaN, inf: none
        begun = min(record.start_ns, record.end_ns - stated_ns)
        spans[r] = replace(record, start_ns=begun, role=MODEL, phase=STREAM)
        call = _timed_call(ordered, index, kin, record, begun)
        if call is not None:
            timed = spans[call]
            tokens = {f: getattr(record, f) for f in _TOKENS if getattr(timed, f) is None}
            spans[call] = replace(timed, end_ns=max(timed.end_ns, record.end_ns), **tokens)
    return sorted(spans, key=_span_order)


def _timed_call(
    spans: list[SpanRecord], index: dict[str, int], kin: dict[str, list[int]], record: SpanRecord, begun: int
) -> int | None:
    """The client model call whose stream the record times, if any."""
    parent = index.get(record.parent_span_id)
    if parent is not None and _is_client_call(spans[parent]) and record.parent_span_id != record.span_id:
        return parent
    siblings = kin.get(record.parent_span_id, ())
    ended = [
        i
        for i in siblings
        if _is_client_call(spans[i]) and spans[i].start_ns <= begun and spans[i].end_ns <= begun + _STREAM_SLACK_NS
    ]
    if not ended:
        return None
    best = max(ended, key=lambda i: (spans[i].end_ns, spans[i].start_ns, spans[i].span_id))
    if any(spans[best].end_ns < spans[i].start_ns < begun for i in siblings):
        return None  # something else began between the call and its stream: not the call it times
    return best


def _same_clock(child: SpanRecord, parent: SpanRecord) -> bool:
    """Both timed by one process: the child's overrun is real time, not skew between clocks."""
    return child.service == parent.service and not child.is_server_span


def _client_calls(ordered: list[SpanRecord], parent: list[int], order: list[int]) -> list[bool]:
    """Per span: a client model call that counts (module docstring, Plain sums and counts): not one inside a
    client call with only spans of no category between (the same request seen again)."""
    client = [_is_client_call(s) for s in ordered]
    is_call = [c and (p == -1 or not client[p]) for c, p in zip(client, parent, strict=True)]
    if sum(client) > 1:  # a call below a wrapper of its own (a framework's step inside the outer call)
        within = [False] * len(ordered)  # inside a client call through spans of no category only
        for i in order:  # parents first
            p = parent[i]
            if p != -1:
                within[i] = client[p] or (within[p] and _no_category(ordered[p]))
            if client[i] and within[i]:
                is_call[i] = False
    if not any(s.response_id for s in ordered):  # most traces
        return is_call
    responses: set[str] = set()
    for i, span in enumerate(ordered):  # start order: the first to start is the call
        if is_call[i] and span.response_id:
            is_call[i] = span.response_id not in responses
            responses.add(span.response_id)
    return is_call


def _tool_calls(ordered: list[SpanRecord], parent: list[int], order: list[int]) -> list[bool]:
    """Per span: a tool call that counts (module docstring, Plain sums and counts). A tool span whose nearest
    tool ancestor, with no model span between, is the same call (``_same_tool_call``) is that call seen again:
    an MCP server's span inside the client's, the client's inside the user's ``execute_tool``."""
    is_tool = [s.role == TOOL for s in ordered]
    if sum(is_tool) < 2:  # most traces
        return is_tool
    counted, outer = is_tool.copy(), [-1] * len(ordered)  # outer: the nearest tool ancestor, none past a model span
    for i in order:  # parents first
        p = parent[i]
        if p == -1:
            continue
        outer[i] = p if is_tool[p] else -1 if ordered[p].role == MODEL else outer[p]
        if is_tool[i] and outer[i] != -1 and _same_tool_call(ordered[outer[i]], ordered[i]):
            counted[i] = False
    return counted


def _views(tree: _Tree) -> dict[int, list[int]]:
    """Each counted client call that other client spans see again -> its spans, the one stating the most figures
    first (ties: the outer one, then the first to start): one request, whichever span of it states a figure."""
    spans = tree.spans
    members: dict[int, list[int]] = {}  # a counted call -> its spans, itself first
    for i, span in enumerate(spans):
        if _is_client_call(span) and not tree.is_call[i]:
            members.setdefault(_call_seen_again(tree, i), []).append(i)
    views = {}
    for call, seen in members.items():
        group = [call, *seen]
        kept = max(group, key=lambda i: (_figures_stated(spans[i]), -group.index(i)))
        views[call] = [kept, *(i for i in group if i != kept)]
    return views


def _seen_again(tree: _Tree, views: dict[int, list[int]]) -> tuple[tuple[str, int], ...]:
    """The spans that span-level figures leave out (module docstring, Plain sums and counts): a tool span that is
    an outer call seen again, and of one model request's spans all but the one stating the most figures."""
    spans = tree.spans
    again = [i for i, s in enumerate(spans) if (s.role == TOOL and not tree.is_tool[i])]
    again.extend(i for group in views.values() for i in group[1:])
    return tuple((spans[i].span_id, spans[i].start_ns) for i in sorted(again))


def _first_ttft(tree: _Tree, views: dict[int, list[int]]) -> float | None:
    """The TTFT of the first counted call that states one, on any of its spans."""
    spans = tree.spans
    for m in compress(range(len(spans)), tree.is_call):
        for i in views.get(m, (m,)):
            if spans[i].ttft_ms is not None:
                return spans[i].ttft_ms
    return None


def _call_seen_again(tree: _Tree, i: int) -> int:
    """The counted client call that client span ``i`` (not counted) is a view of: the call holding it through
    spans of no category, else the one with its response id."""
    spans, p = tree.spans, tree.parent[i]
    while p != -1 and not _is_client_call(spans[p]) and _no_category(spans[p]):
        p = tree.parent[p]
    if p != -1 and _is_client_call(spans[p]):
        return p if tree.is_call[p] else _call_seen_again(tree, p)
    response = spans[i].response_id
    return next(j for j, s in enumerate(spans) if tree.is_call[j] and s.response_id == response)


_STATED = ("ttft_ms", "decode_ms", "input_tokens", "output_tokens", "cache_read_tokens")


def _figures_stated(span: SpanRecord) -> int:
    return sum(getattr(span, f) is not None for f in _STATED)


def _same_tool_call(outer: SpanRecord, inner: SpanRecord) -> bool:
    """The same tool by name, and no two different call ids."""
    if not outer.tool or outer.tool != inner.tool:
        return False
    return not (outer.tool_call_id and inner.tool_call_id and outer.tool_call_id != inner.tool_call_id)


def _no_category(span: SpanRecord) -> bool:
    return span.role not in (MODEL, TOOL) and not span.is_server_span and not span.phase


def _is_client_call(span: SpanRecord) -> bool:
    return span.role == MODEL and not span.is_server_span and not span.phase


def _wins(new: SpanRecord, old: SpanRecord) -> bool:
    """Ends later, else is longer; exact duplicates in time are ordered by repr so input order never matters."""
    a, b = (new.end_ns, -new.start_ns), (old.end_ns, -old.start_ns)
    return a > b or (a == b and repr(new) > repr(old))


def _parents(spans: list[SpanRecord]) -> list[int]:
    index = {s.span_id: i for i, s in enumerate(spans)}
    parent = [
        index.get(s.parent_span_id, -1) if s.parent_span_id and s.parent_span_id != s.span_id else -1 for s in spans
    ]
    if all(p < i for i, p in enumerate(parent)):  # every parent sorts first (the usual case): no cycle possible
        return parent
    state = [0] * len(spans)  # 0 unseen, 1 on the current chain, 2 done
    for start in range(len(spans)):
        chain, i = [], start
        while i != -1 and state[i] == 0:
            state[i] = 1
            chain.append(i)
            i = parent[i]
        if i != -1 and state[i] == 1:  # the chain closed on itself: break at the earliest span
            parent[min(chain[chain.index(i) :])] = -1
        for j in chain:
            state[j] = 2
    return parent


# --- critical path ----------------------------------------------------------------------


def _walk(tree: _Tree) -> tuple[list[PathSegment], dict[str, int], dict[int, tuple[int, int, int]]]:
    """Segments in time order, their total per category and phase, and the walked window (lo, hi, depth) of each
    span on the path."""
    spans, children, reach = tree.spans, tree.children, tree.reach
    own: list[tuple[str, int, int, str, str]] = []  # (span id, lo, hi, category, phase) of each span's own time
    windows: dict[int, tuple[int, int, int]] = {}
    attribution, _ = _attribution(spans[tree.root], _ORCHESTRATION_ONLY, tree.stream_end[tree.root])
    # What each walked span's own time counts as: a span's follows its parent's, wherever the walk adopted it.
    pieces: dict[int, _Pieces] = {tree.root: attribution}
    # (span, lo, hi, depth, what its own time counts as, the siblings it adopts)
    stack: list[tuple[int, int, int, int, _Pieces, list[int]]] = [(tree.root, tree.lo, tree.hi, 0, attribution, [])]
    while stack:
        node, lo, hi, depth, attribution, adopted = stack.pop()
        windows[node] = (lo, hi, depth)
        span_id = spans[node].span_id
        cursor = hi
        kids = children[node] + adopted if adopted else children[node]
        if kids:  # most spans are leaves
            keyed = _clamped_children(spans, reach, kids, lo, hi)
            for k, (neg_hi, c_lo, child) in enumerate(keyed):
                c_hi = -neg_hi
                if c_hi > cursor:
                    if c_lo >= cursor:
                        continue  # it ran beside the chosen one: parallel
                    c_hi = cursor  # it overlapped the chosen one: until that started, the path is it
                if c_hi < cursor:
                    _own_time(own, span_id, c_hi, cursor, attribution)
                outer = pieces[tree.parent[child]] if adopted else attribution
                end = tree.stream_end[child]
                c_attribution, transparent = _attribution(spans[child], outer, end)
                pieces[child] = c_attribution
                inside = _enclosed(keyed, k) if transparent else _enclosed(keyed, k, end) if end is not None else []
                stack.append((child, c_lo, c_hi, depth + 1, c_attribution, inside))
                cursor = c_lo
        if lo < cursor:
            _own_time(own, span_id, lo, cursor, attribution)
    own.sort(key=_SEGMENT_START)  # segments never overlap: no two start together
    if tree.partial:
        own = _split_root_time(tree, own)
    split = dict.fromkeys(_SPLIT, 0)
    for _, lo, hi, category, phase in own:
        split[category] += hi - lo
        if phase:
            split[phase] += hi - lo
    return list(starmap(_segment, own)), split, windows


_SEGMENT_START = itemgetter(1)
_SPLIT = (MODEL, TOOL, ORCHESTRATION, *PHASES)
# What a span's own time counts as, piece by piece: (from ns, category, model phase), the first piece from the
# start of time. One piece but for a model call whose stream ended before the span did, and what runs in it.
_Pieces = tuple[tuple[int, str, str], ...]
_ALWAYS = -(2**63)
_ORCHESTRATION_ONLY: _Pieces = ((_ALWAYS, ORCHESTRATION, ""),)
_MODEL_ONLY: _Pieces = ((_ALWAYS, MODEL, ""),)
_TOOL_ONLY: _Pieces = ((_ALWAYS, TOOL, ""),)


def _own_time(own: list[tuple[str, int, int, str, str]], span_id: str, lo: int, hi: int, pieces: _Pieces) -> None:
    """[lo, hi) of the span's own time as segments, one per piece it overlaps (model phases on model time only)."""
    if len(pieces) == 1:  # nearly always
        _, category, phase = pieces[0]
        own.append((span_id, lo, hi, category, phase if category == MODEL else ""))
        return
    for k, (begin, category, phase) in enumerate(pieces):
        end = pieces[k + 1][0] if k + 1 < len(pieces) else hi
        a, b = max(lo, begin), min(hi, end)
        if a < b:
            own.append((span_id, a, b, category, phase if category == MODEL else ""))


def _attribution(span: SpanRecord, outer: _Pieces, end: int | None) -> tuple[_Pieces, bool]:
    """What a span's own time counts as, given what its parent's does, and whether it is transparent: it has no
    latency category of its own (not a model, tool, phase or server span). A model call whose stream ended (at
    ``end``, from ``_stream_ends``) before the span did is model time until then, and after it counts as its
    parent's time would."""
    role, phase = span.role, span.phase
    if role == MODEL and not span.is_server_span and not phase:
        if end is None:
            return _MODEL_ONLY, False
        return ((_ALWAYS, MODEL, ""), *_from(outer, end)), False
    if not (role == MODEL or span.is_server_span or phase):
        return (_TOOL_ONLY, False) if role == TOOL else (outer, True)
    if phase in PHASES:
        return ((_ALWAYS, MODEL, phase),), False
    if role in (MODEL, TOOL):
        return _MODEL_ONLY, False
    return tuple((begin, MODEL, inherited) for begin, _, inherited in outer), False  # a server span: in its phase


def _from(pieces: _Pieces, moment: int) -> _Pieces:
    """``pieces`` from ``moment`` on: the piece holding it starts there."""
    later = [piece for piece in pieces if piece[0] > moment]
    current = next(piece for piece in reversed(pieces) if piece[0] <= moment)
    return ((moment, current[1], current[2]), *later)


def _stream_ends(spans: list[SpanRecord]) -> list[int | None]:
    """Per span, when a model span's stream ended, where it is known and earlier than the span's end: the stream
    it states (start + TTFT + decode), or the start of the last tool its answer asked for when every one of them
    ran inside it (``_answered_by_tools``); the earlier of the two."""
    ends: list[int | None] = [None] * len(spans)
    asked = []
    for i, span in enumerate(spans):  # one pass: most spans state neither
        if (span.decode_ms is not None or span.answer_tool_calls) and _is_client_call(span):
            if span.decode_ms is not None:
                ends[i] = _stream_end(span)
            if span.answer_tool_calls:
                asked.append(i)
    if asked:
        first_tool: dict[str, SpanRecord] = {}
        for span in spans:  # start order: the first tool span of each call id
            if span.role == TOOL and span.tool_call_id:
                first_tool.setdefault(span.tool_call_id, span)
        for i in asked:
            bound = _answered_by_tools(spans[i], first_tool)
            if bound is not None:
                stated = ends[i]
                ends[i] = bound if stated is None else min(bound, stated)
    return ends


def _answered_by_tools(span: SpanRecord, first_tool: dict[str, SpanRecord]) -> int | None:
    """A model answer that asked for tools ends with their calls, so its stream had ended by the time the last of
    them started; when they all started after the span and ended by its end (the span held its answer open until
    its tools returned: Vercel AI's doStream), that start is before the span's end and bounds its stream."""
    starts = []
    for call_id in span.answer_tool_calls:
        tool = first_tool.get(call_id)
        if tool is None or not span.start_ns < tool.start_ns <= tool.end_ns <= span.end_ns:
            return None
        starts.append(tool.start_ns)
    bound = max(starts)
    return bound if bound < span.end_ns else None


def _stream_end(span: SpanRecord) -> int | None:
    """When a model call's stream ended, if the span states it (start + TTFT + decode) and ended later."""
    ttft, decode = span.ttft_ms, span.decode_ms
    if ttft is None or decode is None or not 0 < ttft + decode < NO_LONGER_NS / 1e6:  # NaN and inf: none stated
        return None
    end = span.start_ns + round((ttft + decode) * 1e6)
    return end if end < span.end_ns else None


def _stretched(span: SpanRecord) -> SpanRecord:
    """A model call that ended before its stream was read (its TTFT, or TTFT + decode, later than its end: the call
    returned the stream, and someone else read it) lasts at least until what it states of the stream."""
    ttft = span.ttft_ms
    if ttft is None or span.role != MODEL or span.is_server_span or span.phase:
        return span
    stated = ttft + (span.decode_ms or 0.0)
    if not 0 < stated < NO_LONGER_NS / 1e6:
        return span
    end = span.start_ns + round(stated * 1e6)
    return replace(span, end_ns=end) if end > span.end_ns else span


NO_LONGER_NS = 86_400 * 10**9  # a stream stated to last longer than a day is no statement


def _enclosed(keyed: list[tuple[int, int, int]], k: int, after: int | None = None) -> list[int]:
    """The siblings after ``keyed[k]`` (latest end first) whose clamped interval lies inside its interval (and,
    given ``after``, ends after it: what ran in a model span past its stream's end)."""
    lo = keyed[k][1] if after is None else max(keyed[k][1], after)
    inside = []
    for neg_c_hi, c_lo, c in keyed[k + 1 :]:
        if -neg_c_hi <= lo:  # this one and every later one end before keyed[k] starts (or its stream ended)
            break
        if c_lo >= keyed[k][1]:
            inside.append(c)
    return inside


def _clamped_children(
    spans: list[SpanRecord], reach: list[int], children: list[int], lo: int, hi: int
) -> list[tuple[int, int, int]]:
    """(-end, start, child) from the child's start to its reach, clamped to [lo, hi], zero-length ones dropped,
    latest end first (ties: earliest start)."""
    keyed = []
    for c in children:
        c_lo, c_hi = spans[c].start_ns, reach[c]
        if not lo <= c_lo < c_hi <= hi:  # seldom: max and min cost more than the rest of the loop
            c_lo, c_hi = max(c_lo, lo), min(c_hi, hi)
            if c_hi <= c_lo:
                continue
        keyed.append((-c_hi, c_lo, c))
    keyed.sort()
    return keyed


def _split_root_time(tree: _Tree, own: list[tuple[str, int, int, str, str]]) -> list[tuple[str, int, int, str, str]]:
    """A partial trace's root owns only its real interval; the widened rest is orchestration."""
    root = tree.spans[tree.root]
    real_lo, real_hi = root.start_ns, root.end_ns
    pieces = []
    for span_id, lo, hi, category, phase in own:
        if span_id != root.span_id:
            pieces.append((span_id, lo, hi, category, phase))
            continue
        cuts = sorted({lo, hi, min(max(real_lo, lo), hi), min(max(real_hi, lo), hi)})
        for a, b in pairwise(cuts):
            inside = real_lo <= a and b <= real_hi
            pieces.append((span_id, a, b, category, phase) if inside else (span_id, a, b, ORCHESTRATION, ""))
    return pieces


# --- sums, joins and what-ifs -----------------------------------------------------------


def _sum(spans: list[SpanRecord], keep: list[bool]) -> int:
    return sum([s.end_ns - s.start_ns for s in compress(spans, keep)])


def _model_sum(tree: _Tree) -> int:
    """Client model calls' durations, each to its stream's end where that is known to be earlier."""
    spans, calls = tree.spans, tree.is_call
    ends = [s.end_ns if end is None else end for s, end in compress(zip(spans, tree.stream_end, strict=True), calls)]
    return sum(ends) - sum([s.start_ns for s in compress(spans, calls)])


def _split_complete(spans: Sequence[SpanRecord]) -> bool:
    """False where the trace does not time its model calls: an agent run with no model span (an agent asks a
    model, so its calls went to another trace: an instrumentation that starts a trace of its own per call), or a
    call that returned its stream before the first chunk and states no decode (someone else read the stream, and
    nothing times its end: LlamaIndex's astream_chat)."""
    roles = {s.role for s in spans}
    return (MODEL in roles or sc.ROLE_AGENT not in roles) and not any(map(_stream_read_untimed, spans))


def _stream_read_untimed(span: SpanRecord) -> bool:
    ttft = span.ttft_ms
    if ttft is None or span.decode_ms is not None or not _is_client_call(span) or not 0 < ttft < NO_LONGER_NS / 1e6:
        return False
    return span.start_ns + round(ttft * 1e6) > span.end_ns + _STREAM_SLACK_NS


def _first(spans: list[SpanRecord], field: str) -> str:
    return next((str(getattr(s, field)) for s in spans if getattr(s, field)), "")


def _prefetch(spans: list[SpanRecord]) -> dict[str, object]:
    """Prefetch outcome counts and saved/wasted sums over all spans."""
    if not any(
        s.prefetch_outcome or s.prefetch_saved_ms is not None or s.prefetch_wasted_ms is not None for s in spans
    ):
        return _NO_PREFETCH  # most traces: skip four passes that would sum zeros
    return {
        "prefetch_hits": sum(s.prefetch_outcome == "hit" for s in spans),
        "prefetch_misses": sum(s.prefetch_outcome in ("miss", "cancelled") for s in spans),
        "prefetch_saved_ms": sum(s.prefetch_saved_ms or 0.0 for s in spans),
        "prefetch_wasted_ms": sum(s.prefetch_wasted_ms or 0.0 for s in spans),
    }


_NO_PREFETCH: dict[str, object] = {
    "prefetch_hits": 0,
    "prefetch_misses": 0,
    "prefetch_saved_ms": 0.0,
    "prefetch_wasted_ms": 0.0,
}

_CACHE_PAIR = attrgetter("cache_read_tokens", "input_tokens")
_SPEC_PAIR = attrgetter("spec_accepted_tokens", "spec_proposed_tokens")


def _server_join(tree: _Tree, views: dict[int, list[int]]) -> dict[str, object]:
    """server_ns, client_wait_ns and the ratios that may fall back on a joined server span."""
    joined = _joined_servers(tree) if any(s.is_server_span for s in tree.spans) else {}
    server = {m: sum(_duration(tree.spans[s]) for s in ss) for m, ss in joined.items()}
    calls = list(compress(range(len(tree.spans)), tree.is_call))
    return {
        "server_ns": sum(server.values()),
        "client_wait_ns": sum(max(0, _duration(tree.spans[m]) - t) for m, t in server.items()),
        "cache_hit_ratio": _ratio(tree, calls, views, joined, _CACHE_PAIR),
        "spec_acceptance": _ratio(tree, calls, views, joined, _SPEC_PAIR),
    }


def _joined_servers(tree: _Tree) -> dict[int, list[int]]:
    """Client model call -> the outermost server spans below it."""
    call, under_server = [-1] * len(tree.spans), [False] * len(tree.spans)
    joined: dict[int, list[int]] = {}
    for i in tree.order:
        span, p = tree.spans[i], tree.parent[i]
        if tree.is_call[i]:
            call[i] = i
        elif p != -1:
            call[i], under_server[i] = call[p], under_server[p] or tree.spans[p].is_server_span
        if span.is_server_span and call[i] != -1 and not under_server[i]:
            joined.setdefault(call[i], []).append(i)
    return joined


def _duration(span: SpanRecord) -> int:
    return span.end_ns - span.start_ns


def _ratio(
    tree: _Tree, calls: list[int], views: dict[int, list[int]], joined: dict[int, list[int]], pair: Callable
) -> float | None:
    """Of each call, the first pair of numbers one of its spans states: its views, then its joined server spans."""
    spans, top, bottom = tree.spans, 0, 0
    for m in calls:
        for i in (*views.get(m, (m,)), *joined.get(m, ())):
            a, b = pair(spans[i])
            if a is not None and b is not None:
                top, bottom = top + a, bottom + b
                break
    return top / bottom if bottom > 0 else None


def _parallel_groups(tree: _Tree, windows: dict[int, tuple[int, int, int]]) -> list[ParallelGroup]:
    deciding: list[bool] | None = None  # computed on first need: most spans are leaves
    runs: list[list[int]] = []
    for kids in tree.children:
        if len(kids) < 2:
            continue
        if deciding is None:
            deciding = _contains_client_model(tree)
        runs.extend(_serial_runs(tree, kids, deciding))
    return [_group(tree, run, windows) for run in sorted(runs)]  # by first start


def _serial_runs(tree: _Tree, kids: list[int], deciding: list[bool]) -> list[list[int]]:
    """The maximal serial runs of two or more tool calls among these siblings."""
    spans, is_tool = tree.spans, tree.is_tool
    runs: list[list[int]] = []
    run: list[int] = []
    call_ids: set[str] = set()  # tool_call_ids of the run's members
    decided = None  # the first start after the run's last member's of a deciding sibling (starts only grow)
    for k in kids:  # index order is start order
        span = spans[k]
        if not is_tool[k]:
            if deciding[k] and decided is None and run and span.start_ns > spans[run[-1]].start_ns:
                decided = span.start_ns
            continue
        if not (run and _extends(spans[run[-1]], span, decided, call_ids)):
            runs.append(run)
            run, call_ids = [], set()
        run.append(k)
        call_ids.add(span.tool_call_id)
        decided = None
    runs.append(run)
    return [r for r in runs if len(r) >= 2]


def _extends(prev: SpanRecord, span: SpanRecord, decided: int | None, call_ids: set[str]) -> bool:
    """``span`` continues the run ending in ``prev``: no overlap, no deciding sibling started strictly between,
    no dependency on a member."""
    if span.start_ns < prev.end_ns or (decided is not None and decided < span.start_ns):
        return False
    return not any(d and d in call_ids for d in span.depends_on)


def _contains_client_model(tree: _Tree) -> list[bool]:
    has, parent = tree.is_call.copy(), tree.parent
    for i in compress(range(len(has)), tree.is_call):  # each call marks its ancestors up to one already marked
        p = parent[i]
        while p != -1 and not has[p]:
            has[p] = True
            p = parent[p]
    return has


def _group(tree: _Tree, run: list[int], windows: dict[int, tuple[int, int, int]]) -> ParallelGroup:
    on_path = all(i in windows for i in run)
    walked = [windows[i][1] - windows[i][0] for i in run] if on_path else [0]
    return ParallelGroup(
        span_ids=tuple(tree.spans[i].span_id for i in run),
        tools=tuple(tree.spans[i].tool or tree.spans[i].name for i in run),
        saving_ns=sum(walked) - max(walked),
        on_critical_path=on_path,
    )


# --- streamed tool-call dispatch ------------------------------------------------------------

_NO_DISPATCH: dict[str, object] = {"dispatched": (), "dispatch_groups": (), "dispatch_saving_ns": 0}


def _dispatch(
    tree: _Tree, windows: dict[int, tuple[int, int, int]], links: dict[int, list[tuple[int, int]]]
) -> dict[str, object]:
    """Linked tool calls, their groups and the trace's dispatch saving (module docstring)."""
    if not links:
        return _NO_DISPATCH  # nearly every trace
    spans = tree.spans
    tool_of: dict[str, int] = {}  # call id -> the first tool span with it
    for i, span in enumerate(spans):
        if tree.is_tool[i] and span.tool_call_id:
            tool_of.setdefault(span.tool_call_id, i)
    related = _Related(tree)
    calls: list[tuple[int, DispatchedCall]] = []
    groups: list[DispatchGroup] = []
    stretches: list[tuple[int, int]] = []
    for m in sorted(links):
        model, members = spans[m], links[m]
        calls.extend((t, _dispatched(spans[t], model, ready, t in windows)) for t, ready in members)
        # walked ends, but never past a tool's reach: a partial trace's root tool is walked over a wider window
        done = [min(windows[t][1], tree.reach[t]) for t, _ in members if t in windows]
        saving = 0
        if done:
            f = max(done)
            floor = max(model.end_ns, *_what_if_ends(tree, members, tool_of))
            if floor < f:
                floor = max(floor, related.latest_other_end(m, [t for t, _ in members], model.end_ns, f))
            floor = max(floor, tree.lo)
            if floor < f:
                saving = f - floor
                stretches.append((floor, f))
        groups.append(
            DispatchGroup(
                model_span_id=model.span_id,
                span_ids=tuple(spans[t].span_id for t, _ in members),
                tools=tuple(spans[t].tool or spans[t].name for t, _ in members),
                saving_ns=saving,
                on_critical_path=bool(done),
            )
        )
    return {
        "dispatched": tuple(call for _, call in sorted(calls, key=lambda c: c[0])),
        "dispatch_groups": tuple(groups),
        "dispatch_saving_ns": _union(stretches),
    }


def _dispatch_links(tree: _Tree) -> dict[int, list[tuple[int, int]]]:
    """Model span -> its linked tool spans with their ready moments, in start order."""
    spans = tree.spans
    streamed: dict[str, tuple[int, int]] = {}  # call id -> (model span, ready): the first span in order wins
    for i, span in enumerate(spans):
        if span.role == MODEL:
            for call in span.tool_calls:
                if call.call_id and call.ready_ns is not None:
                    streamed.setdefault(call.call_id, (i, call.ready_ns))
    calls: list[int] | None = None  # client model calls by start, computed on first need
    starts: list[int] = []
    links: dict[int, list[tuple[int, int]]] = {}
    for t, span in enumerate(spans):
        if not tree.is_tool[t]:
            continue
        link = streamed.get(span.tool_call_id) if span.tool_call_id else None
        if link is None and span.args_ready_ns is not None:
            if calls is None:
                calls = [i for i, s in enumerate(spans) if _is_client_call(s)]  # index order is start order
                starts = [spans[i].start_ns for i in calls]
            m = _streaming_at(spans, calls, starts, span.args_ready_ns)
            link = None if m is None else (m, span.args_ready_ns)
        if link is not None:
            links.setdefault(link[0], []).append((t, link[1]))
    return links


def _streaming_at(spans: list[SpanRecord], calls: list[int], starts: list[int], moment: int) -> int | None:
    """Of the client model calls (span indices and their starts), the one that was streaming at ``moment``:
    the latest to start with start <= moment <= end, ties: the first in span order."""
    k = bisect_right(starts, moment)
    best = None
    while k > 0:
        k -= 1
        i = calls[k]
        if best is not None and spans[i].start_ns < spans[best].start_ns:
            break
        if spans[i].end_ns >= moment:
            best = i  # walking back: an equal start earlier in order replaces it
    return best


def _dispatched(tool: SpanRecord, model: SpanRecord, ready: int, on_path: bool) -> DispatchedCall:
    return DispatchedCall(
        span_id=tool.span_id,
        tool=tool.tool or tool.name,
        call_id=tool.tool_call_id,
        model_span_id=model.span_id,
        ready_ns=ready,
        delay_ns=max(0, tool.start_ns - ready),
        while_streaming=tool.start_ns < model.end_ns,
        on_critical_path=on_path,
    )


def _what_if_ends(tree: _Tree, members: list[tuple[int, int]], tool_of: dict[str, int]) -> list[int]:
    """Each member's end had it started at its ready moment, or once the tools it depends on were done."""
    spans, reach = tree.spans, tree.reach
    finish: dict[str, int] = {}  # call id -> what-if end of a member already placed
    ends = []
    for t, ready in members:
        tool, start = spans[t], ready
        for needed in tool.depends_on:
            if needed in finish:
                start = max(start, finish[needed])
            elif needed in tool_of and tool_of[needed] != t:
                start = max(start, reach[tool_of[needed]])
        end = start + reach[t] - tool.start_ns
        if tool.tool_call_id:
            finish.setdefault(tool.tool_call_id, end)
        ends.append(end)
    return ends


class _Related:
    """Ancestor/descendant tests by the tree's pre-order (an Euler tour), and spans by end."""

    def __init__(self, tree: _Tree) -> None:
        n = len(tree.spans)
        self.first, self.last = [0] * n, [0] * n  # pre-order index of a span, and the last of its subtree
        stack, clock = [tree.root], 0
        while stack:
            i = stack.pop()
            if i < 0:
                self.last[~i] = clock - 1
                continue
            self.first[i] = clock
            clock += 1
            stack.append(~i)
            stack.extend(reversed(tree.children[i]))
        self.by_end = sorted((s.end_ns, i) for i, s in enumerate(tree.spans))
        self.ends = [end for end, _ in self.by_end]

    def kin(self, a: int, b: int) -> bool:
        """One is an ancestor-or-self of the other."""
        first, last = self.first, self.last
        return first[a] <= first[b] <= last[a] or first[b] <= first[a] <= last[b]

    def latest_other_end(self, model: int, members: list[int], after: int, by: int) -> int:
        """The latest end in (after, by] of a span that is not the model span, a member, or kin of a member;
        ``after`` when there is none."""
        k = bisect_right(self.ends, by)
        while k > 0 and self.by_end[k - 1][0] > after:
            k -= 1
            end, i = self.by_end[k]
            if i != model and not any(self.kin(i, t) for t in members):
                return end
        return after


def _union(stretches: list[tuple[int, int]]) -> int:
    """Total length of the union of [lo, hi) intervals."""
    total = 0
    reached = min((lo for lo, _ in stretches), default=0)
    for lo, hi in sorted(stretches):
        total += max(0, hi - max(lo, reached))
        reached = max(reached, hi)
    return total
