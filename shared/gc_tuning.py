"""How agentlat's own long-running processes (the server, its decode workers) run CPython's cyclic
garbage collector. Never called in an instrumented application: its collector is its own business.

CPython collects its youngest generation whenever 700 more container objects have been allocated than
freed since the last collection. A pass of trace analysis (2,000 traces) builds some 100,000 span
records, path segments and lists that live until the pass ends, so they were scanned by several young
collections, promoted, and every pass or two set off a full collection of the whole heap (~200,000
objects, 100 ms). Ingesting 2M benchmark spans, collections took 16.8 s of the server's 70 s of Python
CPU (docs/benchmarks.md). With the youngest generation's threshold above what a pass keeps alive at
once, reference counting frees a pass's objects before any collection looks at them; true garbage
cycles are still collected, a little later. The older generations keep their thresholds.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000  # net new container objects between young collections (CPython's default: 700)


def tune_for_throughput() -> None:
    """Call once start-up is done: what it built (modules, the app) is never scanned again, and young
    collections run ``YOUNG_THRESHOLD`` allocations apart."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
