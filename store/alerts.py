"""SQL of alerting: what rules read (rollup percentiles and hit rates per window, slow-request counts, the
dimension values of a window) and the three tables alerting keeps (state, events, outbox).

The tables are created by migration 4 (``migrations.py``):

- ``agentlat_alert_state``: one row per alert (a rule and a label set) and per notification group,
  its state as JSON, the newest ``Version`` winning; ``Deleted`` marks a forgotten one;
- ``agentlat_alert_events``: every state transition, for the API and the dashboard;
- ``agentlat_alert_outbox``: notifications to send; a newer version of a row records each
  delivery attempt, so a restart sends what was not yet acknowledged and nothing that was.

Every value reaches SQL as a ``{name:Type}`` parameter; the metric expressions and grouping
columns come from the whitelists in ``queries.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from agentlat.store.backends import Backend, Params
from agentlat.store.queries import DIMENSIONS, METRICS, ROLLUP_COLUMNS, SpanFilter
from agentlat.store.rollup_sql import MERGED_QUANTILES

_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_S = pa.timestamp("s", tz="UTC")
STATE_SCHEMA = pa.schema(
    [("ProjectId", pa.string()), ("Kind", pa.string()), ("Key", pa.string()), ("Body", pa.string()),
     ("Deleted", pa.uint8()), ("Version", pa.uint64())]
)  # fmt: skip
EVENT_SCHEMA = pa.schema(
    [("ProjectId", pa.string()), ("Time", _TS_S), ("Fingerprint", pa.string()), ("Alert", pa.string()),
     ("Severity", pa.string()), ("Labels", pa.map_(pa.string(), pa.string())), ("FromState", pa.string()),
     ("ToState", pa.string()), ("Value", pa.float64()), ("Reference", pa.float64()), ("Count", pa.uint64()),
     ("Summary", pa.string()), ("Detail", pa.string())]
)  # fmt: skip
OUTBOX_SCHEMA = pa.schema(
    [("ProjectId", pa.string()), ("Id", pa.string()), ("Receiver", pa.string()), ("GroupKey", pa.string()),
     ("Status", pa.string()), ("CreatedAt", _TS_S), ("Delivery", pa.string()), ("Attempts", pa.uint32()),
     ("NextAttemptAt", _TS_MS), ("LastError", pa.string()), ("SentAt", _TS_MS), ("Payload", pa.string()),
     ("Version", pa.uint64())]
)  # fmt: skip
OUTBOX_COLUMNS = """
    ProjectId AS project, Id AS id, Receiver AS receiver, GroupKey AS group_key, Status AS status,
    toUnixTimestamp(CreatedAt) AS created_at, Delivery AS delivery, Attempts AS attempts,
    toUnixTimestamp64Milli(NextAttemptAt) AS next_attempt_ms, LastError AS last_error,
    toUnixTimestamp64Milli(SentAt) AS sent_ms, Payload AS payload, Version AS version
