"""``delete-ratio-threshold`` end to end: a file whose file-scoped deletes remove enough of its rows is
rewritten even when the size filters and ``min-input-files`` would leave it alone."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.compaction import compact, plan_compaction
from tests.helpers import commit_position_deletes, data_files, live_checksum
from tests.integration.test_deletes import SCHEMA, _live_delete_files

pytestmark = pytest.mark.integration

MiB = 1 << 20


def _table_with_deleted_rows(catalog: SqlCatalog, deleted: int, *, referenced: bool) -> Table:
    """One data file of 10 rows, ``deleted`` of them removed by a file-scoped position delete."""
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"format-version": "2"})
    table.append(
        pa.table(
            {
                "id": pa.array(range(10), pa.int64()),
                "category": ["a"] * 10,
                "name": [f"n{i}" for i in range(10)],
            }
        )
    )
    (only,) = data_files(table)
    commit_position_deletes(table, only.file_path, list(range(deleted)), set_referenced_data_file=referenced)
    return table


@pytest.mark.parametrize("referenced", [True, False], ids=["referenced-data-file", "equal-path-bounds"])
def test_file_with_a_high_delete_ratio_is_rewritten(
    catalog: SqlCatalog, tmp_path: Path, referenced: bool
) -> None:
    """3 of 10 rows deleted reaches Spark's default 0.3: the lone small file is rewritten."""
    table = _table_with_deleted_rows(catalog, 3, referenced=referenced)
    (before_file,) = data_files(table)
    before = live_checksum(table)

    result = compact(table, limits=ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path)))

    assert result["rewritten_data_files_count"] == 1
    assert result["removed_delete_files_count"] == 1
    assert live_checksum(table) == before == (7, before[1])
    assert [f.file_path for f in data_files(table)] != [before_file.file_path]
    assert _live_delete_files(table) == []


@pytest.mark.parametrize(
    ("deleted", "options"),
    [
        pytest.param(3, {"delete-ratio-threshold": "0.31"}, id="threshold-above-the-ratio"),
        pytest.param(2, {}, id="ratio-below-the-default"),
    ],
)
def test_file_below_the_threshold_is_not_planned(
    catalog: SqlCatalog, deleted: int, options: dict[str, str]
) -> None:
    table = _table_with_deleted_rows(catalog, deleted, referenced=True)

    plan = plan_compaction(table, options=options)

    assert plan["tasks"] == []
