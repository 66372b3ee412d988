"""engine/io/position_sort.py: staged (ordinal, position) rows come out sorted, each pair once, one item
per ordinal, in memory or through ordinal ranges, whatever the order they were staged in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
from airflow_provider_iceberg_exec.engine.io import position_sort
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet


def _stage(tmp_path: Path, ords: np.ndarray, positions: np.ndarray) -> StagedParquet:
    stage = StagedParquet(str(tmp_path / "stage"))
    for start in range(0, len(ords), 10_000):
        stage.write(
            pa.record_batch(
                {
                    "ord": pa.array(ords[start : start + 10_000].astype(np.int32)),
                    "pos": pa.array(positions[start : start + 10_000].astype(np.int64)),
                }
            )
        )
    stage.close()
    return stage


@pytest.mark.parametrize("rows", [0, 1_000, 300_000])
def test_rows_come_out_sorted_once_per_ordinal(tmp_path: Path, rows: int) -> None:
    rng = np.random.default_rng(7)
    ords = rng.integers(0, 50, rows)
    positions = rng.integers(0, 20_000, rows)
    limits = ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(tmp_path / "spill"))
    # 300k rows are above the budget of a 32 MiB limit: they go through ordinal ranges.
    assert (rows > MIN_MEMORY_LIMIT_BYTES // 8 // position_sort._SORT_BYTES_PER_ROW) == (rows == 300_000)

    out = list(position_sort.sorted_positions(_stage(tmp_path, ords, positions), limits, str(tmp_path)))

    expected = sorted(set(zip(ords.tolist(), positions.tolist(), strict=True)))
    assert [o for o, _ in out] == sorted({o for o, _ in expected})
    assert [(o, int(p)) for o, ps in out for p in ps] == expected
    assert not list((tmp_path).glob("position-ranges-*"))  # range files removed


def test_one_ordinal_larger_than_the_budget_is_one_range() -> None:
    assert position_sort._ranges(np.array([1, 100, 1, 1]), 10) == [1, 2]
