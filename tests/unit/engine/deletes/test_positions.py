"""Position delete files: the positions of one data file, read from real Parquet position delete files by
field id (or by the spec's column names), merged sorted and unique, and replaced by a deletion vector."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from airflow_provider_iceberg_exec.engine.deletes.positions import (
    FILE_PATH_FIELD_ID,
    POS_FIELD_ID,
    deleted_positions,
    read_position_deletes,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

A = "file:///warehouse/t/data/a.parquet"
B = "file:///warehouse/t/data/b.parquet"


def _field(name: str, type_: pa.DataType, field_id: int | None) -> pa.Field:
    metadata = None if field_id is None else {b"PARQUET:field_id": str(field_id).encode()}
    return pa.field(name, type_, nullable=False, metadata=metadata)


def _write_pos_deletes(
    path: Path,
    rows: list[tuple[str, int]],
    *,
    names: tuple[str, str] = ("file_path", "pos"),
    field_ids: bool = True,
    row_group_size: int | None = None,
) -> DataFile:
    schema = pa.schema(
        [
            _field(names[0], pa.string(), FILE_PATH_FIELD_ID if field_ids else None),
            _field(names[1], pa.int64(), POS_FIELD_ID if field_ids else None),
        ]
    )
    table = pa.table([[r[0] for r in rows], [r[1] for r in rows]], schema=schema)
    pq.write_table(table, path, row_group_size=row_group_size)
    return _entry(str(path), DataFileContent.POSITION_DELETES, FileFormat.PARQUET, len(rows))


def _entry(
    path: str,
    content: DataFileContent,
    file_format: FileFormat,
    record_count: int = 1,
    **v3: object,
) -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path=path,
        file_format=file_format,
        partition=Record(),
        record_count=record_count,
        file_size_in_bytes=100,
        **v3,
    )


def _dv(tmp_path: Path, positions: list[int], referenced: str | None) -> DataFile:
    body = b"\xd1\xd3\x39\x64" + BitMap64(positions).serialize()
    blob = struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))
    path = tmp_path / "dv.puffin"
    path.write_bytes(b"PFA1" + blob + b"PFA1")
    return _entry(
        str(path),
        DataFileContent.POSITION_DELETES,
        FileFormat.PUFFIN,
        len(positions),
        referenced_data_file=referenced,
        content_offset=4,
        content_size_in_bytes=len(blob),
    )


def _scanned(*deletes: DataFile, path: str = A) -> ScannedFile:
    data = _entry(path, DataFileContent.DATA, FileFormat.PARQUET, 100)
    return ScannedFile(data, 1, tuple(ScannedDelete(d, 2) for d in deletes))


# -- read_position_deletes ----------------------------------------------------------------------------------


def test_reads_only_the_positions_of_the_given_data_file(tmp_path: Path) -> None:
    delete = _write_pos_deletes(tmp_path / "d.parquet", [(A, 9), (A, 2), (B, 4), (A, 2), (B, 0)])

    positions = read_position_deletes(PyArrowFileIO(), delete, A)

    assert positions.dtype == np.int64
    assert positions.tolist() == [9, 2, 2]  # file order, duplicates kept
    assert read_position_deletes(PyArrowFileIO(), delete, B).tolist() == [4, 0]


def test_a_data_file_the_delete_file_does_not_name_gets_no_positions(tmp_path: Path) -> None:
    delete = _write_pos_deletes(tmp_path / "d.parquet", [(A, 1)])

    positions = read_position_deletes(PyArrowFileIO(), delete, "file:///warehouse/t/data/c.parquet")

    assert positions.dtype == np.int64
    assert positions.tolist() == []


def test_reads_across_row_groups(tmp_path: Path) -> None:
    rows = [(A if i % 3 else B, i) for i in range(1000)]
    delete = _write_pos_deletes(tmp_path / "d.parquet", rows, row_group_size=100)

    positions = read_position_deletes(PyArrowFileIO(), delete, A)

    assert positions.tolist() == [i for i in range(1000) if i % 3]


def test_columns_are_found_by_field_id_whatever_their_names(tmp_path: Path) -> None:
    delete = _write_pos_deletes(tmp_path / "d.parquet", [(A, 5), (B, 6)], names=("path_x", "position_x"))

    assert read_position_deletes(PyArrowFileIO(), delete, A).tolist() == [5]


def test_without_field_ids_the_spec_column_names_are_used(tmp_path: Path) -> None:
    delete = _write_pos_deletes(tmp_path / "d.parquet", [(A, 5), (B, 6), (A, 7)], field_ids=False)

    assert read_position_deletes(PyArrowFileIO(), delete, A).tolist() == [5, 7]


def test_an_optional_row_column_is_ignored(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            _field("file_path", pa.string(), FILE_PATH_FIELD_ID),
            _field("pos", pa.int64(), POS_FIELD_ID),
            pa.field(
                "row", pa.struct([pa.field("id", pa.int64())]), metadata={b"PARQUET:field_id": b"2147483544"}
            ),
        ]
    )
    pq.write_table(pa.table([[A, B], [3, 4], [{"id": 1}, {"id": 2}]], schema=schema), tmp_path / "d.parquet")
    delete = _entry(str(tmp_path / "d.parquet"), DataFileContent.POSITION_DELETES, FileFormat.PARQUET, 2)

    assert read_position_deletes(PyArrowFileIO(), delete, A).tolist() == [3]


def test_a_file_without_a_pos_column_is_refused(tmp_path: Path) -> None:
    delete = _write_pos_deletes(
        tmp_path / "d.parquet", [(A, 5)], names=("file_path", "other"), field_ids=False
    )

    with pytest.raises(DataFileReadError, match=f"no column with field id {POS_FIELD_ID} \\(pos\\)"):
        read_position_deletes(PyArrowFileIO(), delete, A)


def test_a_file_without_a_file_path_column_is_refused(tmp_path: Path) -> None:
    delete = _write_pos_deletes(tmp_path / "d.parquet", [(A, 5)], names=("path", "pos"), field_ids=False)

    with pytest.raises(
        DataFileReadError, match=f"no column with field id {FILE_PATH_FIELD_ID} \\(file_path\\)"
    ):
        read_position_deletes(PyArrowFileIO(), delete, A)


def test_a_missing_delete_file_is_a_read_error(tmp_path: Path) -> None:
    delete = _entry(str(tmp_path / "gone.parquet"), DataFileContent.POSITION_DELETES, FileFormat.PARQUET)

    with pytest.raises(DataFileReadError, match=r"gone\.parquet cannot be read"):
        read_position_deletes(PyArrowFileIO(), delete, A)


def test_a_file_that_is_not_parquet_is_a_read_error(tmp_path: Path) -> None:
    (tmp_path / "junk.parquet").write_bytes(b"not a parquet file at all")
    delete = _entry(str(tmp_path / "junk.parquet"), DataFileContent.POSITION_DELETES, FileFormat.PARQUET)

    with pytest.raises(DataFileReadError, match=r"junk\.parquet cannot be read"):
        read_position_deletes(PyArrowFileIO(), delete, A)


# -- deleted_positions --------------------------------------------------------------------------------------


def test_no_delete_files_delete_nothing() -> None:
    positions = deleted_positions(PyArrowFileIO(), _scanned())

    assert positions.dtype == np.int64
    assert positions.tolist() == []


def test_several_position_delete_files_merge_sorted_and_unique(tmp_path: Path) -> None:
    first = _write_pos_deletes(tmp_path / "1.parquet", [(A, 9), (A, 3), (B, 1), (A, 3)])
    second = _write_pos_deletes(tmp_path / "2.parquet", [(A, 0), (A, 9), (B, 2)])

    positions = deleted_positions(PyArrowFileIO(), _scanned(first, second))

    assert positions.dtype == np.int64
    assert positions.tolist() == [0, 3, 9]


def test_equality_delete_files_are_not_read_here(tmp_path: Path) -> None:
    position = _write_pos_deletes(tmp_path / "1.parquet", [(A, 4)])
    equality = _entry(
        str(tmp_path / "missing-eq.parquet"), DataFileContent.EQUALITY_DELETES, FileFormat.PARQUET
    )

    assert deleted_positions(PyArrowFileIO(), _scanned(equality, position)).tolist() == [4]


def test_a_deletion_vector_replaces_the_position_delete_files(tmp_path: Path) -> None:
    position = _write_pos_deletes(tmp_path / "1.parquet", [(A, 1), (A, 2)])
    dv = _dv(tmp_path, [7, 5, (1 << 32) + 1], referenced=A)

    positions = deleted_positions(PyArrowFileIO(), _scanned(position, dv))

    assert positions.tolist() == [5, 7, (1 << 32) + 1]


def test_a_deletion_vector_without_referenced_data_file_applies(tmp_path: Path) -> None:
    dv = _dv(tmp_path, [3], referenced=None)

    assert deleted_positions(PyArrowFileIO(), _scanned(dv)).tolist() == [3]


def test_a_deletion_vector_of_another_data_file_is_refused(tmp_path: Path) -> None:
    dv = _dv(tmp_path, [3], referenced=B)

    with pytest.raises(DataFileReadError, match=f"does not reference {A}"):
        deleted_positions(PyArrowFileIO(), _scanned(dv))
