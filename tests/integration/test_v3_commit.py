"""Format-version 3 commits end to end on a real SQLite catalog and real files (issue 15, part 1).

A v2 table gets three PyIceberg appends, is upgraded to v3 (as Java does: format-version 3, next-row-id
0), gets an append through our row delta, and is compacted by us (binpack, then sort). Checked every
time: the rows (PyIceberg's scan), the snapshot's ``first-row-id`` / ``added-rows`` against the table's
``next-row-id``, and each row's ``_row_id`` and ``_last_updated_sequence_number`` as this test reads
them itself from the raw manifest list, manifests and Parquet files (the spec's inheritance rules,
written out here independently of the engine's reader).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.commit.snapshots import commit_row_delta
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import load_table
from tests.helpers import data_files, live_checksum, local_path
from tests.integration.compaction_support import limits, run_compact

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
)
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("category", pa.string())])

Lineage = dict[int, tuple[int | None, int | None]]


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "category": [f"c{i % 3}" for i in ids]}, schema=ARROW)


def _upgraded(catalog: SqlCatalog) -> Table:
    """Three v2 appends (ids 0..29), then the upgrade Java's ``upgradeFormatVersion(3)`` makes."""
    v2 = catalog.create_table("ns.v2", SCHEMA, properties={"format-version": "2"})
    for start in (0, 10, 20):
        v2.append(_rows(start, 10))
    metadata = json.loads(v2.io.new_input(v2.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = v2.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with v2.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    return catalog.register_table("ns.t", location)


def _append(table: Table, start: int, count: int) -> None:
    files = list(_dataframe_to_data_files(table_metadata=table.metadata, df=_rows(start, count), io=table.io))
    commit_row_delta(
        table,
        base_snapshot_id=table.metadata.current_snapshot_id,
        added_data_files=files,
        added_delete_files=[],
        referenced_data_files=[],
        conflict_detection_filter=AlwaysTrue(),
        commit_id=f"append-{start}",
    )


def _lineage(table: Table) -> Lineage:
    """Every live row's ``(_row_id, _last_updated_sequence_number)`` by id, by the spec's rules."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    found: Lineage = {}
    with AvroFile[ManifestFile](
        table.io.new_input(snapshot.manifest_list),
        MANIFEST_LIST_FILE_SCHEMAS[3],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    ) as manifests:
        for manifest in list(manifests):
            if manifest.content == ManifestContent.DATA:
                assert manifest[15] is not None, "every data manifest of a v3 list has a first_row_id"
                found.update(_manifest_lineage(table, manifest, manifest[15]))
    return found


def _manifest_lineage(table: Table, manifest: ManifestFile, next_id: int) -> Lineage:
    found: Lineage = {}
    with AvroFile[ManifestEntry](
        table.io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as entries:
        for entry in list(entries):
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            data_file = entry.data_file
            first = data_file[16]
            if first is None:
                first, next_id = next_id, next_id + data_file.record_count
            sequence = (
                entry.sequence_number if entry.sequence_number is not None else manifest.sequence_number
            )
            rows = pq.read_table(local_path(data_file.file_path)).to_pylist()
            for position, row in enumerate(rows):
                row_id = row.get("_row_id")
                updated = row.get("_last_updated_sequence_number")
                found[row["id"]] = (
                    row_id if row_id is not None else first + position,
                    updated if updated is not None else sequence,
                )
    return found


def _snapshot_row_ids(table: Table) -> tuple[int | None, int | None, int | None]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot.first_row_id, snapshot.added_rows, table.metadata.next_row_id  # type: ignore[attr-defined]


def _reloaded(catalog: SqlCatalog) -> Table:
    return catalog.load_table("ns.t")


def test_append_then_compactions_keep_every_rows_id_and_sequence(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _upgraded(catalog)
    assert (table.format_version, table.metadata.next_row_id) == (3, 0)  # type: ignore[attr-defined]

    _append(table, 30, 20)
    table = _reloaded(catalog)
    # first v3 snapshot: ids for the 20 new rows and for the 30 pre-upgrade ones ("even if existing")
    assert _snapshot_row_ids(table) == (0, 50, 50)
    before = _lineage(table)
    assert sorted(row_id for row_id, _seq in before.values()) == list(range(50))
    checksum = live_checksum(table)

    result = run_compact(table, tmp_path, options={"rewrite-all": "true"})
    table = _reloaded(catalog)

    assert result["rewritten_data_files_count"] == 4
    assert live_checksum(table) == checksum
    assert _lineage(table) == before  # same ids, same sequence numbers
    # the new manifest's 50 ADDED rows take a fresh range, although every row carries its id
    assert _snapshot_row_ids(table) == (50, 50, 100)
    _assert_written_explicitly(table, before)

    _append(table, 50, 5)
    table = _reloaded(catalog)
    assert _snapshot_row_ids(table) == (100, 5, 105)
    before = _lineage(table)
    assert [before[i][0] for i in range(50, 55)] == list(range(100, 105))
    checksum = live_checksum(table)

    run_compact(table, tmp_path, options={"rewrite-all": "true"}, strategy="sort", sort_order="id DESC")
    table = _reloaded(catalog)

    assert live_checksum(table) == checksum
    assert checksum[0] == 55
    assert _lineage(table) == before
    first, added, next_row_id = _snapshot_row_ids(table)
    assert (first, next_row_id) == (105, 105 + (added or 0))
    _assert_written_explicitly(table, before)


def _assert_written_explicitly(table: Table, expected: Lineage) -> None:
    """Compaction output holds both columns physically, never null (Java's rewrite write schema)."""
    for task in table.scan().plan_files():
        written = pq.read_table(local_path(task.file.file_path))
        assert written.schema.field("_row_id").metadata[b"PARQUET:field_id"] == b"2147483540"
        assert written.schema.field("_last_updated_sequence_number").metadata[b"PARQUET:field_id"] == (
            b"2147483539"
        )
        for row in written.to_pylist():
            assert (row["_row_id"], row["_last_updated_sequence_number"]) == expected[row["id"]]


def test_a_binpack_in_two_lanes_keeps_every_rows_id_and_sequence(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lineage is made explicit per input file (its first_row_id, its data sequence number), so each lane
    of a group split in two carries its own files' ids and sequence numbers."""
    table = _upgraded(catalog)
    _append(table, 30, 20)
    table = _reloaded(catalog)
    before = _lineage(table)
    checksum = live_checksum(table)
    target = sum(f.file_size_in_bytes for f in data_files(table)) // 3
    caplog.set_level(logging.INFO, logger="airflow_provider_iceberg_exec.engine.ops.compaction.rewrite")

    run_compact(
        table,
        tmp_path,
        options={"rewrite-all": "true", "target-file-size-bytes": str(target)},
        limits=limits(tmp_path, target_partitions=2),
    )
    table = _reloaded(catalog)

    assert "in 2 lane(s)" in caplog.text
    assert live_checksum(table) == checksum
    assert _lineage(table) == before
    _assert_written_explicitly(table, before)


def test_compaction_as_the_first_v3_commit_leaves_pre_upgrade_rows_to_inherit(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Rows of files from before the upgrade have no id yet: they are written null and inherit from the
    output file's range, as a Java reader then sees them."""
    table = _upgraded(catalog)
    checksum = live_checksum(table)

    run_compact(table, tmp_path, options={"rewrite-all": "true"})
    table = _reloaded(catalog)

    assert live_checksum(table) == checksum
    assert _snapshot_row_ids(table) == (0, 30, 30)
    lineage = _lineage(table)
    assert sorted(row_id for row_id, _seq in lineage.values()) == list(range(30))
    for task in table.scan().plan_files():
        assert (
            pq.read_table(local_path(task.file.file_path)).column("_row_id").null_count
            == task.file.record_count
        )


def test_v3_metadata_written_by_us_reads_back_and_carries_row_ids(catalog: SqlCatalog) -> None:
    table = _upgraded(catalog)
    _append(table, 30, 3)

    raw: dict[str, Any] = json.loads(
        _reloaded(catalog).io.new_input(_reloaded(catalog).metadata_location).open().read()
    )

    assert raw["format-version"] == 3
    assert raw["next-row-id"] == 33
    newest = max(raw["snapshots"], key=lambda s: s["sequence-number"])
    assert (newest["first-row-id"], newest["added-rows"]) == (0, 33)
    assert all("first-row-id" not in s for s in raw["snapshots"] if s is not newest)  # pre-upgrade ones


def test_a_format_version_4_table_is_refused_in_one_line(catalog: SqlCatalog) -> None:
    v2 = catalog.create_table("ns.v2", SCHEMA, properties={"format-version": "2"})
    v2.append(_rows(0, 3))
    metadata = json.loads(v2.io.new_input(v2.metadata_location).open().read())
    metadata.update({"format-version": 4, "next-row-id": 0})
    location = v2.metadata_location.replace(".metadata.json", "-v4.metadata.json")
    with v2.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    with pytest.raises(Exception, match="does not match any of the expected tags: 1, 2, 3"):
        catalog.register_table("ns.t4", location)  # PyIceberg records it, then cannot load it

    with pytest.raises(
        ConfigurationError, match=r"^table 'ns\.t4' .*format version 4 is not supported"
    ) as err:
        load_table(catalog, "ns.t4")
    assert "\n" not in str(err.value)


def test_copy_on_write_keeps_ids_and_updated_rows_take_the_new_sequence_number(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
    from tests.integration.compaction_support import limits

    table = _upgraded(catalog)
    _append(table, 30, 20)
    table = _reloaded(catalog)
    before = _lineage(table)

    cow_rewrite(table, operation="delete", where="id = 3 or id = 31", limits=limits(tmp_path))
    table = _reloaded(catalog)
    after_delete = _lineage(table)
    assert after_delete == {i: v for i, v in before.items() if i not in (3, 31)}

    cow_rewrite(
        table,
        operation="update",
        where="id = 5",
        set_columns={"category": "'updated'"},
        limits=limits(tmp_path),
    )
    table = _reloaded(catalog)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    after_update = _lineage(table)
    assert after_update[5] == (before[5][0], snapshot.sequence_number)  # same id, this commit's number
    assert {i: v for i, v in after_update.items() if i != 5} == {
        i: v for i, v in after_delete.items() if i != 5
    }
    first, added, next_row_id = _snapshot_row_ids(table)
    assert next_row_id == (first or 0) + (added or 0)
    rows = {r["id"]: r["category"] for r in table.scan().to_arrow().to_pylist()}
    assert rows[5] == "updated"
    assert 3 not in rows
    assert len(rows) == 48


def test_a_manifest_rewrite_keeps_every_rows_id(catalog: SqlCatalog) -> None:
    """Entries are rewritten as EXISTING with the first_row_id they inherited; the new manifests take a
    fresh range in the list (Java's too), the rows keep their ids."""
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

    table = _upgraded(catalog)
    _append(table, 30, 20)
    _append(_reloaded(catalog), 50, 5)
    table = _reloaded(catalog)
    before = _lineage(table)
    checksum = live_checksum(table)

    result = rewrite_manifests(table)
    table = _reloaded(catalog)

    assert result["rewritten_manifests_count"] == 5
    assert live_checksum(table) == checksum
    assert _lineage(table) == before
    assert _snapshot_row_ids(table) == (55, 55, 110)  # the 55 EXISTING rows of the new manifest(s)


def test_a_retry_after_a_concurrent_commit_takes_the_next_range(catalog: SqlCatalog, tmp_path: Path) -> None:
    """first-row-id and added-rows are recomputed on every attempt: the commit that lost the race starts
    where the winner's range ended, and no two rows share an id."""
    table = _upgraded(catalog)
    _append(table, 30, 20)
    table = _reloaded(catalog)
    original = catalog.commit_table
    raced: list[int] = []

    def racing_commit_table(target: Table, requirements: Any, updates: Any) -> Any:
        if not raced:
            raced.append(1)
            other = SqlCatalog(catalog.name, **catalog.properties)
            _append(other.load_table("ns.t"), 100, 7)  # lands first; ours then fails and retries
            other.engine.dispose()
        return original(target, requirements, updates)

    catalog.commit_table = racing_commit_table  # type: ignore[method-assign]
    try:
        run_compact(table, tmp_path, options={"rewrite-all": "true"})
    finally:
        del catalog.commit_table

    table = _reloaded(catalog)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    parent = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id or -1)
    assert parent is not None
    assert parent.summary is not None
    assert parent.summary.get("iceberg-exec.commit-id") == "append-100"  # the concurrent append
    assert snapshot.first_row_id == (parent.first_row_id or 0) + (parent.added_rows or 0)
    assert table.metadata.next_row_id == snapshot.first_row_id + (snapshot.added_rows or 0)  # type: ignore[attr-defined]
    lineage = _lineage(table)
    assert len({row_id for row_id, _seq in lineage.values()}) == len(lineage) == 57
