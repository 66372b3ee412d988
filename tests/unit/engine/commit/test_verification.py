"""engine/commit/verification.py: an added file is committed only when it lies under the table and is
the Parquet file its result claims (size and record count); a vanished one means rewrite again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_iceberg_exec.engine.commit.verification import verify_added_files
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError, DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.write import RollingDataFileWriter

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def table(catalog):
    return catalog.create_table("ns.t", schema=SCHEMA)


@pytest.fixture
def written(table):
    """One real data file of 100 rows written by the engine's writer, not committed."""
    writer = RollingDataFileWriter(
        io=table.io,
        location_provider=table.location_provider(),
        schema=table.schema(),
        spec=table.spec(),
        properties=table.properties,
        target_file_size_bytes=512 * 1024**2,
        buffer_bytes=1024**2,
    )
    writer.write(None, pa.record_batch({"id": pa.array(range(100), pa.int64())}))
    (data_file,) = writer.close()
    return data_file


def _claiming(data_file, **changes):
    """A DataFile naming ``data_file`` with some claims changed (DataFile's fields are read-only)."""
    from pyiceberg.manifest import DataFile

    claims = {
        "file_path": data_file.file_path,
        "file_size_in_bytes": data_file.file_size_in_bytes,
        "record_count": data_file.record_count,
        **changes,
    }
    return DataFile.from_args(
        content=data_file.content, file_format=data_file.file_format, partition=data_file.partition, **claims
    )


def _local(data_file) -> Path:
    return Path(data_file.file_path.removeprefix("file://"))


def test_a_file_that_is_what_its_result_says_passes(table, written) -> None:
    verify_added_files(table, [written])


def test_a_wrong_size_or_record_count_is_refused(table, written) -> None:
    bigger = _claiming(written, file_size_in_bytes=written.file_size_in_bytes + 1)
    with pytest.raises(DataFileCodecError, match=f"has {written.file_size_in_bytes} bytes, the result says"):
        verify_added_files(table, [bigger])
    fewer = _claiming(written, record_count=99)
    with pytest.raises(DataFileCodecError, match="holds 100 rows, the result says 99"):
        verify_added_files(table, [fewer])


def test_a_file_outside_the_table_is_refused_before_it_is_read(table, written, tmp_path) -> None:
    outside = _claiming(written, file_path=f"file://{tmp_path}/elsewhere.parquet")
    shutil.copy(_local(written), tmp_path / "elsewhere.parquet")
    with pytest.raises(DataFileCodecError, match="is outside the table's locations; nothing committed"):
        verify_added_files(table, [outside])


def test_a_vanished_file_asks_for_a_new_rewrite(table, written) -> None:
    _local(written).unlink()
    with pytest.raises(CommitValidationError, match=r"no longer exists .* plan and rewrite again"):
        verify_added_files(table, [written])


def test_a_file_that_is_not_parquet_is_refused(table, written) -> None:
    _local(written).write_bytes(b"not parquet at all")
    with pytest.raises(DataFileCodecError, match="is not a readable Parquet file"):
        verify_added_files(table, [written])
