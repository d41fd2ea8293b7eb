"""Versioned schema migrations, applied in order at start-up.

Every statement is idempotent (IF NOT EXISTS), and each applied version is recorded in
``agentlat_migrations``, so running the migrator twice, or from two processes after a crash
half-way, converges on the same schema. Add a migration by appending to ``MIGRATIONS``;
never edit one that has shipped. These are the single-node forms; ``cluster_ddl.py`` rewrites
them for a ClickHouse cluster (and needs a sharding key for each new table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentlat import semconv as sc
from agentlat.store.rollup_sql import (
    GROUP_COLUMNS,
    ROLLUP_LEVELS,
    SPAN_RELEASE,
    days_from_hours,
    hours_from_minutes,
    minutes_from_raw,
    prefixes_from_raw,
)

_MAP = "Map(LowCardinality(String), String)"

SPANS_DDL = f"""
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes {_MAP} CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    Role LowCardinality(String) CODEC(ZSTD(1)),
    Dialect LowCardinality(String) CODEC(ZSTD(1)),
    Operation LowCardinality(String) CODEC(ZSTD(1)),
    Provider LowCardinality(String) CODEC(ZSTD(1)),
    Model LowCardinality(String) CODEC(ZSTD(1)),
    Tool LowCardinality(String) CODEC(ZSTD(1)),
    ToolCallId String CODEC(ZSTD(1)),
    Agent LowCardinality(String) CODEC(ZSTD(1)),
    Route LowCardinality(String) CODEC(ZSTD(1)),
    ConversationId String CODEC(ZSTD(1)),
    IsServerSpan UInt8 CODEC(ZSTD(1)),
    Streaming UInt8 CODEC(ZSTD(1)),
    TtftMs Nullable(Float64) CODEC(ZSTD(1)),
    QueueMs Nullable(Float64) CODEC(ZSTD(1)),
    PrefillMs Nullable(Float64) CODEC(ZSTD(1)),
    DecodeMs Nullable(Float64) CODEC(ZSTD(1)),
    ItlMeanMs Nullable(Float64) CODEC(ZSTD(1)),
    ItlP50Ms Nullable(Float64) CODEC(ZSTD(1)),
    ItlP95Ms Nullable(Float64) CODEC(ZSTD(1)),
    ItlMaxMs Nullable(Float64) CODEC(ZSTD(1)),
    StallCount Nullable(UInt32) CODEC(ZSTD(1)),
    InputTokens Nullable(UInt64) CODEC(ZSTD(1)),
    OutputTokens Nullable(UInt64) CODEC(ZSTD(1)),
    CacheReadTokens Nullable(UInt64) CODEC(ZSTD(1)),
    CacheCreationTokens Nullable(UInt64) CODEC(ZSTD(1)),
    ReasoningTokens Nullable(UInt64) CODEC(ZSTD(1)),
    SpecProposedTokens Nullable(UInt64) CODEC(ZSTD(1)),
    SpecAcceptedTokens Nullable(UInt64) CODEC(ZSTD(1)),
    PrefetchOutcome LowCardinality(String) CODEC(ZSTD(1)),
    PrefetchSavedMs Nullable(Float64) CODEC(ZSTD(1)),
    PrefetchWastedMs Nullable(Float64) CODEC(ZSTD(1)),
    IngestFlags Array(LowCardinality(String)) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ProjectId, ServiceName, SpanName, toDateTime(Timestamp), TraceId, SpanId)
TTL toDate(Timestamp) + INTERVAL {{ttl_days}} DAY
SETTINGS ttl_only_drop_parts = 1
"""

TRACE_TIMES_DDL = """
CREATE TABLE IF NOT EXISTS otel_traces_trace_id_ts (
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime64(9)) CODEC(Delta, ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime64(9)) CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(Start)
ORDER BY (ProjectId, TraceId, toUnixTimestamp(Start))
TTL toDate(Start) + INTERVAL {ttl_days} DAY
"""

TRACE_TIMES_SELECT = """
SELECT
    ProjectId,
    TraceId,
    min(Timestamp) AS Start,
    max(addNanoseconds(Timestamp, Duration)) AS End{spans}
