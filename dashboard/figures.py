"""Plotly figures of the dashboard, each a pure function of query-API answers (the models of
``agentlat.api.models``).

One palette everywhere: model time blue (its phases queue, prefill and decode in lighter to
darker blues), tool time orange, orchestration grey; p50/p95/p99 lines blue, orange, red;
budget levels green, orange, red.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from agentlat import semconv as sc
from agentlat.api.models import (
    BreakdownRow,
    CachePoint,
    DispatchedCall,
    Finding,
    HeatmapResponse,
    MeanStats,
    Span,
    TimeseriesPoint,
    TraceResponse,
    Verdict,
    VersionSeen,
)
from agentlat.dashboard import fmt
from agentlat.dashboard.budgets import STATUS_COLOURS

COLOURS = {
    "model": "#1f77b4",
    "queue": "#9ecae1",
    "prefill": "#4292c6",
    "decode": "#08306b",
    "tool": "#ff7f0e",
    "orchestration": "#a0a0a0",
    "agent": "#c7c7c7",
    "other": "#dcdcdc",
}
PERCENTILE_COLOURS = {"p50": "#1f77b4", "p95": "#ff7f0e", "p99": "#d62728"}
PARTS = ("model", "tool", "orchestration")
PHASES = ("queue", "prefill", "decode")
PATH_OUTLINE = "#111111"
READY_MARK = "#d62728"  # a streamed tool call's arguments complete
FONT = {"family": "Inter, -apple-system, Segoe UI, sans-serif", "size": 13}


def _layout(fig: go.Figure, height: int, **extra: Any) -> go.Figure:
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        font=FONT,
        plot_bgcolor="white",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        **extra,
    )
    fig.update_xaxes(gridcolor="#eeeeee", zeroline=False)
    return fig


# --- overview -------------------------------------------------------------------------
SPLIT_LEVELS = ("p50", "p95", "p99")
MIN_TEXT = 11  # px: a part's label shows inside its bar only when it fits at this size, else in the hover


@dataclass(frozen=True, slots=True)
class SplitBar:
    """One bar of the split chart: a route's requests at a percentile of E2E (or, without that, its mean)."""

    route: str
    level: str  # p50, p95, p99 or mean
    traces: int | None  # the requests averaged (None for the mean over all of them)
    e2e_ms: float
    parts: dict[str, float]  # model, tool, orchestration (ms); they add up to e2e_ms


def split_data(rows: Sequence[BreakdownRow]) -> list[SplitBar]:
    """Per route (the most requests first), the split of its p50, p95 and p99 requests; the mean split for a row
    the API gave no per-percentile split."""
    bars = []
    for row in rows:
        route = row.group.get("route") or "(no route)"
        if not row.at:
            parts = {part: _mean(getattr(row, part)) for part in PARTS}
            bars.append(SplitBar(route, "mean", None, row.e2e.mean or 0.0, parts))
            continue
        for level in SPLIT_LEVELS:
            if (at := row.at.get(level)) is not None:
                parts = {part: getattr(at, part) for part in PARTS}
                bars.append(SplitBar(route, level, at.traces, at.e2e, parts))
    return bars


def split_bars(rows: Sequence[BreakdownRow]) -> go.Figure:
    """Where E2E goes per route for its p50, p95 and p99 requests (``/breakdown?group_by=route`` rows): model +
    tool + orchestration, stacked, so each bar's length is the E2E of those requests. A part's label sits inside
    its bar only where it fits unrotated at a legible size; every part is in the hover and the legend."""
    bars = split_data(rows)
    y = [[b.route for b in bars], [b.level for b in bars]]
    fig = go.Figure()
    for part in PARTS:
        values = [b.parts[part] for b in bars]
        shares = [fmt.share(b.parts[part] / b.e2e_ms if b.e2e_ms else None) for b in bars]
        hover = [
            f"{b.route} · {b.level} request{'s' if b.traces != 1 else ''}"
            f"{f' (mean of {b.traces})' if b.traces and b.traces > 1 else ''}<br>"
            f"{part}: {fmt.ms(v)} ({s}) of {fmt.ms(b.e2e_ms)}"
            for b, v, s in zip(bars, values, shares, strict=True)
        ]
        fig.add_bar(
            name=part,
            y=y,
            x=values,
            orientation="h",
            marker_color=COLOURS[part],
            text=[f"{fmt.ms(v)} · {s}" if v else "" for v, s in zip(values, shares, strict=True)],
            textposition="inside",
            textangle=0,
            insidetextanchor="middle",
            hovertext=hover,
            hoverinfo="text",
        )
    fig.update_xaxes(title_text="ms per request (model + tool + orchestration = E2E)", ticksuffix=" ms")
    fig.update_yaxes(autorange="reversed")
    return _layout(
        fig,
        110 + 30 * len(bars),
        barmode="stack",
        legend_traceorder="normal",
        uniformtext={"minsize": MIN_TEXT, "mode": "hide"},
    )


