"""The query API's answers as pydantic models: one per JSON route, and the parts they share.

The server's routes declare them (``response_model``), so ``/openapi.json`` documents every
answer and FastAPI checks each answer against its model before it is sent; ``ANSWERS`` names
each route's model, and the client (``agentlat.api.client``) reads every answer into it. They
model what the routes return key for key:

* documents the server builds (``Answer``) list every key; a key added to an answer without
  its model fails loudly on the server (``extra="forbid"``) instead of vanishing. A client reads
  with ``READING`` as its context, which leaves out the keys it does not know: a newer server
  may add keys to an answer without breaking an older CLI or dashboard (a key that is missing
  or of another type still fails);
* rows read from the store (``Row``) list the columns the query selects and keep any column
  the store adds (``extra="allow"``);
* numbers keep their type (``int`` where the store or the code gives whole numbers, ``float``
  where it gives floats), what can be missing is ``| None``, and a mapping whose keys are data
  (group values, attributes, evidence) is a ``dict``.

Imports only pydantic and the standard library: a leaf the dashboard and the CLI may read too.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

Source = Literal["spans", "rollups"]
Unit = Literal["ms"]
READING = "reading"  # the validation context of a client reading an answer


class Answer(BaseModel):
    """A document the server builds: every key is declared."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_left_out_when_reading(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context != READING or not isinstance(data, dict):
            return data
        known = _keys_of(cls)
        return {key: value for key, value in data.items() if key in known}


@cache
def _keys_of(model: type[BaseModel]) -> frozenset[str]:
    """The keys an answer model reads (aliases where it has them); asked once per model, not per answer."""
    return frozenset(field.alias or name for name, field in model.model_fields.items())


class Row(BaseModel):
    """A row read from the store: the query's columns, and any column the store adds."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())


# --- shared parts ----------------------------------------------------------------------
class Window(Answer):
    """The time range an answer covers, ``[start, end)``."""

    start: str = Field(description="ISO-8601, UTC")
    end: str = Field(description="ISO-8601, UTC")


class TrailingWindow(Answer):
    """A trailing window as asked (``length``) and the range it covered."""

    length: str = Field(description="as given, e.g. 1h, 24h, 7d")
    start: str = Field(description="ISO-8601, UTC")
    end: str = Field(description="ISO-8601, UTC")


class Stats(Answer):
    """Count and percentiles (ms) of a metric; percentiles are null without samples."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None


class MeanStats(Stats):
    """Count, percentiles and mean (ms) of a metric."""

    mean: float | None


class ErrorDetail(Answer):
    status: int = Field(description="the HTTP status")
    message: str = Field(description="what was wrong, and what is accepted")


class ErrorResponse(Answer):
    """Every error of the API has this shape."""

    error: ErrorDetail


# --- /percentiles, /breakdown, /groups, /timeseries --------------------------------------
class PercentileRow(Answer):
    metric: str = Field(description="the metric this row measures")
    group: dict[str, str] = Field(description="the group's value of each group_by dimension")
    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None


class PercentilesResponse(Answer):
    metric: str = Field(description="the metric asked for, or the metrics, comma-separated")
    unit: Unit
    description: str = Field(description="what the metric measures (with several: each one's, named)")
    source: Source = Field(description="where the numbers come from: raw spans (exact) or rollups")
    window: Window
    filters: dict[str, str] = Field(description="the equality filters applied, by dimension")
    group_by: list[str]
    rows: list[PercentileRow] = Field(description="metric by metric as asked, the most counted groups first")


class SampleRow(Answer):
    group: dict[str, str] = Field(description="the group's value of each group_by dimension")
    count: int = Field(description="every value of the group in the window")
    values: list[float] = Field(description="sorted, ms: all of them, or a fixed random `cap` beyond that many")


class SamplesResponse(Answer):
    metric: str
    unit: Literal["ms"]
    window: Window
    filters: dict[str, str]
    group_by: list[str]
    cap: int = Field(description="the most values a group's sample holds")
    rows: list[SampleRow] = Field(description="the most counted groups first")


