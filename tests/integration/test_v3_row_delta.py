"""Deletion vectors committed by our row delta on a format-version 3 table (real SQLite catalog, real files).

A v2 table with two data files of ten rows is upgraded to v3 (as Java's ``upgradeFormatVersion(3)``);
DVs written by :func:`~.io.deletion_vectors.write_deletion_vectors` (two per Puffin file) are committed
with :func:`~.commit.snapshots.commit_row_delta`. Checked: the live rows read by PyIceberg's scan (an
order-independent checksum of the rows expected), the snapshot summary as Java's ``SnapshotSummary``
writes it, ``next-row-id`` untouched by delete-only commits, and that a removed DV is found by its
``(path, offset, size)`` identity: the other DV of the same Puffin stays live.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import CommitOutcome, commit_row_delta
from airflow_provider_iceberg_exec.engine.deletes.vectors import read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError, ConfigurationError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import DataFileDeletes, write_deletion_vectors
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, v3_field
from airflow_provider_iceberg_exec.engine.meta.row_ids import read_manifest_list
from tests.helpers import data_files, live_checksum, row_digest, table_state

pytestmark = pytest.mark.integration

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
ARROW = pa.schema([pa.field("id", pa.int64())])
_MASK = (1 << 64) - 1


def _upgraded(catalog: SqlCatalog) -> Table:
    v2 = catalog.create_table("ns.v2", SCHEMA, properties={"format-version": "2"})
    for start in (0, 10):
        v2.append(pa.table({"id": list(range(start, start + 10))}, schema=ARROW))
    metadata = json.loads(v2.io.new_input(v2.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = v2.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with v2.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    return catalog.register_table("ns.t", location)


def _files(table: Table) -> dict[int, DataFile]:
    """The two data files by their first id (0 or 10): a row's position is ``id - first``."""
    return {int.from_bytes(f.lower_bounds[1], "little", signed=True): f for f in data_files(table)}


def _expected(deleted: set[int]) -> tuple[int, int]:
    kept = [i for i in range(20) if i not in deleted]
    total = 0
    for i in kept:
        total = (total + row_digest({"id": i})) & _MASK
    return len(kept), total


def _puffin(table: Table, tmp_path: Path, name: str, deletes: dict[int, list[int]]) -> list[DataFile]:
    """One Puffin with a DV per data file (keyed by its first id), positions as given."""
    files = _files(table)
    return write_deletion_vectors(
        table.io,
        f"{table.metadata.location}/data/{name}-{tmp_path.name}.puffin",
        [
            DataFileDeletes(files[first].file_path, 0, files[first].partition, np.array(pos, dtype=np.int64))
            for first, pos in deletes.items()
        ],
    )


def _delta(
    table: Table, commit_id: str, added: list[DataFile], removed: Sequence[DataFile] = (), **kw: Any
) -> CommitOutcome:
    files = {f.file_path: f for f in data_files(table)}
    return commit_row_delta(
        table,
        base_snapshot_id=kw.pop("base", table.metadata.current_snapshot_id),
        added_data_files=[],
        added_delete_files=added,
        removed_delete_files=list(removed),
        referenced_data_files=[files[v3_field(d, "referenced_data_file")] for d in added],
        conflict_detection_filter=AlwaysTrue(),
        commit_id=commit_id,
    )


def _live_dvs(table: Table) -> list[DataFile]:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        entry.data_file
        for manifest in read_manifest_list(table.io, snapshot)
        if manifest.content.value == 1
        for entry in read_manifest_entries(table.io, manifest)
    ]