def _mean(stats: MeanStats | None) -> float:
    """A part's mean, 0 when the rollups hold none of it."""
    return (stats.mean if stats else None) or 0.0


def _iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


RANGE_TO = " to "
HEATMAP_ROW_PX = 22  # height of one latency bucket's row
HEATMAP_COLOURS = [[0.0, "#fdd49e"], [0.5, "#e34a33"], [1.0, "#7f0000"]]  # one request still shows on white


def bucket_label(lower_ms: float, upper_ms: float | None) -> str:
    return f"≥ {fmt.ms(lower_ms)}" if upper_ms is None else f"{fmt.ms(lower_ms)}{RANGE_TO}{fmt.ms(upper_ms)}"


@dataclass(frozen=True, slots=True)
class Cell:
    """A filled cell of the heatmap: the interval ``[start, end)`` (ISO-8601), its bucket row and its count."""

    start: str
    end: str
    row: int
    count: int
    exact: bool


def heatmap_cells(body: HeatmapResponse) -> list[Cell]:
    step = timedelta(seconds=body.step_seconds)
    return [
        Cell(column.t, _iso(fmt.instant(column.t) + step), row, n, column.exact)
        for column in body.columns
        for row, n in enumerate(column.counts)
        if n
    ]


def _intervals(window: tuple[str, str], step: timedelta) -> list[datetime]:
    """The starts of the intervals of ``step`` (aligned as the API aligns them) that overlap ``window``."""
    first, end = fmt.instant(window[0]), fmt.instant(window[1])
    first -= timedelta(seconds=first.timestamp() % step.total_seconds())
    return [first + i * step for i in range(-(-(end - first) // step))]


MARKER_COLOUR = "#6b7280"
MOST_MARKERS = 12  # the newest; more would cover the chart


@dataclass(frozen=True, slots=True)
class Marker:
    """A deploy marker: a release first seen at ``at`` (ISO-8601)."""

    at: str
    label: str
    hover: str


def deploy_markers(versions: Sequence[VersionSeen], apart_s: float = 60) -> list[Marker]:
    """The versions first seen inside the window as markers, the newest ``MOST_MARKERS``; those first seen within
    ``apart_s`` of the one before share its marker (two services deployed together read as one line)."""
    markers: list[Marker] = []
    for v in [v for v in versions if v.new][-MOST_MARKERS:]:
        hover = f"{v.dimension} {v.value} of {v.service} first seen {fmt.utc_time(v.first_seen)}"
        last = markers[-1] if markers else None
        if last and (fmt.instant(v.first_seen) - fmt.instant(last.at)).total_seconds() < apart_s:
            markers[-1] = Marker(last.at, f"{last.label}, {v.value}", f"{last.hover}<br>{hover}")
        else:
            markers.append(Marker(v.first_seen, f"release {v.value}", hover))
    return markers


def over_time(
    points: Sequence[TimeseriesPoint],
    metric: str,
    window: tuple[str, str],
    step_seconds: int,
    budgets: dict[str, float] | None = None,
    distribution: HeatmapResponse | None = None,
    markers: Sequence[Marker] = (),
) -> go.Figure:
    """Above, p50/p95/p99 per interval (``/timeseries`` points, at the middle of their intervals) with budgets
    (percentile -> ms) as dashed lines; below, on the same time axis, how many values fell in each latency
    bucket (rows) per interval (``/heatmap``), as colour. Each point, and an invisible marker on each filled
    cell (Streamlit hears selections, which a heatmap trace does not make), carries its interval (start, end)
    for a click to open. A deploy marker is a dotted line through both, labelled above."""
    step = timedelta(seconds=step_seconds)
    cells = heatmap_cells(distribution) if distribution else []
    rows = len(distribution.buckets) if cells and distribution else 0
    heights = [320, 40 + HEATMAP_ROW_PX * rows] if rows else [320]
    fig = make_subplots(rows=len(heights), shared_xaxes=True, row_heights=heights, vertical_spacing=70 / sum(heights))
    centres = [fmt.instant(p.t) + step / 2 for p in points]
    intervals = [[p.t, _iso(fmt.instant(p.t) + step)] for p in points]
    for name in ("p50", "p95", "p99"):
        fig.add_scatter(
            name=name,
            x=centres,
            y=[getattr(p, name) for p in points],
            mode="lines+markers",
            line={"color": PERCENTILE_COLOURS[name], "width": 2},
            customdata=intervals,
            hovertemplate=f"{name}: %{{y:,.1f}} ms<extra></extra>",
            row=1,
            col=1,
        )
    for percentile, budget_ms in (budgets or {}).items():
        fig.add_hline(
            y=budget_ms,
            line={"color": PERCENTILE_COLOURS[percentile], "dash": "dash", "width": 1},
            annotation_text=f"{percentile} budget {fmt.ms(budget_ms)}",
            annotation_position="top left",
            row=1,
            col=1,
        )
    fig.update_yaxes(title_text=f"{metric} (ms)", ticksuffix=" ms", gridcolor="#eeeeee", rangemode="tozero", row=1)
    if rows and distribution:
        _add_distribution(fig, distribution, cells, metric, _intervals(window, step))
    for marker in markers:
        at = fmt.instant(marker.at)
        fig.add_shape(type="line", x0=at, x1=at, xref="x", yref="paper", y0=0, y1=1,
                      line={"color": MARKER_COLOUR, "dash": "dot", "width": 1})  # fmt: skip
        fig.add_annotation(x=at, xref="x", yref="paper", y=1, yanchor="top", xanchor="left", showarrow=False,
                           text=marker.label, hovertext=marker.hover, bgcolor="rgba(255,255,255,0.85)",
                           font={"size": 11, "color": MARKER_COLOUR})  # fmt: skip
    fig.update_xaxes(range=list(window))
    return _layout(fig, sum(heights) + 70 * (len(heights) - 1), hovermode="closest")


def _add_distribution(
    fig: go.Figure, body: HeatmapResponse, cells: list[Cell], metric: str, intervals: list[datetime]
) -> None:
    step = timedelta(seconds=body.step_seconds)
    filled = {fmt.instant(c.t): c.counts for c in body.columns}
    rows = range(len(body.buckets))
    labels = [bucket_label(b.lower_ms, b.upper_ms) for b in body.buckets]
    fig.add_heatmap(
        x=[t + step / 2 for t in intervals],
        y=list(rows),
        z=[[(filled[t][row] or None) if t in filled else None for t in intervals] for row in rows],
        colorscale=HEATMAP_COLOURS,
        zmin=0,
        hoverinfo="skip",
        showscale=False,
        xgap=1,
        ygap=1,
        row=2,
        col=1,
    )
    fig.add_scatter(
        x=[fmt.instant(c.start) + step / 2 for c in cells],
        y=[c.row for c in cells],
        mode="markers",
        marker={"size": HEATMAP_ROW_PX, "opacity": 0, "symbol": "square"},
        customdata=[[c.start, c.end] for c in cells],
        hovertext=[
            f"{fmt.utc_time(c.start)[11:16]}{RANGE_TO}{fmt.utc_time(c.end)[11:16]} UTC<br>{metric} {labels[c.row]}"
            f"<br>{fmt.count(c.count)} {'' if c.exact else 'estimated '}request{'s' if c.count != 1 else ''}"
            "<br>click for the slowest traces of this interval"
            for c in cells
        ],
        hoverinfo="text",
        showlegend=False,
        row=2,
        col=1,
    )
    fig.update_yaxes(tickvals=list(rows), ticktext=labels, showgrid=False, title_text=f"{metric} distribution", row=2)


# --- trace waterfall ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Bar:
    """One horizontal bar of the waterfall, in ms since the trace started."""

    row: int
    start_ms: float
    length_ms: float
    category: str  # a key of COLOURS
    on_path: bool
    hover: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment on a span's bar: where a streamed tool call's arguments were complete, in ms since the trace
    started."""

    row: int
    at_ms: float
    hover: str


@dataclass(frozen=True, slots=True)
class Waterfall:
    labels: list[str]  # row labels, top first; row 0 is the critical path
    bars: list[Bar]
    marks: list[Mark] = field(default_factory=list)


PATH_ROW_LABEL = "critical path"
NBSP = "\u00a0"


def span_category(span: Span) -> str:
    """model, tool, agent or other from the span's role; a phase span is its phase."""
    phase = span.attributes.get("agentlat.phase", "")
    if phase in PHASES:
        return phase
    role = span.derived.get("Role", "")
    return role if role in COLOURS else "other"


def _tree_order(spans: Sequence[Span]) -> list[tuple[Span, int]]:
    """Spans depth-first (children by start time) with their depth; orphans start new trees."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = defaultdict(list)
    for span in sorted(spans, key=lambda s: (s.start_ns, -s.duration_ns, s.span_id)):
        parent = span.parent_span_id
        children[parent if parent in ids and parent != span.span_id else ""].append(span)
    ordered: list[tuple[Span, int]] = []
    stack = [(span, 0) for span in reversed(children[""])]
    seen: set[str] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        ordered.append((span, depth))
        stack.extend((child, depth + 1) for child in reversed(children[span.span_id]))
    return ordered


def _phase_bars(span: Span, row: int, start_ms: float, on_path: bool) -> list[Bar]:
    """Queue, prefill and decode inside a model span that reports them but has no phase spans."""
    derived = span.derived
    queue, prefill, decode = (derived.get(k) for k in ("QueueMs", "PrefillMs", "DecodeMs"))
    bars, offset = [], 0.0
    for phase, length in (("queue", queue), ("prefill", prefill)):
        if length:
            bars.append(Bar(row, start_ms + offset, length, phase, on_path, f"{phase}: {fmt.ms(length)}"))
            offset += length
    if decode:
        if queue is None and prefill is None and derived.get("TtftMs") is not None:
            offset = derived["TtftMs"]
        bars.append(Bar(row, start_ms + offset, decode, "decode", on_path, f"decode: {fmt.ms(decode)}"))
    return bars


def waterfall_data(body: TraceResponse) -> Waterfall:
    """Rows and bars of one trace (``/traces/{id}``): the critical path strip, then the span tree."""
    spans, analysis = body.spans, body.analysis
    origin = (analysis.start_ns if analysis else 0) or min(s.start_ns for s in spans)
    path = set(analysis.critical_path if analysis else ())
    labels, bars = [PATH_ROW_LABEL], []
    for seg in analysis.segments if analysis else ():
        category = seg.phase if seg.phase in PHASES else seg.category
        length = (seg.end_ns - seg.start_ns) / 1e6
        bars.append(Bar(0, (seg.start_ns - origin) / 1e6, length, category, True, f"{category}: {fmt.ms(length)}"))
    has_phase_children = {s.parent_span_id for s in spans if span_category(s) in PHASES}
    linked = {(c.model_span_id, c.call_id): c for c in analysis.dispatched} if analysis else {}
    rows: dict[str, int] = {}
    marks: list[Mark] = []
    for span, depth in _tree_order(spans):
        row, category = len(labels), span_category(span)
        rows[span.span_id] = row
        error = " (error)" if span.status_code == "Error" else ""
        labels.append(f"{'  ' * depth}{span.name}{error}")
        start, length, on_path = (span.start_ns - origin) / 1e6, span.duration_ns / 1e6, span.span_id in path
        where = "on the critical path" if on_path else "off the critical path"
        hover = f"{span.name}<br>starts +{fmt.ms(start)}, lasts {fmt.ms(length)}<br>{where}"
        bars.append(Bar(row, start, length, category, on_path, hover))
        if category == "model" and span.span_id not in has_phase_children:
            bars.extend(_phase_bars(span, row, start, on_path))
        for call in _streamed_calls(span):
            link = linked.pop((span.span_id, call.call_id), None)
            hover = _ready_hover(call.name, call.call_id, link, call.ready_s * 1000)
            marks.append(Mark(row, start + call.ready_s * 1000, hover))
    for (model, call_id), call in linked.items():  # ready moments a tool span gave (no event on the model's)
        if model in rows:
            marks.append(Mark(rows[model], (call.ready_ns - origin) / 1e6, _ready_hover(call.tool, call_id, call)))
    return Waterfall(labels, bars, marks)


@dataclass(frozen=True, slots=True)
class _Streamed:
    call_id: str
    name: str
    ready_s: float  # seconds from the model call's start


def _streamed_calls(span: Span) -> list[_Streamed]:
    """The tool calls a model span streamed whose arguments were complete (its ``agentlat.tool_call`` events)."""
    found = []
    for event in span.events:
        if event.name != sc.TOOL_CALL_EVENT:
            continue
        attrs = event.attributes
        try:
            ready = float(attrs.get(sc.TOOL_CALL_READY_AT, "nan"))
        except ValueError:
            continue
        if ready >= 0:
            found.append(_Streamed(attrs.get(sc.GEN_AI_TOOL_CALL_ID, ""), attrs.get(sc.GEN_AI_TOOL_NAME, ""), ready))
    return found


def _ready_hover(name: str, call_id: str, linked: DispatchedCall | None, into_ms: float | None = None) -> str:
    """What a mark says: the call, when its arguments were complete, and how long its tool waited then."""
    into = f" at +{fmt.ms(into_ms)} into the call" if into_ms is not None else ""
    text = f"{name or 'tool call'} {call_id}".strip() + f": arguments complete{into}"
    if linked is not None:
        when = "while the model streamed" if linked.while_streaming else "after the message ended"
        text += f"<br>tool started {fmt.ms(linked.delay_ms)} later, {when}"
    return text


def tick_labels(labels: Sequence[str], longest: int = 48) -> list[str]:
    """Labels padded to one width with no-break spaces, so right-aligned monospace ticks read as an
    indented, left-aligned tree (SVG would collapse ordinary spaces)."""
    cut = [label if len(label) <= longest else label[: longest - 1] + "…" for label in labels]
    width = max(map(len, cut), default=0)
    return [label.ljust(width).replace(" ", NBSP) for label in cut]


def waterfall(body: TraceResponse) -> go.Figure:
    """The trace as a waterfall: critical-path spans outlined, the others faded; phases in blues; a red tick on a
    model call where a tool call it streamed had its arguments complete."""
    data = waterfall_data(body)
    fig = go.Figure()
    for category in COLOURS:
        bars = [b for b in data.bars if b.category == category]
        if not bars:
            continue
        fig.add_bar(
            name=category,
            orientation="h",
            y=[b.row for b in bars],
            x=[b.length_ms for b in bars],
            base=[b.start_ms for b in bars],
            marker={
                "color": COLOURS[category],
                "opacity": [1.0 if b.on_path else 0.35 for b in bars],
                "line": {"color": PATH_OUTLINE, "width": [1.5 if b.on_path and b.row else 0 for b in bars]},
            },
            hovertext=[b.hover for b in bars],
            hoverinfo="text",
            width=0.7,  # in rows: the same for every category, however its rows are spaced
        )
    if data.marks:
        fig.add_scatter(
            name="arguments complete",
            x=[m.at_ms for m in data.marks],
            y=[m.row for m in data.marks],
            mode="markers",
            marker={"symbol": "line-ns", "size": 18, "line": {"color": READY_MARK, "width": 3}},
            hovertext=[m.hover for m in data.marks],
            hoverinfo="text",
        )
    fig.update_yaxes(
        tickmode="array",
        tickvals=list(range(len(data.labels))),
        ticktext=tick_labels(data.labels),
        autorange="reversed",
        tickfont={"family": "ui-monospace, Menlo, monospace", "size": 12},
    )
    fig.update_xaxes(title_text="ms since the trace started", ticksuffix=" ms")
    return _layout(fig, 120 + 34 * len(data.labels), barmode="overlay")


# --- budgets --------------------------------------------------------------------------
def budget_bars(verdicts: Sequence[Verdict]) -> go.Figure:
    """Each latency budget's actual as a share of the budget, coloured by the server's verdict; 100 % is the
    line. A hit rate's floor is left to the table: its share of the floor would read the wrong way round."""
    shown = [v for v in verdicts if v.actual is not None and v.unit == "ms"]
    labels = [f"{v.name} · {v.metric} {v.percentile}" for v in shown]
    ratios = [v.actual / v.budget * 100 for v in shown]  # type: ignore[operator]
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=labels,
            x=ratios,
            marker_color=[STATUS_COLOURS[v.status] for v in shown],
            text=[f"{fmt.ms(v.actual)} of {fmt.ms(v.budget)}" for v in shown],
            textposition="auto",
            hovertemplate="%{y}: %{x:.0f}% of budget<extra></extra>",
        )
    )
    fig.add_vline(x=100, line={"color": "#c62828", "dash": "dash"}, annotation_text="budget")
    fig.update_xaxes(title_text="actual as % of budget", ticksuffix="%")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, 90 + 34 * len(shown), showlegend=False)


