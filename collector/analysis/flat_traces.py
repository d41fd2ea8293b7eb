"""The analysis of flat traces over whole batches in columnar form (polars), with no Python loop over spans.

A flat trace is the commonest shape: one root span and its children, which ran one after another. For such a
trace ``critical_path.analyse`` (the reference) reduces to sums over intervals, so this module computes its
row of the traces table for every flat trace of a batch at once; the row equals the reference's
(``tests/test_flat_traces.py`` holds the two side by side on random and real traces). A trace is flat when:

* one span has no parent (the root), every other span's parent is the root, no span id repeats;
* no span is a stream record, a phase span or a server span, and none states streamed tool calls, an answer's
  tool calls, when its arguments were ready, what it depends on, or a prefetch;
* no span ends before it starts, states a TTFT or decode that is not finite, or is a model call that the
  reference stretches (its stated stream outlasts it); no two model spans share a response id;
* every child lies, clamped to the root's interval, in a stretch of positive length, and no two overlap;
* among the children that are model or tool calls, no tool call follows another tool call (the reference would
  weigh them as a serial run that could run in parallel);
* a root that is a model call has no model-call children and no stream end before its own end; a root that is
  a tool call has no tool-call children;
* every span id is made of letters, digits, ``-`` and ``_`` (so the Details JSON needs no escaping).

Every other trace is left to the reference. Under those rules every child is on the critical path over its
whole clamped interval, the root's own time is the gaps between them, and a model call whose stated stream
ended before the span did counts as model time up to that end and as its parent's time after it.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from agentlat import semconv as sc
from agentlat.collector.analysis.critical_path import NO_LONGER_NS
from agentlat.store import TRACE_ROW_SCHEMA

NS_PER_MS = 1_000_000
_NO_LONGER_MS = NO_LONGER_NS / 1e6  # the reference's bound on a stated stream, as its rules compare it
_SAFE_ID = r"^[0-9A-Za-z_-]+$"
_DETAILS_TAIL = '],"parallelisable":[],"dispatched":[],"dispatch_groups":[]}'
_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "name", "service", "role", "is_server_span", "status", "route",
    "agent", "release", "answer_tool_calls", "ttft_ms", "decode_ms", "input_tokens", "cache_read_tokens",
    "spec_proposed_tokens", "spec_accepted_tokens", "prefetch_outcome", "prefetch_saved_ms",
    "prefetch_wasted_ms", "start_ns", "end_ns", "depends_on", "phase", "response_id", "args_ready",
)  # fmt: skip


def split_flat(spans: pa.Table, project: str, analysed_at_us: int) -> tuple[pa.Table, pa.Table]:
    """(the traces table's rows of the flat traces among these spans (analysis input); the input rows of every
    other trace)."""
    frame = _spans(spans)
    flat = _flat_traces(frame)
    rest = pc.invert(pc.is_in(spans.column("trace_id"), value_set=flat.get_column("trace_id").to_arrow()))
    rows = _rows(frame.join(flat, on="trace_id", how="semi"), flat, project, analysed_at_us)
    return rows, spans.filter(rest)


def _round_half_even(x: pl.Expr) -> pl.Expr:
    """Python's round() of a float to an int, for positive values."""
    low = x.floor()
    rest = x - low
    up = (rest > 0.5) | ((rest == 0.5) & ((low % 2) == 1))
    return (low + up.cast(pl.Float64)).cast(pl.Int64)


def _spans(spans: pa.Table) -> pl.DataFrame:
    tool_calls = pc.fill_null(pc.list_value_length(spans.column("tool_calls")), 0)
    frame = pl.from_arrow(spans.select(list(_COLUMNS)).append_column("tool_call_count", tool_calls))
    ttft, decode = pl.col("ttft_ms"), pl.col("decode_ms")
    is_model = pl.col("role") == sc.ROLE_MODEL
    stated = ttft + decode.fill_null(0.0)
    stream = ttft + decode
    stream_end = pl.col("start_ns") + _round_half_even(stream * 1e6)
    return frame.with_columns(
        is_model=is_model,
        is_tool=pl.col("role") == sc.ROLE_TOOL,
        is_root=pl.col("parent_span_id") == "",
        error=(pl.col("status") == "Error").fill_null(False),
        stretched=is_model
        & ttft.is_not_null()
        & (stated > 0)
        & (stated < _NO_LONGER_MS)
        & ((pl.col("start_ns") + _round_half_even(stated * 1e6)) > pl.col("end_ns")),
        stream_end=pl.when(is_model & (stream > 0) & (stream < _NO_LONGER_MS) & (stream_end < pl.col("end_ns")))
        .then(stream_end)
        .otherwise(None),
    ).with_columns(
        unfit=(pl.col("role") == sc.ROLE_STREAM)
        | (pl.col("phase") != "")
        | (pl.col("is_server_span").fill_null(0) != 0)
        | (pl.col("tool_call_count") > 0)
        | (pl.col("answer_tool_calls") != "")
        | (pl.col("args_ready") != "")
        | (pl.col("depends_on") != "")
        | (pl.col("prefetch_outcome") != "")
        | pl.col("prefetch_saved_ms").is_not_null()
        | pl.col("prefetch_wasted_ms").is_not_null()
        | (pl.col("end_ns") < pl.col("start_ns"))
        | ttft.is_nan().fill_null(False)
        | ttft.is_infinite().fill_null(False)
        | decode.is_nan().fill_null(False)
        | decode.is_infinite().fill_null(False)
        | pl.col("stretched")
        | ~pl.col("span_id").str.contains(_SAFE_ID)
    )


