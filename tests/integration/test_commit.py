"""Integration tests of :func:`commit_rewrite` against a real SQLite catalog and real Parquet files."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    COMMIT_ID_PROPERTY,
    CommitOutcome,
    commit_rewrite,
    commit_row_delta,
)
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CommitValidationError,
    ConfigurationError,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import (
    read_manifest_entries,
    referenced_data_file,
)
from tests.helpers import commit_delete_files

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
)
ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("category", pa.string())])
PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545


# -- fixtures and helpers ----------------------------------------------------------------------------


@pytest.fixture
def catalog_uri(tmp_path: Path) -> dict[str, str]:
    return {"uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"}


@pytest.fixture
def catalog(catalog_uri: dict[str, str]) -> SqlCatalog:
    cat = SqlCatalog("t", **catalog_uri)
    cat.create_namespace("ns")
    return cat


def _create(catalog: SqlCatalog, *, format_version: int = 2, partitioned: bool = False) -> Table:
    spec = (
        PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
        )
        if partitioned
        else PartitionSpec()
    )
    return catalog.create_table(
        "ns.t",
        schema=SCHEMA,
        partition_spec=spec,
        properties={"format-version": str(format_version), "commit.retry.min-wait-ms": "10"},
    )


def _rows(start: int, count: int, category: str = "a") -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + count)), "category": [category] * count}, schema=ARROW_SCHEMA
    )


def _append_files(table: Table, count: int, rows_per_file: int = 10, category: str = "a") -> None:
    """Append ``count`` files, one per snapshot; file ``i`` holds ids ``[10*i, 10*i + rows_per_file)``."""
    offset = len(table.scan().to_arrow()) if table.current_snapshot() else 0
    for i in range(count):
        table.append(_rows(offset + i * rows_per_file, rows_per_file, category))


def _live_files(table: Table) -> list[DataFile]:
    return sorted((task.file for task in table.scan().plan_files()), key=lambda f: f.file_path)


def _checksum(table: Table | pa.Table) -> tuple[int, int]:
    """Row count and an order-independent hash of the rows, read by PyIceberg's own scan."""
    data = table.scan().to_arrow() if isinstance(table, Table) else table
    digest = 0
    for row in data.select(["id", "category"]).to_pylist():
        digest ^= int.from_bytes(hashlib.sha256(repr(sorted(row.items())).encode()).digest()[:8], "little")
    return len(data), digest


def _read_files(table: Table, files: Iterable[DataFile]) -> pa.Table:
    parts = []
    for data_file in files:
        with table.io.new_input(data_file.file_path).open() as stream:
            parts.append(pq.read_table(stream).select(["id", "category"]).cast(ARROW_SCHEMA))
    return pa.concat_tables(parts)


def _write_output(table: Table, data: pa.Table) -> list[DataFile]:
    """Write the rewritten output as Parquet without committing it."""
    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io))


def _entries(table: Table, snapshot_id: int) -> dict[str, dict[str, Any]]:
    return {
        row["data_file"]["file_path"]: row
        for row in table.inspect.entries(snapshot_id=snapshot_id).to_pylist()
    }


def _raw_entries(table: Table, manifest: ManifestFile) -> list[ManifestEntry]:
    """Entries exactly as stored, without sequence-number inheritance."""
    with AvroFile[ManifestEntry](
        table.io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[2],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return list(reader)


def _metadata_files(table: Table) -> set[str]:
    folder = table.location().removeprefix("file://") + "/metadata"
    return {os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".avro")}


def _unreferenced_metadata_files(table: Table) -> set[str]:
    """Manifests and manifest lists in the metadata folder that no snapshot references."""
    table.refresh()
    referenced: set[str] = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(snapshot.manifest_list.removeprefix("file://"))
        referenced.update(m.manifest_path.removeprefix("file://") for m in snapshot.manifests(table.io))
    return _metadata_files(table) - referenced


def _commit(
    table: Table, rewritten: Sequence[DataFile], added: Sequence[DataFile], **kwargs: Any
) -> CommitOutcome:
    kwargs.setdefault("commit_id", "c-1")
    base: int | None = kwargs.pop("base_snapshot_id", None) or table.metadata.current_snapshot_id
    assert base is not None
    return commit_rewrite(
        table,
        base_snapshot_id=base,
        rewritten_data_files=rewritten,
        added_data_files=added,
        **kwargs,
    )