class Share(Answer):
    """Each part's share of the mean E2E (the parts' means add up to it)."""

    model: float
    tool: float
    orchestration: float


class SplitAt(Answer):
    """The split of the requests at one percentile of E2E: the means of the traces ranked within half a
    percentile point of it (at least one); model + tool + orchestration = e2e."""

    traces: int = Field(description="traces averaged")
    e2e: float
    model: float
    tool: float
    orchestration: float


class BreakdownRow(Answer):
    group: dict[str, str]
    e2e: MeanStats
    model: MeanStats | None = Field(None, description="absent when the rollups hold no model time")
    tool: MeanStats | None = Field(None, description="absent when the rollups hold no tool time")
    orchestration: MeanStats | None = Field(None, description="absent when the rollups hold no orchestration time")
    traces: int
    share: Share
    at: dict[str, SplitAt] | None = Field(
        None,
        description="per p50, p95, p99: the split of the requests at that percentile of E2E, from the analysed "
        "traces (absent when grouping or filtering by model or tool, which traces do not keep)",
    )


class BreakdownResponse(Answer):
    window: Window
    filters: dict[str, str]
    group_by: list[str]
    unit: Unit
    rows: list[BreakdownRow] = Field(description="the groups with the most traces first")


class GroupRow(Answer):
    group: dict[str, str]
    count: int = Field(description="requests (root spans) served")


class GroupsResponse(Answer):
    window: Window
    filters: dict[str, str]
    group_by: list[str]
    rows: list[GroupRow]


class TimeseriesPoint(Answer):
    t: str = Field(description="the interval's start, ISO-8601")
    count: int
    p50: float | None
    p95: float | None
    p99: float | None


class Series(Answer):
    group: dict[str, str]
    points: list[TimeseriesPoint]


class TimeseriesResponse(Answer):
    metric: str
    unit: Unit
    step_seconds: int
    window: Window
    filters: dict[str, str]
    group_by: list[str]
    series: list[Series]


class HeatmapBucket(Answer):
    lower_ms: float = Field(description="the bucket holds values from lower_ms ...")
    upper_ms: float | None = Field(description="... up to (not including) upper_ms; null for the last, unbounded one")


class HeatmapColumn(Answer):
    t: str = Field(description="the interval's start, ISO-8601")
    count: int
    exact: bool = Field(description="true when the rollups held every value; else a t-digest estimate")
    counts: list[int] = Field(description="values per bucket, in the order of buckets; they add up to count")


class HeatmapResponse(Answer):
    metric: str
    unit: Unit
    step_seconds: int
    window: Window
    filters: dict[str, str]
    buckets: list[HeatmapBucket] = Field(description="latency buckets, the lowest to the highest holding a value")
    columns: list[HeatmapColumn] = Field(description="the intervals holding a value, oldest first")


# --- /dimensions, /advice --------------------------------------------------------------
class DimensionRow(Answer):
    service: str | None = Field(None, description="the service (with group_by=service only)")
    name: str = Field(description="the route, agent, model or tool")
    count: int = Field(description="requests, agent runs, model calls or tool calls")
    errors: int
    error_rate: float | None
    cache_hit_rate: float | None = Field(description="token-weighted prompt-cache hit rate")
    spec_acceptance: float | None = Field(description="accepted share of speculative draft tokens")
    metrics: dict[str, Stats] = Field(description="per metric of the answer's ``metrics``")


class DimensionsResponse(Answer):
    dimension: str
    group_by: list[str] = Field(default_factory=list, description="['service'] when rows are per service too")
    unit: Unit
    source: Source
    window: Window
    filters: dict[str, str]
    metrics: list[str]
    rows: list[DimensionRow]


