"""engine/io/lineage.py through io/read.py: a v3 file's rows read with ``_row_id`` and
``_last_updated_sequence_number`` made explicit (spec "Row Lineage"), positions counted before deletes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.io.lineage import (
    LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID,
    ROW_ID_FIELD_ID,
    RowLineage,
    with_lineage_columns,
)
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _field(name: str, field_id: int) -> pa.Field:
    return pa.field(name, pa.int64(), nullable=True, metadata={b"PARQUET:field_id": str(field_id).encode()})


def _write(path: Path, columns: dict[str, tuple[int, list[int | None]]]) -> DataFile:
    schema = pa.schema([_field(name, field_id) for name, (field_id, _values) in columns.items()])
    table = pa.table({name: values for name, (_id, values) in columns.items()}, schema=schema)
    pq.write_table(table, path)
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=str(path),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=table.num_rows,
        file_size_in_bytes=path.stat().st_size,
    )
    data_file.spec_id = 0
    return data_file


def _read(data_file: DataFile, lineage: RowLineage | None, batch_size: int = 2) -> pa.Table:
    batches = list(
        iter_data_file_batches(
            PyArrowFileIO(),
            data_file,
            table_schema=SCHEMA,
            spec=PartitionSpec(),
            name_mapping=None,
            format_version=3,
            batch_size=batch_size,
            lineage=lineage,
        )
    )
    return pa.Table.from_batches(batches)


def test_a_file_without_lineage_columns_inherits_them(tmp_path: Path) -> None:
    data_file = _write(tmp_path / "new.parquet", {"id": (1, [10, 11, 12, 13, 14])})

    rows = _read(data_file, RowLineage(first_row_id=100, data_sequence_number=4))

    assert rows.column_names == ["id", "_row_id", "_last_updated_sequence_number"]
    assert rows.column("_row_id").to_pylist() == [100, 101, 102, 103, 104]  # across batches of 2
    assert rows.column("_last_updated_sequence_number").to_pylist() == [4] * 5
    ids = [int(f.metadata[b"PARQUET:field_id"]) for f in rows.schema][1:]
    assert ids == [ROW_ID_FIELD_ID, LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID]


def test_explicit_values_are_kept_and_nulls_filled(tmp_path: Path) -> None:
    data_file = _write(
        tmp_path / "rewritten.parquet",
        {
            "id": (1, [1, 2, 3]),
            "_row_id": (ROW_ID_FIELD_ID, [7, None, 9]),
            "_last_updated_sequence_number": (LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, [None, 2, 3]),
        },
    )

    rows = _read(data_file, RowLineage(first_row_id=50, data_sequence_number=6))

    assert rows.column("_row_id").to_pylist() == [7, 51, 9]
    assert rows.column("_last_updated_sequence_number").to_pylist() == [6, 2, 3]


def test_a_file_from_before_the_upgrade_reads_nulls(tmp_path: Path) -> None:
    data_file = _write(tmp_path / "old.parquet", {"id": (1, [1, 2])})

    rows = _read(data_file, RowLineage(first_row_id=None, data_sequence_number=1))

    assert rows.column("_row_id").null_count == rows.column("_last_updated_sequence_number").null_count == 2


def test_without_lineage_the_table_schema_only(tmp_path: Path) -> None:
    data_file = _write(tmp_path / "f.parquet", {"id": (1, [1]), "_row_id": (ROW_ID_FIELD_ID, [5])})

    assert _read(data_file, None).column_names == ["id"]


def test_the_write_schema_appends_optional_longs() -> None:
    schema = with_lineage_columns(SCHEMA)

    assert [(f.field_id, f.name, f.required) for f in schema.fields] == [
        (1, "id", False),
        (ROW_ID_FIELD_ID, "_row_id", False),
        (LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, "_last_updated_sequence_number", False),
    ]
    assert with_lineage_columns(schema) is schema