def _write_position_deletes(table: Table, name: str, targets: Sequence[tuple[str, int]]) -> DataFile:
    """A Parquet position delete file (spec field ids), file-scoped when it targets a single file."""
    path = f"{table.location()}/data/{name}.parquet"
    schema = pa.schema(
        [
            pa.field(
                "file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(PATH_FIELD_ID)}
            ),
            pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_FIELD_ID)}),
        ]
    )
    ordered = sorted(targets)
    data = pa.table({"file_path": [p for p, _ in ordered], "pos": [i for _, i in ordered]}, schema=schema)
    with table.io.new_output(path).create() as stream:
        pq.write_table(data, stream)
    paths = [p for p, _ in ordered]
    positions = [i for _, i in ordered]
    delete_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(ordered),
        file_size_in_bytes=len(table.io.new_input(path)),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={PATH_FIELD_ID: paths[0].encode(), POS_FIELD_ID: struct.pack("<q", min(positions))},
        upper_bounds={PATH_FIELD_ID: paths[-1].encode(), POS_FIELD_ID: struct.pack("<q", max(positions))},
        referenced_data_file=paths[0] if len(set(paths)) == 1 else None,
    )
    delete_file.spec_id = table.metadata.default_spec_id
    return delete_file


def _write_equality_deletes(table: Table, name: str, ids: Sequence[int]) -> DataFile:
    path = f"{table.location()}/data/{name}.parquet"
    schema = pa.schema([pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})])
    with table.io.new_output(path).create() as stream:
        pq.write_table(pa.table({"id": list(ids)}, schema=schema), stream)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(ids),
        file_size_in_bytes=len(table.io.new_input(path)),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        equality_ids=[1],
    )
    delete_file.spec_id = table.metadata.default_spec_id
    return delete_file


# -- (1) the replace commit itself ---------------------------------------------------------------------


def test_replace_commit_rewrites_small_files_into_one(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 4)
    base = table.current_snapshot()
    assert base is not None
    before = _checksum(table)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    assert len(output) == 1

    outcome = _commit(table, inputs, output, snapshot_properties={"app": "test"})

    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert outcome.snapshot_id == snapshot.snapshot_id
    assert outcome.already_committed is False
    assert snapshot.parent_snapshot_id == base.snapshot_id
    assert snapshot.summary is not None
    assert snapshot.summary.operation == Operation.REPLACE
    assert outcome.sequence_number == snapshot.sequence_number == 5
    assert _checksum(table) == before
    assert [f.file_path for f in _live_files(table)] == [output[0].file_path]

    entries = _entries(table, snapshot.snapshot_id)
    added = entries[output[0].file_path]
    assert added["status"] == ManifestEntryStatus.ADDED.value
    assert added["sequence_number"] == base.sequence_number == 4
    assert added["file_sequence_number"] == snapshot.sequence_number
    base_entries = _entries(table, base.snapshot_id)
    assert sorted(e["sequence_number"] for e in base_entries.values()) == [1, 2, 3, 4]
    for data_file in inputs:
        entry, original = entries[data_file.file_path], base_entries[data_file.file_path]
        assert entry["status"] == ManifestEntryStatus.DELETED.value
        assert entry["snapshot_id"] == snapshot.snapshot_id
        assert entry["sequence_number"] == entry["file_sequence_number"] == original["sequence_number"]

    # On disk: the added entry's data sequence number is written, its file sequence number inherited.
    raw = [e for m in snapshot.manifests(table.io) for e in _raw_entries(table, m)]
    raw_added = next(e for e in raw if e.data_file.file_path == output[0].file_path)
    assert (raw_added.sequence_number, raw_added.file_sequence_number) == (4, None)
    assert all(
        e.sequence_number is not None and e.file_sequence_number is not None for e in raw if e.status != 1
    )

    input_bytes = sum(f.file_size_in_bytes for f in inputs)
    assert outcome.summary == {
        "operation": "replace",
        "added-data-files": "1",
        "deleted-data-files": "4",
        "added-records": "40",
        "deleted-records": "40",
        "added-files-size": str(output[0].file_size_in_bytes),
        "removed-files-size": str(input_bytes),
        "changed-partition-count": "1",
        "total-data-files": "1",
        "total-delete-files": "0",
        "total-records": "40",
        "total-files-size": str(output[0].file_size_in_bytes),
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
        COMMIT_ID_PROPERTY: "c-1",
        "app": "test",
    }

    # PyIceberg's own producers keep working on top of our manifests.
    table.append(_rows(1000, 5))
    assert _checksum(table)[0] == 45
    table.delete("id >= 1000")
    assert _checksum(table) == before