class Finding(Answer):
    kind: str
    route: str
    title: str
    lever: str = Field(description="what to change")
    evidence: dict[str, Any] = Field(description="the numbers behind the finding, by name")
    saving_ms_per_request: float
    requests: int
    total_saving_s: float = Field(description="saving per request x requests: what findings are ranked by")
    applies_to: int = Field(description="how many of the requests (or their model calls, or prefetches) it applies to")
    applies_to_unit: Literal["requests", "model calls", "prefetches"] = Field(description="what applies_to counts")
    saving_basis: str = Field(
        description="the saving in words: the requests it is averaged over (all of the route's) and how many the "
        "lever applies to"
    )


class AdviceResponse(Answer):
    source: Source
    window: Window
    findings: list[Finding] = Field(description="the largest total saving first")


# --- /cache ---------------------------------------------------------------------------
MissReason = Literal[
    "cold", "expired", "prefix_changed", "below_minimum", "not_requested", "settings_changed", "unknown"
]
ChangedPart = Literal["model", "tools", "system", "messages"]


class ChangedPartStats(Answer):
    misses: int = Field(
        description="misses whose prompt first differs here from the route's previous request to the model"
    )
    offset_p50: float | None = Field(description="median byte offset in the part (as sent) where it first differs")
    offset_p95: float | None


class CacheGroup(Answer):
    group: dict[str, str]
    calls: int = Field(description="client model calls that report cache-read tokens")
    hits: int
    misses: int = Field(description="calls that read no token from the cache")
    hit_rate: float | None = Field(description="cache-read input tokens / input tokens")
    ttft_hit_ms: float | None = Field(description="mean TTFT of hits")
    ttft_miss_ms: float | None
    misses_by_reason: dict[MissReason, int] = Field(description="docs/attributes.md, 'Why a call missed'")
    changed_parts: dict[ChangedPart, ChangedPartStats] = Field(description="the prefix_changed misses by part")
    input_tokens_hit: float | None = Field(description="mean input tokens of a hit (cached ones included)")
    input_tokens_miss: float | None
    input_cost_hit: float | None = Field(
        description="mean input cost of a hit in full-price input tokens (read and written tokens at their prices)"
    )
    input_cost_miss: float | None
    cache_write_tokens: int = Field(description="input tokens written to the cache")


class CachePoint(Answer):
    t: str
    calls: int
    misses: int
    hit_rate: float | None
    misses_by_reason: dict[MissReason, int]


class CacheResponse(Answer):
    source: Source
    window: Window
    filters: dict[str, str]
    group_by: list[str]
    step_seconds: int
    groups: list[CacheGroup] = Field(description="the most calls first")
    series: list[CachePoint] = Field(
        description="per interval, every group together (the filters apply), from the rollups, oldest first"
    )


# --- /traces, /traces/{trace_id}, /metric_points ---------------------------------------
class TraceSummary(Row):
    trace_id: str
    start_ns: int
    has_root: bool
    duration_ns: int
    root_name: str
    service: str
    route: str
    agent: str
    span_count: int
    model_calls: int
    tool_calls: int
    errors: int
    start: str
    duration_ms: float


class TracesResponse(Answer):
    window: Window
    traces: list[TraceSummary]


class Segment(Answer):
    """A stretch of the critical path and where its time goes."""

    span_id: str
    start_ns: int
    end_ns: int
    category: str = Field(description="model, tool or orchestration")
    phase: str = Field(description="queue, prefill or decode for model time inside a phase span, else empty")


class ParallelGroup(Row):
    """Tool calls that ran one after another and could have run at once."""

    span_ids: list[str]
    tools: list[str]
    saving_ms: float
    on_critical_path: bool


class DispatchedCall(Row):
    """A tool span linked to the tool call its model streamed: when the call's arguments were complete, and
    how long the tool waited after that."""

    span_id: str
    tool: str
    call_id: str
    model_span_id: str = Field(description="the model call that streamed it")
    ready_ns: int = Field(description="when its arguments were complete in the stream (unix ns)")
    delay_ms: float = Field(description="dispatch delay: tool start minus ready, 0 if it started earlier")
    while_streaming: bool = Field(description="the tool started before its model call ended")
    on_critical_path: bool