# --- advisor --------------------------------------------------------------------------
def savings_ranking(findings: Sequence[Finding]) -> go.Figure:
    """Findings by total E2E they would save over the window, largest on top."""
    labels = [f"{f.route} · {f.kind.replace('_', ' ')}" for f in findings]
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=labels,
            x=[f.total_saving_s for f in findings],
            marker_color=COLOURS["model"],
            text=[f"{f.total_saving_s:,.1f} s" for f in findings],
            textposition="auto",
            hovertemplate="%{y}: %{x:,.1f} s saved over the window<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="E2E saved over the window (s)", ticksuffix=" s")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, 90 + 36 * len(findings), showlegend=False)


# Per finding kind: the evidence values (label, evidence key) shown side by side, in ms.
EVIDENCE_BARS: dict[str, tuple[tuple[str, str], ...]] = {
    "prompt_cache": (("TTFT, cache hit", "ttft_cached_ms"), ("TTFT, cache miss", "ttft_uncached_ms")),
    "parallel_tools": (("E2E saved per affected trace", "mean_saving_ms"),),
    "tool_dispatch": (("median dispatch delay", "dispatch_delay_p50_ms"), ("E2E saved per request", "mean_saving_ms")),
    "speculative_decoding": (("decode now", "decode_ms"), ("with speculation (assumed)", "decode_spec_ms")),
    "wasteful_prefetch": (("prefetch wasted", "wasted_ms"), ("prefetch saved", "saved_ms")),
    "queueing": (("queue", "queue_ms"), ("time to first token", "ttft_ms")),
    "long_prefill": (("prefill", "prefill_ms"), ("median TTFT", "ttft_p50_ms")),
    "itl_stalls": (("excess per stall", "stall_excess_ms"),),
}