FROM otel_traces
WHERE TraceId != ''
GROUP BY ProjectId, TraceId
"""
TRACE_TIMES_MV_DDL = (
    "CREATE MATERIALIZED VIEW IF NOT EXISTS otel_traces_trace_id_ts_mv\nTO otel_traces_trace_id_ts AS"
    + TRACE_TIMES_SELECT.replace("{spans}", "")
)


INGESTED_AT_DDL = "ALTER TABLE otel_traces ADD COLUMN IF NOT EXISTS IngestedAt DateTime64(3) DEFAULT now64(3)"

# One row per analysed trace; a re-analysis (late spans) replaces it. Keyed by trace id so a
# trace whose start moves when its root arrives late still has one row.
TRACES_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_traces (
    ProjectId LowCardinality(String),
    TraceId String,
    Start DateTime64(9),
    ServiceName LowCardinality(String),
    Route LowCardinality(String),
    Agent LowCardinality(String),
    RootSpanId String,
    RootName String,
    Partial UInt8,
    E2eMs Float64,
    ModelMs Float64,
    ToolMs Float64,
    OrchestrationMs Float64,
    QueueMs Float64,
    PrefillMs Float64,
    DecodeMs Float64,
    ModelSumMs Float64,
    ToolSumMs Float64,
    Parallelism Float64,
    ModelCalls UInt32,
    ToolCalls UInt32,
    Errors UInt32,
    SpanCount UInt32,
    FirstTtftMs Nullable(Float64),
    CacheHitRatio Nullable(Float64),
    SpecAcceptance Nullable(Float64),
    PrefetchHits UInt32,
    PrefetchMisses UInt32,
    PrefetchSavedMs Float64,
    PrefetchWastedMs Float64,
    ServerMs Float64,
    ClientWaitMs Float64,
    ParallelSavingMs Float64,
    CriticalPath Array(String),
    Details String CODEC(ZSTD(3)),
    AnalysedAt DateTime64(6),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_start Start TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree(AnalysedAt)
PARTITION BY toYYYYMM(Start)
ORDER BY (ProjectId, TraceId)
TTL toDate(Start) + INTERVAL {ttl_days} DAY
"""


# Streamed tool-call dispatch per analysed trace (migration 13): the E2E saved had each streamed tool call
# started when its arguments were complete, each linked call's dispatch delay, and how many started while
# their model call still streamed. The rollup SQL that migrations 7, 8 and 11 run (generated from rollup_sql,
# as it is now) reads them, so each of them first adds them, if missing, as migration 13 does.
TRACE_DISPATCH_COLUMNS = (
    "ALTER TABLE agentlat_traces ADD COLUMN IF NOT EXISTS DispatchSavingMs Float64 AFTER ParallelSavingMs,"
    " ADD COLUMN IF NOT EXISTS DispatchDelaysMs Array(Float64) AFTER DispatchSavingMs,"
    " ADD COLUMN IF NOT EXISTS DispatchStreamedCalls UInt32 AFTER DispatchDelaysMs"
)

# Whether the trace held its model calls (issue 38): an agent run whose calls went to traces of their own has
# no known model or orchestration time, and the split's rollups leave it out. Rows written before it were
# analysed as complete. The rollup SQL of migrations 7, 8 and 11 reads it, so they add it first, as 19 does.
TRACE_SPLIT_COLUMN = (
    "ALTER TABLE agentlat_traces ADD COLUMN IF NOT EXISTS SplitComplete UInt8 DEFAULT 1 AFTER DispatchStreamedCalls"
)

# The spans of a trace that are a counted call seen again (issue 38): the span rollups and span queries leave
# them out (rollup_sql.CLIENT_MODEL, TOOL_CALL), and read the column, so migrations 7, 8 and 11 add it first too.
TRACE_SEEN_AGAIN_COLUMN = (
    "ALTER TABLE agentlat_traces ADD COLUMN IF NOT EXISTS SeenAgainSpanIds Array(String) AFTER SplitComplete"
)

# The values of a rollup row of at most rollup_sql.EXACT_MAX of them, which then has an empty Digest
# (migration 11). Tables created before it lack the column, and the rollup SQL that migrations 5, 7, 8 and
# 10 run (generated from rollup_sql, as it is now) reads and writes it: each of them first adds it, if
# missing, to the rollup tables it touches, after Digest, where new tables have it (the rollup INSERTs
# give values in column order). Where the column exists these statements do nothing.
ROLLUP_EXACT_COLUMN = "Exact Array(Float64) CODEC(ZSTD(1))"  # a fifth smaller than with LZ4 (bench/rollup_storage.py)