def test_dvs_commit_merge_and_remove_the_old_dv_by_identity(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]
    first = _puffin(table, tmp_path, "first", {0: [1, 2], 10: [5]})
    outcome = _delta(table, "dv-1", first)

    assert live_checksum(table) == _expected({1, 2, 15})
    summary = outcome.summary
    assert summary["operation"] == "delete"
    assert summary["added-dvs"] == "2"
    assert summary["added-delete-files"] == "2"
    assert summary["added-position-deletes"] == "3"
    assert "added-position-delete-files" not in summary
    assert summary["added-files-size"] == str(sum(v3_field(d, "content_size_in_bytes") for d in first))
    assert summary["total-position-deletes"] == "3"
    assert list(summary).index("added-dvs") < list(summary).index("added-delete-files")
    # The first v3 commit gives the pre-upgrade manifests their row ids (20 rows), nothing else.
    assert table.current_snapshot().added_rows == 20  # type: ignore[union-attr]
    assert table.metadata.next_row_id == next_row_id + 20  # type: ignore[attr-defined]

    # The first file's DV merged with a new position; only that DV of the shared Puffin is removed.
    old_a = next(d for d in first if v3_field(d, "referenced_data_file") == _files(table)[0].file_path)
    (merged,) = _puffin(table, tmp_path, "second", {0: [1, 2, 3]})
    outcome = _delta(table, "dv-2", [merged], [old_a])
    assert live_checksum(table) == _expected({1, 2, 3, 15})
    assert (outcome.summary["added-dvs"], outcome.summary["removed-dvs"]) == ("1", "1")
    assert outcome.summary["removed-delete-files"] == "1"
    assert outcome.summary["removed-position-deletes"] == "2"
    assert outcome.summary["total-delete-files"] == "2"
    live = _live_dvs(table)
    assert len(live) == 2
    assert {v3_field(d, "referenced_data_file") for d in live} == {
        f.file_path for f in _files(table).values()
    }
    assert sorted(read_deletion_vector(table.io, merged).tolist()) == [1, 2, 3]
    assert table.current_snapshot().added_rows == 0  # type: ignore[union-attr]
    assert table.metadata.next_row_id == next_row_id + 20  # type: ignore[attr-defined]


def test_a_removed_dv_no_longer_live_fails_and_leaves_the_table(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    (old,) = _puffin(table, tmp_path, "first", {0: [1]})
    _delta(table, "dv-1", [old])
    (ours,) = _puffin(table, tmp_path, "ours", {0: [1, 4]})
    (theirs,) = _puffin(table, tmp_path, "theirs", {0: [1, 7]})
    _delta(table, "theirs", [theirs], [old])
    before = table_state(table), live_checksum(table)

    with pytest.raises(CommitValidationError, match="Missing required files to delete"):
        _delta(table, "ours", [ours], [old])
    assert (table_state(table), live_checksum(table)) == before


def test_a_dv_added_concurrently_for_the_same_data_file_fails(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    base = table.metadata.current_snapshot_id
    (theirs,) = _puffin(table, tmp_path, "theirs", {0: [3]})
    _delta(table, "theirs", [theirs])
    (ours,) = _puffin(table, tmp_path, "ours", {0: [4]})
    before = table_state(table), live_checksum(table)

    with pytest.raises(CommitValidationError, match="Found concurrently added DV for "):
        _delta(table, "ours", [ours], base=base)
    assert (table_state(table), live_checksum(table)) == before
    assert live_checksum(table) == _expected({3})


def test_a_second_live_dv_for_one_data_file_is_refused(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    (old,) = _puffin(table, tmp_path, "first", {10: [0]})
    _delta(table, "dv-1", [old])
    (second,) = _puffin(table, tmp_path, "second", {10: [1]})
    before = table_state(table), live_checksum(table)

    # Not concurrent (the base is the head): the live DV is simply not removed.
    with pytest.raises(CommitValidationError, match=r"Cannot commit a second DV for .*not removed"):
        _delta(table, "dv-2", [second])
    assert (table_state(table), live_checksum(table)) == before


def test_bad_dv_documents_are_refused_in_one_line(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    one = _puffin(table, tmp_path, "one", {0: [1]})
    two = _puffin(table, tmp_path, "two", {0: [2]})
    before = table_state(table)
    with pytest.raises(ConfigurationError, match="two deletion vectors for data file") as err:
        _delta(table, "twice", [*one, *two])
    assert "\n" not in str(err.value)
    # a removed delete file that no added DV replaces would bring its rows back
    _delta(table, "dv-1", one)
    (other,) = _puffin(table, tmp_path, "other", {10: [2]})
    with pytest.raises(ConfigurationError, match="not a file-scoped position delete replaced"):
        _delta(table, "stray", [other], one)
    assert table_state(table)[1] == before[1]


def test_cleanup_deletes_an_uncommitted_puffin_and_keeps_one_a_live_dv_references(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _upgraded(catalog)
    live = _puffin(table, tmp_path, "live", {0: [1], 10: [2]})
    _delta(table, "dv-1", live)
    # Replace one of the two DVs: the Puffin stays referenced by the other, live DV.
    (merged,) = _puffin(table, tmp_path, "merged", {0: [1, 3]})
    _delta(table, "dv-2", [merged], [live[0]])
    (uncommitted,) = _puffin(table, tmp_path, "uncommitted", {0: [1, 3, 4]})

    report = delete_unreferenced(
        table, [uncommitted.file_path, live[0].file_path, merged.file_path], what="test output"
    )

    assert report.deleted == (uncommitted.file_path,)
    assert set(report.referenced) == {live[0].file_path, merged.file_path}
    assert live_checksum(table) == _expected({1, 3, 12})
