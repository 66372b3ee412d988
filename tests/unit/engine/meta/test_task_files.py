"""engine/meta/task_files.py: a task's data files with their deletes survive the JSON round trip, and a
group's rewrite drops only the delete files that apply to nothing outside it."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile
from airflow_provider_iceberg_exec.engine.meta.task_files import (
    has_equality_deletes,
    scanned_from_json,
    scanned_to_json,
)

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
SPECS = {0: UNPARTITIONED_PARTITION_SPEC}


def _file(name: str, content: DataFileContent = DataFileContent.DATA, **extra) -> DataFile:
    data_file = DataFile.from_args(
        content=content,
        file_path=f"file:///w/t/data/{name}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=10,
        file_size_in_bytes=1000,
        **extra,
    )
    data_file.spec_id = 0
    return data_file


POS_A = ScannedDelete(_file("pos-a", DataFileContent.POSITION_DELETES), 3)
POS_SHARED = ScannedDelete(_file("pos-ab", DataFileContent.POSITION_DELETES), 3)
EQ = ScannedDelete(_file("eq", DataFileContent.EQUALITY_DELETES, equality_ids=[1]), 4)
A = ScannedFile(_file("a"), 2, (POS_A, POS_SHARED, EQ))
B = ScannedFile(_file("b"), 2, (POS_SHARED,))
C = ScannedFile(_file("c"), 1)


def test_a_task_entry_round_trips_with_its_sequence_numbers_and_deletes() -> None:
    entry = scanned_to_json(A, SPECS, SCHEMA)
    assert entry["data-file"]["file-path"] == "file:///w/t/data/a.parquet"
    assert entry["data-sequence-number"] == 2
    assert [(d["content-file"]["content"], d["data-sequence-number"]) for d in entry["delete-files"]] == [
        ("position-deletes", 3),
        ("position-deletes", 3),
        ("equality-deletes", 4),
    ]
    back = scanned_from_json(entry, SPECS, SCHEMA)
    assert back.data_file.file_path == A.data_file.file_path
    assert back.data_sequence_number == 2
    assert [
        (d.data_file.file_path, d.data_file.content, d.data_sequence_number) for d in back.delete_files
    ] == [(d.data_file.file_path, d.data_file.content, d.data_sequence_number) for d in A.delete_files]
    assert back.delete_files[2].data_file.equality_ids == [1]


def test_an_entry_without_deletes_or_sequence_number_reads_as_zero_and_none() -> None:
    entry = scanned_to_json(C, SPECS, SCHEMA)
    del entry["delete-files"], entry["data-sequence-number"]
    back = scanned_from_json(entry, SPECS, SCHEMA)
    assert (back.data_sequence_number, back.delete_files) == (0, ())


def test_equality_deletes_are_told_from_position_deletes() -> None:
    assert has_equality_deletes(A)
    assert not has_equality_deletes(B)
    assert not has_equality_deletes(C)