class DispatchGroup(Row):
    """The tools one model call streamed, and the E2E saved had each started when its arguments were complete."""

    model_span_id: str
    span_ids: list[str]
    tools: list[str]
    saving_ms: float
    on_critical_path: bool


class TraceAnalysis(Row):
    """The trace's analysis: its E2E split, critical path, segments and what-ifs."""

    trace_id: str
    service_name: str
    route: str
    agent: str
    root_span_id: str
    root_name: str
    partial: bool
    split_complete: bool = Field(
        description="false where the trace does not time its model calls: an agent run whose model calls are in "
        "traces of their own, or a call that returned its stream before the first chunk with nothing timing the rest "
        "of it; model and orchestration time unknown (null), tool time measured"
    )
    e2e_ms: float
    model_ms: float | None
    tool_ms: float
    orchestration_ms: float | None
    queue_ms: float
    prefill_ms: float
    decode_ms: float
    model_sum_ms: float
    tool_sum_ms: float
    parallelism: float
    model_calls: int
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
    server_ms: float
    client_wait_ms: float
    parallel_saving_ms: float
    dispatch_saving_ms: float = Field(description="E2E saved had each streamed tool call started when ready")
    dispatch_delays_ms: list[float] = Field(description="each linked tool call's dispatch delay, in start order")
    dispatch_streamed_calls: int = Field(description="linked tool calls started while their model call streamed")
    critical_path: list[str]
    start_ns: int
    analysed_at: str
    start: str
    segments: list[Segment]
    parallelisable: list[ParallelGroup]
    dispatched: list[DispatchedCall]
    dispatch_groups: list[DispatchGroup]


class SpanEvent(Answer):
    name: str
    time_ns: int
    attributes: dict[str, str]


class Span(Row):
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    service: str
    start_ns: int
    duration_ns: int
    status_code: str
    status_message: str
    attributes: dict[str, str]
    resource: dict[str, str]
    scope_name: str
    scope_version: str
    flags: list[str] = Field(description="what ingest changed or found in the span")
    start: str
    duration_ms: float
    events: list[SpanEvent]
    derived: dict[str, Any] = Field(description="the fields derived from the span's attributes, by column name")


class GenAIEvent(Row):
    """A GenAI event sent for the trace as an OTLP log record."""

    time_ns: int
    observed_time_ns: int
    name: str
    trace_id: str
    span_id: str
    severity_number: int
    severity_text: str
    service: str
    body: Any = Field(description="the record's body: parsed JSON, or the text as stored when it was cut")
    attributes: dict[str, str]
    scope_name: str
    scope_version: str
    ingest_flags: list[str]
    time: str


class TraceResponse(Answer):
    trace_id: str
    analysis: TraceAnalysis | None = Field(description="null until the trace is analysed")
    spans: list[Span]
    events: list[GenAIEvent]


class MetricPoint(Row):
    time_ns: int
    start_time_ns: int
    name: str
    unit: str
    type: str = Field(description="Histogram, ExponentialHistogram, Sum or Gauge")
    temporality: int = Field(description="0 unspecified, 1 delta, 2 cumulative")
    monotonic: bool
    service: str
    attributes: dict[str, str]
    count: int
    sum: float | None
    min: float | None
    max: float | None
    value: float | None = Field(description="a Sum's or Gauge's value")
    explicit_bounds: list[float | None]
    bucket_counts: list[int]
    ingest_flags: list[str]
    time: str


class MetricPointsResponse(Answer):
    window: Window
    points: list[MetricPoint] = Field(description="oldest first")


# --- /compare --------------------------------------------------------------------------
class SideStats(Answer):
    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None