"""

_PROJECTS = "(empty({projects:Array(String)}) OR has({projects:Array(String)}, ProjectId))"
_ROLLUP_RANGE = (
    "ProjectId = {project:String} AND Metric IN {metrics:Array(String)}"
    " AND Minute >= toDateTime({first:UInt32}) AND Minute < toDateTime({last:UInt32})"
)


def _columns(by: Sequence[str]) -> str:
    return "".join(f"{ROLLUP_COLUMNS[d]} AS {d}, " for d in by)


def _windowed(where: SpanFilter, metrics: Sequence[str], by: Sequence[str], columns: str) -> str:
    """``columns`` per label set and window end, over the rollup rows of ``metrics`` in each window
    [end - length, end) (unix seconds, whole minutes) of the ``{ends}`` and ``{length}`` parameters."""
    tests = " AND ".join([_ROLLUP_RANGE, *where.equality_tests(ROLLUP_COLUMNS)])
    minute = "toUnixTimestamp(Minute)"
    return f"""
        SELECT {_columns(by)}window_end, {columns}
        FROM (
            SELECT *, arrayJoin(arrayFilter(e -> {minute} >= e - {{length:UInt32}} AND {minute} < e,
                                            {{ends:Array(UInt32)}})) AS window_end
            FROM agentlat_rollup_1m FINAL
            WHERE {tests}
        )
        GROUP BY {", ".join([*by, "window_end"])}
        HAVING count > 0
    """


def _window_params(where: SpanFilter, metrics: Sequence[str], ends: Sequence[int], length: int) -> Params:
    params = {k: v for k, v in where.params().items() if k not in ("start_ns", "end_ns")}  # the ends say when
    params.update(metrics=list(metrics), ends=sorted(set(ends)), length=length, first=min(ends) - length,
                  last=max(ends))  # fmt: skip
    return params


def window_percentiles_sql(
    where: SpanFilter, metric: str, by: Sequence[str], ends: Sequence[int], length: int
) -> tuple[str, Params]:
    """Count and p50/p95/p99 per label set over each window, merged from the per-minute rollups in one pass
    (exact up to EXACT_MAX values, else t-digest)."""
    sql = _windowed(where, [metric], by, f"sum(Count) AS count, {MERGED_QUANTILES} AS q")
    return sql, _window_params(where, [metric], ends, length)


_HIT_RATE_TERMS = ("advice_cache_reported", "tokens_cache_read", "tokens_cache_input")


def window_ratios_sql(where: SpanFilter, by: Sequence[str], ends: Sequence[int], length: int) -> tuple[str, Params]:
    """The prompt-cache hit rate per label set over each window, from the per-minute rollups: cached input tokens /
    input tokens of the client model calls reporting both (None without input tokens), and how many reported."""
    columns = (
        "sumIf(Count, Metric = 'advice_cache_reported') AS count, sumIf(Sum, Metric = 'tokens_cache_read')"
        " / nullIf(sumIf(Sum, Metric = 'tokens_cache_input'), 0) AS ratio"
    )
    return _windowed(where, _HIT_RATE_TERMS, by, columns), _window_params(where, _HIT_RATE_TERMS, ends, length)


def slow_counts_sql(where: SpanFilter, metric: str, by: Sequence[str], threshold_ms: float) -> tuple[str, Params]:
    """Per label set and minute: requests, and those slower than ``threshold_ms``, from the raw
    spans (exact; the rollups' digests keep three quantiles, not the share above a latency)."""
    spec = METRICS[metric]
    condition = " AND ".join([where.window_clause(), *where.equality_tests()])
    sql = f"""
        SELECT {_columns(by)}toUnixTimestamp(toStartOfMinute(Timestamp)) AS minute,
               count() AS total, countIf(value > {{threshold:Float64}}) AS slow
        FROM (
            SELECT *, {spec.expression} AS value FROM otel_traces FINAL
            WHERE {condition} AND ({spec.condition}) AND value IS NOT NULL
        )
        GROUP BY {", ".join([*by, "minute"])}
    """
    return sql, {**where.params(), "threshold": threshold_ms}


def dimension_values_sql(where: SpanFilter, split_ns: int) -> tuple[str, Params]:
    """Each service.version, model and prompt version before and from ``split_ns``, with its first span's time."""
    condition = " AND ".join([where.window_clause(), *where.equality_tests()])
    sql = f"""
        SELECT Timestamp >= fromUnixTimestamp64Nano({{split_ns:Int64}}) AS current, v.1 AS dimension, v.2 AS value,
               toUnixTimestamp64Nano(min(Timestamp)) AS first_ns
        FROM otel_traces
        ARRAY JOIN [('service_version', {DIMENSIONS["release"]}), ('model', {DIMENSIONS["model"]}),
                    ('prompt_version', {DIMENSIONS["prompt"]})] AS v
        WHERE {condition} AND value != ''
        GROUP BY current, dimension, value
        ORDER BY first_ns, dimension, value
        LIMIT 1000
    """
    return sql, {**where.params(), "split_ns": split_ns}


class AlertTables:
    """Reads and writes of alerting, on the store's backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def _rows(self, sql: str, params: Params | None = None) -> list[dict[str, Any]]:
        return self.backend.query_arrow(sql, params).to_pylist()

    # --- what rules read ------------------------------------------------------------
    def projects(self, since: int) -> list[str]:
        """Projects with rolled-up data since ``since`` (unix seconds)."""
        sql = "SELECT DISTINCT ProjectId AS p FROM agentlat_rollup_1m WHERE Minute >= toDateTime({since:UInt32})"
        return sorted(r["p"] for r in self._rows(sql, {"since": since}))

    def window_percentiles(
        self, where: SpanFilter, metric: str, by: Sequence[str], ends: Sequence[int], length: int
    ) -> list[dict[str, Any]]:
        return self._rows(*window_percentiles_sql(where, metric, by, ends, length))

    def window_ratios(
        self, where: SpanFilter, by: Sequence[str], ends: Sequence[int], length: int
    ) -> list[dict[str, Any]]:
        return self._rows(*window_ratios_sql(where, by, ends, length))

    def slow_counts(
        self, where: SpanFilter, metric: str, by: Sequence[str], threshold_ms: float
    ) -> list[dict[str, Any]]:
        return self._rows(*slow_counts_sql(where, metric, by, threshold_ms))

    def dimension_values(self, where: SpanFilter, split_ns: int) -> list[dict[str, Any]]:
        return self._rows(*dimension_values_sql(where, split_ns))

    # --- state ----------------------------------------------------------------------
    def load_state(self, projects: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Every kept alert and group (of ``projects`` only, if given)."""
        sql = f"""
            SELECT ProjectId AS project, Kind AS kind, Key AS key, Body AS body
            FROM agentlat_alert_state FINAL WHERE Deleted = 0 AND {_PROJECTS} ORDER BY ProjectId, Kind, Key
        """
        return self._rows(sql, {"projects": list(projects or [])})

    def save_state(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows of project, kind, key, body, deleted and version."""
        if rows:
            columns = ("ProjectId", "Kind", "Key", "Body", "Deleted", "Version")
            names = ("project", "kind", "key", "body", "deleted", "version")
            data = {c: [r[n] for r in rows] for c, n in zip(columns, names, strict=True)}
            self.backend.insert_arrow("agentlat_alert_state", pa.Table.from_pydict(data, schema=STATE_SCHEMA))

    # --- events ---------------------------------------------------------------------
    def add_events(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows keyed like EVENT_SCHEMA's columns (Time in unix seconds)."""
        if rows:
            data = {f.name: [r[f.name] for r in rows] for f in EVENT_SCHEMA}
            data["Labels"] = [list(m.items()) for m in data["Labels"]]
            self.backend.insert_arrow("agentlat_alert_events", pa.Table.from_pydict(data, schema=EVENT_SCHEMA))

    def events(self, project: str, start: int, end: int, limit: int = 1000) -> list[dict[str, Any]]:
        sql = """
            SELECT toUnixTimestamp(Time) AS time, Fingerprint AS fingerprint, Alert AS alert, Severity AS severity,
                   Labels AS labels, FromState AS from_state, ToState AS to_state, Value AS value,
                   Reference AS reference, Count AS count, Summary AS summary
            FROM agentlat_alert_events FINAL
            WHERE ProjectId = {project:String}
              AND Time >= toDateTime({start:UInt32}) AND Time < toDateTime({end:UInt32})
            ORDER BY Time DESC, Fingerprint, indexOf(['inactive', 'pending', 'firing', 'resolved'], ToState) DESC
            LIMIT {limit:UInt32}
        """
        rows = self._rows(sql, {"project": project, "start": start, "end": end, "limit": limit})
        return [{**r, "labels": dict(r["labels"])} for r in rows]

    # --- outbox ---------------------------------------------------------------------
    def known_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        sql = "SELECT DISTINCT Id AS id FROM agentlat_alert_outbox WHERE Id IN {ids:Array(String)}"
        return {r["id"] for r in self._rows(sql, {"ids": list(ids)})}

    def write_outbox(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows as ``OUTBOX_COLUMNS`` reads them (new messages, or new versions of one)."""
        if rows:
            names = ("project", "id", "receiver", "group_key", "status", "created_at", "delivery", "attempts",
                     "next_attempt_ms", "last_error", "sent_ms", "payload", "version")  # fmt: skip
            data = {f.name: [r[n] for r in rows] for f, n in zip(OUTBOX_SCHEMA, names, strict=True)}
            self.backend.insert_arrow("agentlat_alert_outbox", pa.Table.from_pydict(data, schema=OUTBOX_SCHEMA))

    def undelivered(self, projects: Sequence[str] | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """Messages waiting to be sent (of ``projects`` only, if given), oldest first."""
        sql = f"""
            SELECT {OUTBOX_COLUMNS} FROM agentlat_alert_outbox FINAL
            WHERE Delivery = 'pending' AND {_PROJECTS} ORDER BY CreatedAt, Id LIMIT {{limit:UInt32}}
        """
        return self._rows(sql, {"limit": limit, "projects": list(projects or [])})

    def notifications(self, project: str, start: int, end: int, limit: int = 1000) -> list[dict[str, Any]]:
        sql = f"""
            SELECT {OUTBOX_COLUMNS} FROM agentlat_alert_outbox FINAL
            WHERE ProjectId = {{project:String}}
              AND CreatedAt >= toDateTime({{start:UInt32}}) AND CreatedAt < toDateTime({{end:UInt32}})
            ORDER BY CreatedAt DESC, Id LIMIT {{limit:UInt32}}
        """
        return self._rows(sql, {"project": project, "start": start, "end": end, "limit": limit})
