"""Builders shared by the compaction integration tests (tests/integration/test_compaction*.py)."""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec, _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from tests.helpers import local_path

MiB = 1024 * 1024

ALL_TYPES_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "i", IntegerType(), required=False),
    NestedField(3, "f", FloatType(), required=False),
    NestedField(4, "d", DoubleType(), required=False),
    NestedField(5, "b", BooleanType(), required=False),
    NestedField(6, "s", StringType(), required=False),
    NestedField(7, "dec", DecimalType(10, 2), required=False),
    NestedField(8, "ts", TimestampType(), required=False),
    NestedField(9, "tstz", TimestamptzType(), required=False),
    NestedField(10, "dt", DateType(), required=False),
    NestedField(11, "tm", TimeType(), required=False),
    NestedField(12, "u", UUIDType(), required=False),
    NestedField(13, "bin", BinaryType(), required=False),
    NestedField(14, "fx", FixedType(4), required=False),
    NestedField(
        15,
        "st",
        StructType(
            NestedField(16, "a", IntegerType(), required=False),
            NestedField(17, "b", StringType(), required=False),
            NestedField(
                18, "inner", StructType(NestedField(19, "x", DoubleType(), required=False)), required=False
            ),
        ),
        required=False,
    ),
    NestedField(20, "l", ListType(21, LongType(), element_required=False), required=False),
    NestedField(
        22,
        "ls",
        ListType(
            23,
            StructType(
                NestedField(24, "k", StringType(), required=False),
                NestedField(25, "v", LongType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
    NestedField(26, "m", MapType(27, StringType(), 28, DoubleType(), value_required=False), required=False),
)

ALL_TYPES_SPEC = PartitionSpec(
    PartitionField(source_id=6, field_id=1000, transform=IdentityTransform(), name="s_identity"),
    PartitionField(source_id=1, field_id=1001, transform=BucketTransform(3), name="id_bucket"),
    PartitionField(source_id=8, field_id=1002, transform=DayTransform(), name="ts_day"),
    PartitionField(source_id=7, field_id=1003, transform=TruncateTransform(50_000), name="dec_trunc"),
)

_BASE_TS = datetime.datetime(2026, 3, 1, 5, 30)


def all_types_row(k: int) -> dict[str, Any]:
    """Row ``k`` of the all-types table: every type, with nulls, NaN, -0.0 and empty values mixed in."""
    return {
        "id": k,
        "i": None if k % 7 == 0 else k - 50,
        "f": float("nan") if k % 5 == 0 else (None if k % 11 == 0 else k / 3),
        "d": float("nan") if k % 6 == 0 else (-0.0 if k % 13 == 0 else (None if k % 17 == 0 else k * 1.5)),
        "b": None if k % 19 == 0 else k % 2 == 0,
        "s": ("x", "y", None)[k % 3],
        "dec": None if k % 9 == 0 else decimal.Decimal(k * 37 % 100_000) / 100,
        "ts": None if k % 23 == 0 else _BASE_TS + datetime.timedelta(minutes=13 * k, microseconds=k),
        "tstz": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(minutes=13 * k),
        "dt": None if k % 29 == 0 else datetime.date(1969, 12, 1) + datetime.timedelta(days=k),
        "tm": datetime.time(k % 24, k % 60, k % 60, k),
        "u": None if k % 31 == 0 else uuid.UUID(int=k * 7919 + 1).bytes,
        "bin": None if k % 10 == 1 else bytes([k % 256]) * (k % 5),
        "fx": None if k % 37 == 0 else k.to_bytes(4, "little"),
        "st": None if k % 10 == 0 else {"a": k, "b": None if k % 4 == 0 else f"s{k}", "inner": {"x": k / 7}},
        "l": None if k % 8 == 0 else ([] if k % 8 == 1 else [k, None, -k]),
        "ls": None if k % 12 == 0 else [{"k": f"k{k}", "v": k}, {"k": None, "v": None}],
        "m": None if k % 4 == 0 else ({} if k % 4 == 1 else {"a": float(k), "b": None, "nan": float("nan")}),
    }


def all_types_rows(table: Table, start: int, count: int) -> pa.Table:
    """Rows ``start .. start+count-1`` in the table's Arrow schema."""
    return pa.Table.from_pylist(
        [all_types_row(k) for k in range(start, start + count)], schema=table.schema().as_arrow()
    )


def create_all_types_table(
    catalog: Catalog,
    name: str = "ns.all_types",
    *,
    partitioned: bool,
    properties: dict[str, str] | None = None,
) -> Table:
    return catalog.create_table(
        name,
        schema=ALL_TYPES_SCHEMA,
        partition_spec=ALL_TYPES_SPEC if partitioned else PartitionSpec(),
        properties=properties or {},
    )


def limits(tmp_path: Path, memory_bytes: int = 64 * MiB, **kwargs: Any) -> ResourceLimits:
    """Small limits, as CI runs them: a 64 MiB limit and a spill directory inside the test's tmp."""
    kwargs.setdefault("spill_dir", str(tmp_path / "spill"))
    return ResourceLimits(memory_limit_bytes=memory_bytes, **kwargs)


def run_compact(
    table: Table, tmp_path: Path, options: dict[str, str] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """``compact`` with small limits and, unless given, ``min-input-files=2``."""
    merged = {"min-input-files": "2", **(options or {})}
    kwargs.setdefault("limits", limits(tmp_path))
    return compact(table, options=merged, **kwargs)


def read_file(data_file: DataFile | str) -> pa.Table:
    """One data file as written (no Iceberg projection)."""
    path = data_file if isinstance(data_file, str) else data_file.file_path
    return pq.read_table(local_path(path), partitioning=None)  # not the path's key=value (PyArrow 23)


def assert_rows_match_partition(table: Table, data_file: DataFile) -> None:
    """Every row of ``data_file`` has the file's partition values under the file's spec.

    Transforms are applied per row with PyIceberg's pure-Python transforms (not the Arrow ones the
    engine splits with).
    """
    spec = table.specs()[data_file.spec_id]
    schema = table.schema()
    rows = read_file(data_file).to_pylist()
    assert rows, data_file.file_path
    for position, partition_field in enumerate(spec.fields):
        source = schema.find_field(partition_field.source_id)
        column = schema.find_column_name(partition_field.source_id)
        assert column is not None
        transform = partition_field.transform.transform(source.field_type)
        expected = data_file.partition[position]
        for row in rows:
            value = row
            for part in column.split("."):
                value = value[part] if value is not None else None
            if isinstance(value, bytes) and isinstance(source.field_type, UUIDType):
                value = uuid.UUID(bytes=value)
            actual = transform(_to_partition_representation(source.field_type, value))
            assert actual == expected, (data_file.file_path, partition_field.name, row)


#: ``letters_table``'s columns
LETTERS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)


def letters(rng: np.random.Generator, rows: int, width: int) -> pa.Array:
    """``rows`` strings of ``width`` random lowercase letters."""
    data = rng.integers(97, 123, rows * width, dtype=np.uint8).tobytes()
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32).tobytes()
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def letters_table(
    catalog: SqlCatalog, name: str, *, categories: tuple[str, ...], files: int, rows_per_file: int
) -> Table:
    """``files`` appends per category of ``rows_per_file`` rows with 40 random letters each, ids counting
    up; partitioned by identity(category) when there are several categories."""
    spec = (
        PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
        )
        if len(categories) > 1
        else PartitionSpec()
    )
    table = catalog.create_table(name, schema=LETTERS_SCHEMA, partition_spec=spec)
    rng = np.random.default_rng(16)
    start = 0
    for _ in range(files):
        for category in categories:
            table.append(
                pa.table(
                    {
                        "id": pa.array(np.arange(start, start + rows_per_file), pa.int64()),
                        "category": pa.array([category] * rows_per_file, pa.string()),
                        "payload": letters(rng, rows_per_file, 40),
                    },
                    schema=LETTERS_SCHEMA.as_arrow(),
                )
            )
            start += rows_per_file
    return table
