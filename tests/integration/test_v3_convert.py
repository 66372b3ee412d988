"""Equality deletes converted to deletion vectors on a format-version 3 table (real SQLite catalog, files).

A v2 table partitioned by category gets two data files, a file-scoped position delete file, a
partition-scoped one and equality deletes, is upgraded to v3 (as Java's ``upgradeFormatVersion(3)``),
and gets a DV of ours; the conversion then writes one DV per data file, merged with the file's old DV and
position deletes, and removes what it folded by identity. The rows are read by PyIceberg's scan (an
order-independent checksum of the rows the model keeps); one live DV per data file, each at the new
snapshot's sequence number; the summary and ``next-row-id`` as Java writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.commit.snapshots import commit_row_delta
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import DataFileDeletes, write_deletion_vectors
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.ops.convert import (
    commit_conversion,
    convert_equality_deletes,
    convert_task,
    plan_conversion,
)
from tests.helpers import (
    commit_delete_files,
    commit_position_deletes,
    data_files,
    live_checksum,
    live_delete_entries,
    row_digest,
)
from tests.integration.maintenance_support import (
    create_table,
    limits,
    rows,
    write_equality_deletes,
    write_position_deletes,
)

pytestmark = pytest.mark.integration

_MASK = (1 << 64) - 1


def _checksum(live: Sequence[dict[str, Any]]) -> tuple[int, int]:
    total = 0
    for row in live:
        total = (total + row_digest(row)) & _MASK
    return len(live), total


def _to_v3(catalog: SqlCatalog, table: Table) -> Table:
    metadata = json.loads(table.io.new_input(table.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = table.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with table.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    return catalog.register_table("ns.v3", location)


def _our_dv(table: Table, tmp_path: Path, data_file: DataFile, positions: list[int], commit_id: str) -> None:
    (dv,) = write_deletion_vectors(
        table.io,
        f"file://{tmp_path}/{commit_id}.puffin",
        [DataFileDeletes(data_file.file_path, 0, data_file.partition, np.array(positions, dtype=np.int64))],
    )
    commit_row_delta(
        table,
        base_snapshot_id=table.metadata.current_snapshot_id,
        added_data_files=[],
        added_delete_files=[dv],
        referenced_data_files=[data_file],
        conflict_detection_filter=AlwaysTrue(),
        commit_id=commit_id,
    )


def _table(catalog: SqlCatalog, tmp_path: Path) -> tuple[Table, dict[str, DataFile]]:
    """File a (ids 0-49) and b (ids 100-149): position deletes of a 10, 11 (file-scoped) and 20 (partition
    scoped), equality deletes of 0, 1, 10 (a) and 100, 101 (b), then v3 and our DV of b's position 20."""
    v2 = create_table(catalog, "ns.v2", partition_name="category")
    v2.append(rows(0, 50, "a"))
    v2.append(rows(100, 50, "b"))
    files = {f.partition[0]: f for f in data_files(v2)}
    commit_position_deletes(v2, files["a"].file_path, [10, 11])
    commit_delete_files(v2, [write_position_deletes(v2, files["a"].file_path, [20], "a")])
    commit_delete_files(
        v2, [write_equality_deletes(v2, [0, 1, 10], "a"), write_equality_deletes(v2, [100, 101], "b")]
    )
    table = _to_v3(catalog, v2)
    _our_dv(table, tmp_path, files["b"], [20], "dv-b")
    return table, files


def test_v3_conversion_writes_one_merged_dv_per_data_file(catalog: SqlCatalog, tmp_path: Path) -> None:
    table, files = _table(catalog, tmp_path)
    deleted = {0, 1, 10, 11, 20, 100, 101, 120}
    expected = _checksum(
        [
            r
            for r in [*rows(0, 50, "a").to_pylist(), *rows(100, 50, "b").to_pylist()]
            if r["id"] not in deleted
        ]
    )
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]

    result = convert_equality_deletes(table, limits=limits(tmp_path), commit_id="convert-v3")

    assert live_checksum(table) == expected
    assert result["converted_equality_delete_files_count"] == 2
    assert result["added_position_delete_files_count"] == 2
    assert result["removed_position_delete_files_count"] == 2  # a's file-scoped file, b's old DV
    snapshot = table.current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary
    assert summary is not None
    assert summary.operation.value == "replace"
    assert (summary["added-dvs"], summary["removed-dvs"]) == ("2", "1")
    assert summary["removed-position-delete-files"] == "1"
    assert summary["removed-equality-delete-files"] == "2"
    assert "added-position-delete-files" not in summary.additional_properties, summary.additional_properties
    assert snapshot.added_rows == 0  # type: ignore[attr-defined]
    assert table.metadata.next_row_id == next_row_id  # type: ignore[attr-defined]

    live = live_delete_entries(table)
    dvs = [(f, seq) for f, seq in live if is_deletion_vector(f)]
    others = [f for f, _ in live if not is_deletion_vector(f)]
    assert sorted(referenced_data_file(f) or "" for f, _ in dvs) == sorted(
        f.file_path for f in files.values()
    )
    assert {seq for _, seq in dvs} == {snapshot.sequence_number}
    by_file = {referenced_data_file(f): sorted(read_deletion_vector(table.io, f).tolist()) for f, _ in dvs}
    # a: its equality matches, its file-scoped positions and the partition-scoped one (a DV replaces all)
    assert by_file[files["a"].file_path] == [0, 1, 10, 11, 20]
    assert by_file[files["b"].file_path] == [0, 1, 20]
    # only the partition-scoped position file stays: it may name other files' rows
    assert [f.record_count for f in others] == [1]


def test_v3_conversion_fails_on_a_concurrent_dv_and_leaves_the_table(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table, files = _table(catalog, tmp_path)
    plan = plan_conversion(table)
    results = [convert_task(table, task, limits(tmp_path)) for task in plan["tasks"]]
    # Meanwhile another writer replaces b's DV (b's positions 20 and 30).
    (old,) = [f for f, _ in live_delete_entries(table) if is_deletion_vector(f)]
    (theirs,) = write_deletion_vectors(
        table.io,
        f"file://{tmp_path}/theirs.puffin",
        [DataFileDeletes(files["b"].file_path, 0, files["b"].partition, np.array([20, 30], dtype=np.int64))],
    )
    commit_row_delta(
        table,
        base_snapshot_id=table.metadata.current_snapshot_id,
        added_data_files=[],
        added_delete_files=[theirs],
        removed_delete_files=[old],
        referenced_data_files=[files["b"]],
        conflict_detection_filter=AlwaysTrue(),
        commit_id="theirs",
    )
    # (PyIceberg cannot scan equality deletes: the state is the snapshot and its files)
    before = table.metadata.current_snapshot_id, sorted(_identities(table))

    with pytest.raises(
        CommitValidationError, match=r"Missing required files to delete|concurrently added DV"
    ):
        commit_conversion(table, results, commit_id="convert-v3")

    table.refresh()
    assert (table.metadata.current_snapshot_id, sorted(_identities(table))) == before


def _identities(table: Table) -> list[Any]:
    return [file_identity(f) for f, _ in live_delete_entries(table)]
