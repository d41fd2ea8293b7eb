"""Long windows read whole hours from the hourly rollups and only their ragged ends from the minutes.

Tool spans with known durations fill 3 hours (100 spans a minute, durations 1..100 ms), written
straight into the session's embedded store and rolled up. Reads over windows with ragged ends
must count every span exactly once, whichever table answers for which part.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from agentlat.store import SpanFilter, Store
from agentlat.store.queries import DAY_S, HOUR_S, MINUTE_S, rollup_spans
from tests.span_tables import span_batch

PROJECT = "rollup-hours"
NS = 10**9
PER_MINUTE = 100
BASE = (int(time.time()) // 3600 - 6) * 3600  # an hour boundary, 6 hours back
FIRST_MINUTE, LAST_MINUTE = BASE - 30 * 60, BASE + 150 * 60  # 30 ragged minutes, 2 whole hours, 30 ragged


def _spans(minutes: range, route: str, tag: str) -> pa.Table:
    starts = np.repeat(np.array(minutes, dtype=np.int64) * NS, PER_MINUTE) + np.tile(
        np.arange(PER_MINUTE), len(minutes)
    )
    durations = np.tile(np.arange(1, PER_MINUTE + 1, dtype=np.uint64) * 1_000_000, len(minutes))
    n = starts.size
    ids = pc.cast(pa.array(np.arange(n)), pa.string())
    columns = {
        "Timestamp": pa.array(starts, pa.timestamp("ns", tz="UTC")),
        "TraceId": pc.binary_join_element_wise(f"{tag}-trace-", ids, ""),
        "SpanId": pc.binary_join_element_wise(f"{tag}-span-", ids, ""),
        "ParentSpanId": pa.repeat("parent", n),
        "SpanName": pa.repeat("execute_tool lookup", n),
        "ServiceName": pa.repeat("hours-svc", n),
        "Duration": pa.array(durations, pa.uint64()),
        "Role": pa.repeat("tool", n),
        "Tool": pa.repeat("lookup", n),
        "Route": pa.repeat(route, n),
        "ProjectId": pa.repeat(PROJECT, n),
    }
    return span_batch(columns, n)


@pytest.fixture(scope="module")
def store(embedded_store: Store) -> Store:
    minutes = range(FIRST_MINUTE, LAST_MINUTE, 60)
    embedded_store.insert_spans(_spans(minutes, "/hours", "a"))
    embedded_store.rollup(list(minutes), version=1)
    return embedded_store


def _window(start_s: int, end_s: int) -> SpanFilter:
    return SpanFilter(PROJECT, start_s * NS, end_s * NS)


def test_a_window_is_split_into_whole_hours_and_ragged_minutes() -> None:
    parts = rollup_spans(_window(BASE - 1799, BASE + 7200 + 61))
    assert parts == {
        "minute_first": BASE - 1800,  # the minute the start falls in
        "minute_last": BASE + 7200 + 120,  # up to the end of the minute the end falls in
        "hour_first": BASE,
        "hour_last": BASE + 7200,
        "day_first": BASE + 7200,  # no whole day: empty, at the end of the hours
        "day_last": BASE + 7200,
    }
    inside = rollup_spans(_window(BASE + 60, BASE + 3599))  # no whole hour: minutes only
    assert inside == {
        "minute_first": BASE + 60,
        "minute_last": BASE + 3600,
        "hour_first": BASE + 3600,
        "hour_last": BASE + 3600,
        "day_first": BASE + 3600,
        "day_last": BASE + 3600,
    }
    minutes_only = rollup_spans(_window(BASE - 1800, BASE + 9000), largest=MINUTE_S)
    assert minutes_only["hour_first"] == minutes_only["hour_last"] == BASE + 9000


def test_a_long_window_is_split_into_whole_days_hours_and_minutes() -> None:
    day = (BASE // DAY_S - 3) * DAY_S
    parts = rollup_spans(_window(day - 5400 + 17, day + 2 * DAY_S + 6000))
    assert parts == {
        "minute_first": day - 5400,
        "minute_last": day + 2 * DAY_S + 6000,
        "hour_first": day - 3600,
        "hour_last": day + 2 * DAY_S + 3600,
        "day_first": day,
        "day_last": day + 2 * DAY_S,
    }
    hours_at_most = rollup_spans(_window(day - 5400, day + 2 * DAY_S), largest=HOUR_S)
    assert hours_at_most["day_first"] == hours_at_most["day_last"] == day + 2 * DAY_S


def test_hourly_rows_hold_their_minutes(store: Store) -> None:
    rows = store.backend.query_arrow(
        "SELECT toUnixTimestamp(Hour) AS hour, sum(Count) AS count FROM agentlat_rollup_1h FINAL "
        "WHERE ProjectId = {p:String} AND Metric = 'tool' GROUP BY hour ORDER BY hour",
        {"p": PROJECT},
    ).to_pylist()
    assert rows == [
        {"hour": BASE - 3600, "count": 30 * PER_MINUTE},
        {"hour": BASE, "count": 60 * PER_MINUTE},
        {"hour": BASE + 3600, "count": 60 * PER_MINUTE},
        {"hour": BASE + 7200, "count": 30 * PER_MINUTE},
    ]


@pytest.mark.parametrize(
    ("start_s", "end_s", "minutes"),
    [
        (FIRST_MINUTE, LAST_MINUTE, 180),  # everything: 2 hours from the hourly table, 60 minutes from the minutes
        (BASE - 600, BASE + 3600 + 1200, 90),  # ragged both ends around one whole hour
        (BASE, BASE + 7200, 120),  # exactly two hours
        (BASE + 600, BASE + 1800, 20),  # inside one hour
    ],
)
def test_every_span_counts_once(store: Store, start_s: int, end_s: int, minutes: int) -> None:
    where = _window(start_s, end_s)
    [row] = store.rollup_percentiles(["tool"], ["route"], where)
    [exact] = store.percentiles("tool", ["route"], where)
    assert row["count"] == exact.count == minutes * PER_MINUTE
    assert row["mean"] == pytest.approx(50.5, rel=1e-12)
    assert row["q"] == pytest.approx([50.5, 95.05, 99.01], rel=0.02)


def test_hourly_steps_match_minute_steps(store: Store) -> None:
    where = _window(BASE - 600, BASE + 7800)
    hourly = store.timeseries("tool", [], where, 3600)
    by_minutes = store.timeseries("tool", [], where, 1800)
    assert [(r["t"], r["count"]) for r in hourly] == [
        (BASE - 3600, 10 * PER_MINUTE),
        (BASE, 60 * PER_MINUTE),
        (BASE + 3600, 60 * PER_MINUTE),
        (BASE + 7200, 10 * PER_MINUTE),
    ]
    assert sum(r["count"] for r in by_minutes) == 140 * PER_MINUTE


def test_late_spans_replace_the_hour(store: Store) -> None:
    late_minute = BASE + 3600 + 5 * 60
    store.insert_spans(_spans(range(late_minute, late_minute + 60, 60), "/hours", "late"))
    store.rollup([late_minute], version=2)
    [row] = store.rollup_percentiles(["tool"], [], _window(BASE + 3600, BASE + 7200))
    assert row["count"] == 61 * PER_MINUTE


DAYS_PROJECT = "rollup-days"


def test_days_hours_and_minutes_count_every_span_once(embedded_store: Store) -> None:
    """Three days and a half of one tool span a minute (durations 1..60 ms by minute of the hour): windows
    read from every tier count each span once, and daily steps sum their days."""
    day = (int(time.time()) // DAY_S - 5) * DAY_S
    minutes = np.arange(day - 6 * 3600, day + 3 * DAY_S + 6 * 3600, 60, dtype=np.int64)
    n = minutes.size
    ids = pc.cast(pa.array(np.arange(n)), pa.string())
    embedded_store.insert_spans(
        span_batch(
            {
                "Timestamp": pa.array(minutes * NS, pa.timestamp("ns", tz="UTC")),
                "TraceId": pc.binary_join_element_wise("days-trace-", ids, ""),
                "SpanId": ids,
                "ParentSpanId": pa.repeat("parent", n),
                "Duration": pa.array((minutes // 60 % 60 + 1) * 1_000_000, pa.uint64()),
                "Role": pa.repeat("tool", n),
                "Tool": pa.repeat("lookup", n),
                "ProjectId": pa.repeat(DAYS_PROJECT, n),
            },
            n,
        )
    )
    embedded_store.rollup(minutes.tolist(), version=1)
    for start, end in ((day - 5400 + 17, day + 2 * DAY_S + 6000), (day, day + 3 * DAY_S), (day + 60, day + 7200)):
        where = SpanFilter(DAYS_PROJECT, start * NS, end * NS)
        [row] = embedded_store.rollup_percentiles(["tool"], [], where)
        first, last = start // 60 * 60, -(-end // 60) * 60
        expected = minutes[(minutes >= first) & (minutes < last)]
        assert row["count"] == expected.size
        assert row["sum"] == pytest.approx(float((expected // 60 % 60 + 1).sum()), rel=1e-12)
    daily = embedded_store.timeseries("tool", [], SpanFilter(DAYS_PROJECT, day * NS, (day + 3 * DAY_S) * NS), DAY_S)
    assert [(r["t"], r["count"]) for r in daily] == [(day + i * DAY_S, 1440) for i in range(3)]
