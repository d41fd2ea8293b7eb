"""A comparison (``GET /api/v1/compare``) as rows people read: one per figure and statistic, the same for the
dashboard's Compare page and ``agentlat compare``. Pure: no streamlit."""

from __future__ import annotations

from dataclasses import dataclass

from agentlat.api.models import CompareResponse, Comparison, LeverChange, VersionSeen
from agentlat.dashboard import fmt

VERDICTS = {"slower": "slower", "faster": "faster", "no_clear_change": "no clear change",
            "too_few_samples": "too few samples", "no_data": "no data",
            "higher": "higher", "lower": "lower"}  # fmt: skip
LEVER_NAMES = {"cache_hit_rate": "cache hit rate", "spec_acceptance": "speculative acceptance",
               "output_tokens": "output tokens (a call)", "serial_tools_ms": "serial tools (a trace)",
               "dispatch_delay_ms": "dispatch delay (a tool call)"}  # fmt: skip
MOST_BEGAN = 5  # the versions that began in the window, named under a comparison
MIN_SAMPLES_NOTE = "An interval needs 30 / 200 / 1,000 samples a side for p50 / p95 / p99 (30 for a mean)"
NOT_KEPT_NAMES = {"e2e": "E2E", "split": "the split", "tools": "the tools", **LEVER_NAMES}


def source_note(found: CompareResponse) -> str:
    """Where the comparison's figures and intervals come from, and what the rollups left out."""
    if found.source == "spans":
        return "Exact, from the spans; intervals from a bootstrap over them."
    note = (
        "From the rollups (a window beyond 7 days): a side's values where they keep every one (at most 128), else "
        "its t-digest's quantiles, with intervals from the ranks a percentile's interval spans; the levers' from "
        "resampling hours (20 a side)."
    )
    if found.not_in_rollups:
        kept_not = ", ".join(NOT_KEPT_NAMES.get(name, name) for name in found.not_in_rollups)
        note += f" Not kept by the rollups for a {found.dimension}: {kept_not}."
    return note


@dataclass(frozen=True, slots=True)
class Row:
    figure: str  # "TTFT p50", "tool time (mean a trace)", "tool search p95"
    a: float | None
    b: float | None
    difference: float | None  # B - A, ms
    low: float | None
    high: float | None
    count_a: int
    count_b: int
    status: str

    @property
    def interval(self) -> str:
        return fmt.DASH if self.low is None else f"{signed(self.low)} to {signed(self.high)}"

    @property
    def samples(self) -> str:
        return f"{self.count_a:,} / {self.count_b:,}"

    @property
    def verdict(self) -> str:
        return VERDICTS[self.status]


def rows(found: CompareResponse) -> list[Row]:
    """TTFT, ITL and E2E, then the split's parts, then each tool: each statistic a row."""
    sections: list[tuple[str, Comparison]] = [(m.upper(), c) for m, c in found.metrics.items()]
    sections += [(f"{part} time (mean a trace)", c) for part, c in found.split.items()]
    sections += [(f"tool {tool}", c) for tool, c in found.tools.items()]
    out = []
    for label, comparison in sections:
        for d in comparison.differences:
            name = label if d.statistic == "mean" else f"{label} {d.statistic}"
            a, b = (getattr(side, d.statistic) for side in (comparison.a, comparison.b))
            out.append(Row(name, a, b, d.difference, d.low, d.high, comparison.a.count, comparison.b.count, d.status))
    return out


def signed(value: float | None) -> str:
    """A difference with its sign: '+300 ms', '-12.5 ms', '±0.00 ms'."""
    if value is None:
        return fmt.DASH
    return ("+" if value > 0 else "-" if value < 0 else "±") + fmt.ms(abs(value))


def began(found: CompareResponse) -> list[str]:
    """The releases, prompt versions and models first seen inside the window (before and after an instant: the
    nearest to it first, with how far from it), what may have started the change."""
    return [_began(v, found.at) for v in found.began[:MOST_BEGAN]]


def _began(v: VersionSeen, at: str | None) -> str:
    text = f"{v.dimension} {v.value} of {v.service} first seen {fmt.utc_time(v.first_seen)}"
    if at is None:
        return text
    seconds = (fmt.instant(v.first_seen) - fmt.instant(at)).total_seconds()
    return f"{text}, {fmt.duration(abs(seconds))} {'after' if seconds >= 0 else 'before'} the instant"


@dataclass(frozen=True, slots=True)
class LeverRow:
    """One lever that may have moved with the latency, its values written in its unit."""

    lever: str
    a: str
    b: str
    difference: str
    interval: str
    samples: str
    verdict: str


def lever_rows(found: CompareResponse) -> list[LeverRow]:
    """What moved with the latency: the prompt cache's hit rate, speculative acceptance, output length, serial tools
    and dispatch delay, each side's value and B - A with its interval."""
    return [
        LeverRow(LEVER_NAMES.get(name, name), _in_unit(c.a.value, c.unit), _in_unit(c.b.value, c.unit),
                 _change(c.difference, c.unit), _lever_interval(c), f"{c.a.count:,} / {c.b.count:,}",
                 VERDICTS[c.status])
        for name, c in found.levers.items()
    ]  # fmt: skip


def _in_unit(value: float | None, unit: str) -> str:
    if value is None:
        return fmt.DASH
    return fmt.share(value) if unit == "ratio" else fmt.ms(value) if unit == "ms" else f"{value:,.1f}"


def _change(value: float | None, unit: str) -> str:
    """B - A with its sign: a ratio's in percentage points, tokens as a count, ms as elsewhere."""
    if value is None:
        return fmt.DASH
    if unit == "ms":
        return signed(value)
    sign = "+" if value > 0 else "-" if value < 0 else "±"
    return f"{sign}{abs(value) * 100:.1f} pts" if unit == "ratio" else f"{sign}{abs(value):,.1f}"


def _lever_interval(c: LeverChange) -> str:
    return fmt.DASH if c.low is None else f"{_change(c.low, c.unit)} to {_change(c.high, c.unit)}"
