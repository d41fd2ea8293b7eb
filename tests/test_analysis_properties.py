"""The E2E split checked against a brute-force reference on random span trees, plus two hand-built cases.

The reference below shares no code with ``agentlat.collector.analysis.critical_path``: it re-reads the rules of that
module's docstring and applies them one 1 ms tick at a time (who owns tick t, walking back from the end),
with plain dicts and lists and no interval arithmetic, so a disagreement points at one of the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlat.collector.analysis.critical_path import (
    ParallelGroup,
    SpanRecord,
    StreamedToolCall,
    TraceAnalysis,
    analyse,
)

MS = 1_000_000
PHASES = ("queue", "prefill", "decode")
PROPERTY_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples every run: a property test must not be flaky
    database=None,  # and must not write a .hypothesis folder into the repository
    suppress_health_check=[HealthCheck.too_slow],
)


# --- random traces ------------------------------------------------------------------------


@st.composite
def traces(draw: st.DrawFn) -> list[SpanRecord]:
    """One trace's spans in ms: nested mostly, with skew, overruns, negative lengths, orphans, cycles, duplicates."""
    n = draw(st.integers(1, 16))
    spans: list[SpanRecord] = []
    for i in range(n):
        if i == 0:
            start = draw(st.integers(0, 10))
            end = start + draw(st.integers(-2, 90))
            parent = draw(st.sampled_from(["", "lost"]))  # often the root never arrives: a partial trace
        else:
            p = spans[draw(st.integers(0, i - 1))]
            p_lo, p_hi = p.start_ns // MS, max(p.start_ns, p.end_ns) // MS
            # Often aligned with the parent's edges (ties everywhere), else a few ms of clock skew either side;
            # the end may overrun the parent or come before the start.
            start = draw(st.one_of(st.sampled_from((p_lo, p_hi)), st.integers(p_lo - 6, p_hi + 3)))
            end = draw(st.one_of(st.just(p_hi), st.integers(start - 3, max(start + 1, p_hi + 6))))
            how = draw(st.sampled_from(["child"] * 12 + ["", "missing", "self", "later"]))
            parent = {"child": p.span_id, "": "", "missing": f"gone{i}", "self": f"s{i}"}.get(how, "later")
        role = draw(st.sampled_from(("model", "tool", "agent", "other")))
        may_be_call_part = role in ("model", "other")
        tool = role == "tool"
        spans.append(
            SpanRecord(
                span_id=f"s{i}",
                parent_span_id=parent,
                name=f"s{i}",
                service="props-svc",
                start_ns=start * MS,
                end_ns=end * MS,
                role=role,
                is_server_span=may_be_call_part and draw(st.integers(0, 3)) == 0,
                phase=draw(st.sampled_from(("",) * 4 + PHASES)) if may_be_call_part else "",
                # few names and ids: a tool inside a tool is often the same call seen again (MCP client and server)
                tool=draw(st.sampled_from(("tool_a", "tool_b"))) if tool else "",
                tool_call_id=draw(st.sampled_from(("", f"c{i}", f"c{i}"))) if tool else "",
                depends_on=(f"c{draw(st.integers(0, i))}",) if tool and draw(st.booleans()) else (),
                # what a model span states of its stream: often nothing, else a first chunk and a decode that
                # may end before the span, at its end, or after it (a span that ended before its stream was read)
                ttft_ms=draw(st.one_of(st.none(), st.integers(0, 60).map(float))) if role == "model" else None,
                decode_ms=draw(st.one_of(st.none(), st.integers(0, 40).map(float))) if role == "model" else None,
                # the tool calls a model's answer asked for: often none, else ids that tool spans may have
                answer_tool_calls=tuple(
                    f"c{j}" for j in draw(st.lists(st.integers(i + 1, i + 4), max_size=2, unique=True))
                )
                if role == "model"
                else (),
            )
        )
    for i, s in enumerate(spans):
        if s.parent_span_id == "later":  # a later span may descend from this one: a parent cycle
            spans[i] = replace(s, parent_span_id=f"s{draw(st.integers(i + 1, n - 1))}" if i < n - 1 else "gone")
    for _ in range(draw(st.integers(0, 3))):  # re-sent spans with other times (late or corrected)
        victim = spans[draw(st.integers(0, n - 1))]
        shift_start, shift_end = draw(st.integers(-4, 4)), draw(st.integers(-4, 4))
        spans.append(
            replace(victim, start_ns=victim.start_ns + shift_start * MS, end_ns=victim.end_ns + shift_end * MS)
        )
    return spans


