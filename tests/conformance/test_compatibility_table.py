"""The compatibility tables in docs/attributes.md and the README say what the conformance suite
checks, row for row: a claim the suite does not test cannot stand in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.compatibility import INSTRUMENTATIONS, Instrumentation

ROOT = Path(__file__).resolve().parents[2]
TABLE_HEAD = (
    "| instrumentation | agent, model, tool | TTFT | decode | ITL | stream flag | tokens | cache-read |"  # then more
)
STREAM_ONLY = ("ttft", "decode", "itl", "streaming_flag")


def cell(case: Instrumentation, name: str) -> str:
    """What the table must say of one column, from what the suite asserts."""
    if name in STREAM_ONLY:
        return "yes" if getattr(case.stream, name) else "no"
    on = (getattr(case.stream, name), getattr(case.whole, name))
    return {(True, True): "yes", (False, True): "whole calls", (True, False): "streams", (False, False): "no"}[on]


def table_rows(path: Path) -> dict[str, list[str]]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_HEAD)) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("document", ["docs/attributes.md", "README.md"])
def test_table_says_what_the_suite_checks(document: str) -> None:
    rows = table_rows(ROOT / document)
    assert set(rows) == {case.row for case in INSTRUMENTATIONS}
    columns = ("ttft", "decode", "itl", "streaming_flag", "tokens", "cache")
    for case in INSTRUMENTATIONS:
        roles, *claims = rows[case.row][: 1 + len(columns)]
        assert roles == "yes", case.row  # every case asserts the agent, model and tool names
        assert claims == [cell(case, c) for c in columns], case.row