def evidence_values(finding: Finding) -> list[tuple[str, float]]:
    """The (label, ms) pairs a finding's evidence chart shows."""
    evidence = dict(finding.evidence)
    if finding.kind == "speculative_decoding":
        evidence["decode_spec_ms"] = evidence["decode_ms"] / evidence["assumed_speedup"]
    pairs = EVIDENCE_BARS.get(finding.kind)
    if pairs is None:
        return [(k, float(v)) for k, v in evidence.items() if k.endswith("_ms") and isinstance(v, int | float)]
    return [(label, float(evidence[key])) for label, key in pairs if evidence.get(key) is not None]


def evidence(finding: Finding) -> go.Figure:
    """A finding's evidence as bars in ms, with the expected saving per request."""
    values = evidence_values(finding)
    fig = go.Figure(
        go.Bar(
            x=[label for label, _ in values],
            y=[v for _, v in values],
            marker_color=[COLOURS["model"], COLOURS["tool"], COLOURS["orchestration"]][: len(values)],
            text=[fmt.ms(v) for _, v in values],
            textposition="auto",
            hovertemplate="%{x}: %{y:,.1f} ms<extra></extra>",
        )
    )
    fig.update_yaxes(ticksuffix=" ms", gridcolor="#eeeeee", rangemode="tozero")
    fig.update_layout(title={"text": f"saves {fmt.ms(finding.saving_ms_per_request)} per request", "x": 0})
    return _layout(fig, 260, showlegend=False)