@st.composite
def answered_traces(draw: st.DrawFn) -> list[SpanRecord]:
    """``traces()`` where model calls' answers asked for tools that ran inside them, as siblings or children
    (Vercel AI's doStream holds its answer open until they return), and some answers name a call no span has."""
    spans = draw(traces())
    models = [i for i, s in enumerate(spans) if s.role == "model" and s.end_ns > s.start_ns + MS]
    for i in draw(st.lists(st.sampled_from(models), min_size=1, max_size=2, unique=True)) if models else []:
        model, ids = spans[i], []
        for k in range(draw(st.integers(1, 2))):
            lo, hi = model.start_ns // MS + 1, model.end_ns // MS
            start = draw(st.integers(lo, hi))
            call_id = f"a{i}-{k}"
            spans.append(
                SpanRecord(
                    span_id=f"s{i}-t{k}",
                    parent_span_id=draw(st.sampled_from((model.span_id, model.parent_span_id))),
                    name="tool",
                    service="props-svc",
                    start_ns=start * MS,
                    end_ns=draw(st.integers(start, hi + 2)) * MS,  # now and then past the call's end: no bound
                    role="tool",
                    tool="tool_a",
                    tool_call_id=call_id,
                )
            )
            ids.append(call_id)
        unmatched = ("nowhere",) if draw(st.integers(0, 5)) == 0 else ()
        for k, copy in enumerate(spans):  # a span sent again carries the same attributes
            if copy.span_id == model.span_id:
                spans[k] = replace(copy, answer_tool_calls=(*ids, *unmatched))
    return spans


# --- the brute-force reference ------------------------------------------------------------


@dataclass
class Node:
    id: str
    raw_parent: str
    start: int  # ms
    end: int
    role: str
    server: bool
    phase: str
    stream_end: int | None = None  # ms: a model call whose stream ended before the span did
    parent: str | None = None
    kids: list[str] = field(default_factory=list)
    record: SpanRecord | None = None  # the record that won (for the dispatch reference)


@dataclass
class Reference:
    root: str
    partial: bool
    lo: int
    hi: int
    nodes: dict[str, Node]
    owner: dict[int, str]  # tick (ms) -> span owning [tick, tick + 1 ms) on the critical path
    category: dict[int, str]
    phase: dict[int, str]
    walked: dict[str, int]  # span on the critical path -> start of the window it was walked over
    walked_end: dict[str, int]  # ... and its end

    def total(self, category: str) -> int:
        return sum(1 for c in self.category.values() if c == category) * MS

    def phase_total(self, phase: str) -> int:
        return sum(1 for t, p in self.phase.items() if p == phase and self.category[t] == "model") * MS


def order_key(node: Node) -> tuple[int, int, str]:
    """Earliest start, then the longest, then span id: every tie-break of the docstring."""
    return (node.start, -node.end, node.id)


