"""Figures for bench/run: read from each benchmark's printed output, each with its target.

The benchmarks print tables for people; these parsers read those tables line by line with
regular expressions anchored on the figure names, so a reworded note does not break them
but a renamed figure drops out (and bench/run then shows the step with no figures).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

NUMBER = r"[-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?|nan|inf"
ACKNOWLEDGED_TARGET = 100_000.0  # spans/s, durable in the write-ahead log (issue 9)
STORED_TARGET = 60_000.0  # spans/s in the store (issue 21)
ANALYSED_TARGET = 45_000.0  # spans/s stored, analysed and rolled up (issue 21)
RSS_TARGET_MIB = 512.0  # peak RSS of the server and its workers during the ingest benchmark (issue 21)
SPANS_PER_TRACE = 10


def number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class Figure:
    """One measured figure; ``goal`` is how value compares with target when met ("" = no target)."""

    name: str
    value: float | None
    unit: str
    target: float | None = None
    goal: str = ""  # one of "<", "<=", ">", ">=", or "" for a figure shown for information
    note: str = ""
    load: str = ""  # the 1-minute load average while the figure was measured

    @property
    def ratio(self) -> float | None:
        """How far the target is met: ≥ 1 met, < 1 missed (target/value for ceilings, value/target for floors)."""
        if self.value is None or self.target is None or not self.goal or math.isnan(self.value):
            return None
        if self.goal.startswith("<"):
            return self.target / self.value if self.value > 0 else math.inf
        return self.value / self.target if self.target > 0 else math.inf

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "FAILED"
        ratio = self.ratio
        if ratio is None:
            return "info" if not self.goal else "no value"
        strict = self.goal in ("<", ">")
        return "met" if ratio > 1 or (ratio == 1 and not strict) else "MISSED"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


# --- bench/sdk_overhead.py ----------------------------------------------------------------------
def parse_sdk(text: str) -> list[Figure]:
    figures: list[Figure] = []
    for line in text.splitlines():
        m = re.match(rf"^(SDK: .+?)\s+({NUMBER})\s+(\S+)\s*(.*)$", line.strip())
        if not m:
            continue
        name, value, unit, note = m.group(1), number(m.group(2)), m.group(3), m.group(4)
        if "bare" in name:
            figures.append(Figure(name, value, unit, note="reference"))
        elif "chunk" in name:
            figures.append(Figure(name, value, unit, _target(note, 3.0), "<"))
        else:
            figures.append(Figure(name, value, unit))
            times = re.search(rf"({NUMBER})x bare", note)
            if times:
                target = _target(note, 1.5)
                figures.append(Figure("SDK: agentlat span ÷ bare OTel span", number(times.group(1)), "x", target, "<"))
    return figures


def _target(note: str, default: float) -> float:
    m = re.search(rf"target\s*[<>≤≥=]+\s*({NUMBER})", note)
    return number(m.group(1)) if m else default


# --- bench/normalise.py -------------------------------------------------------------------------
def parse_normalise(text: str) -> list[Figure]:
    header = re.search(rf"target < ({NUMBER})", text)
    target = number(header.group(1)) if header else 10.0
    figures = []
    for line in text.splitlines():
        m = re.match(rf"^(.+?)\s+({NUMBER})\s+(ok|OVER)$", line.strip())
        if m:
            figures.append(Figure(f"normalise: {m.group(1)}", number(m.group(2)), "µs/span", target, "<"))
    return figures


# --- bench/stages.py ----------------------------------------------------------------------------
def parse_stages(text: str) -> list[Figure]:
    """Each stage's CPU µs per span, and the 2-core ceilings of all stages and of the best case."""
    figures = []
    for line in text.splitlines():
        m = re.match(rf"^(stage: .+?|all stages.+?|best case.+?)\s+({NUMBER})\s+({NUMBER})$", line.strip())
        if not m:
            continue
        name, us, most = m.group(1), number(m.group(2)), number(m.group(3))
        if name.startswith("stage: "):
            figures.append(Figure(f"ingest CPU: {name[7:]}", us, "µs/span"))
        else:
            figures.append(Figure(f"ingest ceiling on 2 cores: {name}", most, "spans/s", note=f"{us:.1f} CPU µs/span"))
    return figures


# --- bench/ingest.py ----------------------------------------------------------------------------
INGEST_ROWS: dict[str, tuple[str, float | None, str]] = {
    "acknowledged (durable) spans/s": ("spans/s", ACKNOWLEDGED_TARGET, ">="),
    "stored spans/s": ("spans/s", STORED_TARGET, ">="),
    "request latency p50": ("ms", None, ""),
    "request latency p99": ("ms", None, ""),
    "server CPU per 100k spans": ("CPU s", None, ""),
    "server peak RSS": ("MiB", RSS_TARGET_MIB, "<="),
}


