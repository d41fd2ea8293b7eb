"""The embedded backend's handles stay in step with their statements after a failure."""

from __future__ import annotations

import pytest

from agentlat.store import Store, StoreError


def test_a_statement_after_one_that_failed_mid_result_gets_its_own_result(embedded_store: Store) -> None:
    """chDB 4.4 hands a statement that failed while writing its Arrow result to the handle's next statement
    (which loses its own): the backend takes that leftover away before the handle is used again."""
    for _ in range(3):  # the handles are reused last-in first-out: this one comes back at once
        with pytest.raises(StoreError, match="throwIf"):
            embedded_store.backend.query_arrow("SELECT throwIf(number = 100000) AS x FROM numbers(1000000)")
        assert embedded_store.backend.query_arrow("SELECT 42 AS answer").to_pylist() == [{"answer": 42}]