class Difference(Answer):
    statistic: str = Field(description="p50, p95, p99 or mean")
    difference: float | None = Field(description="B minus A, ms; null when a side has no values")
    low: float | None = Field(
        description="the 95 % interval's low end (how it is drawn: `source`); null with too few samples"
    )
    high: float | None
    status: Literal["slower", "faster", "no_clear_change", "too_few_samples", "no_data"] = Field(
        description="slower or faster when the interval excludes 0 (B against A)"
    )


class Comparison(Answer):
    a: SideStats
    b: SideStats
    differences: list[Difference]


class LeverSide(Answer):
    count: int = Field(description="model calls (the ratios: those reporting both token counts), traces or tool calls")
    value: float | None = Field(description="the ratio, or the mean; null without values")


class LeverChange(Answer):
    unit: Literal["ratio", "tokens", "ms"]
    a: LeverSide
    b: LeverSide
    statistic: Literal["ratio", "mean"]
    difference: float | None = Field(description="B minus A, in `unit`")
    low: float | None = Field(
        description="the 95 % interval's low end (how it is drawn: `source`); null with too few samples"
    )
    high: float | None
    status: Literal["higher", "lower", "no_clear_change", "too_few_samples", "no_data"]


class SideValue(Answer):
    value: str
    spans: int
    first_seen: str = Field(description="ISO-8601, UTC: the value's first span in the window")
    last_seen: str


class SideValuesResponse(Answer):
    dimension: str
    window: Window
    filters: dict[str, str]
    values: list[SideValue] = Field(description="the first seen first, so the newest release is last")


class VersionSeen(Answer):
    dimension: Literal["release", "prompt", "model"]
    service: str
    value: str
    first_seen: str = Field(description="ISO-8601, UTC: its first span ever (as long as spans are kept)")
    last_seen: str
    new: bool = Field(description="first seen inside the window: a deploy marker")


class VersionsResponse(Answer):
    window: Window
    filters: dict[str, str]
    versions: list[VersionSeen] = Field(description="the first seen first")


class CompareResponse(Answer):
    dimension: str = Field(description="release (service.version), model, prompt (agentlat.prompt.version) or time")
    a: str = Field(description="side A: a release, model or prompt version; for time, before `at`")
    b: str = Field(description="side B; for time, from `at` on")
    at: str | None = Field(default=None, description="for time: the instant between the sides (ISO-8601, UTC)")
    window: Window
    filters: dict[str, str]
    source: Literal["spans", "rollups"] = Field(
        description="spans: every value, exact, for a window up to 7 days; rollups beyond: the values of a side the "
        "rollups keep whole (at most 128), else their t-digest's quantiles, with intervals from the ranks a "
        "quantile's interval spans (MOVER for the difference); for time, `at` taken to its minute"
    )
    unit: Literal["ms"]
    min_samples: dict[str, int] = Field(description="per percentile on both sides for an interval; mean: as p50")
    not_in_rollups: list[str] = Field(
        description="from the rollups: what they do not keep for this dimension, left out (a trace keeps its "
        "release, not a prompt version or model; no rollup keeps output tokens a call)"
    )
    metrics: dict[str, Comparison] = Field(description="ttft, itl, e2e")
    split: dict[str, Comparison] = Field(description="model, tool, orchestration: mean ms per analysed trace")
    tools: dict[str, Comparison] = Field(description="each tool's call duration")
    levers: dict[str, LeverChange] = Field(
        description="what moved with it: cache_hit_rate and spec_acceptance (token-weighted, over the model calls; "
        "an interval needs 20 calls a side), output_tokens (a call), serial_tools_ms (what running a trace's "
        "independent tools in parallel would save), dispatch_delay_ms (a streamed tool call's wait after its "
        "arguments were complete)"
    )
    began: list[VersionSeen] = Field(
        description="releases, prompt versions and models first seen inside the window (for time: the nearest to "
        "`at` first): what may have started the change"
    )