def test_partitioned_rewrite_prunes_and_keeps_other_partitions(catalog: SqlCatalog) -> None:
    table = _create(catalog, partitioned=True)
    _append_files(table, 3, category="a")
    _append_files(table, 2, category="b")
    before = _checksum(table)
    inputs = [f for f in _live_files(table) if f.partition == Record("a")]
    others = {f.file_path for f in _live_files(table)} - {f.file_path for f in inputs}
    output = _write_output(table, _read_files(table, inputs))

    outcome = _commit(table, inputs, output)

    assert _checksum(table) == before
    assert {f.file_path for f in _live_files(table)} == others | {output[0].file_path}
    assert outcome.summary["changed-partition-count"] == "1"
    assert outcome.summary["total-data-files"] == "3"


def test_v1_table_commits_replace_without_sequence_numbers(catalog: SqlCatalog) -> None:
    table = _create(catalog, format_version=1)
    _append_files(table, 3)
    before = _checksum(table)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())

    outcome = _commit(table, inputs, output)

    assert outcome.sequence_number is None
    assert outcome.summary["operation"] == "replace"
    assert _checksum(table) == before
    assert [f.file_path for f in _live_files(table)] == [output[0].file_path]


def test_base_that_is_not_an_ancestor_is_refused(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())

    with pytest.raises(CommitValidationError, match="Cannot determine history between starting snapshot 42"):
        _commit(table, inputs, output, base_snapshot_id=42)


# -- (2) idempotency ---------------------------------------------------------------------------------