def ingest_rows(text: str, prefix: str = "ingest") -> dict[str, tuple[float, str]]:
    """``{figure without prefix: (value, rest of line)}`` for bench/ingest.py-style lines."""
    rows = {}
    for line in text.splitlines():
        m = re.match(rf"^{prefix}: (.+?)\s+({NUMBER})\s+(.*)$", line.strip())
        if m:
            rows[m.group(1)] = (number(m.group(2)), m.group(3))
    return rows


def parse_ingest(text: str) -> list[Figure]:
    rows = ingest_rows(text)
    figures = []
    for name, (unit, target, goal) in INGEST_ROWS.items():
        if name in rows:
            value, rest = rows[name]
            note = rest.removeprefix(unit).strip()
            figures.append(Figure(f"ingest: {name}", value, unit, target, goal, note if target is None else ""))
    figures += _analysis(rows.get("traces analysed"))
    return figures


def parse_ingest_output(text: str, json_file: Path) -> list[Figure]:
    """From ``--json`` when bench/ingest.py wrote it, else from its printed table."""
    return parse_ingest_json(json_file) if json_file.exists() else parse_ingest(text)


def _analysis(row: tuple[float, str] | None) -> list[Figure]:
    """Trace analysis keeping up: every trace analysed, and analysed spans/s end to end."""
    if row is None:
        return []
    analysed, rest = row
    m = re.search(rf"of ({NUMBER}) in ({NUMBER}) s", rest)  # "of 20000 in 56.1 s (kept up)"
    if not m:
        return [Figure("ingest: traces analysed", analysed, "traces")]
    expected, seconds = number(m.group(1)), number(m.group(2))
    rate = analysed * SPANS_PER_TRACE / seconds if seconds > 0 else math.nan
    return [
        Figure("ingest: traces analysed", analysed, "traces", expected, ">=", f"in {seconds:.1f} s"),
        Figure("ingest: analysed spans/s (trace analysis keeping up)", rate, "spans/s", ANALYSED_TARGET, ">="),
    ]


def parse_ingest_json(json_file: Path) -> list[Figure]:
    """bench/ingest.py's ``--json`` object (its ``Figures`` dataclass)."""
    d = json.loads(json_file.read_text())
    acked, stored, seconds = d["spans_acked"], d["spans_stored"], d["analysis_seconds"]
    stored_s = stored / d["spans_per_s_stored"] if d["spans_per_s_stored"] else math.nan
    lag, kept_up = seconds - stored_s, "kept up" if d["analysis_kept_up"] else "did NOT keep up"
    return [
        Figure("ingest: acknowledged (durable) spans/s", d["spans_per_s_acked"], "spans/s", ACKNOWLEDGED_TARGET, ">="),
        Figure("ingest: stored spans/s", d["spans_per_s_stored"], "spans/s", STORED_TARGET, ">=",
               f"{stored:,} of {acked:,} stored in {stored_s:.1f} s"),
        Figure("ingest: request latency p50", d["latency_p50_ms"], "ms", note="1,000 spans per request"),
        Figure("ingest: request latency p99", d["latency_p99_ms"], "ms"),
        Figure("ingest: server CPU per 100k spans", d["server_cpu_s_per_100k_spans"], "CPU s",
               note=f"{d['server_cpu_s']:.1f} s in all"),
        Figure("ingest: server peak RSS", d["peak_rss_mb"], "MiB", RSS_TARGET_MIB, "<=", f"{d['processes']} processes"),
        Figure("ingest: traces analysed", d["traces_analysed"], "traces", d["traces_expected"], ">=",
               f"in {seconds:.1f} s"),
        Figure("ingest: analysed spans/s (trace analysis keeping up)",
               d["traces_analysed"] * SPANS_PER_TRACE / seconds if seconds > 0 else math.nan, "spans/s",
               ANALYSED_TARGET, ">="),
        Figure("ingest: analysis done after the last span stored", lag, "s", kept_up_seconds(), "<=", kept_up),
        *(Figure(f"ingest: server CPU per span, {part}", us, "µs") for part, us in _cpu_parts(d).items()),
        *([Figure("ingest: traces read back from the store", d["traces_read_back"], "traces",
                  note="the rest were analysed from the spans held in memory")] if "traces_read_back" in d else []),
        *(Figure(f"ingest: server garbage collections, {kind}", n, "")
          for kind, n in d.get("gc_collections", {}).items()),
    ]  # fmt: skip


def _cpu_parts(ingest: dict) -> dict[str, float]:
    """bench/ingest.py's server CPU per span by part, under the names it prints."""
    try:
        from bench.ingest import CPU_PARTS
    except ImportError:
        return {}
    return {CPU_PARTS[part]: us for part, us in ingest.get("cpu_us_per_span", {}).items() if part in CPU_PARTS}


