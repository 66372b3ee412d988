"""engine/meta/manifests.py: an entry written again with a new status keeps its ``data_file`` byte for byte.

The filtered copy of a manifest (a commit's) copies each ``data_file``'s stored Avro bytes where that is
exact and encodes it otherwise; either way every entry must read back, by PyIceberg's own reader, as the
original with only its status, snapshot id and sequence numbers changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.io import pyiceberg_internals
from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import data_file_copy_suffix
from airflow_provider_iceberg_exec.engine.meta import manifests
from airflow_provider_iceberg_exec.engine.meta.manifests import (
    entry_copier,
    iter_stored_entries,
    new_manifest_writer,
    read_manifest_entries,
)
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id, with_manifest_first_row_id

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "day", DateType(), required=False),
    NestedField(4, "price", DecimalType(12, 2), required=False),
    schema_id=0,
)
UNPARTITIONED = PartitionSpec(spec_id=0)
PARTITIONED = PartitionSpec(
    PartitionField(1, 1000, IdentityTransform(), "id"),
    PartitionField(2, 1001, TruncateTransform(3), "name_trunc"),
    PartitionField(3, 1002, DayTransform(), "day_day"),
    PartitionField(1, 1003, BucketTransform(8), "id_bucket"),
    PartitionField(4, 1004, IdentityTransform(), "price"),
    spec_id=1,
)
SNAPSHOT = 11
NEW_SNAPSHOT = 99


def _partition(spec: PartitionSpec, i: int) -> Record:
    from decimal import Decimal

    if spec.is_unpartitioned():
        return Record()
    return Record(i, f"n{i % 3}", 19000 + i % 5, i % 8, None if i % 4 == 0 else Decimal(f"{i}.25"))


def _data_file(spec: PartitionSpec, i: int, content: DataFileContent = DataFileContent.DATA) -> DataFile:
    data_file = DataFile.from_args(
        content=content,
        file_path=f"file:///w/data/{spec.spec_id}-{i:06d}.parquet",
        file_format=FileFormat.PARQUET,
        partition=_partition(spec, i),
        record_count=10 + i,
        file_size_in_bytes=4000 + i,
        column_sizes={1: 100 + i, 2: 200, 3: 30, 4: 44},
        value_counts={1: 10 + i, 2: 10 + i, 3: 10 + i, 4: 10 + i},
        null_value_counts={1: 0, 2: i % 2, 3: 0, 4: 1},
        nan_value_counts={},
        lower_bounds={1: (i).to_bytes(8, "little"), 2: b"a" * (i % 7)},
        upper_bounds={1: (i + 9).to_bytes(8, "little"), 2: b"z" * (i % 5)},
        key_metadata=None if i % 3 else b"\x01\x02",
        split_offsets=[4] if i % 2 else None,
        equality_ids=[1, 2] if content == DataFileContent.EQUALITY_DELETES else None,
        sort_order_id=0 if content == DataFileContent.DATA else None,
    )
    data_file.spec_id = spec.spec_id
    return data_file


def _write(
    tmp_path: Path,
    name: str,
    entries: list[ManifestEntry],
    *,
    spec: PartitionSpec,
    version: int,
    content: ManifestContent = ManifestContent.DATA,
    pyiceberg: bool = False,
) -> ManifestFile:
    """Write ``entries`` with our writer, or PyIceberg's own (as the tables it writes have them)."""
    io = PyArrowFileIO()
    output = io.new_output(str(tmp_path / name))
    if pyiceberg:
        writer: Any = write_manifest(version, spec, SCHEMA, output, SNAPSHOT, "deflate")  # type: ignore[arg-type]
    else:
        writer = new_manifest_writer(
            format_version=version,
            content=content,
            spec=spec,
            schema=SCHEMA,
            output_file=output,
            snapshot_id=SNAPSHOT,
            avro_compression="deflate",
        )
    with writer:
        for entry in entries:
            writer.add_entry(entry)
    manifest: ManifestFile = writer.to_manifest_file()
    manifest.sequence_number = manifest.min_sequence_number = 5  # as the manifest list assigns them
    return manifest