def _previous(value: pl.Expr) -> pl.Expr:
    """The value on the row before, if that row is of the same trace (rows sorted by trace: cheaper than a window
    over each trace)."""
    return pl.when(pl.col("trace_id").shift(1) == pl.col("trace_id")).then(value.shift(1))


def _previous_in_trace(column: str) -> pl.Expr:
    """The last value that is not null on the rows before, among the same trace's (rows sorted by trace)."""
    trace = pl.when(pl.col(column).is_not_null()).then(pl.col("trace_id"))
    same = trace.forward_fill().shift(1) == pl.col("trace_id")
    return pl.when(same).then(pl.col(column).forward_fill().shift(1))


def _flat_traces(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per flat trace: its root's fields."""
    roots = frame.filter(pl.col("is_root")).select(
        "trace_id",
        root_id="span_id",
        root_name="name",
        root_role="role",
        rs="start_ns",
        re="end_ns",
        root_stream_end="stream_end",
        root_service="service",
        root_route="route",
        root_agent="agent",
        root_release="release",
    )
    response_ids = pl.col("response_id").filter(pl.col("is_model") & (pl.col("response_id") != ""))
    traces = frame.group_by("trace_id").agg(
        spans=pl.len(),
        roots=pl.col("is_root").sum(),
        distinct_ids=pl.col("span_id").n_unique(),
        unfit=pl.col("unfit").any(),
        responses=response_ids.len(),
        distinct_responses=response_ids.n_unique(),
        models=pl.col("is_model").sum(),
        tools=pl.col("is_tool").sum(),
    )
    candidates = traces.filter(
        (pl.col("roots") == 1)
        & (pl.col("distinct_ids") == pl.col("spans"))
        & ~pl.col("unfit")
        & (pl.col("responses") == pl.col("distinct_responses"))
    ).join(roots, on="trace_id")
    children = (
        frame.join(candidates.select("trace_id", "root_id", "rs", "re"), on="trace_id")
        .filter(~pl.col("is_root"))
        .with_columns(c_lo=pl.max_horizontal("start_ns", "rs"), c_hi=pl.min_horizontal("end_ns", "re"))
        .sort("trace_id", "start_ns")
        .with_columns(
            walked=pl.col("c_hi") > pl.col("c_lo"),
            same_start=pl.col("start_ns") == _previous(pl.col("start_ns")),
            calls_role=pl.when(pl.col("is_model") | pl.col("is_tool")).then(pl.col("role")),
        )
        .with_columns(previous_call=_previous_in_trace("calls_role"))
    )
    walked = children.filter(pl.col("walked")).with_columns(overlaps=pl.col("c_lo") < _previous(pl.col("c_hi")))
    misfits = (
        pl.concat(
            [
                children.group_by("trace_id").agg(
                    misfit=(
                        (pl.col("parent_span_id") != pl.col("root_id"))
                        | (pl.col("end_ns") <= pl.col("start_ns"))
                        | pl.col("same_start").fill_null(False)
                        | (pl.col("is_tool") & (pl.col("previous_call") == sc.ROLE_TOOL).fill_null(False))
                    ).any()
                ),
                walked.group_by("trace_id").agg(misfit=pl.col("overlaps").fill_null(False).any()),
            ]
        )
        .group_by("trace_id")
        .agg(pl.col("misfit").any())
    )
    root_model = (pl.col("root_role") == sc.ROLE_MODEL) & (
        (pl.col("models") > 1) | pl.col("root_stream_end").is_not_null()
    )
    root_tool = (pl.col("root_role") == sc.ROLE_TOOL) & (pl.col("tools") > 1)
    return candidates.join(misfits, on="trace_id", how="left").filter(
        ~pl.col("misfit").fill_null(False) & ~root_model & ~root_tool
    )


def _rows(frame: pl.DataFrame, flat: pl.DataFrame, project: str, analysed_at_us: int) -> pa.Table:
    """The traces table's columns of the flat traces, as ``assembler.trace_rows`` gives the reference's."""
    root_category = (
        pl.when(pl.col("root_role") == sc.ROLE_MODEL)
        .then(pl.lit(sc.ROLE_MODEL))
        .when(pl.col("root_role") == sc.ROLE_TOOL)
        .then(pl.lit(sc.ROLE_TOOL))
        .otherwise(pl.lit("orchestration"))
    )
    spans = frame.join(flat.select("trace_id", "root_id", "rs", "re", root_category=root_category), on="trace_id")
    segments = _segments(spans)
    split = segments.group_by("trace_id").agg(
        **{
            f"{category}_ns": (pl.col("hi") - pl.col("lo")).filter(pl.col("category") == category).sum()
            for category in (sc.ROLE_MODEL, sc.ROLE_TOOL, "orchestration")
        },
        segments=pl.concat_str(
            pl.lit('["'), "span_id", pl.lit('",'), "lo", pl.lit(","), "hi", pl.lit(',"'), "category", pl.lit('",""]')
        ).str.join(","),
    )
    walked_child = ~pl.col("is_root") & (pl.min_horizontal("end_ns", "re") > pl.max_horizontal("start_ns", "rs"))
    both = pl.col("cache_read_tokens").is_not_null() & pl.col("input_tokens").is_not_null()
    spec = pl.col("spec_accepted_tokens").is_not_null() & pl.col("spec_proposed_tokens").is_not_null()
    # the reference's order of a trace's spans: by start, the longest first, then by span id
    ordered = spans.sort("trace_id", "start_ns", "end_ns", "span_id", descending=[False, False, True, False])
    sums = ordered.group_by("trace_id", maintain_order=True).agg(
        span_count=pl.len(),
        errors=pl.col("error").sum(),
        model_calls=pl.col("is_model").sum(),
        tool_calls=pl.col("is_tool").sum(),
        model_sum_ns=(pl.col("stream_end").fill_null(pl.col("end_ns")) - pl.col("start_ns"))
        .filter(pl.col("is_model"))
        .sum(),
        tool_sum_ns=(pl.col("end_ns") - pl.col("start_ns")).filter(pl.col("is_tool")).sum(),
        has_model=pl.col("is_model").any(),
        has_agent=(pl.col("role") == sc.ROLE_AGENT).any(),
        cache_top=pl.col("cache_read_tokens").filter(pl.col("is_model") & both).sum(),
        cache_bottom=pl.col("input_tokens").filter(pl.col("is_model") & both).sum(),
        spec_top=pl.col("spec_accepted_tokens").filter(pl.col("is_model") & spec).sum(),
        spec_bottom=pl.col("spec_proposed_tokens").filter(pl.col("is_model") & spec).sum(),
        children_path=pl.col("span_id").filter(walked_child),
        first_ttft_ms=pl.col("ttft_ms").filter(pl.col("is_model") & pl.col("ttft_ms").is_not_null()).first(),
        **{f"first_{c}": pl.col(c).filter(pl.col(c) != "").first() for c in ("service", "route", "agent")},
    )
    rows = flat.join(split, on="trace_id", how="left").join(sums, on="trace_id")
    return _table(rows, project, analysed_at_us)


def _segments(spans: pl.DataFrame) -> pl.DataFrame:
    """(trace, span id, lo, hi, category) of each stretch of the critical path: the root's own time between its
    children, and each child's clamped interval (a model call's split at its stream's end)."""
    children = (
        spans.filter(~pl.col("is_root"))
        .with_columns(lo=pl.max_horizontal("start_ns", "rs"), hi=pl.min_horizontal("end_ns", "re"))
        .filter(pl.col("hi") > pl.col("lo"))
    )
    own_category = (
        pl.when(pl.col("is_model"))
        .then(pl.lit(sc.ROLE_MODEL))
        .when(pl.col("is_tool"))
        .then(pl.lit(sc.ROLE_TOOL))
        .otherwise(pl.col("root_category"))
    )
    stream_end = pl.col("stream_end")
    streamed = children.select(
        "trace_id",
        "span_id",
        "lo",
        hi=pl.when(stream_end.is_not_null()).then(pl.min_horizontal("hi", stream_end)).otherwise(pl.col("hi")),
        category=own_category,
    )
    after_stream = children.filter(stream_end.is_not_null()).select(
        "trace_id", "span_id", lo=pl.max_horizontal("lo", stream_end), hi=pl.col("hi"), category="root_category"
    )
    ordered = children.sort("trace_id", "lo")
    gaps_before = ordered.select(
        "trace_id",
        span_id="root_id",
        lo=_previous(pl.col("hi")).fill_null(pl.col("rs")),
        hi=pl.col("lo"),
        category="root_category",
    )
    last = ordered.group_by("trace_id").agg(pl.col("hi").max().alias("last_hi"))
    roots = spans.filter(pl.col("is_root")).join(last, on="trace_id", how="left")
    gap_after = roots.select(
        "trace_id", span_id="root_id", lo=pl.col("last_hi").fill_null(pl.col("rs")), hi="re", category="root_category"
    )
    return (
        pl.concat([streamed, after_stream, gaps_before, gap_after])
        .filter(pl.col("hi") > pl.col("lo"))
        .sort("trace_id", "lo")
    )


def _ratio(top: str, bottom: str) -> pl.Expr:
    return pl.when(pl.col(bottom) > 0).then(pl.col(top) / pl.col(bottom)).otherwise(None)


# Columns in ns that the table holds in ms: divided by Arrow, since polars multiplies by the reciprocal, which
# rounds differently from Python's ``ns / NS_PER_MS``.
_IN_MS = ("E2eMs", "ModelMs", "ToolMs", "OrchestrationMs", "ModelSumMs", "ToolSumMs")


def _table(rows: pl.DataFrame, project: str, analysed_at_us: int) -> pa.Table:
    on_path = pl.col("model_ns") + pl.col("tool_ns")
    zero = pl.lit(0.0)
    frame = rows.with_columns(
        pl.col("model_ns", "tool_ns", "orchestration_ns").fill_null(0),
        pl.col("children_path").fill_null([]),
    ).select(
        ProjectId=pl.lit(project),
        TraceId="trace_id",
        Start=pl.col("rs"),
        ServiceName=pl.when(pl.col("root_service") != "")
        .then("root_service")
        .otherwise(pl.col("first_service").fill_null("")),
        Route=pl.when(pl.col("root_route") != "").then("root_route").otherwise(pl.col("first_route").fill_null("")),
        Agent=pl.when(pl.col("root_agent") != "").then("root_agent").otherwise(pl.col("first_agent").fill_null("")),
        Release="root_release",
        RootSpanId="root_id",
        RootName="root_name",
        Partial=pl.lit(0),
        E2eMs=pl.col("re") - pl.col("rs"),
        ModelMs="model_ns",
        ToolMs="tool_ns",
        OrchestrationMs="orchestration_ns",
        QueueMs=zero,
        PrefillMs=zero,
        DecodeMs=zero,
        ModelSumMs="model_sum_ns",
        ToolSumMs="tool_sum_ns",
        Parallelism=pl.when(on_path > 0)
        .then((pl.col("model_sum_ns") + pl.col("tool_sum_ns")).cast(pl.Float64) / on_path.cast(pl.Float64))
        .otherwise(1.0),
        ModelCalls="model_calls",
        ToolCalls="tool_calls",
        Errors="errors",
        SpanCount="span_count",
        FirstTtftMs="first_ttft_ms",
        CacheHitRatio=_ratio("cache_top", "cache_bottom"),
        SpecAcceptance=_ratio("spec_top", "spec_bottom"),
        PrefetchHits=pl.lit(0),
        PrefetchMisses=pl.lit(0),
        PrefetchSavedMs=zero,
        PrefetchWastedMs=zero,
        ServerMs=zero,
        ClientWaitMs=zero,
        ParallelSavingMs=zero,
        DispatchSavingMs=zero,
        DispatchDelaysMs=pl.lit([], dtype=pl.List(pl.Float64)),
        DispatchStreamedCalls=pl.lit(0),
        SplitComplete=(pl.col("has_model") | ~pl.col("has_agent")).cast(pl.UInt8),
        SeenAgainSpanIds=pl.lit([], dtype=pl.List(pl.String)),
        CriticalPath=pl.concat_list(pl.col("root_id"), "children_path"),
        Details=pl.concat_str(pl.lit('{"segments":['), pl.col("segments").fill_null(""), pl.lit(_DETAILS_TAIL)),
        AnalysedAt=pl.lit(analysed_at_us, dtype=pl.Int64),
    )
    table = frame.to_arrow()
    columns = [
        pc.divide(table.column(f.name).cast(pa.float64()), NS_PER_MS) if f.name in _IN_MS else table.column(f.name)
        for f in TRACE_ROW_SCHEMA
    ]
    return pa.table([c.cast(f.type) for c, f in zip(columns, TRACE_ROW_SCHEMA, strict=True)], schema=TRACE_ROW_SCHEMA)
