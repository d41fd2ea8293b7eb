"""The E2E split: exact integer expectations on hand-built traces, then robustness and properties."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

import pytest

from agentlat.collector.analysis.critical_path import (
    DispatchedCall,
    DispatchGroup,
    ParallelGroup,
    SpanRecord,
    StreamedToolCall,
    TraceAnalysis,
    analyse,
)

MS = 1_000_000


def span(span_id: str, parent: str, start_ms: float, end_ms: float, role: str = "other", **kw: object) -> SpanRecord:
    """A span from readable millisecond offsets."""
    kw.setdefault("service", "agent-svc")
    kw.setdefault("name", span_id)
    return SpanRecord(span_id, parent, start_ns=round(start_ms * MS), end_ns=round(end_ms * MS), role=role, **kw)


def model(span_id: str, parent: str, start_ms: float, end_ms: float, **kw: object) -> SpanRecord:
    return span(span_id, parent, start_ms, end_ms, "model", **kw)


def tool(span_id: str, parent: str, start_ms: float, end_ms: float, **kw: object) -> SpanRecord:
    kw.setdefault("tool", f"tool_{span_id}")
    return span(span_id, parent, start_ms, end_ms, "tool", **kw)


def agent(span_id: str, parent: str, start_ms: float, end_ms: float, **kw: object) -> SpanRecord:
    return span(span_id, parent, start_ms, end_ms, "agent", **kw)


def split_ms(a: TraceAnalysis) -> tuple[int, int, int, int]:
    """(e2e, model, tool, orchestration) in ms, asserting each is a whole number of ms."""
    parts = (a.e2e_ns, a.model_ns, a.tool_ns, a.orchestration_ns)
    assert all(p % MS == 0 for p in parts), parts
    return tuple(p // MS for p in parts)  # type: ignore[return-value]


# --- the split, table-driven -------------------------------------------------------------

SPLIT_CASES = [
    pytest.param([agent("r", "", 0, 100)], (100, 0, 0, 100), ("r",), id="single-root-all-orchestration"),
    pytest.param(
        [agent("r", "", 0, 100), model("m1", "r", 10, 30), tool("t1", "r", 35, 60), model("m2", "r", 65, 95)],
        (100, 50, 25, 25),
        ("r", "m1", "t1", "m2"),
        id="sequential-model-tool-model",
    ),
    pytest.param(
        [
            agent("r", "", 0, 100),
            model("m1", "r", 0, 20),
            tool("t1", "r", 20, 50),
            tool("t2", "r", 20, 70),
            model("m2", "r", 70, 100),
        ],
        (100, 50, 50, 0),
        ("r", "m1", "t2", "m2"),
        id="two-parallel-tools-longer-is-critical",
    ),
    pytest.param(
        [
            agent("r", "", 0, 100),
            agent("a1", "r", 10, 90),
            model("m1", "a1", 20, 40),
            agent("a2", "a1", 45, 85),
            tool("t1", "a2", 50, 80),
        ],
        (100, 20, 30, 50),
        ("r", "a1", "m1", "a2", "t1"),
        id="nested-agents",
    ),
    pytest.param(
        [agent("r", "", 0, 100), tool("t1", "r", 10, 90), model("m1", "t1", 20, 50)],
        (100, 30, 50, 20),
        ("r", "t1", "m1"),
        id="tool-calls-a-model-inside",
    ),
    pytest.param(
        [agent("r", "", 0, 100), model("m1", "r", -10, 30), tool("t1", "r", 80, 120)],
        (100, 30, 20, 50),
        ("r", "m1", "t1"),
        id="clock-skew-children-clamped-to-parent",
    ),
    pytest.param(
        [agent("r", "", 0, 100), model("b", "r", 40, 60), tool("a", "r", 20, 60)],
        (100, 0, 40, 60),
        ("r", "a"),
        id="children-ending-together-the-earlier-start-wins",
    ),
    pytest.param(
        [agent("r", "", 10, 100), tool("o", "gone", 0, 20), model("m", "r", 50, 70)],
        (90, 20, 10, 60),
        ("r", "o", "m"),
        id="orphan-starting-before-the-real-root-is-attached-not-root",
    ),
    pytest.param(
        [agent("r", "", 0, 100), tool("t1", "r", 150, 180), model("m1", "r", 40, 60)],
        (100, 20, 0, 80),
        ("r", "m1"),
        id="child-entirely-outside-parent-is-not-on-path",
    ),
    pytest.param(
        # a (10-60, its tool inside) overlaps m (50-90): until m began the path is a's tool
        [agent("r", "", 0, 100), agent("a", "r", 10, 60), model("m", "r", 50, 90), tool("t", "a", 10, 60)],
        (100, 40, 40, 20),
        ("r", "a", "t", "m"),
        id="overlapping-sibling-is-on-the-path-until-the-chosen-one-began",
    ),
    pytest.param(
        [
            agent("r", "", 0, 1000),
            span("step1", "r", 10, 500),  # LangChain: the graph step, no children ...
            span("seq1", "r", 12, 498),  # ... encloses its sibling, which holds the model call
            model("m1", "seq1", 15, 495),
            span("tools", "r", 500, 720),
            tool("t", "tools", 505, 705),
            span("step2", "r", 720, 990),
            span("seq2", "r", 722, 988),
            model("m2", "seq2", 725, 985),
        ],
        (1000, 740, 200, 60),
        ("r", "step1", "seq1", "m1", "tools", "t", "step2", "seq2", "m2"),
        id="step-without-category-walks-the-siblings-inside-it",
    ),
    pytest.param(
        [agent("r", "", 0, 100), agent("a", "r", 10, 90), model("m", "r", 20, 60)],
        (100, 40, 0, 60),
        ("r", "a", "m"),
        id="span-that-lost-its-context-counts-inside-the-span-it-ran-in",
    ),
    pytest.param(
        [agent("r", "", 0, 600), span("step", "r", 10, 20), model("m", "step", 15, 500)],
        (600, 485, 0, 115),
        ("r", "step", "m"),
        id="child-that-outlives-its-parent-counts-where-it-ran",  # a step that returns a stream
    ),
    pytest.param(
        [agent("r", "", 0, 100), agent("a", "r", 10, 50), model("m", "a", 20, 60, service="model-svc")],
        (100, 30, 0, 70),
        ("r", "a", "m"),
        id="child-of-another-service-that-outlives-its-parent-is-clock-skew",
    ),
    pytest.param(
        [agent("r", "", 0, 100), tool("t", "r", 10, 90), model("m", "r", 20, 60)],
        (100, 0, 80, 20),
        ("r", "t"),
        id="work-inside-a-tool-sibling-stays-parallel",
    ),
]


@pytest.mark.parametrize(("spans", "expected", "path"), SPLIT_CASES)
def test_split(spans: list[SpanRecord], expected: tuple[int, int, int, int], path: tuple[str, ...]) -> None:
    a = analyse(spans)
    assert split_ms(a) == expected
    assert a.critical_path == path


def test_overlap_case_walks_earlier_piece_of_the_overlapping_sibling() -> None:
    # a (10-60) overlaps m (50-90): m is chosen, then a cut at the cursor (50), its tool with it.
    a = analyse([agent("r", "", 0, 100), agent("a", "r", 10, 60), model("m", "r", 50, 90), tool("t", "a", 10, 60)])
    assert [(s.span_id, s.start_ns // MS, s.end_ns // MS, s.category) for s in a.segments] == [
        ("r", 0, 10, "orchestration"),
        ("t", 10, 50, "tool"),
        ("m", 50, 90, "model"),
        ("r", 90, 100, "orchestration"),
    ]


def test_a_call_whose_span_ended_just_after_the_tool_began_is_model_time() -> None:
    """LiteLLM's logging thread ends a streamed call's span ~10 ms after its stream, 0.45 ms after the agent began
    the tool the call asked for: the call was the path until the tool began, not a sibling beside it."""
    spans = [
        agent("r", "", 0, 1000),
        model("m1", "r", 0, 450.45),
        tool("t", "r", 450, 650),
        model("m2", "r", 650, 1000),
    ]
    assert split_ms(analyse(spans)) == (1000, 800, 200, 0)


def test_two_parallel_tools_plain_sums_and_parallelism() -> None:
    a = analyse(
        [
            agent("r", "", 0, 100),
            model("m1", "r", 0, 20),
            tool("t1", "r", 20, 50),
            tool("t2", "r", 20, 70),
            model("m2", "r", 70, 100),
        ]
    )
    assert (a.model_sum_ns, a.tool_sum_ns) == (50 * MS, 80 * MS)
    assert a.parallelism == 130 / 100
    assert (a.model_calls, a.tool_calls) == (2, 2)


def test_single_root_has_neutral_parallelism_and_no_calls() -> None:
    a = analyse([agent("r", "", 0, 100, route="/chat", agent="planner")])
    assert (a.parallelism, a.model_calls, a.tool_calls, a.partial) == (1.0, 0, 0, False)
    assert (a.root_span_id, a.start_ns, a.route, a.agent, a.service) == ("r", 0, "/chat", "planner", "agent-svc")


def test_phase_spans_split_model_time() -> None:
    spans = [
        agent("r", "", 0, 120),
        model("m1", "r", 10, 110),
        model("q", "m1", 10, 20, phase="queue"),
        model("p", "m1", 20, 40, phase="prefill"),
        span("d", "m1", 40, 100, phase="decode"),  # role other: a phase span still counts as model
    ]
    a = analyse(spans)
    assert split_ms(a) == (120, 100, 0, 20)
    assert (a.queue_ns, a.prefill_ns, a.decode_ns) == (10 * MS, 20 * MS, 60 * MS)
    assert a.model_calls == 1
    assert a.model_sum_ns == 100 * MS


def test_model_call_nested_in_a_phase_span_is_not_in_that_phase() -> None:
    spans = [agent("r", "", 0, 100), model("m1", "r", 0, 100), span("d", "m1", 20, 100, phase="decode")]
    a = analyse([*spans, model("guard", "d", 40, 60)])
    assert (a.model_ns, a.decode_ns, a.model_calls) == (100 * MS, 60 * MS, 2)


def test_call_directly_inside_a_call_is_the_same_call_counted_once() -> None:
    # OpenInference's span wraps the anthropic SDK's own span of the same request
    outer = model("oi", "r", 10, 460, input_tokens=1000, cache_read_tokens=800)
    inner = model("sdk", "oi", 11, 459, input_tokens=1000, cache_read_tokens=0, ttft_ms=321.0)
    a = analyse([agent("r", "", 0, 500), outer, inner])
    assert (a.model_calls, a.model_sum_ns, a.model_ns) == (1, 450 * MS, 450 * MS)
    # the request's figures come from the span that states the most of them (the inner one here), as its
    # span-level figures do: its TTFT, and its cache pair
    assert (a.first_ttft_ms, a.cache_hit_ratio) == (321.0, 0.0)
    assert a.seen_again == (("oi", 10 * MS),)


def test_a_request_seen_twice_takes_its_figures_from_whichever_span_states_them() -> None:
    # LlamaIndex: the outer astream_chat states nothing, the inner one the first chunk (a stream it returned)
    outer = model("outer", "r", 10, 12)
    inner = model("inner", "outer", 11, 12, ttft_ms=300.0, input_tokens=1000, cache_read_tokens=800)
    a = analyse([agent("r", "", 0, 500), outer, inner, model("next", "r", 400, 450, ttft_ms=20.0)])
    assert (a.model_calls, a.first_ttft_ms, a.cache_hit_ratio) == (2, 300.0, 0.8)


def test_a_call_inside_a_call_through_a_step_is_the_same_call_and_one_through_a_tool_is_another() -> None:
    spans = [
        agent("r", "", 0, 900),
        model("framework", "r", 0, 400),  # a framework's model call ...
        span("step", "framework", 1, 399),  # ... a step of its own ...
        model("client", "step", 2, 398),  # ... and the client library's span of the same request
        model("planner", "r", 400, 900),
        tool("judge", "planner", 500, 800, tool="judge"),
        model("judge-call", "judge", 510, 790),  # an agent used as a tool asks a model: a call of its own
    ]
    a = analyse(spans)
    assert (a.model_calls, a.tool_calls) == (3, 1)
    assert a.model_sum_ns == (400 + 500 + 280) * MS


def test_calls_with_one_response_id_are_one_call() -> None:
    # OpenLLMetry's anthropic span (never made current) beside the anthropic SDK's own span of one request
    first = model("ollm", "r", 10, 460, response_id="msg_1", input_tokens=1000)
    again = model("sdk", "r", 11, 459, response_id="msg_1", input_tokens=1000)
    other = model("m2", "r", 470, 490, response_id="msg_2")
    a = analyse([agent("r", "", 0, 500), again, first, other])
    assert (a.model_calls, a.model_sum_ns, a.model_ns) == (2, 470 * MS, 470 * MS)


def test_of_one_requests_spans_the_one_stating_most_stays_in_span_figures() -> None:
    # a framework's wrapper with the timing, the client's own span inside it with the usage, a step between
    wrapper = model("wrap", "r", 10, 460, ttft_ms=300.0, decode_ms=140.0)
    step = span("step", "wrap", 11, 459)
    inner = model("inner", "step", 12, 458, ttft_ms=298.0, decode_ms=139.0, input_tokens=50, output_tokens=7)
    again = model("sdk", "r", 470, 490, response_id="msg_2")  # one response seen twice, beside each other
    first = model("m2", "r", 469, 491, response_id="msg_2")
    a = analyse([agent("r", "", 0, 500), wrapper, step, inner, again, first])
    assert a.model_calls == 2
    assert a.seen_again == (("wrap", 10 * MS), ("sdk", 470 * MS))


# The user's execute_tool span around the mcp SDK's client span, the MCP server's span (another service) inside
# it: one call. A sub-tool of another name inside a tool is a call of its own; so is the same tool under another
# call id, and a tool of the same name made by a model call inside the tool (an agent used as a tool).
TOOL_SEEN_AGAIN_CASES = [
    pytest.param(
        [
            tool("user", "r", 100, 305, tool="get_weather", tool_call_id="call_0"),
            span("send", "user", 101, 304, name="MCP send tools/call get_weather"),
            tool("mcp-client", "send", 101, 304, tool="get_weather"),
            tool("mcp-server", "mcp-client", 102, 303, tool="get_weather", service="mcp-server"),
        ],
        (1, 205, 205),
        id="execute-tool-around-mcp-client-and-server",
    ),
    pytest.param(
        [tool("search", "r", 100, 300, tool="search"), tool("fetch", "search", 150, 250, tool="fetch")],
        (2, 300, 200),
        id="sub-tool-of-another-name-counts",
    ),
    pytest.param(
        [
            tool("a", "r", 100, 300, tool="search", tool_call_id="call_1"),
            tool("b", "a", 150, 250, tool="search", tool_call_id="call_2"),
        ],
        (2, 300, 200),
        id="same-tool-other-call-id-counts",
    ),
    pytest.param(
        [
            tool("outer", "r", 100, 400, tool="research"),
            model("m", "outer", 110, 350),
            tool("inner", "m", 210, 300, tool="research"),
        ],
        (2, 390, 150),
        id="same-tool-past-a-model-call-counts",
    ),
]


@pytest.mark.parametrize(("spans", "expected"), TOOL_SEEN_AGAIN_CASES)
def test_a_tool_seen_again_inside_itself_counts_once(spans: list[SpanRecord], expected: tuple[int, int, int]) -> None:
    """(tool calls, their plain sum, tool time on the critical path) in ms."""
    a = analyse([agent("r", "", 0, 500), *spans])
    assert (a.tool_calls, a.tool_sum_ns // MS, a.tool_ns // MS) == expected
    assert len(a.seen_again) == sum(s.role == "tool" for s in spans) - a.tool_calls  # the inner views


# Model spans whose stated stream (TTFT, decode) ends before or after the span does.
STREAM_END_CASES = [
    pytest.param(
        # Vercel AI's doStream: the stream ends at 370 (10 + 300 + 60), the span stays open while the tool it
        # holds runs and 100 ms past it: 360 ms model, the tool's 200, the rest orchestration.
        [model("m", "r", 10, 680, ttft_ms=300.0, decode_ms=60.0), tool("t", "m", 380, 580)],
        (700, 360, 200, 140),
        (360, 200),
        id="tool-inside-a-model-span-open-past-its-stream",
    ),
    pytest.param(
        # Vercel AI SDK 6's doStream: its finish waits for the tool its answer asked for, which runs as its
        # sibling, so nothing it states ends before the tool: the tool's start (the answer's last call) does
        [
            model("m", "r", 10, 600, ttft_ms=300.0, answer_tool_calls=("call_0",)),
            tool("t", "r", 400, 598, tool_call_id="call_0"),
        ],
        (700, 390, 198, 112),
        (390, 198),
        id="sibling-tool-its-answer-asked-for-inside-a-model-span",
    ),
    pytest.param(
        # two calls in one answer: the stream had ended by the later start; the earlier tool ran beside the
        # stream's end and is on the path from its own start
        [
            model("m", "r", 10, 600, ttft_ms=300.0, decode_ms=200.0, answer_tool_calls=("a", "b")),
            tool("ta", "r", 380, 590, tool_call_id="a"),
            tool("tb", "r", 400, 560, tool_call_id="b"),
        ],
        (700, 370, 210, 120),
        (390, 370),
        id="answer-with-two-tool-calls-held-open",
    ),
    pytest.param(
        # evidence that does not bound the stream: a tool that outlives the span (it ran beside a stream that
        # went on), one the answer names that no span ran, a tool started with the call
        [
            model("m1", "r", 10, 300, answer_tool_calls=("x",)),
            tool("tx", "r", 200, 320, tool_call_id="x"),
            model("m2", "r", 330, 500, answer_tool_calls=("y", "nowhere")),
            tool("ty", "r", 400, 450, tool_call_id="y"),
            model("m3", "r", 510, 600, answer_tool_calls=("z",)),
            tool("tz", "m3", 510, 550, tool_call_id="z"),
        ],
        (700, 410, 160, 130),
        (550, 210),
        id="answer-tools-that-bound-no-stream",
    ),
    pytest.param(
        # LlamaIndex's astream_chat: returns the stream at 11 and someone else reads it; first chunk at 310
        [model("m", "r", 10, 11, ttft_ms=300.0)],
        (700, 300, 0, 400),
        (300, 0),
        id="span-ended-before-its-first-chunk",
    ),
    pytest.param(
        [model("m", "r", 10, 11, ttft_ms=300.0, decode_ms=140.0)],
        (700, 440, 0, 260),
        (440, 0),
        id="span-ended-before-its-stream-with-decode-known",
    ),
    pytest.param(
        # a model call inside a tool (a sub-agent's): past its stream the time is the tool's again
        [tool("t", "r", 0, 500), model("m", "t", 10, 400, ttft_ms=100.0, decode_ms=50.0)],
        (700, 150, 350, 200),
        (150, 500),
        id="model-call-inside-a-tool-past-its-stream",
    ),
    pytest.param(
        # a stream that ends when the span does, or a span with no decode: nothing changes
        [model("m1", "r", 10, 110, ttft_ms=50.0, decode_ms=50.0), model("m2", "r", 200, 300, ttft_ms=20.0)],
        (700, 200, 0, 500),
        (200, 0),
        id="stream-ending-with-its-span",
    ),
    pytest.param(
        # what nothing can state: NaN, infinite, or a day long
        [
            model("m", "r", 10, 110, ttft_ms=math.nan, decode_ms=1.0),
            model("n", "r", 200, 300, ttft_ms=math.inf),
            model("o", "r", 400, 500, ttft_ms=9e7),
        ],
        (700, 300, 0, 400),
        (300, 0),
        id="stated-stream-not-finite",
    ),
]


@pytest.mark.parametrize(("spans", "expected", "sums"), STREAM_END_CASES)
def test_a_model_call_is_model_time_to_its_streams_end(
    spans: list[SpanRecord], expected: tuple[int, int, int, int], sums: tuple[int, int]
) -> None:
    """(e2e, model, tool, orchestration) and (model sum, tool sum) in ms."""
    a = analyse([agent("r", "", 0, 700), *spans])
    assert split_ms(a) == expected
    assert (a.model_sum_ns // MS, a.tool_sum_ns // MS) == sums


def test_past_its_stream_a_model_span_is_its_parents_time_piece_by_piece() -> None:
    """A model call inside another's post-stream time: past both streams, the tool that holds them."""
    spans = [
        agent("r", "", 0, 700),
        tool("t", "r", 0, 600),
        model("outer", "t", 0, 500, ttft_ms=100.0, decode_ms=100.0),  # stream ends at 200
        span("step", "outer", 250, 450),
        model("inner", "step", 250, 450, ttft_ms=50.0, decode_ms=50.0),  # stream ends at 350
    ]
    a = analyse(spans)
    assert split_ms(a) == (700, 300, 300, 100)
    assert [(s.span_id, s.start_ns // MS, s.end_ns // MS, s.category) for s in a.segments if s.span_id != "r"] == [
        ("outer", 0, 200, "model"),
        ("outer", 200, 250, "tool"),
        ("inner", 250, 350, "model"),
        ("inner", 350, 450, "tool"),
        ("outer", 450, 500, "tool"),
        ("t", 500, 600, "tool"),
    ]


def test_a_stream_read_past_what_any_span_states_leaves_the_split_incomplete() -> None:
    """A call that returned its stream before its first chunk and states no decode: the rest of its stream is
    timed by nothing, so model and orchestration time are unknown (LlamaIndex's astream_chat)."""
    returned = analyse([agent("r", "", 0, 700), model("m", "r", 10, 11, ttft_ms=300.0)])
    assert (returned.split_complete, returned.first_ttft_ms, returned.model_calls) == (False, 300.0, 1)
    assert analyse([agent("r", "", 0, 700), model("m", "r", 10, 11, ttft_ms=300.0, decode_ms=140.0)]).split_complete
    assert analyse([agent("r", "", 0, 700), model("m", "r", 10, 309.5, ttft_ms=300.0)]).split_complete  # 1 ms slack
    assert not analyse([agent("r", "", 0, 700), model("m", "r", 10, 308.9, ttft_ms=300.0)]).split_complete


def test_an_agent_run_without_model_calls_has_no_complete_split() -> None:
    """Its model calls went to traces of their own (LiteLLM's callback): model time is not known here."""
    elsewhere = analyse([agent("r", "", 0, 900), tool("t", "r", 100, 300)])
    assert (elsewhere.split_complete, elsewhere.model_calls, elsewhere.tool_ns) == (False, 0, 200 * MS)
    assert analyse([agent("r", "", 0, 900), model("m", "r", 0, 100)]).split_complete
    assert analyse([span("job", "", 0, 900), tool("t", "job", 100, 300)]).split_complete  # no agent: nothing missing
    assert analyse([model("m", "", 0, 100)]).split_complete  # the other side: a call's own trace


def test_no_phase_spans_means_zero_phases() -> None:
    a = analyse([agent("r", "", 0, 100), model("m1", "r", 0, 100, queue_ms=5.0, decode_ms=50.0)])
    assert (a.queue_ns, a.prefill_ns, a.decode_ns) == (0, 0, 0)


def test_joined_server_span() -> None:
    spans = [
        agent("r", "", 0, 100),
        model("m1", "r", 10, 90, input_tokens=100),
        span("http", "m1", 12, 88),  # an HTTP client span between the call and the server
        model("s1", "http", 20, 80, is_server_span=True, service="vllm", input_tokens=100, cache_read_tokens=40),
    ]
    a = analyse(spans)
    assert split_ms(a) == (100, 80, 0, 20)
    assert (a.server_ns, a.client_wait_ns) == (60 * MS, 20 * MS)
    assert (a.model_calls, a.model_sum_ns) == (1, 80 * MS)
    assert a.cache_hit_ratio == 0.4  # the call has no cache numbers: its server span's are used
    assert "s1" in a.critical_path


def test_server_span_longer_than_its_call_has_zero_client_wait() -> None:
    spans = [agent("r", "", 0, 100), model("m1", "r", 10, 50), model("s1", "m1", 5, 60, is_server_span=True)]
    a = analyse(spans)
    assert (a.server_ns, a.client_wait_ns, a.model_ns) == (55 * MS, 0, 40 * MS)


def test_nested_server_spans_count_once() -> None:
    spans = [agent("r", "", 0, 100), model("m1", "r", 0, 100), model("router", "m1", 10, 90, is_server_span=True)]
    a = analyse([*spans, model("worker", "router", 20, 80, is_server_span=True)])
    assert (a.server_ns, a.client_wait_ns, a.model_calls) == (80 * MS, 20 * MS, 1)


def test_call_facts() -> None:
    spans = [
        agent("r", "", 0, 100, service="", route=""),
        model("m2", "r", 50, 60, ttft_ms=7.0, input_tokens=100, cache_read_tokens=0, error=True),
        model("m1", "r", 10, 20, ttft_ms=3.5, input_tokens=300, cache_read_tokens=100, route="/plan"),
        model("m0", "r", 5, 8, spec_proposed_tokens=40, spec_accepted_tokens=30, service="llm-gw"),
        model("mx", "r", 1, 2, input_tokens=50, service=""),  # no cache figure: left out of the ratio
        tool("t1", "r", 30, 40, prefetch_outcome="hit", prefetch_saved_ms=12.5),
        tool("t2", "r", 30, 35, prefetch_outcome="miss", prefetch_wasted_ms=2.0),
        tool("t3", "r", 30, 33, prefetch_outcome="cancelled", prefetch_wasted_ms=1.0, error=True),
    ]
    a = analyse(spans)
    assert a.first_ttft_ms == 3.5
    assert a.cache_hit_ratio == 100 / 400
    assert a.spec_acceptance == 0.75
    assert (a.prefetch_hits, a.prefetch_misses, a.prefetch_saved_ms, a.prefetch_wasted_ms) == (1, 2, 12.5, 3.0)
    assert (a.errors, a.model_calls, a.tool_calls) == (2, 4, 3)
    assert (a.service, a.route) == ("llm-gw", "/plan")  # root's are empty: first non-empty by start time


def test_ratios_are_none_without_data() -> None:
    a = analyse([agent("r", "", 0, 10), model("m", "r", 0, 5, input_tokens=10)])
    assert (a.cache_hit_ratio, a.spec_acceptance, a.first_ttft_ms) == (None, None, None)


# --- partial and late traces ------------------------------------------------------------


def test_missing_root_is_partial_and_orphans_attach() -> None:
    spans = [agent("a1", "gone", 10, 60), model("m1", "a1", 20, 50), tool("t1", "gone2", 70, 90)]
    a = analyse(spans)
    assert (a.partial, a.root_span_id, a.start_ns) == (True, "a1", 10 * MS)
    assert split_ms(a) == (80, 30, 20, 30)
    assert a.critical_path == ("a1", "m1", "t1")


def test_partial_root_owns_only_its_real_interval() -> None:
    a = analyse([tool("t0", "gone", 0, 10), model("m9", "gone", 20, 30)])
    assert (a.root_span_id, a.partial) == ("t0", True)
    assert split_ms(a) == (30, 10, 10, 10)


def test_partial_root_ties_go_to_the_longest() -> None:
    a = analyse([tool("short", "x", 0, 10), tool("long", "y", 0, 20)])
    assert (a.root_span_id, a.e2e_ns) == ("long", 20 * MS)


def test_late_span_changes_the_result() -> None:
    early = [agent("r", "", 0, 100), model("m1", "r", 0, 40)]
    first = analyse(early)
    late = analyse([*early, tool("t1", "r", 50, 90)])
    assert split_ms(first) == (100, 40, 0, 60)
    assert split_ms(late) == (100, 40, 40, 20)
    assert (first.tool_calls, late.tool_calls) == (0, 1)


def test_late_root_turns_a_partial_trace_complete() -> None:
    children = [model("m1", "r", 10, 40), tool("t1", "r", 50, 70)]
    before, after = analyse(children), analyse([*children, agent("r", "", 0, 100)])
    assert (before.partial, before.root_span_id, before.e2e_ns) == (True, "m1", 60 * MS)
    assert (after.partial, after.root_span_id, split_ms(after)) == (False, "r", (100, 30, 20, 50))


# --- parallelisable tool calls ----------------------------------------------------------


def _serial(*between: SpanRecord, deps: tuple[str, ...] = ()) -> list[SpanRecord]:
    return [
        agent("r", "", 0, 100),
        model("m1", "r", 0, 10),
        tool("t1", "r", 10, 30, tool_call_id="c1"),
        tool("t2", "r", 30, 60, tool_call_id="c2", depends_on=deps),
        tool("t3", "r", 60, 70, tool_call_id="c3"),
        model("m2", "r", 70, 100),
        *between,
    ]


def test_serial_independent_tools_form_a_group() -> None:
    a = analyse(_serial())
    assert a.parallelisable == (ParallelGroup(("t1", "t2", "t3"), ("tool_t1", "tool_t2", "tool_t3"), 30 * MS, True),)
    assert a.parallel_saving_ns == 30 * MS


def test_model_call_between_tools_breaks_the_group() -> None:
    a = analyse([agent("r", "", 0, 100), tool("t1", "r", 10, 30), model("m", "r", 30, 40), tool("t2", "r", 40, 60)])
    assert (a.parallelisable, a.parallel_saving_ns) == ((), 0)


def test_model_call_between_breaks_only_there() -> None:
    a = analyse(_serial(model("mx", "r", 35, 50)))  # starts inside t2, before t3: t2 and t3 stay apart
    assert [g.span_ids for g in a.parallelisable] == [("t1", "t2")]


def test_sub_agent_running_a_model_between_tools_breaks_the_group() -> None:
    a = analyse(
        [
            agent("r", "", 0, 100),
            tool("t1", "r", 10, 30),
            agent("a", "r", 30, 40),
            model("m", "a", 31, 39),
            tool("t2", "r", 40, 60),
        ]
    )
    assert a.parallelisable == ()


def test_declared_dependency_breaks_the_group() -> None:
    a = analyse(
        [
            agent("r", "", 0, 100),
            tool("t1", "r", 10, 30, tool_call_id="c1"),
            tool("t2", "r", 30, 60, depends_on=("c1",)),
        ]
    )
    assert a.parallelisable == ()


def test_dependency_on_an_earlier_member_splits_the_run() -> None:
    a = analyse([*_serial()[:4], tool("t3", "r", 60, 70, depends_on=("c1",)), model("m2", "r", 70, 100)])
    assert [(g.span_ids, g.saving_ns) for g in a.parallelisable] == [(("t1", "t2"), 20 * MS)]


def test_overlapping_tools_are_not_serial() -> None:
    a = analyse([agent("r", "", 0, 100), tool("t1", "r", 0, 50), tool("t2", "r", 40, 100)])
    assert a.parallelisable == ()


def test_group_off_the_critical_path_saves_nothing() -> None:
    spans = [
        agent("r", "", 0, 100),
        tool("long", "r", 0, 100),
        agent("side", "r", 0, 90),
        tool("t1", "side", 0, 20),
        tool("t2", "side", 20, 40),
    ]
    a = analyse(spans)
    assert a.parallelisable == (ParallelGroup(("t1", "t2"), ("tool_t1", "tool_t2"), 0, False),)
    assert a.parallel_saving_ns == 0


# --- streamed tool-call dispatch ----------------------------------------------------------
# The model call m streams 0-1000 ms: tool call A's arguments are complete at 300 ms, B's at 600 ms.
STREAMED = (StreamedToolCall("A", "a", 100 * MS, 300 * MS), StreamedToolCall("B", "b", 400 * MS, 600 * MS))


def _planner(
    a: tuple[float, float], b: tuple[float, float], end: float, *more: SpanRecord, b_needs: tuple[str, ...] = ()
) -> list[SpanRecord]:
    """m streams A and B, tools a and b run over the given (start, end) ms (b consumes the output of the calls
    ``b_needs``), then m2 answers, 10 ms after the message and the tools are done, until ``end``."""
    last_tool = max(a[1], b[1], 1000)
    return [
        agent("r", "", 0, end),
        model("m", "r", 0, 1000, tool_calls=STREAMED),
        tool("a", "r", *a, tool_call_id="A"),
        tool("b", "r", *b, tool_call_id="B", depends_on=b_needs),
        model("m2", "r", last_tool + 10, end),
        *more,
    ]


@pytest.mark.parametrize(
    ("a_ms", "b_ms", "expected"),
    [
        # a starts at 900 while m still streams and ends after it: it waited for the stream, so m is on the path
        # until 900 (model 900 + m2 290), a 400; the 10 ms before m2 are the agent's own.
        ((900, 1300), (601, 801), (1600, 1190, 400, 10)),
        # both tools start as their arguments are complete and end during the stream: m stays the path.
        ((301, 701), (601, 801), (1600, 1590, 0, 10)),
        # the tools wait for the end of the message: nothing overlaps, the plain rule.
        ((1010, 1410), (1010, 1210), (2000, 1580, 400, 20)),
    ],
)
def test_a_tool_dispatched_from_a_stream_waited_for_it(a_ms: tuple, b_ms: tuple, expected: tuple) -> None:
    """Never orchestration: the time a model streamed before the tool it dispatched started is model time."""
    assert split_ms(analyse(_planner(a_ms, b_ms, expected[0]))) == expected


def _dispatch_ms(a: TraceAnalysis) -> tuple[float, list[tuple[str, float, bool, bool]], list[tuple[str, float]]]:
    """(trace saving, per call (span, delay, while streaming, on path), per group (model span, saving)) in ms."""
    return (
        a.dispatch_saving_ns / MS,
        [(c.span_id, c.delay_ns / MS, c.while_streaming, c.on_critical_path) for c in a.dispatched],
        [(g.model_span_id, g.saving_ns / MS) for g in a.dispatch_groups],
    )


DISPATCH_CASES = [
    pytest.param(
        # Both tools start together 10 ms after the message: a would have run 300-700, b 600-800, so they would
        # be done when the message ends (1000) instead of at 1410: m2 could start 410 ms sooner.
        _planner((1010, 1410), (1010, 1210), 2000),
        (410.0, [("a", 710.0, False, True), ("b", 410.0, False, False)], [("m", 410.0)]),
        id="tools-wait-for-the-end-of-the-message",
    ),
    pytest.param(
        # Each tool starts 1 ms after its arguments: the stream (0-1000) stays the critical path, nothing to save.
        _planner((301, 701), (601, 801), 1600),
        (0.0, [("a", 1.0, True, False), ("b", 1.0, True, False)], [("m", 0.0)]),
        id="dispatched-while-streaming",
    ),
    pytest.param(
        # b starts at once, a only at 900 (still streaming) and outlasts the stream: a could have run 300-700;
        # the group is then done at the message's end (1000) instead of 1300. a waited for the stream until 900,
        # so the path is m (0-900), a, m2: b ran beside the stream, off the path.
        _planner((900, 1300), (601, 801), 1600),
        (300.0, [("b", 1.0, True, False), ("a", 600.0, True, True)], [("m", 300.0)]),
        id="one-call-dispatched-late-while-streaming",
    ),
    pytest.param(
        # a 1000-1400 then b 1400-2000 (b consumed a's output). Started when ready: a 300-700, b once a is done,
        # 700-1300. Done at 1300 instead of 2000.
        _planner((1000, 1400), (1400, 2000), 2200, b_needs=("A",)),
        (700.0, [("a", 700.0, False, True), ("b", 800.0, False, True)], [("m", 700.0)]),
        id="a-dependent-call-waits-for-the-tool-it-consumed",
    ),
    pytest.param(
        # The same without the dependency: b 600-1200, so the group is done at 1200.
        _planner((1000, 1400), (1400, 2000), 2200),
        (800.0, [("a", 700.0, False, True), ("b", 800.0, False, True)], [("m", 800.0)]),
        id="independent-calls-together",
    ),
    pytest.param(
        # A guard agent on another branch ends at 1305 (its model call at 1300): the next step may wait for it
        # too, so the tools dispatched when ready save only 1410 - 1305.
        _planner((1010, 1410), (1010, 1210), 2000, agent("guard", "r", 5, 1305), model("g", "guard", 10, 1300)),
        (105.0, [("a", 710.0, False, True), ("b", 410.0, False, False)], [("m", 105.0)]),
        id="other-work-ending-before-the-tools-bounds-the-saving",
    ),
    pytest.param(
        # The tools run inside the model call's span (started in its `with` block) and outlive it: a started
        # 50 ms after its arguments, at 350, so everything moves 50 ms sooner.
        [
            agent("r", "", 0, 1500),
            model("m", "r", 0, 1000, tool_calls=STREAMED[:1]),
            tool("a", "m", 350, 1200, tool_call_id="A"),
            model("m2", "r", 1200, 1500),
        ],
        (50.0, [("a", 50.0, True, True)], [("m", 50.0)]),
        id="tool-inside-the-model-span-started-late",
    ),
    pytest.param(
        # No event on the model call: the tool's own args_ready_ns links it to the call streaming then (m, not
        # m0, which ended before). The event wins where both exist (b's attribute says 0, the event 600).
        [
            agent("r", "", 0, 2000),
            model("m0", "r", 0, 100),
            model("m", "r", 100, 1000, tool_calls=STREAMED[1:]),
            tool("a", "r", 1010, 1410, tool_call_id="A", args_ready_ns=300 * MS),
            tool("b", "r", 1010, 1210, tool_call_id="B", args_ready_ns=0),
            model("m2", "r", 1420, 2000),
        ],
        (410.0, [("a", 710.0, False, True), ("b", 410.0, False, False)], [("m", 410.0)]),
        id="tool-span-args-ready-time",
    ),
    pytest.param(
        # A tool's args_ready_ns outside every model call links it to none; unknown call ids link nothing.
        [
            agent("r", "", 0, 2000),
            model("m", "r", 0, 1000, tool_calls=(StreamedToolCall("X", "x", 0, 300 * MS),)),
            tool("a", "r", 1010, 1410, tool_call_id="A", args_ready_ns=1005 * MS),
            model("m2", "r", 1420, 2000),
        ],
        (0.0, [], []),
        id="nothing-linked",
    ),
    pytest.param(
        # The tools of a side branch, off the critical path: their delays count, their saving does not.
        [
            agent("r", "", 0, 3000),
            tool("long", "r", 0, 3000),
            agent("side", "r", 0, 2000),
            model("m", "side", 0, 1000, tool_calls=STREAMED),
            tool("a", "side", 1010, 1410, tool_call_id="A"),
            tool("b", "side", 1010, 1210, tool_call_id="B"),
        ],
        (0.0, [("a", 710.0, False, False), ("b", 410.0, False, False)], [("m", 0.0)]),
        id="off-the-critical-path",
    ),
]


@pytest.mark.parametrize(("spans", "expected"), DISPATCH_CASES)
def test_dispatch_delays_and_what_if(spans: list[SpanRecord], expected: tuple) -> None:
    a = analyse(spans)
    assert _dispatch_ms(a) == expected
    for call in a.dispatched:
        ready = next(s for s in spans if s.span_id == call.span_id).start_ns - call.delay_ns
        assert call.ready_ns == ready or call.delay_ns == 0


def test_dispatch_group_and_call_details() -> None:
    a = analyse(_planner((1010, 1410), (1010, 1210), 2000))
    assert a.dispatch_groups == (DispatchGroup("m", ("a", "b"), ("tool_a", "tool_b"), 410 * MS, True),)
    assert a.dispatched[0] == DispatchedCall("a", "tool_a", "A", "m", 300 * MS, 710 * MS, False, True)
    assert a.parallelisable == ()  # a and b overlap: nothing to parallelise, only to start sooner


def test_dispatch_savings_of_two_model_calls_add_up() -> None:
    second = (StreamedToolCall("C", "c", None, 1700 * MS),)
    spans = [
        *_planner((1010, 1410), (1010, 1210), 3000)[:4],
        model("m2", "r", 1420, 2000, tool_calls=second),
        tool("c", "r", 2010, 2510, tool_call_id="C"),  # could run 1700-2200: done at 2200 instead of 2510
        model("m3", "r", 2520, 3000),
    ]
    a = analyse(spans)
    assert [(g.model_span_id, g.saving_ns / MS) for g in a.dispatch_groups] == [("m", 410.0), ("m2", 310.0)]
    assert a.dispatch_saving_ns == 720 * MS


# --- robustness -------------------------------------------------------------------------


def test_empty_input_raises() -> None:
    with pytest.raises(ValueError, match="got none"):
        analyse([])


def test_duplicate_span_ids_keep_the_one_that_ends_last() -> None:
    spans = [agent("r", "", 0, 100), tool("t", "r", 10, 20), tool("t", "r", 10, 60)]
    for ordering in (spans, spans[::-1]):
        a = analyse(ordering)
        assert (a.tool_ns, a.tool_sum_ns, a.tool_calls) == (50 * MS, 50 * MS, 1)


def test_end_before_start_is_zero_length() -> None:
    a = analyse([agent("r", "", 0, 100), model("m", "r", 50, 40)])
    assert (a.model_sum_ns, a.model_ns, a.critical_path) == (0, 0, ("r",))


def test_root_with_end_before_start() -> None:
    a = analyse([agent("r", "", 100, 0), model("m", "r", 10, 40)])
    assert (a.e2e_ns, a.model_ns, a.orchestration_ns) == (0, 0, 0)


def test_parent_cycle_is_broken_and_attached_to_root() -> None:
    spans = [agent("r", "", 0, 100), tool("a", "b", 10, 50), model("b", "a", 20, 40)]
    a = analyse(spans)
    assert (a.partial, a.root_span_id) == (False, "r")
    assert split_ms(a) == (100, 20, 20, 60)
    assert a.critical_path == ("r", "a", "b")


def test_trace_that_is_only_a_cycle_is_partial() -> None:
    a = analyse([tool("a", "b", 10, 50), model("b", "a", 20, 40), span("c", "c", 0, 5)])
    assert (a.partial, a.root_span_id, split_ms(a)) == (True, "c", (50, 20, 20, 10))


def test_shuffled_order_gives_identical_results() -> None:
    spans = _random_trace(random.Random(7), 200)
    expected = analyse(spans)
    rng = random.Random(11)
    for _ in range(20):
        shuffled = list(spans)
        rng.shuffle(shuffled)
        assert analyse(shuffled) == expected
    assert len(expected.critical_path) > 1


# --- scale ------------------------------------------------------------------------------


def test_deep_chain_of_10000_spans() -> None:
    n = 10_000
    roles = ("agent", "tool", "other", "model")
    spans = [span(f"s{i}", f"s{i - 1}" if i else "", i, 2 * n - i, roles[i % 4]) for i in range(n)]
    began = time.perf_counter()
    a = analyse(spans[::-1])
    assert time.perf_counter() - began < 5
    assert a.e2e_ns == 2 * n * MS
    assert a.model_ns + a.tool_ns + a.orchestration_ns == a.e2e_ns
    assert len(a.critical_path) == n
    # each level owns 1 ms at each end; roles cycle agent, tool, other, model, so below the agent root
    # levels 1, 2 (mod 4) are tool time and 3, 0 (mod 4) model time
    assert a.orchestration_ns == 2 * MS
    assert (a.model_ns, a.tool_ns) == (9_998 * MS, 10_000 * MS)


def test_wide_fan_out_of_10000_spans() -> None:
    n = 10_000
    spans = [agent("r", "", 0, 10 * n)] + [tool(f"t{i}", "r", 10 * i, 10 * i + 10) for i in range(n)]
    began = time.perf_counter()
    a = analyse(spans[::-1])
    assert time.perf_counter() - began < 5
    assert (a.tool_ns, a.orchestration_ns, a.e2e_ns) == (10 * n * MS, 0, 10 * n * MS)
    assert len(a.critical_path) == n + 1
    assert len(a.parallelisable) == 1 and len(a.parallelisable[0].span_ids) == n
    assert a.parallel_saving_ns == 10 * (n - 1) * MS


# --- properties over random trees -------------------------------------------------------


def _random_trace(rng: random.Random, size: int) -> list[SpanRecord]:
    spans = [span("s0", "" if rng.random() < 0.8 else "lost", 0, rng.randint(1, 1000), "agent")]
    for i in range(1, size):
        parent = spans[rng.randrange(len(spans))]
        lo, hi = parent.start_ns // MS, parent.end_ns // MS
        start = rng.randint(lo - 5, hi)  # sometimes before the parent: clock skew
        end = start + rng.randint(-2, max(1, hi - start + 5))  # sometimes after it, sometimes negative
        parent_id = parent.span_id if rng.random() < 0.95 else f"missing{i}"
        role = rng.choice(("model", "tool", "agent", "other"))
        extra: dict[str, object] = {}
        if role == "model" and rng.random() < 0.2:
            extra["is_server_span"] = True
        if rng.random() < 0.1:
            extra["phase"] = rng.choice(("queue", "prefill", "decode"))
        if role == "tool":
            extra.update(tool_call_id=f"c{i}", depends_on=(f"c{rng.randrange(i)}",) if rng.random() < 0.2 else ())
        spans.append(span(f"s{i}", parent_id, start, end, role, **extra))
    if rng.random() < 0.3:  # a duplicate that ends later
        victim = spans[rng.randrange(len(spans))]
        spans.append(replace(victim, end_ns=victim.end_ns + 3 * MS))
    return spans


@pytest.mark.parametrize("seed", range(3))
def test_random_trees_always_add_up(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        a = analyse(_random_trace(rng, rng.randint(1, 60)))
        parts = (a.model_ns, a.tool_ns, a.orchestration_ns)
        assert sum(parts) == a.e2e_ns and min(parts) >= 0
        assert a.queue_ns + a.prefill_ns + a.decode_ns <= a.model_ns
        assert len(set(a.critical_path)) == len(a.critical_path) and a.critical_path[0] == a.root_span_id
        cursor = a.start_ns
        for seg in a.segments:  # non-overlapping, in order, tiling [start, start + e2e)
            assert seg.start_ns == cursor and seg.end_ns > seg.start_ns
            cursor = seg.end_ns
        assert cursor == a.start_ns + a.e2e_ns
        for category, total in (("model", a.model_ns), ("tool", a.tool_ns), ("orchestration", a.orchestration_ns)):
            assert sum(s.end_ns - s.start_ns for s in a.segments if s.category == category) == total
        assert set(s.span_id for s in a.segments) <= set(a.critical_path)
        assert 0 <= a.parallel_saving_ns <= a.model_ns + a.tool_ns