# --- prompt cache -----------------------------------------------------------------------
# Why calls missed, in the order the chart stacks them: what a change of the prompt avoids first (warm colours),
# then what no lever avoids (greys).
MISS_REASONS = {
    "prefix_changed": ("prefix changed", "#d62728"),
    "expired": ("expired", "#ff7f0e"),
    "not_requested": ("no breakpoint", "#e377c2"),
    "settings_changed": ("settings changed", "#bcbd22"),
    "unknown": ("unknown", "#7f7f7f"),
    "cold": ("cold (first call)", "#c7c7c7"),
    "below_minimum": ("below minimum", "#dbdb8d"),
}


def cache_over_time(points: Sequence[CachePoint], step_seconds: int) -> go.Figure:
    """Misses by reason per interval (stacked bars) under the hit rate (a line, right axis)."""
    times = [p.t for p in points]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for reason, (label, colour) in MISS_REASONS.items():
        counts = [p.misses_by_reason.get(reason, 0) for p in points]
        if any(counts):
            fig.add_trace(go.Bar(x=times, y=counts, name=label, marker_color=colour,
                                 hovertemplate=f"{label}: %{{y}} misses<extra></extra>"))  # fmt: skip
    fig.add_trace(
        go.Scatter(x=times, y=[p.hit_rate for p in points], name="hit rate", mode="lines+markers",
                   line={"color": COLOURS["model"]}, hovertemplate="hit rate %{y:.0%}<extra></extra>"),
        secondary_y=True,
    )  # fmt: skip
    fig.update_layout(barmode="stack", bargap=0.1)
    fig.update_yaxes(title_text=f"misses per {step_seconds // 60} min", gridcolor="#eeeeee", secondary_y=False)
    fig.update_yaxes(range=[0, 1], tickvals=[0, 0.25, 0.5, 0.75, 1], tickformat=".0%", showgrid=False,
                     secondary_y=True)  # fmt: skip
    return _layout(fig, 320)