# --- /budgets --------------------------------------------------------------------------
class Verdict(Answer):
    dimension: str = Field(description="route or agent")
    name: str
    source: str = Field(description="where the budget is declared: route, agent or default")
    metric: str = Field(description="a latency (ttft, itl, e2e, model, tool) or cache_hit_rate")
    percentile: str = Field(description="a latency's p50, p95 or p99; the hit rate's min (a floor)")
    budget: float = Field(description="in `unit`: a latency's ceiling in ms, the hit rate's floor as a share")
    actual: float | None = Field(description="the measured value in `unit`; null without samples")
    unit: Literal["ms", "ratio"]
    count: int = Field(description="samples; for the hit rate, model calls reporting cache tokens")
    min_samples: int
    status: Literal["pass", "breach", "insufficient"]
    line: int = Field(description="the budget's line in the file")


class BudgetThresholds(Answer):
    """The file's budgets as written: ``{metric: {percentile: ms}}`` (the hit rate's ``{"min": share}``);
    null drops a default."""

    default: dict[str, dict[str, float | None]]
    routes: dict[str, dict[str, dict[str, float | None]]]
    agents: dict[str, dict[str, dict[str, float | None]]]


class BudgetsResponse(Answer):
    file: str
    type: str | None = Field(description="the file's agent type")
    primary: str | None = Field(description="the metric users of this agent type feel most")
    secondary: str | None
    service: str | None
    window: TrailingWindow
    status: Literal["pass", "breach", "insufficient"]
    counts: dict[str, int] = Field(description="verdicts per status")
    min_samples: dict[str, int] = Field(description="per percentile, and per ratio metric the file budgets")
    thresholds: BudgetThresholds
    results: list[Verdict]


# --- /alerts ---------------------------------------------------------------------------
class Receiver(Answer):
    name: str
    type: str


class StateCounts(Answer):
    inactive: int
    pending: int
    firing: int
    resolved: int


class AlertRule(Answer):
    """A rule as written, with how many of its label sets are in each state."""

    alert: str
    severity: str
    type: str
    metric: str
    percentile: str | None
    condition: str
    window: str
    by: list[str]
    match: dict[str, str]
    for_: str = Field(alias="for")
    keep_firing_for: str
    min_samples: int
    line: int
    state: str = Field(description="the most severe state of its label sets")
    inactive: int
    pending: int
    firing: int
    resolved: int


class Alert(Answer):
    """One label set of one rule."""

    alert: str
    severity: str
    labels: dict[str, str]
    state: str
    active_at: str | None
    fired_at: str | None
    resolved_at: str | None
    evaluated_at: str | None
    value: float | None
    reference: float | None
    count: int
    enough_samples: bool
    summary: str
    muted: str | None = Field(description="why a firing alert is not notified (a silence or an inhibition)")
    changes: list[str]
    dashboard_url: str


class AlertEvent(Answer):
    """A stored state transition."""

    time: str
    alert: str
    severity: str
    labels: dict[str, str]
    from_: str = Field(alias="from")
    to: str
    value: float | None
    reference: float | None
    count: int
    summary: str


class AlertNotification(Answer):
    """A stored notification and its delivery status."""

    id: str
    time: str
    receiver: str
    status: str
    title: str
    alerts: int
    delivery: str
    attempts: int
    last_error: str | None = Field(description="the latest failed attempt, kept after a retry succeeds")
    errors: list[str] = Field(description="every failed attempt, oldest first (the last 10)")
    sent_at: str | None


class AlertsResponse(Answer):
    file: str
    evaluation_interval: str
    evaluated_at: str | None
    window_end: str | None
    receivers: list[Receiver]
    counts: StateCounts
    rules: list[AlertRule]
    alerts: list[Alert]
    events: list[AlertEvent] = Field(description="the last day's transitions, newest first")


class AlertEventsResponse(Answer):
    window: TrailingWindow
    transitions: list[AlertEvent]
    notifications: list[AlertNotification]


class ReplayedTransition(AlertEvent):
    """A transition a replay found, with the project it belongs to."""

    project: str