def _exact_column(*tables: str) -> tuple[str, ...]:
    return tuple(f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {ROLLUP_EXACT_COLUMN} AFTER Digest" for t in tables)


# A rollup row's release and prompt version (issue 40: rollup_sql.GROUP_COLUMNS), in its sorting key (migration 24).
# Tables created before it lack them, and the rollup SQL that migrations 5, 7, 8, 10, 11 and 22 run (generated from
# rollup_sql, as it is now) groups by them: each of them first adds them, if missing, to the rollup tables it
# touches, after Tool, where new tables have them, and appends them to the sorting key (ClickHouse allows that
# only in the ALTER that adds the columns). The sharding keys of cluster mode stay a part of the sorting key.
ROLLUP_VERSION_COLUMNS = ("Release", "PromptVersion")
ROLLUP_TIME_COLUMNS = {"agentlat_rollup_1m": "Minute", "agentlat_rollup_1h": "Hour", "agentlat_rollup_1d": "Day"}


def _rollup_key(time_column: str) -> str:
    return f"ProjectId, Metric, {time_column}, {GROUP_COLUMNS}"


def _version_columns(*tables: str) -> tuple[str, ...]:
    return tuple(
        f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS Release LowCardinality(String) CODEC(ZSTD(3)) AFTER Tool,"
        " ADD COLUMN IF NOT EXISTS PromptVersion LowCardinality(String) CODEC(ZSTD(3)) AFTER Release,"
        f" MODIFY ORDER BY ({_rollup_key(ROLLUP_TIME_COLUMNS[t])})"
        for t in tables
    )


# A trace's release: its root's service.version (issue 40), which the trace rollups group by. Rows analysed before
# migration 24 get theirs from their spans there; the rollup SQL of migrations 7, 8, 11 and 22 reads the column, so
# they add it first.
TRACE_RELEASE_COLUMN = "ALTER TABLE agentlat_traces ADD COLUMN IF NOT EXISTS Release LowCardinality(String) AFTER Agent"


def _rollup_table(name: str, time_column: str, partition: str) -> str:
    """The DDL of a rollup table: one row per metric, group and ``time_column`` (a minute or an hour)."""
    return f"""
CREATE TABLE IF NOT EXISTS {name} (
    ProjectId LowCardinality(String),
    Metric LowCardinality(String),
    {time_column} DateTime('UTC'),
    ServiceName LowCardinality(String),
    Route LowCardinality(String),
    Agent LowCardinality(String),
    Model LowCardinality(String),
    Tool LowCardinality(String),
    Release LowCardinality(String) CODEC(ZSTD(3)),
    PromptVersion LowCardinality(String) CODEC(ZSTD(3)),
    Count UInt64,
    Sum Float64,
    Digest AggregateFunction(quantilesTDigest({ROLLUP_LEVELS}), Float64),
    {ROLLUP_EXACT_COLUMN},
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
PARTITION BY {partition}({time_column})
ORDER BY ({_rollup_key(time_column)})
TTL toDate({time_column}) + INTERVAL {{ttl_days}} DAY
"""


# Per-minute digests, recomputed whole for a minute that received data (so duplicates,
# which the raw tables drop at read time, never inflate them); the newest Version wins.
ROLLUP_DDL = _rollup_table("agentlat_rollup_1m", "Minute", "toDate")


# The per-minute rollups merged per hour, for long windows: a day reads 24 rows per group
# instead of 1,440. Recomputed from the minute rows whenever one of its minutes is.
ROLLUP_HOURLY_DDL = _rollup_table("agentlat_rollup_1h", "Hour", "toYYYYMM")

ROLLUP_HOURLY_BACKFILL = (
    *_exact_column("agentlat_rollup_1m"),
    *_version_columns("agentlat_rollup_1m", "agentlat_rollup_1h"),
    hours_from_minutes("1"),
)

# Per-day digests (UTC days), merged from the hours, so a week's window merges a few days of digests
# and only its ragged hours and minutes.
ROLLUP_DAILY_DDL = _rollup_table("agentlat_rollup_1d", "Day", "toYYYYMM")

ROLLUP_DAILY = (
    *_exact_column("agentlat_rollup_1h"),
    *_version_columns("agentlat_rollup_1h"),
    ROLLUP_DAILY_DDL,
    days_from_hours("1"),
)

# Every minute rolled up again (now with the counters of rollup_sql.COUNTER_METRICS), then its hour.
_NOW_VERSION = "toUInt64(toUnixTimestamp64Nano(now64(9)))"
ROLLUP_COUNTERS_BACKFILL = (
    *_exact_column("agentlat_rollup_1m", "agentlat_rollup_1h"),
    *_version_columns("agentlat_rollup_1m", "agentlat_rollup_1h"),
    TRACE_DISPATCH_COLUMNS,
    TRACE_SPLIT_COLUMN,
    TRACE_SEEN_AGAIN_COLUMN,
    TRACE_RELEASE_COLUMN,
    minutes_from_raw("1", "1", "1", _NOW_VERSION),
    hours_from_minutes("1"),
)

# Per minute, route, model and prompt-prefix hash: client model calls and their cache misses, so the
# advisor's identical-prefix misses over a long window read these instead of every call's attributes.
PREFIX_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_prefix_1m (
    ProjectId LowCardinality(String),
    Minute DateTime('UTC'),
    ServiceName LowCardinality(String),
    Route LowCardinality(String),
    Model LowCardinality(String),
    PrefixHash String,
    Calls UInt64,
    Misses UInt64,
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
PARTITION BY toDate(Minute)
ORDER BY (ProjectId, Minute, ServiceName, Route, Model, PrefixHash)
TTL toDate(Minute) + INTERVAL {ttl_days} DAY
"""
# The prefix counts of every minute, and every minute and hour rolled up again with the advisor's
# metrics (rollup_sql.ADVICE_SPAN_METRICS and ADVICE_TRACE_METRICS).
ADVICE_ROLLUPS = (
    *_exact_column("agentlat_rollup_1m", "agentlat_rollup_1h"),
    *_version_columns("agentlat_rollup_1m", "agentlat_rollup_1h"),
    TRACE_DISPATCH_COLUMNS,
    TRACE_SPLIT_COLUMN,
    TRACE_SEEN_AGAIN_COLUMN,
    TRACE_RELEASE_COLUMN,
    PREFIX_DDL,
    prefixes_from_raw("1", _NOW_VERSION),
    minutes_from_raw("1", "1", "1", _NOW_VERSION),
    hours_from_minutes("1"),
)

# API keys: only a hash of each secret is kept; revoking writes a newer row.
KEYS_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_api_keys (
    KeyId String,
    ProjectId String,
    Name String,
    Admin UInt8,
    SecretHash String,
    CreatedAt DateTime64(3),
    Revoked UInt8,
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
ORDER BY KeyId
"""

# Alerting (store/alerts.py): each alert's and notification group's state as JSON (newest
# Version wins), every state transition, and the outbox of notifications with their delivery.
ALERT_STATE_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_alert_state (
    ProjectId LowCardinality(String),
    Kind LowCardinality(String),
    Key String,
    Body String CODEC(ZSTD(1)),
    Deleted UInt8,
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
ORDER BY (ProjectId, Kind, Key)
"""

ALERT_EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_alert_events (
    ProjectId LowCardinality(String),
    Time DateTime('UTC'),
    Fingerprint String,
    Alert LowCardinality(String),
    Severity LowCardinality(String),
    Labels Map(LowCardinality(String), String),
    FromState LowCardinality(String),
    ToState LowCardinality(String),
    Value Nullable(Float64),
    Reference Nullable(Float64),
    Count UInt64,
    Summary String,
    Detail String CODEC(ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(Time)
ORDER BY (ProjectId, Time, Fingerprint, ToState)
TTL toDate(Time) + INTERVAL {ttl_days} DAY
"""

ALERT_OUTBOX_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_alert_outbox (
    ProjectId LowCardinality(String),
    Id String,
    Receiver LowCardinality(String),
    GroupKey String,
    Status LowCardinality(String),
    CreatedAt DateTime('UTC'),
    Delivery LowCardinality(String),
    Attempts UInt32,
    NextAttemptAt DateTime64(3, 'UTC'),
    LastError String,
    SentAt Nullable(DateTime64(3, 'UTC')),
    Payload String CODEC(ZSTD(3)),
    Version UInt64
)
ENGINE = ReplacingMergeTree(Version)
PARTITION BY toYYYYMM(CreatedAt)
ORDER BY (ProjectId, Id)
TTL toDate(CreatedAt) + INTERVAL {ttl_days} DAY
"""


# Spans-table layout (issue 9; bench/storage.py measures it): heavier ZSTD where values repeat
# (attribute maps, ids that recur within a trace), T64 for integers and times, plain ZSTD(1) for
# random ids and floats, which nothing compresses further. Codec changes apply to parts written
# from now on. The attribute-map bloom filters go: no query searches attributes, and they cost
# about 3 bytes per span and a tenth of the insert time.
_LAYOUT_CODECS = {
    "ZSTD(6)": ("SpanAttributes", "ResourceAttributes", "TraceId", "ConversationId"),
    "ZSTD(3)": ("ParentSpanId",),
    "T64, ZSTD(1)": (
        "Timestamp", "Duration", "IngestedAt", "StallCount", "InputTokens", "OutputTokens", "CacheReadTokens",
        "CacheCreationTokens", "ReasoningTokens", "SpecProposedTokens", "SpecAcceptedTokens",
    ),
}  # fmt: skip
SPANS_CODECS_DDL = "ALTER TABLE otel_traces " + ",\n    ".join(
    f"MODIFY COLUMN {column} CODEC({codec})" for codec, columns in _LAYOUT_CODECS.items() for column in columns
)
DROPPED_SPAN_INDEXES = ("idx_res_attr_key", "idx_res_attr_value", "idx_span_attr_key", "idx_span_attr_value")
SPANS_DROP_INDEXES_DDL = "ALTER TABLE otel_traces " + ", ".join(
    f"DROP INDEX IF EXISTS {name}" for name in DROPPED_SPAN_INDEXES
)


# Spans-table rebuild (issue 9; bench/query.py, bench/storage.py measure it). A trace's spans used to
# sit in ~8 granules of 8,192 rows each, one per span name, so a trace by id decompressed ~60k rows of
# every column. Sorted by role and time before the trace id, a trace's spans are neighbours (1 to 3
# granules of 1,024 rows), and ids repeated within a trace compress against each other: 89 instead of
# 95 bytes per span at 10M, trace by id ~40 instead of ~60 ms. The sorting key keeps every column of
# the old one, so duplicates (which share every column) still replace each other; queries filtering
# on Role prune by it. Neither the sorting key nor index_granularity can be altered in place, so the
# table is rebuilt: every column, codec, default, skip index and the TTL as migrations 1, 2 and 6
# left them, only ORDER BY and index_granularity differ.
SPANS_REBUILD_TABLE = "otel_traces_v9"
SPANS_V9_ORDER_BY = "(ProjectId, ServiceName, Role, toDateTime(Timestamp), TraceId, SpanName, SpanId)"
SPANS_V9_GRANULARITY = 1024
# A ledger row (not a migration: no Version in MIGRATIONS) written as the copy starts; its AppliedAt
# bounds which rows the catch-up below has to look at.
SPANS_REBUILD_MARK = 9009


def _spans_v9_ddl() -> str:
    """The spans table as migrations 1, 2 and 6 left it, under the rebuild's name, sorting key and granularity."""
    ddl = SPANS_DDL.replace(
        "CREATE TABLE IF NOT EXISTS otel_traces (", f"CREATE TABLE IF NOT EXISTS {SPANS_REBUILD_TABLE} ("
    )
    ingested = INGESTED_AT_DDL.split("IF NOT EXISTS ", 1)[1]  # migration 2, without a codec until 6
    ddl = ddl.replace("    INDEX idx_trace_id", f"    {ingested} CODEC(LZ4),\n    INDEX idx_trace_id", 1)
    for codec, columns in _LAYOUT_CODECS.items():
        for column in columns:
            ddl, found = re.subn(rf"(?m)^(    {column} .*) CODEC\(.*?\),$", rf"\1 CODEC({codec}),", ddl)
            assert found == 1, column
    for name in DROPPED_SPAN_INDEXES:
        ddl, found = re.subn(rf"(?m)^    INDEX {name} .*\n", "", ddl)
        assert found == 1, name
    old_order = "ORDER BY (ProjectId, ServiceName, SpanName, toDateTime(Timestamp), TraceId, SpanId)"
    ddl = ddl.replace(old_order, f"ORDER BY {SPANS_V9_ORDER_BY}")
    return ddl.replace(
        "SETTINGS ttl_only_drop_parts = 1",
        f"SETTINGS ttl_only_drop_parts = 1, index_granularity = {SPANS_V9_GRANULARITY}, prewarm_mark_cache = 1",
    )


# The rebuild, resumable: run again from the top after an interruption anywhere, it ends with one
# spans table in the new layout holding every row. The copy is dropped first (an interrupted run
# leaves a partial copy, or after the exchange the old table, already copied), created anew, filled,
# then swapped in by name: the materialized view and every query follow the name. Migrations run before
# a process serves, and an embedded store has no other writer. On a ClickHouse server, collectors of
# the previous version may still be writing (docs/operations.md: schema first): rows they add to the
# old table during the copy are copied after the swap (those ingested since the copy started and
# not in the new table; the window is small, so the anti-join is cheap). Only an insert already
# running when the tables are exchanged and committed after the catch-up started could be missed:
# stop the collectors for this migration to rule it out.
# A trace by id reads a few granules of a part it has not touched yet, and loading that part's marks
# (every column's) took longer than the read: both tables it reads keep their marks in the mark cache
# from the moment a part is written, merged or loaded (a few MB a million spans, of the 5 GB cache).
TRACE_TIMES_PREWARM_DDL = "ALTER TABLE otel_traces_trace_id_ts MODIFY SETTING prewarm_mark_cache = 1"
_COPY_STARTED = (
    f"(SELECT max(AppliedAt) - INTERVAL 5 MINUTE FROM agentlat_migrations WHERE Version = {SPANS_REBUILD_MARK})"
)
SPANS_REBUILD = (
    f"DROP TABLE IF EXISTS {SPANS_REBUILD_TABLE}",
    _spans_v9_ddl(),
    f"INSERT INTO agentlat_migrations SELECT {SPANS_REBUILD_MARK}, 'migration 9: spans copy started', now64(3)",
    f"INSERT INTO {SPANS_REBUILD_TABLE} SELECT * FROM otel_traces",
    f"EXCHANGE TABLES otel_traces AND {SPANS_REBUILD_TABLE}",
    f"""INSERT INTO otel_traces SELECT * FROM {SPANS_REBUILD_TABLE}
WHERE IngestedAt >= {_COPY_STARTED}
  AND (ProjectId, TraceId, SpanId) NOT IN (
    SELECT ProjectId, TraceId, SpanId FROM otel_traces WHERE IngestedAt >= {_COPY_STARTED})""",
    f"DROP TABLE IF EXISTS {SPANS_REBUILD_TABLE}",
    TRACE_TIMES_PREWARM_DDL,
)


# Issue 16: every rollup row of at most rollup_sql.EXACT_MAX values keeps them (and then no digest), so
# small groups' percentiles come out exact, as from the spans: the column, then every minute rolled up
# again, then its hour and day.
ROLLUP_EXACT = (
    *_exact_column("agentlat_rollup_1m", "agentlat_rollup_1h", "agentlat_rollup_1d"),
    *_version_columns("agentlat_rollup_1m", "agentlat_rollup_1h", "agentlat_rollup_1d"),
    TRACE_DISPATCH_COLUMNS,
    TRACE_SPLIT_COLUMN,
    TRACE_SEEN_AGAIN_COLUMN,
    TRACE_RELEASE_COLUMN,
    minutes_from_raw("1", "1", "1", _NOW_VERSION),
    hours_from_minutes("1"),
    days_from_hours("1"),
)


# OTLP logs and metrics (issue 16). GenAI events (log records named gen_ai.*) with the spans' conventions:
# a project column, partitions by day, the retention TTL, a bloom filter on TraceId (the trace detail
# reads a trace's events), and a ReplacingMergeTree whose sorting key ends with a hash of the whole
# record, so a record delivered twice (retries, log replay) counts once with FINAL.
EVENTS_DDL = f"""
CREATE TABLE IF NOT EXISTS agentlat_events (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    ObservedTimestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    TraceFlags UInt8 CODEC(ZSTD(1)),
    SeverityText LowCardinality(String) CODEC(ZSTD(1)),
    SeverityNumber UInt8 CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Body String CODEC(ZSTD(3)),
    ResourceAttributes {_MAP} CODEC(ZSTD(6)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    LogAttributes {_MAP} CODEC(ZSTD(6)),
    EventName LowCardinality(String) CODEC(ZSTD(1)),
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    RecordId String CODEC(ZSTD(1)),
    IngestFlags Array(LowCardinality(String)) CODEC(ZSTD(1)),
    IngestedAt DateTime64(3) DEFAULT now64(3) CODEC(LZ4),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ProjectId, ServiceName, EventName, toDateTime(Timestamp), TraceId, RecordId)
TTL toDate(Timestamp) + INTERVAL {{ttl_days}} DAY
SETTINGS ttl_only_drop_parts = 1
"""

# gen_ai.* metric data points, one table for every point type (Histogram, ExponentialHistogram as
# explicit buckets, Sum, Gauge); duplicates replace each other by a hash of the whole point.
METRIC_POINTS_DDL = f"""
CREATE TABLE IF NOT EXISTS agentlat_metric_points (
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    TimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),
    StartTimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),
    MetricName LowCardinality(String) CODEC(ZSTD(1)),
    MetricDescription LowCardinality(String) CODEC(ZSTD(1)),
    MetricUnit LowCardinality(String) CODEC(ZSTD(1)),
    MetricType LowCardinality(String) CODEC(ZSTD(1)),
    AggregationTemporality Int32 CODEC(ZSTD(1)),
    IsMonotonic UInt8 CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(6)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    Attributes {_MAP} CODEC(ZSTD(6)),
    Count UInt64 CODEC(T64, ZSTD(1)),
    Sum Nullable(Float64) CODEC(ZSTD(1)),
    Min Nullable(Float64) CODEC(ZSTD(1)),
    Max Nullable(Float64) CODEC(ZSTD(1)),
    Value Nullable(Float64) CODEC(ZSTD(1)),
    ExplicitBounds Array(Float64) CODEC(ZSTD(3)),
    BucketCounts Array(UInt64) CODEC(ZSTD(1)),
    PointId String CODEC(ZSTD(1)),
    IngestFlags Array(LowCardinality(String)) CODEC(ZSTD(1)),
    IngestedAt DateTime64(3) DEFAULT now64(3) CODEC(LZ4)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(TimeUnix)
ORDER BY (ProjectId, ServiceName, MetricName, toDateTime(TimeUnix), PointId)
TTL toDate(TimeUnix) + INTERVAL {{ttl_days}} DAY
SETTINGS ttl_only_drop_parts = 1
"""


# Spans-table codecs measured column by column (issue 21; `bench/storage.py --codecs`, docs/benchmarks.md):
# the 10M spans of bench/query.py take 75.9 instead of 78.3 B/span, at no more insert CPU. ZSTD(1)
# compresses a run of one value poorly (64 KiB of one 8-byte value to 2 KiB, ZSTD(3) to 26 bytes),
# which is what the lengths of ids, scope names and versions are where String lengths have a stream
# of their own (chDB's default); ZSTD(6) finds short, costly matches in random hex ids that ZSTD(3)
# codes as literals. Times: T64 in bit mode, then ZSTD(3); latencies that vary little from one model
# call to the next (ITL, decode): Gorilla. The other columns' codecs measured best already (migration
# 6). Like migration 6, this changes only the codec of parts written from now on; existing parts keep
# theirs until a merge rewrites them (OPTIMIZE TABLE otel_traces FINAL rewrites every part, at the
# cost of reading and writing the whole table).
SPANS_CODECS_V14: dict[str, tuple[str, ...]] = {
    "ZSTD(3)": ("TraceId", "SpanId", "ConversationId", "ScopeName", "ScopeVersion"),
    "T64('bit'), ZSTD(3)": ("Timestamp", "IngestedAt"),
    "Gorilla, ZSTD(1)": ("DecodeMs", "ItlMeanMs", "ItlP50Ms", "ItlP95Ms"),
}
SPANS_CODECS_V14_DDL = "ALTER TABLE otel_traces " + ",\n    ".join(
    f"MODIFY COLUMN {column} CODEC({codec})" for codec, columns in SPANS_CODECS_V14.items() for column in columns
)


# Analysis-row codecs (issue 21, docs/benchmarks.md "Ingest at 2M spans"): the columns of agentlat_traces
# that LZ4 (the default) compressed least. The ids are random hex, which ZSTD(1) codes at half its
# characters and LZ4 barely at all; the latencies and times are close in value from one trace to the next.
# `python -m bench.trace_rows`: 480 -> 370 B a trace of the collector's own rows, for +3.5 µs of insert CPU a
# trace and the same merge CPU. Like migration 14 it changes the codec of parts written from now on.
TRACES_CODECS_V15 = (
    "TraceId", "RootSpanId", "CriticalPath", "Start", "AnalysedAt", "E2eMs", "ModelMs", "ToolMs", "OrchestrationMs",
    "ModelSumMs", "ToolSumMs", "Parallelism", "FirstTtftMs", "CacheHitRatio",
)  # fmt: skip
TRACES_CODECS_V15_DDL = "ALTER TABLE agentlat_traces " + ",\n    ".join(
    f"MODIFY COLUMN {column} CODEC(ZSTD(1))" for column in TRACES_CODECS_V15
)


# Rollup-table codecs (issue 21, docs/benchmarks.md "Ingest at 2M spans"): every column but the exact values
# (ZSTD(1) since migration 11) had LZ4. Their rows repeat a few group names and times in long runs, which
# ZSTD codes far better, and counts are small integers; ZSTD(3) rather than ZSTD(1), which codes a long run of
# one value poorly (the Version of a recomputation: 0.10 B a span under LZ4, 0.71 under ZSTD(1), 0.02 under
# ZSTD(3)). `python bench/rollup_storage.py [--skip 16]` measures it.
ROLLUP_CODECS_V16_COLUMNS = ("ServiceName", "Route", "Agent", "Model", "Tool", "Count", "Sum", "Digest", "Version")
ROLLUP_CODECS_V16_DDL = tuple(
    f"ALTER TABLE {table} "
    + ",\n    ".join(f"MODIFY COLUMN {column} CODEC(ZSTD(3))" for column in (time_column, *ROLLUP_CODECS_V16_COLUMNS))
    for table, time_column in ROLLUP_TIME_COLUMNS.items()
)


# Issue 21: the trace time index counts each trace's stored span rows (every copy of a span sent twice
# included), so the collector can tell that the spans it holds in memory are all a trace has and analyse it
# without reading it back (collector/analysis/assembler.py). Rows from before this migration count UNCOUNTED, more
# than any trace holds, so a trace with spans from before it never matches the spans held: it is read back,
# as every trace was before.
UNCOUNTED = 2**40
TRACE_SPAN_COUNT = (
    "ALTER TABLE otel_traces_trace_id_ts ADD COLUMN IF NOT EXISTS "
    f"Spans SimpleAggregateFunction(sum, UInt64) DEFAULT {UNCOUNTED} CODEC(ZSTD(1))",
    "ALTER TABLE otel_traces_trace_id_ts_mv MODIFY QUERY" + TRACE_TIMES_SELECT.replace("{spans}", ", count() AS Spans"),
)


# Issue 21: ToolCallId and ConversationId are stored once when the span's GenAI attribute holds the same
# value (store/schema.py ATTRIBUTE_COPIES); a bit here says which. Rows written before it have 0: their
# columns hold their values. ZSTD(3): the bits repeat in long runs, which ZSTD(1) codes poorly.
ATTRIBUTE_COPIES_DDL = "ALTER TABLE otel_traces ADD COLUMN IF NOT EXISTS AttributeCopies UInt8 DEFAULT 0 CODEC(ZSTD(3))"


# Issue 38: the tool calls a model's answer asked for (collector/normalise: Vercel AI's ai.response.toolCalls,
# OpenInference's output messages). The analysis reads them: an answer that its tools' run held open ended its
# stream when the last of them started (docs/trace-analysis.md). Rows written before it have none.
_ANSWER_TOOL_CALLS_COLUMN = "AnswerToolCallIds String DEFAULT '' CODEC(ZSTD(1)) AFTER ToolCallId"
ANSWER_TOOL_CALLS_DDL = f"ALTER TABLE otel_traces ADD COLUMN IF NOT EXISTS {_ANSWER_TOOL_CALLS_COLUMN}"


# Issue 40: when each release (service.version), prompt version and model was first and last seen, per service and
# route, kept as spans arrive (a view of the inserts: no read of the spans), so a release new in any window is a deploy
# marker, however long ago the one before it began. First and last seen are exact under duplicates (min, max).
VERSIONS_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_versions (
    ProjectId LowCardinality(String),
    Dimension LowCardinality(String),
    ServiceName LowCardinality(String),
    Route LowCardinality(String),
    Value String,
    FirstSeen SimpleAggregateFunction(min, DateTime64(9)),
    LastSeen SimpleAggregateFunction(max, DateTime64(9))
)
ENGINE = AggregatingMergeTree
ORDER BY (ProjectId, Dimension, ServiceName, Route, Value)
TTL toDate(LastSeen) + INTERVAL {ttl_days} DAY
"""
VERSIONS_SELECT = f"""
SELECT ProjectId, v.1 AS Dimension, ServiceName, Route, v.2 AS Value,
       min(Timestamp) AS FirstSeen, max(Timestamp) AS LastSeen
FROM otel_traces
ARRAY JOIN [('release', ResourceAttributes['service.version']),
            ('prompt', SpanAttributes['{sc.PROMPT_VERSION}']), ('model', Model)] AS v
WHERE v.2 != ''
GROUP BY ProjectId, Dimension, ServiceName, Route, Value
"""
VERSIONS = (
    VERSIONS_DDL,
    "CREATE MATERIALIZED VIEW IF NOT EXISTS agentlat_versions_mv\nTO agentlat_versions AS" + VERSIONS_SELECT,
    "INSERT INTO agentlat_versions" + VERSIONS_SELECT,  # the spans stored before the view
)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


# Every stored minute, hour and day rolled up again with the prompt cache's metrics (rollup_sql.CACHE_METRICS and
# MISS_PAIRS).
CACHE_ROLLUPS = (
    *_version_columns(*ROLLUP_TIME_COLUMNS),
    TRACE_RELEASE_COLUMN,
    minutes_from_raw("1", "1", "1", _NOW_VERSION),
    hours_from_minutes("1"),
    days_from_hours("1"),
)

# Issue 40: releases and prompt versions as rollup dimensions. Each analysed trace's release, from its spans as the
# analysis takes it (its root's service.version; a trace without a root span, its earliest span's): rows analysed
# before this migration are written again with it, a microsecond newer so they replace themselves. Then every stored
# minute, hour and day rolled up again: each group's old row (release '') gets a row of count 0 that replaces it.
_ANALYSED_RELEASES = f"""
INSERT INTO agentlat_traces
SELECT t.* REPLACE (r.TraceRelease AS Release, t.AnalysedAt + toIntervalMicrosecond(1) AS AnalysedAt)
FROM agentlat_traces AS t FINAL
INNER JOIN (
    SELECT ProjectId, TraceId, argMin({SPAN_RELEASE}, (ParentSpanId != '', Timestamp)) AS TraceRelease
    FROM otel_traces
    GROUP BY ProjectId, TraceId
    HAVING TraceRelease != ''
) AS r ON t.ProjectId = r.ProjectId AND t.TraceId = r.TraceId
WHERE t.Release = ''
"""
VERSION_ROLLUPS = (
    *_version_columns(*ROLLUP_TIME_COLUMNS),
    TRACE_RELEASE_COLUMN,
    _ANALYSED_RELEASES,
    minutes_from_raw("1", "1", "1", _NOW_VERSION),
    hours_from_minutes("1"),
    days_from_hours("1"),
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "spans table and trace time index", (SPANS_DDL, TRACE_TIMES_DDL, TRACE_TIMES_MV_DDL)),
    Migration(2, "ingest time, per-trace analysis and per-minute rollups", (INGESTED_AT_DDL, TRACES_DDL, ROLLUP_DDL)),
    Migration(3, "API keys", (KEYS_DDL,)),
    Migration(4, "alert state, events and notification outbox", (ALERT_STATE_DDL, ALERT_EVENTS_DDL, ALERT_OUTBOX_DDL)),
    Migration(5, "hourly rollups", (ROLLUP_HOURLY_DDL, *ROLLUP_HOURLY_BACKFILL)),
    Migration(6, "spans storage: codecs, no attribute bloom filters", (SPANS_CODECS_DDL, SPANS_DROP_INDEXES_DDL)),
    Migration(7, "rollup counters for per-dimension summaries", ROLLUP_COUNTERS_BACKFILL),
    Migration(8, "advice rollups: the advisor's counters and per-minute prompt-prefix counts", ADVICE_ROLLUPS),
    Migration(9, "spans table rebuilt: sorted by role and time, granules of 1,024 rows", SPANS_REBUILD),
    Migration(10, "daily rollups", ROLLUP_DAILY),
    Migration(11, "exact values of small rollup groups", ROLLUP_EXACT),
    Migration(12, "GenAI events and gen_ai.* metric points (OTLP logs and metrics)", (EVENTS_DDL, METRIC_POINTS_DDL)),
    Migration(13, "streamed tool-call dispatch per trace", (TRACE_DISPATCH_COLUMNS,)),
    Migration(14, "spans storage: codecs measured per column", (SPANS_CODECS_V14_DDL,)),
    Migration(15, "analysis rows: ZSTD(1) for the columns LZ4 compressed least", (TRACES_CODECS_V15_DDL,)),
    Migration(16, "rollups: ZSTD(3) instead of LZ4", ROLLUP_CODECS_V16_DDL),
    Migration(17, "trace time index: span rows per trace", TRACE_SPAN_COUNT),
    Migration(18, "spans: a call or conversation id equal to its attribute stored once", (ATTRIBUTE_COPIES_DDL,)),
    Migration(19, "analysis rows: whether the trace held its model calls", (TRACE_SPLIT_COLUMN,)),
    Migration(20, "analysis rows: the spans that are a call seen again", (TRACE_SEEN_AGAIN_COLUMN,)),
    Migration(21, "spans: the tool calls a model's answer asked for", (ANSWER_TOOL_CALLS_DDL,)),
    Migration(22, "rollups: prompt-cache misses by reason, input tokens and cost of hits and misses", CACHE_ROLLUPS),
    Migration(23, "releases, prompt versions and models: when each was first and last seen", VERSIONS),
    Migration(24, "rollups by release and prompt version", VERSION_ROLLUPS),
)

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS agentlat_migrations (
    Version UInt32,
    Name String,
    AppliedAt DateTime64(3) DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY Version
"""

DEFAULT_TTL_DAYS = 180


def with_ttl(statement: str, ttl_days: int) -> str:
    """A migration statement with its retention filled in."""
    return statement.replace("{ttl_days}", str(int(ttl_days)))
