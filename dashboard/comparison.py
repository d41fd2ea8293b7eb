"""A comparison (``GET /api/v1/compare``) as rows people read: one per figure and statistic, the same for the
dashboard's Compare page and ``agentlat compare``. Pure: no streamlit."""

from __future__ import annotations

from dataclasses import dataclass

from agentlat.api.models import CompareResponse, Comparison
from agentlat.dashboard import fmt

VERDICTS = {"slower": "slower", "faster": "faster", "no_clear_change": "no clear change",
            "too_few_samples": "too few samples", "no_data": "no data"}  # fmt: skip
MIN_SAMPLES_NOTE = "An interval needs 30 / 200 / 1,000 samples a side for p50 / p95 / p99 (30 for a mean)"


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
