"""What the prompt cache's rollup metrics cost: CPU µs per span of rolling the minutes up with them and without,
side by side in one run, on the spans ``bench/stages.py`` ingests (GenAI traces of 10 spans, stored and analysed).

The cache's metrics are its input tokens and cost of hits and misses (``rollup_sql.CACHE_METRICS``) and the
pairs a miss counts in, named by its reason (``rollup_sql.MISS_PAIRS``); "without" rolls up every other metric.
Each figure is the best of ``--rounds`` rounds, the two alternating.

Run: ``python -m bench.cache_rollup [--requests 200] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from agentlat.store import rollup_sql
from bench.ingest import build_requests
from bench.stages import Stages, cpu_seconds

NONE = ({}, "('no cache metric', CAST(NULL, 'Nullable(Float64)'))")  # a pair the rollups drop, as any NULL value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests of 1,000 spans")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        stages = Stages(build_requests(args.requests), Path(workdir))
        for stage in (stages.insert, stages.hold, stages.analyse, stages.write_analyses, stages.rollup):
            stage()
        kept = (rollup_sql.CACHE_METRICS, rollup_sql.MISS_PAIRS)
        best = {"with the cache's metrics": float("inf"), "without": float("inf")}
        try:
            for _ in range(args.rounds):
                for name, metrics in (("with the cache's metrics", kept), ("without", NONE)):
                    rollup_sql.CACHE_METRICS, rollup_sql.MISS_PAIRS = metrics
                    best[name] = min(best[name], cpu_seconds(stages.rollup, 1))
        finally:
            rollup_sql.CACHE_METRICS, rollup_sql.MISS_PAIRS = kept
    for name, seconds in best.items():
        print(f"rollup, {name:<24} {seconds * 1e6 / stages.spans:6.2f} CPU µs/span ({stages.spans:,} spans)")
    ratio = best["with the cache's metrics"] / best["without"]
    print(f"rollup, the cache's metrics cost {ratio:.2f}x the rest")


if __name__ == "__main__":
    main()
