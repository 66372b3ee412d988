"""engine/commit/dangling.py: a delete file's identity (Java's ``DeleteFileSet`` key).

Many DVs share one Puffin path, so a DV is its path and its blob's offset and size; telling DVs apart by
path alone would remove (and resurrect the rows of) every DV in a Puffin file when one is removed. The
removal itself, on Java-written Puffin files shared by DVs of rewritten and kept data files, is tested in
tests/interop/test_v3_accept_interop.py."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.dangling import delete_file_identity


def _dv(offset: int | None, size: int | None, path: str = "file:///t/data/d.puffin") -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=Record(),
        record_count=2,
        file_size_in_bytes=500,
        referenced_data_file=f"file:///t/data/{offset}.parquet",
        content_offset=offset,
        content_size_in_bytes=size,
    )


def test_dvs_in_one_puffin_file_are_told_apart_by_offset_and_size() -> None:
    first, second = _dv(4, 46), _dv(50, 46)

    assert delete_file_identity(first) == ("file:///t/data/d.puffin", 4, 46)
    assert delete_file_identity(first) != delete_file_identity(second)
    assert delete_file_identity(first) == delete_file_identity(_dv(4, 46))


def test_a_position_delete_file_is_its_path() -> None:
    position = DataFile.from_args(
        _table_format_version=2,
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/pos.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=2,
        file_size_in_bytes=500,
    )

    assert delete_file_identity(position) == ("file:///t/data/pos.parquet", -1, -1)


def test_a_dv_without_its_blob_pointers_falls_back_to_its_path() -> None:
    assert delete_file_identity(_dv(None, None)) == ("file:///t/data/d.puffin", -1, -1)