class ReplayedNotification(Answer):
    time: str
    project: str
    receiver: str
    status: str
    title: str
    alerts: list[str] = Field(description="each alert's summary")


class ReplaySummary(Answer):
    fired: int
    resolved: int
    notifications: int
    alerts_fired: list[str]


class ReplayedRule(Answer):
    alert: str
    severity: str
    why: str = Field(
        description="what the rule saw: fired N times, no matching series, too few samples, or its closest miss"
    )


class ReplayResponse(Answer):
    window: TrailingWindow
    step: str
    evaluations: int
    projects: list[str]
    summary: ReplaySummary
    transitions: list[ReplayedTransition]
    notifications: list[ReplayedNotification]
    rules: list[ReplayedRule]


# --- /keys -----------------------------------------------------------------------------
class KeyInfo(Answer):
    key_id: str
    project: str
    admin: bool
    name: str
    created_ms: int


class CreatedKey(KeyInfo):
    key: str = Field(description="the secret, shown this once")


class KeysResponse(Answer):
    keys: list[KeyInfo]


class RevokedKey(Answer):
    revoked: str = Field(description="the key id")


# --- health ----------------------------------------------------------------------------
class Health(Answer):
    status: str


class Readiness(Answer):
    status: Literal["ok", "unavailable"]
    problems: list[str]
    pending_bytes: int
    writer: str


# --- which route answers in which model ------------------------------------------------
# "METHOD path" (FastAPI's template for path parameters) -> the answer's model. The client reads
# every answer into its model through this table; tests/test_query_api.py holds it to the
# routers' ``response_model``, so a new route is one entry here beside its router.
ANSWERS: dict[str, type[Answer]] = {
    "GET /api/v1/percentiles": PercentilesResponse,
    "GET /api/v1/breakdown": BreakdownResponse,
    "GET /api/v1/groups": GroupsResponse,
    "GET /api/v1/timeseries": TimeseriesResponse,
    "GET /api/v1/heatmap": HeatmapResponse,
    "GET /api/v1/dimensions": DimensionsResponse,
    "GET /api/v1/advice": AdviceResponse,
    "GET /api/v1/cache": CacheResponse,
    "GET /api/v1/samples": SamplesResponse,
    "GET /api/v1/compare": CompareResponse,
    "GET /api/v1/versions": VersionsResponse,
    "GET /api/v1/compare/values": SideValuesResponse,
    "GET /api/v1/traces": TracesResponse,
    "GET /api/v1/traces/{trace_id}": TraceResponse,
    "GET /api/v1/metric_points": MetricPointsResponse,
    "GET /api/v1/budgets": BudgetsResponse,
    "GET /api/v1/alerts": AlertsResponse,
    "GET /api/v1/alerts/events": AlertEventsResponse,
    "POST /api/v1/alerts/replay": ReplayResponse,
    "POST /api/v1/keys": CreatedKey,
    "GET /api/v1/keys": KeysResponse,
    "DELETE /api/v1/keys/{key_id}": RevokedKey,
}
_TEMPLATED = [  # (method, path segments, model) of the routes with path parameters
    (key.partition(" ")[0], key.partition(" ")[2].split("/"), model) for key, model in ANSWERS.items() if "{" in key
]


def answer_model(method: str, path: str) -> type[Answer] | None:
    """The model ``method path`` answers in (``path`` as requested, e.g. ``/api/v1/traces/4bf9…``);
    None for a route not in ``ANSWERS``."""
    if found := ANSWERS.get(f"{method} {path}"):
        return found
    segments = path.split("/")
    return next((m for verb, parts, m in _TEMPLATED if verb == method and _fills(parts, segments)), None)


def _fills(template: list[str], segments: list[str]) -> bool:
    """Whether a path's segments fill a template's: each the same, or any non-empty one for a ``{parameter}``."""
    return len(template) == len(segments) and all(
        t == s or (t.startswith("{") and s != "") for t, s in zip(template, segments, strict=True)
    )
