"""Inter-token latency statistics from chunk arrival times: one implementation for the SDK
(chunks it sees) and the collector (chunk events other instrumentations record)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from operator import sub
from typing import NamedTuple


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of sorted values, by linear interpolation between closest
    ranks (numpy's default), so p50 of 1..100 is 50.5."""
    rank = q * (len(ordered) - 1)
    low = int(rank)  # rank >= 0, so this is its floor
    if low + 1 == len(ordered):
        return ordered[low]
    return ordered[low] + (ordered[low + 1] - ordered[low]) * (rank - low)


class GapStats(NamedTuple):
    """Gaps between consecutive chunks, in nanoseconds."""

    count: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    max_ns: int
    stalls: int  # gaps longer than the stall threshold
    decode_ns: int  # first chunk to last chunk


def gap_stats(times_ns: Sequence[int], stall_threshold_ns: int | None = None) -> GapStats | None:
    """Statistics of the gaps between sorted chunk times; None for fewer than two chunks."""
    if len(times_ns) < 2:
        return None
    gaps = list(map(sub, times_ns[1:], times_ns[:-1]))
    gaps.sort()
    stalls = 0 if stall_threshold_ns is None else len(gaps) - bisect_right(gaps, stall_threshold_ns)
    decode_ns = times_ns[-1] - times_ns[0]
    return GapStats(
        len(gaps), decode_ns / len(gaps), percentile(gaps, 0.5), percentile(gaps, 0.95), gaps[-1], stalls, decode_ns
    )