def test_same_commit_id_twice_commits_once(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    base_id = table.metadata.current_snapshot_id
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    first = _commit(table, inputs, output, commit_id="job-7")
    location = table.metadata_location
    snapshots = len(table.metadata.snapshots)

    second = _commit(table, inputs, output, commit_id="job-7", base_snapshot_id=base_id)

    assert second.already_committed is True
    assert (second.snapshot_id, second.summary) == (first.snapshot_id, first.summary)
    table.refresh()
    assert table.metadata_location == location
    assert len(table.metadata.snapshots) == snapshots


# -- (3) concurrent append is kept ----------------------------------------------------------------------


def test_append_between_base_and_commit_is_kept(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    base = table.current_snapshot()
    assert base is not None
    inputs = _live_files(table)
    rewritten_rows = table.scan().to_arrow()
    output = _write_output(table, rewritten_rows)
    appended = _rows(500, 7)
    catalog.load_table("ns.t").append(appended)

    outcome = _commit(table, inputs, output, base_snapshot_id=base.snapshot_id)

    expected = _checksum(pa.concat_tables([rewritten_rows, appended]))
    assert _checksum(table) == expected
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.snapshot_id == outcome.snapshot_id
    assert snapshot.parent_snapshot_id != base.snapshot_id
    entries = _entries(table, snapshot.snapshot_id)
    assert entries[output[0].file_path]["sequence_number"] == base.sequence_number
    assert outcome.summary["total-records"] == "37"


# -- (4) and (5) files removed meanwhile ----------------------------------------------------------------


def test_rewritten_file_deleted_meanwhile_fails_and_leaves_table_unchanged(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    base_id = table.metadata.current_snapshot_id
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    catalog.load_table("ns.t").delete("id >= 0 and id < 10")
    table.refresh()
    current, location = table.metadata.current_snapshot_id, table.metadata_location
    files_before = _metadata_files(table)

    with pytest.raises(CommitValidationError, match="Missing required files to delete: file://"):
        _commit(table, inputs, output, base_snapshot_id=base_id)

    table.refresh()
    assert (table.metadata.current_snapshot_id, table.metadata_location) == (current, location)
    assert _metadata_files(table) == files_before


def test_second_compaction_of_the_same_file_fails_cleanly(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    base_id = table.metadata.current_snapshot_id
    f0, f1, f2 = _live_files(table)
    out_a = _write_output(table, _read_files(table, [f0, f1]))
    out_b = _write_output(table, _read_files(table, [f0, f2]))
    before = _checksum(table)

    _commit(table, [f0, f1], out_a, commit_id="a", base_snapshot_id=base_id)
    location = table.metadata_location
    with pytest.raises(CommitValidationError, match=f"Missing required files to delete: {f0.file_path}$"):
        _commit(table, [f0, f2], out_b, commit_id="b", base_snapshot_id=base_id)

    table.refresh()
    assert table.metadata_location == location
    assert _checksum(table) == before
    assert _unreferenced_metadata_files(table) == set()


# -- (6) deletes committed after the base ----------------------------------------------------------------


def test_new_position_delete_for_a_rewritten_file_fails(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    base_id = table.metadata.current_snapshot_id
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    commit_delete_files(table, [_write_position_deletes(table, "pd", [(inputs[1].file_path, 3)])])
    location = table.metadata_location

    with pytest.raises(
        CommitValidationError, match="found new position delete for replaced data file: file://"
    ):
        _commit(table, inputs, output, base_snapshot_id=base_id)

    table.refresh()
    assert table.metadata_location == location
    assert _unreferenced_metadata_files(table) == set()


def test_new_position_delete_for_another_file_does_not_conflict(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    base_id = table.metadata.current_snapshot_id
    f0, f1, f2 = _live_files(table)
    output = _write_output(table, _read_files(table, [f0, f1]))
    commit_delete_files(table, [_write_position_deletes(table, "pd", [(f2.file_path, 0)])])
    before = _checksum(table)

    _commit(table, [f0, f1], output, base_snapshot_id=base_id)

    assert _checksum(table) == before
    assert before[0] == 29


def test_new_equality_delete_keeps_applying_to_the_output(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    base = table.current_snapshot()
    assert base is not None
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    eq_delete = _write_equality_deletes(table, "eq", [3, 15])
    commit_delete_files(table, [eq_delete])

    outcome = _commit(table, inputs, output, base_snapshot_id=base.snapshot_id)

    entries = _entries(table, outcome.snapshot_id)
    added_seq = entries[output[0].file_path]["sequence_number"]
    delete_seq = entries[eq_delete.file_path]["sequence_number"]
    assert added_seq == base.sequence_number
    assert delete_seq > added_seq  # so the equality delete still applies to the output (strictly lower)


def test_new_equality_delete_fails_without_starting_sequence_number(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    base_id = table.metadata.current_snapshot_id
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    commit_delete_files(table, [_write_equality_deletes(table, "eq", [3])])

    with pytest.raises(CommitValidationError, match="Cannot commit, found new delete for replaced data file"):
        _commit(table, inputs, output, base_snapshot_id=base_id, use_starting_sequence_number=False)


def _in_partition(content_file: DataFile, value: str) -> DataFile:
    """``content_file`` (metrics dropped) said to be in partition ``category=value``."""
    moved = DataFile.from_args(
        content=content_file.content,
        file_path=content_file.file_path,
        file_format=content_file.file_format,
        partition=Record(value),
        record_count=content_file.record_count,
        file_size_in_bytes=content_file.file_size_in_bytes,
        equality_ids=content_file.equality_ids,
    )
    moved.spec_id = content_file.spec_id
    return moved


def test_a_rewritten_file_claimed_in_another_partition_is_still_checked_in_its_own(
    catalog: SqlCatalog,
) -> None:
    """The commit checks the files it removes with the head's spec and partition when the caller's differ:
    a file of partition "a" claimed as "b" still conflicts with a new equality delete in "a" (which
    would otherwise no longer apply to its rows once rewritten with a new sequence number)."""
    table = _create(catalog, partitioned=True)
    # one manifest for both partitions: its summary cannot tell that the claimed "b" file is not there
    table.append(pa.concat_tables([_rows(0, 10, "a"), _rows(10, 10, "b")]))
    base_id = table.metadata.current_snapshot_id
    in_a = [f for f in _live_files(table) if f.partition[0] == "a"]
    forged = [_in_partition(f, "b") for f in in_a]
    output = _write_output(table, _read_files(table, in_a))
    delete = _in_partition(_write_equality_deletes(table, "eq-a", [3]), "a")
    commit_delete_files(table, [delete])
    location = table.metadata_location

    with pytest.raises(CommitValidationError, match="Cannot commit, found new delete for replaced data file"):
        _commit(table, forged, output, base_snapshot_id=base_id, use_starting_sequence_number=False)
    table.refresh()
    assert table.metadata_location == location


def test_without_starting_sequence_number_added_files_get_the_new_sequence_number(
    catalog: SqlCatalog,
) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())

    outcome = _commit(table, inputs, output, use_starting_sequence_number=False)

    entry = _entries(table, outcome.snapshot_id)[output[0].file_path]
    assert entry["sequence_number"] == entry["file_sequence_number"] == outcome.sequence_number


# -- (7) removing delete files ---------------------------------------------------------------------------


def test_removed_delete_files_are_dropped_in_the_same_snapshot(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    x, z = _live_files(table)
    d_x = _write_position_deletes(table, "d-x", [(x.file_path, 2), (x.file_path, 5)])
    d_z = _write_position_deletes(table, "d-z", [(z.file_path, 0)])
    commit_delete_files(table, [d_x, d_z])
    before = _checksum(table)
    assert before[0] == 17
    # The rewrite of x applies its deletes, so d_x becomes dangling and goes in the same commit.
    x_rows = _read_files(table, [x])
    output = _write_output(table, x_rows.take([i for i in range(10) if i not in (2, 5)]))

    outcome = _commit(table, [x], output, removed_delete_files=[d_x])

    assert _checksum(table) == before
    snapshot = table.current_snapshot()
    assert snapshot is not None
    by_path: dict[str, tuple[ManifestContent, ManifestEntry]] = {}
    for manifest in snapshot.manifests(table.io):
        for entry in read_manifest_entries(table.io, manifest, discard_deleted=False):
            by_path[entry.data_file.file_path] = (manifest.content, entry)
    content, removed = by_path[d_x.file_path]
    assert (content, removed.status, removed.snapshot_id) == (
        ManifestContent.DELETES,
        ManifestEntryStatus.DELETED,
        snapshot.snapshot_id,
    )
    content, kept = by_path[d_z.file_path]
    assert (content, kept.status) == (ManifestContent.DELETES, ManifestEntryStatus.EXISTING)
    assert referenced_data_file(kept.data_file) == z.file_path  # field 143 survives the manifest rewrite
    assert kept.sequence_number == removed.sequence_number == 3
    assert {
        k: outcome.summary[k]
        for k in (
            "removed-delete-files",
            "removed-position-delete-files",
            "removed-position-deletes",
            "total-delete-files",
            "total-position-deletes",
            "total-records",
        )
    } == {
        "removed-delete-files": "1",
        "removed-position-delete-files": "1",
        "removed-position-deletes": "2",
        "total-delete-files": "1",
        "total-position-deletes": "1",
        "total-records": "18",
    }


# -- (8) format version 3 ---------------------------------------------------------------------------------


def _register_v3_copy(catalog: SqlCatalog, table: Table) -> Table:
    """PyIceberg 0.12 cannot create a v3 table: write a v3 copy of a v2 table's metadata and register it."""
    metadata = json.loads(table.io.new_input(table.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = table.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with table.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    return catalog.register_table("ns.t3", location)


def test_position_delete_files_are_refused_on_v3_unchanged(catalog: SqlCatalog) -> None:
    """v3 takes deletion vectors only (Java: "Must use DVs for position deletes in V3")."""
    v2 = _create(catalog)
    _append_files(v2, 1)
    table = _register_v3_copy(catalog, v2)
    assert table.format_version == 3
    location = table.metadata_location
    fake = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///nowhere-deletes.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=1,
    )

    with pytest.raises(ConfigurationError, match=r"take deletion vectors only; table left unchanged$"):
        commit_row_delta(
            table,
            base_snapshot_id=table.metadata.current_snapshot_id,
            added_data_files=[],
            added_delete_files=[fake],
            referenced_data_files=_live_files(table),
            conflict_detection_filter=AlwaysTrue(),
            commit_id="c-v3",
        )

    table.refresh()
    assert table.metadata_location == location


def test_a_v3_rewrite_commits_and_assigns_row_ids(catalog: SqlCatalog) -> None:
    v2 = _create(catalog)
    _append_files(v2, 3)
    table = _register_v3_copy(catalog, v2)
    inputs = _live_files(table)
    rows = table.scan().to_arrow()

    outcome = _commit(table, inputs, _write_output(table, rows))

    table.refresh()
    assert _checksum(table) == _checksum(rows)
    snapshot = table.metadata.snapshot_by_id(outcome.snapshot_id)
    assert snapshot is not None
    assert (snapshot.first_row_id, snapshot.added_rows, table.metadata.next_row_id) == (0, 30, 30)


# -- (9) CommitFailedException and retries --------------------------------------------------------------


def _race_once(monkeypatch: pytest.MonkeyPatch, catalog: SqlCatalog, action: Any) -> list[int]:
    """Make the next catalog commit first run ``action`` (a concurrent writer), then go ahead."""
    original = catalog.commit_table
    calls: list[int] = []

    def racing_commit_table(table: Table, requirements: Any, updates: Any) -> Any:
        if not calls:
            action()
        calls.append(1)
        return original(table, requirements, updates)

    monkeypatch.setattr(catalog, "commit_table", racing_commit_table)
    return calls


def test_commit_failed_is_retried_and_keeps_the_concurrent_append(
    catalog: SqlCatalog, catalog_uri: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(catalog)
    _append_files(table, 3)
    inputs = _live_files(table)
    rewritten_rows = table.scan().to_arrow()
    output = _write_output(table, rewritten_rows)
    appended = _rows(900, 4)
    other = SqlCatalog("t", **catalog_uri)
    calls = _race_once(monkeypatch, catalog, lambda: other.load_table("ns.t").append(appended))

    outcome = _commit(table, inputs, output)

    assert len(calls) == 2  # the first catalog commit lost the race, the retry won
    assert _checksum(table) == _checksum(pa.concat_tables([rewritten_rows, appended]))
    assert outcome.summary["total-records"] == "34"
    assert _unreferenced_metadata_files(table) == set()


def test_retry_revalidates_from_the_base(
    catalog: SqlCatalog, catalog_uri: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    other = SqlCatalog("t", **catalog_uri)
    _race_once(monkeypatch, catalog, lambda: other.load_table("ns.t").delete("id < 10"))

    with pytest.raises(CommitValidationError, match="Missing required files to delete"):
        _commit(table, inputs, output)

    assert _unreferenced_metadata_files(table) == set()


def test_retry_finds_the_same_commit_landed_by_another_writer(
    catalog: SqlCatalog, catalog_uri: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    base_id = table.metadata.current_snapshot_id
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    other = SqlCatalog("t", **catalog_uri)
    landed: list[CommitOutcome] = []

    def same_commit_elsewhere() -> None:
        landed.append(_commit(other.load_table("ns.t"), inputs, output, base_snapshot_id=base_id))

    _race_once(monkeypatch, catalog, same_commit_elsewhere)

    outcome = _commit(table, inputs, output, base_snapshot_id=base_id)

    assert outcome.already_committed is True
    assert outcome.snapshot_id == landed[0].snapshot_id
    assert _unreferenced_metadata_files(table) == set()


def test_commit_failed_until_retries_run_out_is_a_conflict(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    location = table.metadata_location
    calls: list[int] = []

    def always_moved(table: Table, requirements: Any, updates: Any) -> Any:
        calls.append(1)
        raise CommitFailedException("branch main has changed")

    monkeypatch.setattr(catalog, "commit_table", always_moved)

    with pytest.raises(CommitConflictError, match="retries ran out: branch main has changed") as info:
        _commit(table, inputs, output)

    assert not isinstance(info.value, CommitValidationError)
    assert isinstance(info.value.__cause__, CommitFailedException)
    assert len(calls) == 5  # commit.retry.num-retries = 4
    table.refresh()
    assert table.metadata_location == location
    assert _unreferenced_metadata_files(table) == set()


def test_commit_state_unknown_is_not_retried_nor_cleaned_up(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _create(catalog)
    _append_files(table, 2)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    calls: list[int] = []

    def unknown(table: Table, requirements: Any, updates: Any) -> Any:
        calls.append(1)
        raise CommitStateUnknownException("gateway timeout")

    monkeypatch.setattr(catalog, "commit_table", unknown)

    with pytest.raises(CommitStateUnknownError, match=f"{COMMIT_ID_PROPERTY}=c-1"):
        _commit(table, inputs, output)

    assert len(calls) == 1
    # The catalog may have taken the commit: its manifests must stay (orphan removal decides later).
    assert _unreferenced_metadata_files(table) != set()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rewritten": [], "added": []}, "Files to delete cannot be empty"),
        ({"rewritten": [], "added": "one", "removed_delete_files": "pos"}, "Data files to add must be empty"),
        ({"commit_id": ""}, "commit_id must be a non-empty string"),
        ({"snapshot_properties": {COMMIT_ID_PROPERTY: "x"}}, "snapshot_properties cannot set"),
        ({"added": "twice"}, "lists a path more than once"),
        ({"removed_delete_files": "data"}, "removed delete files must be delete files"),
    ],
)
def test_bad_arguments_are_configuration_errors(
    catalog: SqlCatalog, kwargs: dict[str, Any], message: str
) -> None:
    table = _create(catalog)
    _append_files(table, 1)
    inputs = _live_files(table)
    output = _write_output(table, table.scan().to_arrow())
    named = {
        "one": output,
        "twice": output + output,
        "data": inputs,
        "pos": [_write_position_deletes(table, "pd", [(inputs[0].file_path, 0)])],
    }
    arguments: dict[str, Any] = {k: named.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    arguments["commit_id"] = kwargs.get("commit_id", "c-1")
    rewritten: list[DataFile] = arguments.pop("rewritten", inputs)
    added: list[DataFile] = arguments.pop("added", output)
    location = table.metadata_location

    with pytest.raises(ConfigurationError, match=message):
        _commit(table, rewritten, added, **arguments)

    table.refresh()
    assert table.metadata_location == location


def test_a_manifest_whose_first_entries_are_kept_is_filtered_in_order(catalog: SqlCatalog) -> None:
    """The filtered copy is opened at the first removed entry: the entries kept before it are read again,
    and every live entry is written once, in the manifest's order, each data_file as the base lists it."""
    table = _create(catalog)
    files = [f for i in range(5) for f in _write_output(table, _rows(10 * i, 10))]
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    table.refresh()
    (base_manifest,) = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    base_entries = {e.data_file.file_path: e for e in _raw_entries(table, base_manifest)}
    before = _checksum(table)
    removed = [files[2], files[4]]

    outcome = _commit(table, removed, _write_output(table, _read_files(table, removed)))

    table.refresh()
    assert _checksum(table) == before
    snapshot = table.metadata.snapshot_by_id(outcome.snapshot_id)
    assert snapshot is not None
    (filtered,) = [m for m in snapshot.manifests(table.io) if m.deleted_files_count]
    written = _raw_entries(table, filtered)
    deleted = {removed[0].file_path, removed[1].file_path}
    assert [(e.data_file.file_path, e.status) for e in written] == [
        (f.file_path, ManifestEntryStatus.DELETED if f.file_path in deleted else ManifestEntryStatus.EXISTING)
        for f in files
    ]
    for entry in written:
        original = base_entries[entry.data_file.file_path]
        assert [entry.data_file[i] for i in range(16)] == [original.data_file[i] for i in range(16)]
        assert (entry.sequence_number, entry.file_sequence_number) == (1, 1)  # inherited, now explicit
        expected_snapshot = (
            outcome.snapshot_id if entry.data_file.file_path in deleted else original.snapshot_id
        )
        assert entry.snapshot_id == expected_snapshot