def _added(data_files: list[DataFile]) -> list[ManifestEntry]:
    return [
        ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED,
            snapshot_id=SNAPSHOT,
            sequence_number=None,
            file_sequence_number=None,
            data_file=f,
        )
        for f in data_files
    ]


def _filtered_copy(
    tmp_path: Path, source: ManifestFile, *, spec: PartitionSpec, version: int, removed: set[str]
) -> tuple[ManifestFile, int]:
    """The commit's filtered copy of ``source``; returns it and how many entries were copied as stored."""
    copied = 0
    original = pyiceberg_internals.add_copied_entry

    def counting(*args: Any) -> None:
        nonlocal copied
        copied += 1
        original(*args)

    io = PyArrowFileIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifests, "add_copied_entry", counting)
        with new_manifest_writer(
            format_version=version,
            content=source.content,
            spec=spec,
            schema=SCHEMA,
            output_file=io.new_output(str(tmp_path / f"copy-{Path(source.manifest_path).name}")),
            snapshot_id=NEW_SNAPSHOT,
            avro_compression="deflate",
        ) as writer:
            add = entry_copier(writer)
            for entry, stored in iter_stored_entries(io, source):
                deleted = entry.data_file.file_path in removed
                add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.DELETED if deleted else ManifestEntryStatus.EXISTING,
                        snapshot_id=NEW_SNAPSHOT if deleted else entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    ),
                    stored,
                )
    manifest = writer.to_manifest_file()
    manifest.sequence_number = manifest.min_sequence_number = 6
    return manifest, copied


def _fields(data_file: DataFile) -> list[Any]:
    return [data_file[pos] for pos in range(len(data_file))]


def _pyiceberg_entries(manifest: ManifestFile) -> Iterator[ManifestEntry]:
    return iter(manifest.fetch_manifest_entry(PyArrowFileIO(), discard_deleted=False))