def reference(records: list[SpanRecord]) -> Reference:
    # Assembly: zero length for end < start, then the duplicate that ends last (then the longer) wins.
    nodes: dict[str, Node] = {}
    for r in records:
        start, end = r.start_ns // MS, max(r.end_ns, r.start_ns) // MS
        client = r.role == "model" and not r.is_server_span and not r.phase
        stated = r.ttft_ms + (r.decode_ms or 0) if client and r.ttft_ms is not None else 0
        if stated > 0:  # a call that ended before its stream was read lasts as long as it says the stream did
            end = max(end, start + int(stated))
        told = r.ttft_ms + r.decode_ms if client and None not in (r.ttft_ms, r.decode_ms) else 0
        stream_end = start + int(told) if told > 0 and start + told < end else None
        node = Node(r.span_id, r.parent_span_id, start, end, r.role, r.is_server_span, r.phase, stream_end, record=r)
        old = nodes.get(r.span_id)
        if old is None or (end, -start) > (old.end, -old.start):
            nodes[r.span_id] = node
    answered_by_tools(nodes)
    for node in nodes.values():
        known = node.raw_parent in nodes and node.raw_parent != node.id
        node.parent = node.raw_parent if known else None
    for node in nodes.values():  # a span that reaches itself by parent links is on a cycle
        seen, cur = [node.id], node.parent
        while cur is not None and cur != node.id and len(seen) <= len(nodes):
            seen.append(cur)
            cur = nodes[cur].parent
        if cur == node.id:
            nodes[min((nodes[s] for s in seen), key=order_key).id].parent = None
    parentless = [n for n in nodes.values() if n.parent is None]
    real_roots = [n for n in parentless if n.raw_parent == ""]
    root = min(real_roots or parentless, key=order_key)
    for n in parentless:
        if n is not root:
            n.parent = root.id
    for n in sorted(nodes.values(), key=order_key):
        if n.parent is not None:
            nodes[n.parent].kids.append(n.id)
    partial = not real_roots
    lo = min(n.start for n in nodes.values()) if partial else root.start
    hi = max(n.end for n in nodes.values()) if partial else root.end

    # Reach: a span lasts until the latest end in its subtree (children that outlive it), but for
    # server spans, another process's clock (the random traces have one service otherwise).
    def reach(node_id: str) -> int:
        return max([nodes[node_id].end, *(reach(kid) for kid in nodes[node_id].kids if not nodes[kid].server)])

    # Critical path: walk back from the window's end one tick at a time.
    owner: dict[int, str] = {}
    walked: dict[str, int] = {}
    walked_end: dict[str, int] = {}

    def walk(span_id: str, w_lo: int, w_hi: int, adopted: list[str]) -> None:
        walked[span_id], walked_end[span_id] = w_lo, w_hi
        clamped = []
        for kid in nodes[span_id].kids + adopted:
            k_lo, k_hi = max(nodes[kid].start, w_lo), min(reach(kid), w_hi)
            if k_hi > k_lo:
                clamped.append((k_lo, k_hi, kid))
        tick, chosen = w_hi, set()
        while tick > w_lo:
            # a kid that began before the tick and reaches it (one that overlapped a chosen kid is cut there)
            reaching = [c for c in clamped if c[0] < tick <= c[1] and c[2] not in chosen]
            if reaching:
                k_lo, k_hi, kid = min(reaching, key=lambda c: (-c[1], c[0], order_key(nodes[c[2]])))
                chosen.add(kid)
                # A kid with no category of its own walks the siblings that lie inside it as its kids.
                # So does a model call past its stream's end, with those that end after it.
                after = nodes[kid].stream_end
                inside = [
                    c[2]
                    for c in clamped
                    if c[2] != kid and k_lo <= c[0] and c[1] <= k_hi and (after is None or c[1] > after)
                ]
                walk(kid, k_lo, tick, inside if not _is_call(nodes[kid]) or after is not None else [])
                tick = k_lo
            else:
                owner[tick - 1] = span_id
                tick -= 1

    walk(root.id, lo, hi, [])

    # Attribution: the nearest model or tool ancestor-or-self; phases stop at the nearest call.
    category: dict[int, str] = {}
    phase: dict[int, str] = {}
    for tick, span_id in owner.items():
        if span_id == root.id and partial and not (root.start <= tick < root.end):
            category[tick], phase[tick] = "orchestration", ""  # time of the missing parent
            continue
        chain, cur = [], span_id
        while cur is not None:  # past its stream's end a model call is no model time: skipped like any other span
            if nodes[cur].stream_end is None or tick < nodes[cur].stream_end:
                chain.append(nodes[cur])
            cur = nodes[cur].parent
        category[tick] = next(
            ("model" if n.role == "model" or n.server or n.phase else "tool" for n in chain if _is_call(n)),
            "orchestration",
        )
        phase[tick] = next((n.phase for n in chain if n.phase or n.role in ("model", "tool")), "")
    return Reference(root.id, partial, lo, hi, nodes, owner, category, phase, walked, walked_end)


def answered_by_tools(nodes: dict[str, Node]) -> None:
    """A client call's stream ended by the start of the last tool its answer asked for, when the first tool span
    of each of those ids started after the call and ended by its end."""
    tools = sorted((n for n in nodes.values() if n.role == "tool" and n.record.tool_call_id), key=order_key)
    first: dict[str, Node] = {}
    for tool in tools:
        first.setdefault(tool.record.tool_call_id, tool)
    for n in nodes.values():
        if not n.record.answer_tool_calls or n.role != "model" or n.server or n.phase:
            continue
        asked = [first.get(call_id) for call_id in n.record.answer_tool_calls]
        if all(t is not None and n.start < t.start <= t.end <= n.end for t in asked):
            bound = max(t.start for t in asked)
            if bound < n.end:
                n.stream_end = bound if n.stream_end is None else min(bound, n.stream_end)


