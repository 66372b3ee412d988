"""``bench/mor.py``: the predicate a large table's pristine checksum is read by leaves the rows its count
expects."""

from __future__ import annotations

import pytest

from tests.unit.bench.bench_scripts import load

mor = load("mor")


@pytest.mark.parametrize("rows", [0, 1, 4, 8, 19, 20, 27, 1000, 12_345])
def test_the_live_predicate_keeps_the_expected_rows(rows: int) -> None:
    import datafusion

    ctx = datafusion.SessionContext()
    [batch] = ctx.sql(
        f"SELECT count(*) AS n FROM (SELECT value AS id FROM range({rows})) WHERE {mor.LIVE_WHERE}"
    ).collect()
    assert batch.column(0)[0].as_py() == mor.expected_live_rows(rows)
