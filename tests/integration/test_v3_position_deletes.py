"""Position-delete compaction on a format-version 3 table: v2 position files become one DV per data file.

A v2 table partitioned by category gets data files A and C (category a) and B (b), file-scoped and
partition-scoped position delete files and a dangling position; it is upgraded to v3 (as Java's
``upgradeFormatVersion(3)``), B and C get DVs of ours. The rewrite must give A one DV folding every
position file that applied to it, leave C (whose DV readers already use) and B alone, drop the
dangling position, and remove every v2 file. Rows read by PyIceberg's scan (an order-independent
checksum), the live deletes and their sequence numbers read back from the manifests.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.commit.snapshots import commit_row_delta
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import DataFileDeletes, write_deletion_vectors
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.ops.position_deletes import (
    commit_position_delete_rewrite,
    execute_position_delete_task,
    plan_position_delete_rewrite,
    rewrite_position_deletes,
)
from tests.helpers import (
    commit_position_delete_file,
    commit_position_deletes,
    data_files,
    live_checksum,
    live_delete_entries,
)
from tests.integration.test_deletes import SCHEMA

pytestmark = pytest.mark.integration

BY_CATEGORY = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _rows(ids: range, category: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "category": pa.array([category] * len(ids), pa.string()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
        }
    )


def _dv(table: Table, data_file: DataFile, positions: list[int], name: str, removed: list[DataFile]) -> None:
    (dv,) = write_deletion_vectors(
        table.io,
        f"{table.metadata.location}/data/{name}.puffin",
        [DataFileDeletes(data_file.file_path, 0, data_file.partition, np.array(positions, dtype=np.int64))],
    )
    commit_row_delta(
        table,
        base_snapshot_id=table.metadata.current_snapshot_id,
        added_data_files=[],
        added_delete_files=[dv],
        removed_delete_files=removed,
        referenced_data_files=[data_file],
        conflict_detection_filter=AlwaysTrue(),
        commit_id=name,
    )


def _table(catalog: SqlCatalog) -> tuple[Table, dict[str, DataFile]]:
    v2 = catalog.create_table(
        "ns.v2", schema=SCHEMA, partition_spec=BY_CATEGORY, properties={"format-version": "2"}
    )
    v2.append(_rows(range(20), "a"))
    v2.append(_rows(range(100, 120), "b"))
    v2.append(_rows(range(200, 220), "a"))
    files = {
        {0: "A", 100: "B", 200: "C"}[int.from_bytes(f.lower_bounds[1], "little")]: f for f in data_files(v2)
    }
    a, b, c = files["A"].file_path, files["B"].file_path, files["C"].file_path
    commit_position_deletes(v2, a, [1, 2])
    commit_position_deletes(v2, a, [3])
    commit_position_delete_file(v2, {a: [5], c: [7]})  # partition scoped
    commit_position_delete_file(v2, {a: [9], f"{v2.metadata.location}/data/gone.parquet": [4]})
    b_scoped = commit_position_deletes(v2, b, [0])
    metadata = json.loads(v2.io.new_input(v2.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = v2.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with v2.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    table = catalog.register_table("ns.t", location)
    _dv(table, files["B"], [0, 4], "dv-b", [b_scoped])  # B's DV folds its file-scoped file
    _dv(table, files["C"], [7, 8], "dv-c", [])  # C's DV holds the partition-scoped position 7
    return table, files


def test_v3_rewrite_turns_position_files_into_one_dv_per_data_file(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table, files = _table(catalog)
    before = live_checksum(table)
    assert before[0] == 60 - 5 - 2 - 2  # A: 1, 2, 3, 5, 9; B: 0, 4; C: 7, 8
    old = {file_identity(f) for f, _ in live_delete_entries(table) if is_deletion_vector(f)}
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]

    result = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="posdel-v3")

    assert live_checksum(table) == before
    assert result["rewritten_delete_files_count"] == 4  # the v2 files of partition a
    assert result["added_delete_files_count"] == 1
    live = live_delete_entries(table)
    assert all(is_deletion_vector(f) for f, _ in live)  # no v2 position file left
    by_file = {referenced_data_file(f): (f, seq) for f, seq in live}
    assert set(by_file) == {f.file_path for f in files.values()}
    a_dv, a_seq = by_file[files["A"].file_path]
    assert read_deletion_vector(table.io, a_dv).tolist() == [1, 2, 3, 5, 9]
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert a_seq == snapshot.sequence_number  # the commit's, as a row delta's DVs
    assert {file_identity(f) for f, _ in live if f is not a_dv} == old  # B's and C's DVs untouched
    summary = snapshot.summary
    assert summary is not None
    assert summary.operation.value == "replace"
    assert summary["added-dvs"] == "1"
    assert summary["removed-position-delete-files"] == "4"
    assert result["added_bytes_count"] == int(summary["added-files-size"])
    assert snapshot.added_rows == 0  # type: ignore[attr-defined]
    assert table.metadata.next_row_id == next_row_id  # type: ignore[attr-defined]

    again = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="posdel-v3-again")
    assert again["snapshot_ids"] == []  # v2 deletes already rewritten to DVs


def test_v3_rewrite_fails_on_a_concurrent_dv_and_removes_its_puffin(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table, files = _table(catalog)
    plan = plan_position_delete_rewrite(table)
    results = [execute_position_delete_task(table, task, _limits(tmp_path)) for task in plan["tasks"]]
    (ours,) = [f["file-path"] for r in results for f in r["added_delete_files"]]
    # Meanwhile another writer gives A a DV (folding its position files, as Spark does).
    _dv(table, files["A"], [1, 2, 3, 5, 9, 10], "theirs", [])
    before = table.metadata.current_snapshot_id, live_checksum(table)

    with pytest.raises(CommitValidationError, match=r"concurrently added DV|second DV"):
        commit_position_delete_rewrite(table, results, commit_id="posdel-v3")

    table.refresh()
    assert (table.metadata.current_snapshot_id, live_checksum(table)) == before
    assert not table.io.new_input(ours).exists()  # nothing references it: removed