# --- compare ---------------------------------------------------------------------------
VERDICT_COLOURS = {"slower": "#c62828", "faster": "#2e7d32", "no_clear_change": "#757575",
                   "too_few_samples": "#f9a825", "no_data": "#bdbdbd"}  # fmt: skip


def difference_bars(rows: Sequence[Any]) -> go.Figure:
    """Each figure's difference B - A (``dashboard.comparison.Row``), with its 95 % interval as an error bar where
    there is one, coloured by what it says: which part moved, and how sure that is."""
    shown = [r for r in rows if r.difference is not None]
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=[r.figure for r in shown],
            x=[r.difference for r in shown],
            error_x={
                "type": "data", "symmetric": False, "color": "#424242",
                "array": [None if r.high is None else r.high - r.difference for r in shown],
                "arrayminus": [None if r.low is None else r.difference - r.low for r in shown],
            },
            marker_color=[VERDICT_COLOURS[r.status] for r in shown],
            customdata=[[r.verdict, r.interval, r.samples] for r in shown],
            hovertemplate="%{y}: %{x:+,.1f} ms (%{customdata[0]})<br>95 % interval %{customdata[1]}"
            "<br>samples A / B %{customdata[2]}<extra></extra>",
        )
    )  # fmt: skip
    fig.add_vline(x=0, line={"color": "#424242"})
    fig.update_xaxes(title_text="B - A", ticksuffix=" ms")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, 90 + 26 * len(shown), showlegend=False)
