"""Stream records: a model call whose stream is timed by a separate span or log (Logfire's "streaming
response from ... took ...s", role ``stream``). The rule is in ``agentlat.collector.analysis.critical_path``'s
docstring (Assembly); the properties hold it to the trace such a record stands for, on random traces.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from agentlat.collector.analysis.critical_path import SpanRecord, TraceAnalysis, analyse
from tests.test_analysis_properties import MS, PROPERTY_SETTINGS, traces

STREAM = "stream"


def _span(span_id: str, parent: str, start_ms: int, end_ms: int, role: str, **more: object) -> SpanRecord:
    tool = f"tool_{span_id}" if role == "tool" else ""
    return SpanRecord(span_id, parent, span_id, "svc", start_ms * MS, end_ms * MS, role, tool=tool, **more)


def _record(span_id: str, parent: str, end_ms: int, stream_ms: float | None, **more: object) -> SpanRecord:
    """Logfire's log: zero length at the stream's end, the stream's duration in DecodeMs."""
    return _span(span_id, parent, end_ms, end_ms, STREAM, decode_ms=stream_ms, **more)


def _ms(a: TraceAnalysis) -> tuple[int, int, int, int]:
    parts = (a.e2e_ns, a.model_ns, a.tool_ns, a.orchestration_ns)
    assert sum(parts[1:]) == parts[0]
    return tuple(p // MS for p in parts)  # type: ignore[return-value]


def _without_count(a: TraceAnalysis) -> TraceAnalysis:
    return replace(a, span_count=0)


# --- Logfire-shaped traces against the trace they stand for ----------------------------------


@st.composite
def logfire_rounds(draw: st.DrawFn) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """An agent loop as Logfire records it (request spans that end at the headers, a stream record
    after each), and the same loop as a client that times whole calls records it."""
    logfire = [_span("root", "", 0, 0, "agent")]
    truth = [_span("root", "", 0, 0, "agent")]
    t = draw(st.integers(0, 5))
    for i in range(draw(st.integers(1, 5))):
        start, headers = t, t + draw(st.integers(0, 8))  # the request span ends at the headers
        begun = headers + draw(st.integers(0, 3))  # the client starts reading the stream
        end = begun + draw(st.integers(1, 60))  # a stream takes time: the next call starts after it began
        streamed = draw(st.booleans())
        tokens = {"input_tokens": 1000, "cache_read_tokens": draw(st.integers(0, 1000))}
        if streamed:
            logfire.append(_span(f"m{i}", "root", start, headers, "model"))
            logfire.append(_record(f"s{i}", "root", end, float(end - begun), **tokens))
        else:
            logfire.append(_span(f"m{i}", "root", start, end, "model", **tokens))
        truth.append(_span(f"m{i}", "root", start, end, "model", **tokens))
        t = end + draw(st.integers(0, 4))
        if draw(st.booleans()):
            tool_end = t + draw(st.integers(1, 30))
            for trace in (logfire, truth):
                trace.append(_span(f"t{i}", "root", t, tool_end, "tool"))
            t = tool_end + draw(st.integers(0, 4))
    end = t + draw(st.integers(0, 5))
    logfire[0], truth[0] = replace(logfire[0], end_ns=end * MS), replace(truth[0], end_ns=end * MS)
    return draw(st.permutations(logfire)), truth


@PROPERTY_SETTINGS
@given(logfire_rounds())
def test_a_logfire_trace_analyses_as_the_trace_it_stands_for(rounds: tuple[list[SpanRecord], list[SpanRecord]]) -> None:
    logfire, truth = rounds
    a, want = analyse(logfire), analyse(truth)
    assert _without_count(a) == _without_count(want)
    assert a.span_count == len(logfire)


# --- random traces with stream records sprinkled in ------------------------------------------


@st.composite
def traces_with_records(draw: st.DrawFn) -> tuple[list[SpanRecord], list[SpanRecord]]:
    spans = draw(traces())
    records = []
    for k in range(draw(st.integers(1, 4))):
        # under a span of the trace, as Logfire emits them: a parentless record could become the trace's root
        parent = draw(st.sampled_from([s.span_id for s in spans]))
        end = draw(st.integers(-5, 110))
        stream = draw(st.one_of(st.none(), st.integers(0, 80).map(float), st.floats(0, 80)))
        start = end - draw(st.sampled_from((0, 0, 0, 5)))  # a record is zero length, or not
        records.append(replace(_record(f"r{k}", parent, end, stream), start_ns=start * MS))
        if draw(st.booleans()):  # its call's tokens, on the record
            records[-1] = replace(records[-1], input_tokens=100, cache_read_tokens=draw(st.integers(0, 100)))
    return spans, records


@PROPERTY_SETTINGS
@given(traces_with_records())
def test_stream_records_keep_the_split_exact_and_are_never_calls(
    drawn: tuple[list[SpanRecord], list[SpanRecord]],
) -> None:
    spans, records = drawn
    a, without = analyse(spans + records), analyse(spans)
    assert a.model_ns + a.tool_ns + a.orchestration_ns == a.e2e_ns
    assert min(a.model_ns, a.tool_ns, a.orchestration_ns) >= 0
    assert a.queue_ns + a.prefill_ns + a.decode_ns <= a.model_ns
    assert (a.model_calls, a.tool_calls, a.tool_sum_ns) == (
        without.model_calls,
        without.tool_calls,
        without.tool_sum_ns,
    )
    assert a.model_sum_ns >= without.model_sum_ns  # a call is only ever stretched
    assert a.span_count == without.span_count + len(records)


@PROPERTY_SETTINGS
@given(st.data())
def test_input_order_does_not_change_the_result_with_stream_records(data: st.DataObject) -> None:
    spans, records = data.draw(traces_with_records())
    shuffled = data.draw(st.permutations(spans + records))
    assert analyse(shuffled) == analyse(spans + records)


# --- hand-computed cases -----------------------------------------------------------------------


def test_logfire_stream_counts_from_request_to_stream_end() -> None:
    # the request span ends at the headers (2 ms), the stream record at 45 ms says it took 42 ms
    a = analyse([_span("r", "", 0, 100, "agent"), _span("m", "r", 1, 3, "model"), _record("s", "r", 45, 42.0)])
    assert _ms(a) == (100, 44, 0, 56)
    assert (a.model_sum_ns, a.model_calls, a.critical_path) == (44 * MS, 1, ("r", "m"))


def test_record_with_nothing_to_time_is_model_time_over_its_interval() -> None:
    a = analyse([_span("r", "", 0, 100, "agent"), _span("t", "r", 10, 40, "tool"), _record("s", "r", 90, 30.0)])
    assert _ms(a) == (100, 30, 30, 40)
    assert (a.model_calls, a.model_sum_ns) == (0, 0)


def test_a_sibling_starting_between_call_and_stream_breaks_the_link() -> None:
    # a tool ran between the call and the stream: the record times some call not in the trace
    spans = [
        _span("r", "", 0, 100, "agent"),
        _span("m", "r", 0, 5, "model"),
        _span("t", "r", 6, 20, "tool"),
        _record("s", "r", 90, 60.0),
    ]
    a = analyse(spans)
    assert _ms(a) == (100, 65, 14, 21)
    assert a.model_sum_ns == 5 * MS


def test_concurrent_streams_each_time_their_own_call() -> None:
    spans = [
        _span("r", "", 0, 100, "agent"),
        _span("a", "r", 0, 10, "model"),
        _span("b", "r", 2, 30, "model"),
        _record("sa", "r", 60, 48.0),  # began at 12: a had ended, b had not
        _record("sb", "r", 80, 48.0),  # began at 32
    ]
    a = analyse(spans)
    assert a.model_sum_ns == (60 + 78) * MS
    assert _ms(a) == (100, 80, 0, 20)  # b, stretched to 2-80, overlaps a (0-60): a is the path until b began


def test_record_inside_its_call_stretches_it() -> None:
    spans = [_span("r", "", 0, 100, "agent"), _span("m", "r", 0, 10, "model"), _record("s", "m", 50, 45.0)]
    assert analyse(spans).model_sum_ns == 50 * MS


def test_record_late_by_more_than_the_slack_still_links_and_a_bare_record_stretches_nothing() -> None:
    # the stated start may round to just before the call's end (1 ms of slack), not further
    base = [_span("r", "", 0, 100, "agent"), _span("m", "r", 0, 10, "model")]
    assert analyse([*base, _record("s", "r", 50, 41.0)]).model_sum_ns == 50 * MS  # began at 9
    assert analyse([*base, _record("s", "r", 50, 42.0)]).model_sum_ns == 10 * MS  # began at 8


def test_the_call_takes_the_record_tokens_it_lacks() -> None:
    spans = [
        _span("r", "", 0, 100, "agent"),
        _span("m1", "r", 0, 2, "model"),
        _record("s1", "r", 40, 38.0, input_tokens=1000, output_tokens=8, cache_read_tokens=800),
        _span("m2", "r", 50, 90, "model", input_tokens=1000, cache_read_tokens=0),
        _record("s2", "r", 95, 4.0, input_tokens=1000, cache_read_tokens=1000),  # m2 has its own
    ]
    assert analyse(spans).cache_hit_ratio == 800 / 2000
