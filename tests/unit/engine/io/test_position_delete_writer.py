"""The position-delete writer: sorted rows in, Parquet delete files with Java's metadata out."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFileContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.locations import load_location_provider
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import NestedField, StringType

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.position_delete_writer import (
    DeleteGranularity,
    write_position_deletes,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

SCHEMA = Schema(NestedField(1, "category", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "category"), spec_id=3)
PATH, POS = 2147483546, 2147483545


def _batches(rows: list[tuple[str, int]], size: int = 2) -> list[pa.RecordBatch]:
    table = pa.table({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]})
    return table.to_batches(max_chunksize=size)


def _write(tmp_path: Path, rows, granularity=DeleteGranularity.FILE, target=1 << 20, **kwargs):
    return write_position_deletes(
        PyArrowFileIO(),
        load_location_provider(f"file://{tmp_path}/t", {}),
        SPEC,
        Record("a"),
        _batches(rows),
        target,
        schema=SCHEMA,
        properties=kwargs.pop("properties", {}),
        buffer_bytes=1 << 20,
        granularity=granularity,
        file_prefix="g-1",
    )


ROWS = [
    ("s3://b/d1.parquet", 0),
    ("s3://b/d1.parquet", 7),
    ("s3://b/d2.parquet", 3),
    ("s3://b/d3.parquet", 1),
]


def test_file_granularity_writes_one_file_scoped_delete_per_data_file(tmp_path: Path) -> None:
    files = _write(tmp_path, ROWS)
    assert [referenced_data_file(f) for f in files] == [
        "s3://b/d1.parquet",
        "s3://b/d2.parquet",
        "s3://b/d3.parquet",
    ]
    first = files[0]
    assert first.content == DataFileContent.POSITION_DELETES
    assert first.spec_id == 3
    assert first.partition == Record("a")
    assert first.record_count == 2
    assert first.lower_bounds == {PATH: b"s3://b/d1.parquet", POS: struct.pack("<q", 0)}
    assert first.upper_bounds == {PATH: b"s3://b/d1.parquet", POS: struct.pack("<q", 7)}
    assert first.value_counts == {PATH: 2, POS: 2}
    assert first.null_value_counts == {PATH: 0, POS: 0}
    assert first.sort_order_id is None
    local = first.file_path.removeprefix("file://")
    assert "/category=a/" in local
    assert first.file_size_in_bytes == Path(local).stat().st_size
    written = pq.read_table(local, partitioning=None)  # the file alone (PyArrow 23 adds the path's key=value)
    assert written.to_pylist() == [
        {"file_path": "s3://b/d1.parquet", "pos": 0},
        {"file_path": "s3://b/d1.parquet", "pos": 7},
    ]
    fields = {f.name: f.metadata[b"PARQUET:field_id"] for f in written.schema}
    assert fields == {"file_path": str(PATH).encode(), "pos": str(POS).encode()}
    assert not written.schema.field("pos").nullable


def test_partition_granularity_writes_one_file_without_referenced_data_file(tmp_path: Path) -> None:
    (only,) = _write(tmp_path, ROWS, DeleteGranularity.PARTITION)
    assert referenced_data_file(only) is None
    assert only.record_count == 4
    assert only.lower_bounds[PATH] == b"s3://b/d1.parquet"
    assert only.upper_bounds[PATH] == b"s3://b/d3.parquet"
    assert only.upper_bounds[POS] == struct.pack("<q", 7)


def test_files_roll_at_the_target_size_and_keep_every_row_in_order(tmp_path: Path) -> None:
    rows = [(f"s3://b/data-{i // 1000:03d}.parquet", i) for i in range(20_000)]
    files = _write(tmp_path, rows, DeleteGranularity.PARTITION, target=16 * 1024)
    assert len(files) > 1
    paths = [f.file_path.removeprefix("file://") for f in files]
    back = [r for path in paths for r in pq.read_table(path, partitioning=None).to_pylist()]
    assert [(r["file_path"], r["pos"]) for r in back] == rows
    assert sum(f.record_count for f in files) == len(rows)


def test_no_rows_no_file(tmp_path: Path) -> None:
    assert _write(tmp_path, []) == []


def test_a_failure_removes_what_was_written(tmp_path: Path) -> None:
    def broken():
        yield from _batches(ROWS)
        raise RuntimeError("reader died")

    with pytest.raises(RuntimeError):
        write_position_deletes(
            PyArrowFileIO(),
            load_location_provider(f"file://{tmp_path}/t", {}),
            SPEC,
            Record("a"),
            broken(),
            1 << 20,
            schema=SCHEMA,
            properties={},
            buffer_bytes=1 << 20,
        )
    assert not list(tmp_path.rglob("*.parquet"))


def test_granularity_follows_the_table_with_spark_default_file() -> None:
    assert DeleteGranularity.of_table({}) is DeleteGranularity.FILE
    assert (
        DeleteGranularity.of_table({"write.delete.granularity": "Partition"}) is DeleteGranularity.PARTITION
    )
    with pytest.raises(ConfigurationError, match=r"write\.delete\.granularity"):
        DeleteGranularity.of_table({"write.delete.granularity": "row"})
