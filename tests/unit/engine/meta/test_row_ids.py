"""engine/meta/row_ids.py and the v3 manifest writer: row ids assigned in the manifest list (the spec's
worked example), inherited by data files on read (Java's ManifestReader), and written back as Java does."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.avro.file import AvroFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer, read_manifest_entries
from airflow_provider_iceberg_exec.engine.meta.row_ids import (
    assign_manifest_row_ids,
    first_row_id,
    inherit_first_row_ids,
    manifest_first_row_id,
    read_manifest_list,
    with_manifest_first_row_id,
    write_manifest_list_v3,
)

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _manifest(
    path: str,
    added: int,
    existing: int,
    *,
    content: ManifestContent = ManifestContent.DATA,
    first: int | None = None,
    snapshot_id: int = 9,
    sequence_number: int = -1,
) -> ManifestFile:
    manifest = ManifestFile.from_args(
        manifest_path=path,
        manifest_length=100,
        partition_spec_id=0,
        content=content,
        sequence_number=sequence_number,
        min_sequence_number=sequence_number,
        added_snapshot_id=snapshot_id,
        added_files_count=1,
        existing_files_count=1,
        deleted_files_count=0,
        added_rows_count=added,
        existing_rows_count=existing,
        deleted_rows_count=0,
        partitions=[],
        key_metadata=None,
    )
    return with_manifest_first_row_id(manifest, first)


def test_the_spec_example_assigns_375_rows_from_1000() -> None:
    """Spec "Row lineage example": existing (first_row_id 925) kept; added1 100+25 at 1000, added2 0+100
    at 1125, added3 125+25 at 1225; next-row-id 1375, so added-rows is 375, not the 225 added rows."""
    manifests = [
        _manifest("existing", 75, 0, first=925),
        _manifest("added1", 100, 25),
        _manifest("deletes", 10, 0, content=ManifestContent.DELETES),
        _manifest("added2", 0, 100),
        _manifest("added3", 125, 25),
    ]

    assigned, counter = assign_manifest_row_ids(manifests, 1000)

    assert [(m.manifest_path, manifest_first_row_id(m)) for m in assigned] == [
        ("existing", 925),
        ("added1", 1000),
        ("deletes", None),  # delete manifests never get one
        ("added2", 1125),
        ("added3", 1225),
    ]
    assert counter - 1000 == 375


def test_a_v3_manifest_list_reads_back_with_its_ids_and_java_keys(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    path = str(tmp_path / "snap.avro")
    manifests = [
        _manifest("old", 0, 40, first=3, snapshot_id=1, sequence_number=1),
        _manifest("new", 30, 0, snapshot_id=9),
    ]

    counter = write_manifest_list_v3(
        io.new_output(path),
        manifests,
        snapshot_id=9,
        parent_snapshot_id=1,
        sequence_number=4,
        first_row_id=50,
        avro_compression="deflate",
    )

    assert counter == 80
    snapshot = Snapshot(snapshot_id=9, sequence_number=4, manifest_list=path, timestamp_ms=1)
    read = read_manifest_list(io, snapshot)
    assert [(m.manifest_path, manifest_first_row_id(m), m.sequence_number) for m in read] == [
        ("old", 3, 1),  # a carried manifest keeps what it had
        ("new", 50, 4),  # this commit's manifest gets the sequence number and the counter
    ]
    with AvroFile[ManifestFile](io.new_input(path), None) as reader:  # type: ignore[arg-type]
        meta = reader.header.meta
    assert {k: meta[k] for k in ("snapshot-id", "parent-snapshot-id", "sequence-number", "first-row-id")} == {
        "snapshot-id": "9",
        "parent-snapshot-id": "1",
        "sequence-number": "4",
        "first-row-id": "50",
    }
    assert meta["format-version"] == "3"


def _data_file(path: str, records: int, first: int | None = None) -> DataFile:
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=records,
        file_size_in_bytes=10,
        first_row_id=first,
    )
    data_file.spec_id = 0
    return data_file


def _entry(status: ManifestEntryStatus, data_file: DataFile) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=status, snapshot_id=9, sequence_number=2, file_sequence_number=2, data_file=data_file
    )


def test_files_inherit_ids_after_the_preceding_null_ids_deleted_entries_skipped() -> None:
    """Spec "First Row ID Inheritance", the added1 example, plus a DELETED entry that takes no range."""
    entries = [
        _entry(ManifestEntryStatus.EXISTING, _data_file("data1", 25, first=800)),
        _entry(ManifestEntryStatus.ADDED, _data_file("data2", 50)),
        _entry(ManifestEntryStatus.DELETED, _data_file("gone", 7)),
        _entry(ManifestEntryStatus.ADDED, _data_file("data3", 50)),
    ]

    read = list(inherit_first_row_ids(entries, _manifest("added1", 100, 25, first=1000)))

    assert [(e.data_file.file_path, first_row_id(e.data_file)) for e in read] == [
        ("data1", 800),
        ("data2", 1000),
        ("gone", None),
        ("data3", 1050),
    ]


def test_a_manifest_without_an_id_gives_its_files_none() -> None:
    """Java nulls every file-level id of a manifest the list gave no first_row_id, explicit ones too."""
    entries = [_entry(ManifestEntryStatus.EXISTING, _data_file("data1", 25, first=800))]

    read = list(inherit_first_row_ids(entries, _manifest("pre-upgrade", 0, 25)))

    assert first_row_id(read[0].data_file) is None


def test_v3_manifests_write_added_ids_null_and_keep_existing_ones(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    path = tmp_path / "m.avro"
    with new_manifest_writer(
        format_version=3,
        content=ManifestContent.DATA,
        spec=PartitionSpec(),
        schema=SCHEMA,
        output_file=io.new_output(str(path)),
        snapshot_id=9,
        avro_compression="deflate",
    ) as writer:
        writer.add_entry(_entry(ManifestEntryStatus.EXISTING, _data_file("kept", 25, first=800)))
        # an id on an ADDED entry is never written: the list assigns the range
        writer.add_entry(_entry(ManifestEntryStatus.ADDED, _data_file("new", 50, first=5)))
        writer.add_entry(_entry(ManifestEntryStatus.DELETED, _data_file("removed", 10, first=900)))
    manifest = with_manifest_first_row_id(writer.to_manifest_file(), 2000)

    read = read_manifest_entries(io, manifest, discard_deleted=False)

    assert [(e.data_file.file_path, first_row_id(e.data_file)) for e in read] == [
        ("kept", 800),
        ("new", 2000),
        ("removed", 900),
    ]
    with AvroFile[ManifestEntry](io.new_input(str(path)), None) as reader:  # type: ignore[arg-type]
        meta = reader.header.meta
    assert meta["format-version"] == "3"
    assert meta["content"] == "data"
    assert "schema-id" not in meta  # as Java's V3 writer
    assert {"schema", "partition-spec", "partition-spec-id"} <= meta.keys()


def test_v3_delete_manifests_say_deletes() -> None:
    io = PyArrowFileIO()
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/d.avro"
        delete_file = DataFile.from_args(
            _table_format_version=3,
            content=DataFileContent.POSITION_DELETES,
            file_path="file:///w/d.parquet",
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=1,
            file_size_in_bytes=10,
        )
        delete_file.spec_id = 0
        with new_manifest_writer(
            format_version=3,
            content=ManifestContent.DELETES,
            spec=PartitionSpec(),
            schema=SCHEMA,
            output_file=io.new_output(path),
            snapshot_id=9,
            avro_compression="deflate",
        ) as writer:
            writer.add_entry(_entry(ManifestEntryStatus.ADDED, delete_file))
        with AvroFile[ManifestEntry](io.new_input(path), None) as reader:  # type: ignore[arg-type]
            assert reader.header.meta["content"] == "deletes"
        assert writer.to_manifest_file().content == ManifestContent.DELETES