@pytest.mark.parametrize("spec", [UNPARTITIONED, PARTITIONED], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize("pyiceberg", [False, True], ids=["ours", "pyiceberg-written"])
def test_a_copied_entry_reads_back_as_the_original(
    tmp_path: Path, spec: PartitionSpec, pyiceberg: bool
) -> None:
    files = [_data_file(spec, i) for i in range(40)]
    source = _write(tmp_path, "m.avro", _added(files), spec=spec, version=2, pyiceberg=pyiceberg)
    removed = {f.file_path for f in files[::3]}

    copy, copied = _filtered_copy(tmp_path, source, spec=spec, version=2, removed=removed)

    assert copied == len(files)  # every entry copied as stored, none encoded again
    originals = {e.data_file.file_path: e for e in read_manifest_entries(PyArrowFileIO(), source)}
    for reader in (
        _pyiceberg_entries(copy),
        iter(read_manifest_entries(PyArrowFileIO(), copy, discard_deleted=False)),
    ):
        written = list(reader)
        assert [e.data_file.file_path for e in written] == [f.file_path for f in files]
        for entry in written:
            original = originals[entry.data_file.file_path]
            size = min(len(entry.data_file), len(original.data_file))
            assert _fields(entry.data_file)[:size] == _fields(original.data_file)[:size]
            if entry.data_file.file_path in removed:
                assert (entry.status, entry.snapshot_id) == (ManifestEntryStatus.DELETED, NEW_SNAPSHOT)
            else:
                assert (entry.status, entry.snapshot_id) == (ManifestEntryStatus.EXISTING, SNAPSHOT)
            # the sequence numbers the original inherited are written explicitly
            assert (entry.sequence_number, entry.file_sequence_number) == (5, 5)
    assert (copy.existing_files_count, copy.deleted_files_count) == (len(files) - len(removed), len(removed))
    assert copy.deleted_rows_count == sum(f.record_count for f in files if f.file_path in removed)
    assert copy.partitions == source.partitions


def test_copies_of_copies_and_of_manifests_of_several_specs(tmp_path: Path) -> None:
    """A second commit copies the first's copy; each spec's manifest is copied into its own spec's."""
    for spec in (UNPARTITIONED, PARTITIONED):
        files = [_data_file(spec, i) for i in range(10)]
        source = _write(tmp_path, f"m{spec.spec_id}.avro", _added(files), spec=spec, version=2)
        first, copied_first = _filtered_copy(tmp_path, source, spec=spec, version=2, removed=set())
        second, copied_second = _filtered_copy(
            tmp_path, first, spec=spec, version=2, removed={files[0].file_path}
        )
        assert copied_first == copied_second == len(files)
        assert [
            _fields(e.data_file)
            for e in read_manifest_entries(PyArrowFileIO(), second, discard_deleted=False)
        ] == [_fields(e.data_file) for e in read_manifest_entries(PyArrowFileIO(), source)]


def test_a_manifest_of_another_layout_is_encoded_not_copied(tmp_path: Path) -> None:
    """A v1 manifest's data_file (block_size_in_bytes, no content) is no v2 data_file: encoded again."""
    files = [_data_file(UNPARTITIONED, i) for i in range(5)]
    source = _write(tmp_path, "v1.avro", _added(files), spec=UNPARTITIONED, version=1)

    copy, copied = _filtered_copy(
        tmp_path, source, spec=UNPARTITIONED, version=2, removed={files[1].file_path}
    )

    assert copied == 0
    written = read_manifest_entries(PyArrowFileIO(), copy, discard_deleted=False)
    assert [e.data_file.file_path for e in written] == [f.file_path for f in files]
    assert [e.data_file.record_count for e in written] == [f.record_count for f in files]


def test_v1_manifests_are_copied_into_v1(tmp_path: Path) -> None:
    files = [_data_file(PARTITIONED, i) for i in range(6)]
    source = _write(tmp_path, "v1.avro", _added(files), spec=PARTITIONED, version=1)

    copy, copied = _filtered_copy(tmp_path, source, spec=PARTITIONED, version=1, removed={files[2].file_path})

    assert copied == len(files)
    written = list(_pyiceberg_entries(copy))
    originals = list(_pyiceberg_entries(source))
    assert [_fields(e.data_file) for e in written] == [_fields(e.data_file) for e in originals]
    assert [e.status for e in written].count(ManifestEntryStatus.DELETED) == 1


def test_v3_first_row_ids_inherited_are_written_then_copied(tmp_path: Path) -> None:
    """v3: an ADDED entry's null first_row_id is inherited on read and must be written explicitly, so its
    first copy is encoded; the copy of that copy, whose stored id is the one to write, is copied."""
    files = [_data_file(PARTITIONED, i) for i in range(8)]
    source = with_manifest_first_row_id(
        _write(tmp_path, "v3.avro", _added(files), spec=PARTITIONED, version=3), 1000
    )
    expected: list[int] = []
    next_id = 1000
    for data_file in files:
        expected.append(next_id)
        next_id += data_file.record_count

    first, copied_first = _filtered_copy(
        tmp_path, source, spec=PARTITIONED, version=3, removed={files[0].file_path}
    )
    second, copied_second = _filtered_copy(
        # the manifest list gives the copy an id of its own; its entries' explicit ids come first
        tmp_path,
        with_manifest_first_row_id(first, 5000),
        spec=PARTITIONED,
        version=3,
        removed=set(),
    )

    assert copied_first == 0
    assert copied_second == len(files) - 1  # the removed file's DELETED entry is not carried
    for manifest, skip in (
        (with_manifest_first_row_id(first, 5000), 0),
        (with_manifest_first_row_id(second, 7000), 1),
    ):
        written = read_manifest_entries(PyArrowFileIO(), manifest, discard_deleted=False)
        # DELETED entries keep their id (Java's reader does not assign one to them)
        assert [first_row_id(e.data_file) for e in written] == expected[skip:]
        assert [e.data_file.file_path for e in written] == [f.file_path for f in files[skip:]]


def test_v3_delete_files_are_copied_with_a_null_first_row_id(tmp_path: Path) -> None:
    deletes = [_data_file(PARTITIONED, i, DataFileContent.EQUALITY_DELETES) for i in range(4)]
    source = _write(
        tmp_path, "d3.avro", _added(deletes), spec=PARTITIONED, version=3, content=ManifestContent.DELETES
    )

    copy, copied = _filtered_copy(
        tmp_path, source, spec=PARTITIONED, version=3, removed={deletes[3].file_path}
    )

    assert copied == len(deletes)
    written = read_manifest_entries(PyArrowFileIO(), copy, discard_deleted=False)
    assert [e.data_file.equality_ids for e in written] == [[1, 2]] * 4
    assert [first_row_id(e.data_file) for e in written] == [None] * 4
    assert [e.status for e in written] == [ManifestEntryStatus.EXISTING] * 3 + [ManifestEntryStatus.DELETED]


_LONG = ["null", "long"]


def _record(*fields: tuple[int, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "r2",
        "fields": [{"name": f"f{i}", "field-id": i, "type": t} for i, t in fields],
    }


@pytest.mark.parametrize(
    ("stored", "written", "suffix"),
    [
        (_record((1, "long")), _record((1, "long")), b""),
        # names, docs and logical types do not change the encoding; int and long share it
        (_record((1, {"type": "int", "logicalType": "date"})), _record((1, "long")), b""),
        (_record((1, "long")), _record((1, "long"), (143, ["null", "string"]), (144, _LONG)), b"\x00\x00"),
        (_record((1, "long")), _record((1, "long"), (143, "string")), None),  # a required field added
        (_record((1, "long"), (2, _LONG)), _record((1, "long")), None),  # a field dropped
        (_record((1, "long")), _record((5, "long")), None),  # another field
        (_record((1, _LONG)), _record((1, ["long", "null"])), None),  # union branches swapped
        (
            _record((1, {"type": "fixed", "name": "f", "size": 8})),
            _record((1, {"type": "fixed", "name": "g", "size": 9})),
            None,
        ),
        (_record((1, "string")), _record((1, "bytes")), None),
        (_record((1, "r1")), _record((1, "r1")), None),  # a type by name
    ],
)
def test_copy_suffix(stored: Any, written: Any, suffix: bytes | None) -> None:
    assert data_file_copy_suffix(stored, written) == suffix


@pytest.mark.parametrize(
    ("version", "content", "pyiceberg"),
    [
        (1, ManifestContent.DATA, False),
        (2, ManifestContent.DATA, True),
        (2, ManifestContent.DATA, False),
        (2, ManifestContent.DELETES, False),
        (3, ManifestContent.DATA, False),
        (3, ManifestContent.DELETES, False),
    ],
)
def test_records_read_as_pyiceberg_reads_them(
    tmp_path: Path, version: int, content: ManifestContent, pyiceberg: bool
) -> None:
    """AvroRecords' flattened reader: the same records, field for field, as PyIceberg's AvroFile, and the
    bytes of each record back to back make the file's blocks."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS

    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import AvroRecords

    kind = DataFileContent.DATA if content == ManifestContent.DATA else DataFileContent.EQUALITY_DELETES
    files = [_data_file(PARTITIONED, i, kind) for i in range(30)]
    entries = _added(files)
    for i, entry in enumerate(entries):  # explicit values and nulls in every optional header field
        if i % 2:
            entry.sequence_number, entry.file_sequence_number = 3, 4
    manifest = _write(
        tmp_path, "m.avro", entries, spec=PARTITIONED, version=version, content=content, pyiceberg=pyiceberg
    )
    io = PyArrowFileIO()
    read_types: dict[int, Any] = {-1: ManifestEntry, 2: DataFile}
    read_enums: dict[int, Any] = {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}

    def deep(record: Any) -> Any:
        values = [record[pos] for pos in range(len(record))]
        return [deep(v) if isinstance(v, Record) else (dict(v) if isinstance(v, dict) else v) for v in values]

    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3], read_types, read_enums
    ) as reader:
        expected = [deep(e) for e in reader]

    def records() -> AvroRecords:  # read once each
        return AvroRecords(
            io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3], read_types, read_enums
        )

    pairs = list(records())
    assert [deep(r) for r, _ in pairs] == expected
    assert [deep(r) for r in records().records()] == expected
    assert [type(r) for r, _ in pairs] == [ManifestEntry] * len(files)
    assert all(type(r.data_file) is DataFile for r, _ in pairs)
    # a record's bytes end with its data_file's
    stored = [s for _, s in iter_stored_entries(io, manifest)]
    assert all(s is not None and b.endswith(s.data) for s, (_, b) in zip(stored, pairs, strict=True))
