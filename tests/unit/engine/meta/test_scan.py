"""Which delete files are file-scoped (Java's ``ContentFileUtil.isFileScoped``), the deletes whose record
counts ``delete-ratio-threshold`` adds up."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.meta.scan import is_file_scoped

PATH_ID = 2147483546


def _delete(
    content: DataFileContent,
    *,
    lower: bytes | None = None,
    upper: bytes | None = None,
    referenced: str | None = None,
    file_format: FileFormat = FileFormat.PARQUET,
) -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path="s3://b/t/data/delete.parquet",
        file_format=file_format,
        partition=Record(),
        record_count=4,
        file_size_in_bytes=100,
        lower_bounds={} if lower is None else {PATH_ID: lower},
        upper_bounds={} if upper is None else {PATH_ID: upper},
        referenced_data_file=referenced,
    )


POS = DataFileContent.POSITION_DELETES


@pytest.mark.parametrize(
    ("delete_file", "expected"),
    [
        pytest.param(_delete(POS, referenced="s3://b/t/data/a.parquet"), True, id="referenced-data-file"),
        pytest.param(
            _delete(POS, referenced="s3://b/t/data/a.parquet", file_format=FileFormat.PUFFIN),
            True,
            id="deletion-vector",
        ),
        pytest.param(_delete(POS, lower=b"s3://a", upper=b"s3://a"), True, id="equal-path-bounds"),
        pytest.param(_delete(POS, lower=b"s3://a", upper=b"s3://b"), False, id="path-range"),
        pytest.param(_delete(POS, lower=b"s3://a"), False, id="lower-bound-only"),
        pytest.param(_delete(POS), False, id="no-bounds"),
        pytest.param(
            _delete(DataFileContent.EQUALITY_DELETES, lower=b"x", upper=b"x"), False, id="equality-delete"
        ),
    ],
)
def test_is_file_scoped(delete_file: DataFile, expected: bool) -> None:
    assert is_file_scoped(delete_file) is expected
