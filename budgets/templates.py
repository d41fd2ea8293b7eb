"""Commented starter budgets files, one per agent type (``agentlat budget init --type``).

Each type budgets its primary and secondary metric in ``default``; the numbers are starting
points to tune against your own p50/p95/p99, not promises about any provider.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from agentlat.budgets.model import AGENT_TYPES
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, METRIC_NAMES


@dataclass(frozen=True, slots=True)
class _Starter:
    why: str  # why these two metrics matter for this type
    primary: tuple[float, float, float]  # p50, p95, p99 in ms
    secondary: tuple[float, float, float]
    route_example: str
    agent_example: str


_STARTERS: dict[str, _Starter] = {
    "chat": _Starter(
        "People watch the reply appear: TTFT decides whether it feels stuck, ITL whether it reads smoothly.",
        (500, 1200, 2500),
        (30, 60, 120),
        "/chat:\n  ttft: {p95: 800}\n  e2e: {p95: 8s}",
        "assistant:\n  e2e: {p95: 10s}",
    ),
    "reasoning": _Starter(
        "The answer matters when it is complete (E2E); TTFT shows how long the model thinks before it speaks.",
        (20_000, 60_000, 120_000),
        (2000, 8000, 15_000),
        "/code-review:\n  e2e: {p95: 90s}\n  tool: {p95: 5s}",
        "coder:\n  model: {p95: 45s}",
    ),
    "tools": _Starter(
        "Tool calls dominate: E2E shows their sum (serial calls add up), TTFT each model turn's wait.",
        (5000, 15_000, 30_000),
        (800, 2000, 4000),
        "/book-trip:\n  e2e: {p95: 20s}\n  tool: {p95: 2s}",
        "planner:\n  e2e: {p95: 25s}",
    ),
    "rag": _Starter(
        "Long prompts make prefill the first wait (TTFT); retrieval plus generation make up E2E.",
        (1000, 2500, 5000),
        (6000, 15_000, 30_000),
        "/ask-docs:\n  ttft: {p95: 3s}\n  tool: {p95: 1500}",
        "retriever:\n  e2e: {p95: 2s}",
    ),
    "multimodal": _Starter(
        "Image and audio inputs lengthen prefill (TTFT); streamed output must stay smooth (ITL).",
        (800, 2000, 4000),
        (40, 80, 150),
        "/describe-image:\n  ttft: {p95: 3s}",
        "vision:\n  e2e: {p95: 12s}",
    ),
}


def _duration(ms: float) -> str:
    return f"{ms / 1000:g}s" if ms >= 1000 else f"{ms:g}"


def _budget(values: tuple[float, float, float]) -> str:
    p50, p95, p99 = (_duration(v) for v in values)
    return f"{{p50: {p50}, p95: {p95}, p99: {p99}}}"


def _commented(block: str) -> str:
    return "\n".join(f"#   {line}" for line in block.splitlines())


def template(kind: str) -> str:
    """The commented starter file for an agent type (a key of ``AGENT_TYPES``)."""
    agent_type, starter = AGENT_TYPES[kind], _STARTERS[kind]
    primary, secondary = METRIC_NAMES[agent_type.primary], METRIC_NAMES[agent_type.secondary]
    why = textwrap.fill(
        f"Primary metric {primary}, secondary {secondary}. {starter.why}",
        width=92,
        initial_indent="# ",
        subsequent_indent="# ",
    )
    minimums = "\n".join(f"  {pct}: {n}" for pct, n in DEFAULT_MIN_SAMPLES.items())
    return f"""\
# agentlat latency budgets: {agent_type.label}
#
{why}
#
# Metrics: ttft (time to first token), itl (mean inter-token latency of a call), e2e (a whole
# trace), model (model-call time), tool (tool-call time). Percentiles: p50, p95, p99.
# Durations: milliseconds (800) or a string with a unit ('800ms', '1.5s'). A percentile at or
# under its budget passes. The prompt cache's hit rate has a floor instead, met at or above it:
# cache_hit_rate: {{min: 0.8}} (or 80%). Format reference: docs/budgets.md.
#
#   agentlat budget check budgets.yaml --api http://127.0.0.1:4318 --window 1h
#   exit codes: 0 pass, 1 breach, 2 usage or config error, 3 not enough data
version: 1
type: {kind}

# Read only this service's spans (otherwise every service on the server).
# service: my-agent

# Samples a percentile needs before it can pass or fail; with fewer it is "insufficient".
min_samples:
{minimums}

# Every route, for each metric it has samples of; entries under `routes` override it.
default:
  {agent_type.primary}: {_budget(starter.primary)}  # primary
  {agent_type.secondary}: {_budget(starter.secondary)}  # secondary

# Routes (the agentlat.route attribute) with budgets of their own, judged even without data;
# they override the default percentile by percentile, and `null` drops an inherited budget.
# routes:
{_commented(starter.route_example)}

# Agents (gen_ai.agent.name) are held to what they list here, nothing inherited.
# agents:
{_commented(starter.agent_example)}
"""