def _is_call(n: Node) -> bool:
    return n.role in ("model", "tool") or n.server or bool(n.phase)


def segment_ticks(a: TraceAnalysis) -> tuple[dict[int, str], dict[int, str]]:
    """The analysis' segments expanded to per-tick owner and category."""
    owner, category = {}, {}
    for seg in a.segments:
        assert seg.start_ns % MS == 0 and seg.end_ns % MS == 0, seg
        for tick in range(seg.start_ns // MS, seg.end_ns // MS):
            assert tick not in owner, f"tick {tick} in two segments"
            owner[tick], category[tick] = seg.span_id, seg.category
    return owner, category


# --- properties ---------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(traces())
def test_split_adds_up_to_e2e_and_no_part_is_negative(spans: list[SpanRecord]) -> None:
    a = analyse(spans)
    parts = (a.model_ns, a.tool_ns, a.orchestration_ns)
    assert sum(parts) == a.e2e_ns
    assert min(parts) >= 0 and min(a.queue_ns, a.prefill_ns, a.decode_ns) >= 0
    assert a.queue_ns + a.prefill_ns + a.decode_ns <= a.model_ns


@PROPERTY_SETTINGS
@given(st.one_of(traces(), st.deferred(lambda: dispatch_traces())))  # with streamed tool calls too
def test_split_equals_the_brute_force_reference(spans: list[SpanRecord]) -> None:
    assert_split_is_the_reference(spans)


@PROPERTY_SETTINGS
@given(answered_traces())
def test_split_of_answers_that_asked_for_tools_equals_the_reference(spans: list[SpanRecord]) -> None:
    assert_split_is_the_reference(spans)


def assert_split_is_the_reference(spans: list[SpanRecord]) -> None:
    a, ref = analyse(spans), reference(spans)
    assert (a.root_span_id, a.partial) == (ref.root, ref.partial)
    assert (a.start_ns, a.e2e_ns) == (ref.lo * MS, (ref.hi - ref.lo) * MS)
    assert (a.model_ns, a.tool_ns, a.orchestration_ns) == (
        ref.total("model"),
        ref.total("tool"),
        ref.total("orchestration"),
    )
    assert (a.queue_ns, a.prefill_ns, a.decode_ns) == tuple(ref.phase_total(p) for p in PHASES)
    owner, category = segment_ticks(a)
    assert owner == ref.owner
    assert category == ref.category
    assert set(a.critical_path) == set(ref.walked)
    assert a.span_count == len(ref.nodes)
    roles = {n.role for n in ref.nodes.values()}
    untimed = any(  # a call that returned its stream before the first chunk and states no decode
        r.role == "model" and not r.is_server_span and not r.phase and r.ttft_ms and r.decode_ms is None
        and r.start_ns + r.ttft_ms * MS > r.end_ns + MS
        for r in spans
    )  # fmt: skip
    assert a.split_complete == (("agent" not in roles or "model" in roles) and not untimed)


def seen_again(nodes: dict[str, Node], node: Node) -> bool:
    """A tool span whose nearest tool ancestor, with no model span between, is the same call: the same tool name
    and no two different call ids. Not a call of its own."""
    above = node.parent
    while above is not None and nodes[above].role not in ("tool", "model"):
        above = nodes[above].parent
    if node.role != "tool" or above is None or nodes[above].role != "tool":
        return False
    outer, inner = nodes[above].record, node.record
    return outer.tool == inner.tool != "" and not (
        outer.tool_call_id and inner.tool_call_id and outer.tool_call_id != inner.tool_call_id
    )


def reference_tool_calls(ref: Reference) -> int:
    return sum(n.role == "tool" and not seen_again(ref.nodes, n) for n in ref.nodes.values())


def reference_model_calls(ref: Reference) -> int:
    """Client model calls that no client model call holds through spans of no category only."""

    def client(n: Node) -> bool:
        return n.role == "model" and not n.server and not n.phase

    def held(n: Node) -> bool:
        above = n.parent
        while above is not None and not _is_call(nodes[above]):
            above = nodes[above].parent
        return above is not None and client(nodes[above])

    nodes = ref.nodes
    return sum(client(n) and not held(n) for n in nodes.values())


@PROPERTY_SETTINGS
@given(traces())
def test_model_calls_count_a_call_seen_again_inside_itself_once(spans: list[SpanRecord]) -> None:
    a, ref = analyse(spans), reference(spans)
    assert a.model_calls == reference_model_calls(ref)


@PROPERTY_SETTINGS
@given(traces())
def test_tool_calls_count_a_call_seen_again_inside_itself_once(spans: list[SpanRecord]) -> None:
    a, ref = analyse(spans), reference(spans)
    assert a.tool_calls == reference_tool_calls(ref)


@PROPERTY_SETTINGS
@given(traces())
def test_spans_left_out_of_span_figures_leave_one_per_call(spans: list[SpanRecord]) -> None:
    """Per-span figures keep one span per model request and per tool call: what seen_again leaves counts them."""
    a, ref = analyse(spans), reference(spans)
    left_out = {span_id for span_id, _ in a.seen_again}
    nodes = ref.nodes.values()
    client = [n for n in nodes if n.role == "model" and not n.server and not n.phase]
    assert sum(n.record.span_id not in left_out for n in client) == reference_model_calls(ref)
    assert sum(n.role == "tool" and n.record.span_id not in left_out for n in nodes) == reference_tool_calls(ref)
    assert left_out <= {n.record.span_id for n in client} | {n.record.span_id for n in nodes if n.role == "tool"}


@PROPERTY_SETTINGS
@given(st.data())
def test_input_order_does_not_change_the_result(data: st.DataObject) -> None:
    spans = data.draw(traces())
    shuffled = data.draw(st.permutations(spans))
    assert analyse(shuffled) == analyse(spans)


@PROPERTY_SETTINGS
@given(traces())
def test_critical_path_is_a_chain_from_the_root_in_start_order(spans: list[SpanRecord]) -> None:
    a, ref = analyse(spans), reference(spans)
    assert a.critical_path[0] == a.root_span_id
    assert len(set(a.critical_path)) == len(a.critical_path)
    for i, span_id in enumerate(a.critical_path[1:], start=1):
        assert ref.nodes[span_id].parent in a.critical_path[:i], (span_id, a.critical_path)
    starts = [ref.walked[s] for s in a.critical_path]
    assert starts == sorted(starts)


def test_reference_agrees_with_a_hand_computed_trace() -> None:
    """The reference itself, on the docstring's overlap rule: a sibling ending after the cursor is the path until the
    chosen one began (a's tool, 10-50)."""
    spans = [
        SpanRecord("r", "", "r", "svc", 0, 100 * MS, "agent"),
        SpanRecord("a", "r", "a", "svc", 10 * MS, 60 * MS, "agent"),
        SpanRecord("m", "r", "m", "svc", 50 * MS, 90 * MS, "model"),
        SpanRecord("t", "a", "t", "svc", 10 * MS, 60 * MS, "tool"),
    ]
    ref = reference(spans)
    assert (ref.total("model"), ref.total("tool"), ref.total("orchestration")) == (40 * MS, 40 * MS, 20 * MS)
    assert set(ref.walked) == {"r", "m", "a", "t"}


# --- hand-built cases missing from test_analysis.py -----------------------------------------


def _span(span_id: str, parent: str, start_ms: int, end_ms: int, role: str) -> SpanRecord:
    tool = f"tool_{span_id}" if role == "tool" else ""
    return SpanRecord(span_id, parent, span_id, "props-svc", start_ms * MS, end_ms * MS, role, tool=tool)


def _ms(a: TraceAnalysis) -> tuple[int, int, int, int]:
    parts = (a.e2e_ns, a.model_ns, a.tool_ns, a.orchestration_ns)
    assert all(p % MS == 0 for p in parts), parts
    return tuple(p // MS for p in parts)  # type: ignore[return-value]


# The model streams 10-60 and emits a tool call at 30 that finishes (50) while it still streams.
STREAMED_TOOL_INSIDE_THE_STREAM = [
    _span("r", "", 0, 100, "agent"),
    _span("m1", "r", 10, 60, "model"),
    _span("t1", "r", 30, 50, "tool"),
    _span("m2", "r", 60, 90, "model"),
]
# A planner agent with its own tools, and a sub-agent with its own model calls and two serial tools.
NESTED_AGENTS_WITH_OWN_TOOLS = [
    _span("r", "", 0, 200, "agent"),
    _span("a1", "r", 10, 190, "agent"),
    _span("m1", "a1", 10, 30, "model"),
    _span("t1", "a1", 30, 60, "tool"),
    _span("a2", "a1", 60, 150, "agent"),
    _span("m2", "a2", 60, 80, "model"),
    _span("t2", "a2", 80, 100, "tool"),
    _span("t3", "a2", 100, 130, "tool"),
    _span("m3", "a2", 130, 150, "model"),
    _span("t4", "a1", 150, 170, "tool"),
    _span("m4", "a1", 170, 185, "model"),
]

STREAMED_AND_NESTED = [
    pytest.param(
        STREAMED_TOOL_INSIDE_THE_STREAM,  # the stream is the critical path, the tool is hidden under it
        (100, 80, 0, 20),
        ("r", "m1", "m2"),
        id="streamed-tool-call-finishing-inside-the-stream",
    ),
    pytest.param(
        # The streamed tool call (30-70) outlasts the stream (10-50) and the next model call waits for it:
        # the tool is critical and the stream, overlapping it, is the path until the tool began (10-30).
        [
            _span("r", "", 0, 100, "agent"),
            _span("m1", "r", 10, 50, "model"),
            _span("t1", "r", 30, 70, "tool"),
            _span("m2", "r", 70, 95, "model"),
        ],
        (100, 45, 40, 15),
        ("r", "m1", "t1", "m2"),
        id="streamed-tool-call-outlasting-the-stream",
    ),
    pytest.param(
        NESTED_AGENTS_WITH_OWN_TOOLS,
        (200, 75, 100, 25),
        ("r", "a1", "m1", "t1", "a2", "m2", "t2", "t3", "m3", "t4", "m4"),
        id="nested-agents-each-with-their-own-tools",
    ),
    pytest.param(
        # A tool that delegates to a sub-agent: the sub-agent's own time and its tool are tool time, its
        # model call is model time, and only the outer agent's gaps are orchestration.
        [
            _span("r", "", 0, 100, "agent"),
            _span("m1", "r", 0, 10, "model"),
            _span("delegate", "r", 10, 90, "tool"),
            _span("sub", "delegate", 15, 85, "agent"),
            _span("sm", "sub", 20, 40, "model"),
            _span("st", "sub", 45, 75, "tool"),
            _span("m2", "r", 90, 98, "model"),
        ],
        (100, 38, 60, 2),
        ("r", "m1", "delegate", "sub", "sm", "st", "m2"),
        id="sub-agent-run-as-a-tool",
    ),
]


@pytest.mark.parametrize(("spans", "expected", "path"), STREAMED_AND_NESTED)
def test_streamed_and_nested_known_answers(
    spans: list[SpanRecord], expected: tuple[int, int, int, int], path: tuple[str, ...]
) -> None:
    a = analyse(spans)
    assert _ms(a) == expected
    assert a.critical_path == path
    ref = reference(spans)  # the brute force agrees on the hand-computed answers too
    assert (ref.total("model"), ref.total("tool"), ref.total("orchestration")) == tuple(x * MS for x in expected[1:])


def test_streamed_tool_call_sums_and_parallelism() -> None:
    a = analyse(STREAMED_TOOL_INSIDE_THE_STREAM)
    assert (a.model_sum_ns, a.tool_sum_ns, a.model_calls, a.tool_calls) == (80 * MS, 20 * MS, 2, 1)
    assert a.parallelism == 100 / 80
    assert a.parallelisable == ()


def test_nested_agents_group_only_their_own_serial_tools() -> None:
    # a2's t2 and t3 are serial and independent: one group, both critical, saving 20 + 30 - 30 = 20 ms.
    # a1's t1 and t4 are separated by a2, which runs model calls: no group, and none across agents.
    a = analyse(NESTED_AGENTS_WITH_OWN_TOOLS)
    assert a.parallelisable == (ParallelGroup(("t2", "t3"), ("tool_t2", "tool_t3"), 20 * MS, True),)
    assert (a.model_sum_ns, a.tool_sum_ns, a.parallelism) == (75 * MS, 100 * MS, 1.0)


# --- streamed tool-call dispatch ------------------------------------------------------------


@st.composite
def dispatch_traces(draw: st.DrawFn, at_ready: bool = False) -> list[SpanRecord]:
    """``traces()`` whose tool calls were streamed by its model spans (events), report their own ready moment
    (args_ready_ns), both, or neither; ``at_ready``: every tool started the moment its arguments were ready."""
    spans = draw(traces())
    winner: dict[str, SpanRecord] = {}  # the record analyse() keeps per span id: it ends last, then is longer
    for span in spans:
        old, end = winner.get(span.span_id), max(span.end_ns, span.start_ns)
        if old is None or (end, -span.start_ns) > (max(old.end_ns, old.start_ns), -old.start_ns):
            winner[span.span_id] = span
    models = sorted(i for i, w in winner.items() if w.role == "model")
    streamed: dict[str, list[StreamedToolCall]] = {m: [] for m in models}
    own_ready: dict[str, int] = {}
    for span_id in sorted(i for i, w in winner.items() if w.role == "tool"):
        tool = winner[span_id]
        ready = tool.start_ns if at_ready else tool.start_ns - draw(st.integers(-3, 40)) * MS
        source = draw(st.sampled_from(("event", "event", "attribute", "both", "unready event", "none")))
        if not tool.tool_call_id and source != "none":  # an event names its call by id: without one, no event
            source = "attribute"
        if models and source in ("event", "both", "unready event"):
            done = None if source == "unready event" else ready
            named = draw(st.one_of(st.none(), st.just(ready - 5 * MS)))
            streamed[draw(st.sampled_from(models))].append(StreamedToolCall(tool.tool_call_id, tool.tool, named, done))
        if source in ("attribute", "both", "unready event") and draw(st.booleans()):
            own_ready[span_id] = ready if source != "both" else ready - draw(st.integers(0, 20)) * MS
    for m in models:  # a call the model streamed that no tool ran
        if draw(st.booleans()):
            streamed[m].append(StreamedToolCall("nobody", "", None, draw(st.integers(0, 100)) * MS))
    return [
        replace(s, tool_calls=tuple(streamed.get(s.span_id, ())), args_ready_ns=own_ready.get(s.span_id)) for s in spans
    ]


@dataclass
class DispatchReference:
    saving: int  # ns
    calls: list[tuple[str, int, bool, bool]]  # tool span, delay ns, while streaming, on the critical path
    groups: list[tuple[str, int]]  # model span, saving ns


def dispatch_links(nodes: dict[str, Node]) -> dict[str, tuple[str, int]]:
    """Tool span -> (the model span whose streamed call it ran, the ready moment in ms), in start order."""
    ordered = sorted(nodes.values(), key=order_key)
    record = {n.id: n.record for n in ordered}
    streamed: dict[str, tuple[str, int]] = {}
    for n in ordered:
        for call in record[n.id].tool_calls if n.role == "model" else ():
            if call.call_id and call.ready_ns is not None and call.call_id not in streamed:
                streamed[call.call_id] = (n.id, call.ready_ns // MS)
    client_calls = [n for n in ordered if n.role == "model" and not n.server and not n.phase]
    links: dict[str, tuple[str, int]] = {}
    for n in ordered:
        r = record[n.id]
        if n.role != "tool" or seen_again(nodes, n):
            continue
        link = streamed.get(r.tool_call_id) if r.tool_call_id else None
        if link is None and r.args_ready_ns is not None:
            ready = r.args_ready_ns // MS
            streaming = [c for c in client_calls if c.start <= ready <= c.end]
            if streaming:
                latest = max(c.start for c in streaming)
                link = (next(c for c in streaming if c.start == latest).id, ready)
        if link is not None:
            links[n.id] = link
    return links


def reference_dispatch(ref: Reference) -> DispatchReference:
    """The docstring's dispatch rules, with plain loops over the reference's nodes (times in ms)."""
    nodes = ref.nodes
    ordered = sorted(nodes.values(), key=order_key)
    record = {n.id: n.record for n in ordered}

    def chain(node_id: str) -> list[str]:  # the node and its ancestors
        found = [node_id]
        while nodes[found[-1]].parent is not None:
            found.append(nodes[found[-1]].parent)
        return found

    def reach(node_id: str) -> int:
        return max([nodes[node_id].end, *(reach(kid) for kid in nodes[node_id].kids if not nodes[kid].server)])

    members: dict[str, list[tuple[str, int]]] = {}
    for tool_id, (model_id, ready) in dispatch_links(nodes).items():
        members.setdefault(model_id, []).append((tool_id, ready))
    first_tool: dict[str, str] = {}
    for n in ordered:
        if n.role == "tool" and record[n.id].tool_call_id:
            first_tool.setdefault(record[n.id].tool_call_id, n.id)

    calls: list[tuple[str, int, bool, bool]] = []
    groups: list[tuple[str, int]] = []
    saved_ticks: set[int] = set()
    for model in (n for n in ordered if n.id in members):
        finish: dict[str, int] = {}
        ends = []
        for tool_id, ready in members[model.id]:
            r, start = record[tool_id], ready
            for needed in r.depends_on:
                if needed in finish:
                    start = max(start, finish[needed])
                elif needed in first_tool and first_tool[needed] != tool_id:
                    start = max(start, reach(first_tool[needed]))
            end = start + reach(tool_id) - nodes[tool_id].start
            if r.tool_call_id and r.tool_call_id not in finish:
                finish[r.tool_call_id] = end
            ends.append(end)
            tool = nodes[tool_id]
            calls.append((tool_id, max(0, tool.start - ready) * MS, tool.start < model.end, tool_id in ref.walked))
        on_path = [min(ref.walked_end[t], reach(t)) for t, _ in members[model.id] if t in ref.walked]
        if not on_path:
            groups.append((model.id, 0))
            continue
        done = max(on_path)
        kin = {a for t, _ in members[model.id] for a in chain(t)}  # members and their ancestors ...
        kin |= {n.id for n in ordered if any(t in chain(n.id) for t, _ in members[model.id])}  # ... descendants
        others = [n.end for n in ordered if n.id != model.id and n.id not in kin and model.end < n.end <= done]
        floor = max([model.end, *ends, *others, ref.lo])
        groups.append((model.id, max(0, done - floor) * MS))
        saved_ticks.update(range(floor, done))
    order = {n.id: k for k, n in enumerate(ordered)}
    return DispatchReference(len(saved_ticks) * MS, sorted(calls, key=lambda c: order[c[0]]), groups)


@PROPERTY_SETTINGS
@given(dispatch_traces())
def test_dispatch_equals_the_brute_force_reference(spans: list[SpanRecord]) -> None:
    a, ref = analyse(spans), reference(spans)
    want = reference_dispatch(ref)
    assert [(c.span_id, c.delay_ns, c.while_streaming, c.on_critical_path) for c in a.dispatched] == want.calls
    assert [(g.model_span_id, g.saving_ns) for g in a.dispatch_groups] == want.groups
    assert a.dispatch_saving_ns == want.saving


@PROPERTY_SETTINGS
@given(dispatch_traces())
def test_dispatch_saving_never_exceeds_what_the_critical_path_allows(spans: list[SpanRecord]) -> None:
    """At least 0; at most E2E, and at most the dispatch delays (the tools' waiting) on the critical path: per
    group, the largest delay of a member on the path; in all, their sum."""
    a = analyse(spans)
    assert 0 <= a.dispatch_saving_ns <= a.e2e_ns
    assert a.dispatch_saving_ns <= sum(g.saving_ns for g in a.dispatch_groups)
    waiting = {c.span_id: c.delay_ns for c in a.dispatched if c.on_critical_path}
    assert a.dispatch_saving_ns <= sum(waiting.values())
    for group in a.dispatch_groups:
        assert group.saving_ns <= max((waiting[t] for t in group.span_ids if t in waiting), default=0)
        assert group.saving_ns == 0 or group.on_critical_path


@PROPERTY_SETTINGS
@given(dispatch_traces(at_ready=True))
def test_nothing_is_saved_when_every_tool_started_when_ready(spans: list[SpanRecord]) -> None:
    a = analyse(spans)
    assert all(c.delay_ns == 0 for c in a.dispatched)
    assert a.dispatch_saving_ns == 0 and all(g.saving_ns == 0 for g in a.dispatch_groups)


def test_dispatch_reference_agrees_with_a_hand_computed_trace() -> None:
    """The reference itself: tools started 10 ms after a 1000 ms message, though ready at 300 and 600 ms."""
    spans = [
        _span("r", "", 0, 2000, "agent"),
        replace(
            _span("m", "r", 0, 1000, "model"),
            tool_calls=(StreamedToolCall("A", "a", None, 300 * MS), StreamedToolCall("B", "b", None, 600 * MS)),
        ),
        replace(_span("a", "r", 1010, 1410, "tool"), tool_call_id="A"),
        replace(_span("b", "r", 1010, 1210, "tool"), tool_call_id="B"),
        _span("m2", "r", 1420, 2000, "model"),
    ]
    want = reference_dispatch(reference(spans))
    assert want == DispatchReference(410 * MS, [("a", 710 * MS, False, True), ("b", 410 * MS, False, False)],
                                     [("m", 410 * MS)])  # fmt: skip
    assert analyse(spans).dispatch_saving_ns == want.saving
