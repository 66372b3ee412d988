"""MERGE with a source many times the memory limit: the matched source rows, joined back to their target
rows and sorted by position, must spill and finish (regression: the join's sorts and the ORDER BY in one
plan shared the pool six ways, "Not enough memory to continue external sort"; with one partition the
join became a hash join whose build side, every pair, could not spill: "Failed to allocate ... for
HashJoinInput"). The matched rows are now fetched by range of target positions, one source pass each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.merge import upsert

ROWS = 2_000_000  # 1M matched rows: pairs of about 20 MB, above the join's pool at the 32 MiB limit


def _rows(ids: np.ndarray, tag: str) -> pa.Table:
    text = pc.binary_join_element_wise(tag, pc.cast(pa.array(ids, pa.int64()), pa.string()), "")
    return pa.table({"id": pa.array(ids, pa.int64()), "v": text})


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_source_larger_than_the_limit_finishes(catalog: SqlCatalog, tmp_path: Path, mode: str) -> None:
    table = catalog.create_table("ns.big", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(_rows(np.arange(ROWS), "old"))
    rng = np.random.default_rng(5)
    ids = np.concatenate([rng.choice(ROWS, ROWS // 2, replace=False), np.arange(ROWS, ROWS + ROWS // 2)])
    source = _rows(ids, "new")
    assert source.nbytes > 32 << 20
    pq.write_table(source, tmp_path / "source.parquet")
    limits = ResourceLimits(memory_limit_bytes=32 << 20, spill_dir=str(tmp_path / "spill"))

    result = upsert(
        table, join_cols=["id"], source_files=[str(tmp_path / "source.parquet")], limits=limits, mode=mode
    )

    assert (result["rows_updated"], result["rows_inserted"]) == (ROWS // 2, ROWS // 2)
    table.refresh()
    live = table.scan().to_arrow()
    assert live.num_rows == ROWS + ROWS // 2
    assert pc.count_distinct(live.column("id")).as_py() == live.num_rows
    new = pc.starts_with(live.column("v"), "new")
    assert sorted(pc.filter(live.column("id"), new).to_pylist()) == sorted(ids.tolist())
