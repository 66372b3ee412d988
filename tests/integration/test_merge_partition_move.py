"""MERGE into a partitioned table where one target file has a position delete and another has none: rows read
through the delete-applying path and rows read straight from Parquet (or made by DataFusion) reach the
new-rows writer with different Arrow string types, and must be written as one set (regression:
ArrowInvalid "Schema at index 1 was different" when the new rows were staged for clustering)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.ops.merge import merge
from tests.helpers import commit_delete_files
from tests.integration.maintenance_support import (
    create_table,
    limits,
    rows,
    write_position_deletes,
)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_rows_moving_partition_from_files_with_and_without_deletes(
    catalog: SqlCatalog, tmp_path: Path, mode: str
) -> None:
    table = create_table(catalog, "ns.moves", partition_name="category")
    table.append(rows(0, 10, "a"))
    table.append(rows(10, 10, "b"))
    (file_a,) = [t.file.file_path for t in table.scan().plan_files() if t.file.partition[0] == "a"]
    commit_delete_files(table, [write_position_deletes(table, file_a, [1], "a")])
    source = tmp_path / "source.parquet"
    changes = [
        {"id": 2, "category": "b"},  # moves from a (a file with a delete) to b
        {"id": 12, "category": "a"},  # moves from b (no delete) to a
        {"id": 13, "category": "b"},
        {"id": 50, "category": "a"},
    ]
    pq.write_table(pa.Table.from_pylist(changes), source)

    merge(
        table,
        on=["id"],
        source_files=[str(source)],
        when_matched=["THEN UPDATE SET *"],
        when_not_matched=["THEN INSERT *"],
        mode=mode,
        limits=limits(tmp_path),
    )

    expected = {i: {"id": i, "category": "a" if i < 10 else "b"} for i in range(20) if i != 1}
    expected.update({c["id"]: c for c in changes})
    table.refresh()
    live = table.scan().to_arrow().to_pylist()
    assert sorted(live, key=lambda r: r["id"]) == [expected[k] for k in sorted(expected)]