def kept_up_seconds() -> float:
    """bench/ingest.py's grace for "analysis kept up" (10 s when it has none)."""
    try:
        from bench import ingest
    except ImportError:
        return 10.0
    return float(getattr(ingest, "KEPT_UP_SECONDS", 10.0))


# --- bench/phoenix.py (--json) ------------------------------------------------------------------
def parse_phoenix(json_file: Path) -> tuple[list[Figure], dict[str, object]]:
    data = json.loads(json_file.read_text())
    figures = [Figure(r["figure"], r["value"], r["unit"], note=r["note"]) for r in data["rows"]]
    return figures, data["meta"]


def versus_phoenix(figures: list[Figure], phoenix_requests: int) -> list[Figure]:
    """agentlat ÷ Phoenix for acknowledged and stored spans/s, from both steps' figures."""
    by_name = {f.name: f.value for f in figures}
    same = f"Phoenix fed the first {phoenix_requests} of the same requests"
    pairs = [  # Phoenix acks into a memory queue before storing, agentlat after its write-ahead log: no target
        ("acknowledged", "ingest: acknowledged (durable) spans/s", "phoenix: acknowledged spans/s", None, "", ""),
        ("stored", "ingest: stored spans/s", "phoenix: stored spans/s", 1.0, ">", same),
    ]
    out = []
    for kind, ours, theirs, target, goal, note in pairs:
        a, p = by_name.get(ours), by_name.get(theirs)
        if a is not None and p:
            note = note or "Phoenix acks into a memory queue, agentlat after its write-ahead log"
            out.append(Figure(f"agentlat ÷ Phoenix: {kind} spans/s", a / p, "x", target, goal, note))
    return out


# --- bench/query.py (with bench/dashboard_queries.py) ------------------------------------------
def parse_query(text: str) -> list[Figure]:
    spans = re.search(r"^([\d,]+) spans \(", text, re.MULTILINE)
    at = f"at {spans.group(1)} spans" if spans else ""
    figures = []
    value, target = rf"(?P<val>{NUMBER}) (?P<unit>ms|B)", rf"<= (?P<tgt>{NUMBER}) (?:ms|B)"
    row = re.compile(rf"^(?P<fig>\S.*?)\s{{2,}}{value}\s{{2,}}{target}\s{{2,}}(ok|OVER)$")
    for line in text.splitlines():
        m = row.match(line.rstrip())
        if m:
            fig, unit = m.group("fig"), m.group("unit")
            figures.append(Figure(f"query: {fig}", number(m.group("val")), unit, number(m.group("tgt")), "<=", at))
    return figures + parse_pages(text, at) + parse_browser(text, at)


def parse_pages(text: str, at: str) -> list[Figure]:
    """Each dashboard page's p50, the worst over the windows dashboard_queries.py ran with."""
    worst: dict[str, float] = {}
    windows: list[str] = []
    target = 300.0
    for line in text.splitlines():
        if m := re.match(r"^\$ dashboard_queries\.py --window (\S+)", line):
            windows.append(m.group(1))
        elif m := re.search(rf"target ({NUMBER}) ms per page", line):
            target = number(m.group(1))
        elif m := re.match(rf"^(\S.*?)\s+({NUMBER})\s+({NUMBER})\s+(ok|TOO SLOW)\b", line):
            worst[m.group(1)] = max(worst.get(m.group(1), 0.0), number(m.group(2)))
    note = f"worst of windows {', '.join(windows)} {at}".strip()
    return [Figure(f"dashboard page: {page}, p50", ms, "ms", target, "<", note) for page, ms in worst.items()]


def parse_browser(text: str, at: str) -> list[Figure]:
    """bench/dashboard_browser.py's figures: the p50 of each page in a browser (first page, each switch) with its
    target, the max in the note; the first pages' ratios to the bare Streamlit page's (the one-chart page's have no
    target: shown by the bench, not carried)."""
    figures = []
    row = re.compile(rf"^browser: (.+?)\s{{2,}}({NUMBER})\s+({NUMBER})\s+<= ({NUMBER}) ms\s+(ok|OVER)$")
    ratio = re.compile(rf"^(.+?) ÷ bare page\s{{2,}}({NUMBER})x\s+<= ({NUMBER})x\s+(ok|OVER)$")
    for line in text.splitlines():
        if m := row.match(line.strip()):
            name, p50, worst, target = m.group(1), number(m.group(2)), number(m.group(3)), number(m.group(4))
            note = f"max {worst:,.0f} ms {at}".strip()
            figures.append(Figure(f"browser: {name}, p50", p50, "ms", target, "<=", note))
        elif m := ratio.match(line.strip()):
            name = f"browser: {m.group(1)} ÷ a bare Streamlit page, p50"
            figures.append(Figure(name, number(m.group(2)), "x", number(m.group(3)), "<=", at))
    return figures
