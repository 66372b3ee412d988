"""Which delete files are file-scoped (Java's ``ContentFileUtil.isFileScoped``), the deletes whose record
counts ``delete-ratio-threshold`` adds up; which delete files the scan's index applies to a data file."""

from __future__ import annotations

import random

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.meta.scan import _DeleteIndex, _may_reference, is_file_scoped

PATH_ID = 2147483546


def _delete(
    content: DataFileContent,
    *,
    lower: bytes | None = None,
    upper: bytes | None = None,
    referenced: str | None = None,
    file_format: FileFormat = FileFormat.PARQUET,
    path: str = "s3://b/t/data/delete.parquet",
) -> DataFile:
    delete_file = DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path=path,
        file_format=file_format,
        partition=Record(),
        record_count=4,
        file_size_in_bytes=100,
        lower_bounds={} if lower is None else {PATH_ID: lower},
        upper_bounds={} if upper is None else {PATH_ID: upper},
        referenced_data_file=referenced,
    )
    delete_file.spec_id = 0
    return delete_file


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


def _entry(delete_file: DataFile, sequence_number: int) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=ManifestEntryStatus.ADDED,
        snapshot_id=1,
        sequence_number=sequence_number,
        file_sequence_number=sequence_number,
        data_file=delete_file,
    )


def _data(path: str) -> DataFile:
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=4,
        file_size_in_bytes=100,
    )
    data_file.spec_id = 0
    return data_file


def test_the_delete_index_finds_what_testing_every_delete_finds() -> None:
    """Position deletes of one data file (by referenced_data_file or equal path bounds) are looked up by
    that file's path; the others (a range of paths, one bound, none) tested one by one; equality deletes
    by sequence number: for every data file, the same delete files as testing each against it."""
    rng = random.Random(11)
    paths = [f"s3://b/t/data/{i:03d}.parquet" for i in range(40)]
    deletes = []
    for number in range(120):
        path = rng.choice(paths)
        lower, upper = sorted(rng.sample(paths, 2))
        shape = rng.choice(["referenced", "bounds", "range", "lower", "none", "referenced-and-range"])
        shapes = {
            "referenced": {"referenced": path},
            "bounds": {"lower": path.encode(), "upper": path.encode()},
            "range": {"lower": lower.encode(), "upper": upper.encode()},
            "lower": {"lower": lower.encode()},
            "none": {},
            "referenced-and-range": {"lower": lower.encode(), "upper": upper.encode(), "referenced": path},
        }
        delete = _delete(POS, path=f"s3://b/t/deletes/{number:03d}.parquet", **shapes[shape])  # type: ignore[arg-type]
        deletes.append((delete, rng.randint(1, 5)))
    equality = _delete(DataFileContent.EQUALITY_DELETES, path="s3://b/t/deletes/eq.parquet")
    deletes.append((equality, 3))
    index = _DeleteIndex([_entry(d, seq) for d, seq in deletes], unpartitioned_specs={0})
    for path in paths:
        for sequence_number in range(6):
            expected = sorted(
                d.file_path
                for d, seq in deletes
                if (d.content == POS and seq >= sequence_number and _may_reference(d, path))
                or (d.content != POS and seq > sequence_number)
            )
            found = [d.data_file.file_path for d in index.for_data_file(_data(path), sequence_number)]
            assert found == expected
