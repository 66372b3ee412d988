"""Compaction with Spark's ``zorder(c1, c2)`` sort order on a real catalog: rows unchanged (checksum by
PyIceberg's scan), each output file's rows in z-value order (the reference port of Java's
``ZOrderByteUtils`` in the unit tests computes the values again), files stamped unsorted as Spark's."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from tests.helpers import live_checksum
from tests.unit.engine.io.test_zorder import _reference


@pytest.mark.parametrize(
    ("columns", "contribution"),
    [
        (("x", "tag"), 3),  # unequal widths: 11 bytes, a decimal128 sort column
        (("x", "tag"), 8),  # equal widths: 16 bytes, interleaved as 64-bit words
        (("x", "y", "tag"), 8),  # 24 bytes: a decimal256 sort column
        (("x", "y", "tag"), 20),  # 36 bytes: a binary sort column
    ],
)
def test_zorder_compaction_orders_rows_by_interleaved_bits(
    catalog: Catalog, tmp_path: Path, columns: tuple[str, ...], contribution: int
) -> None:
    schema = Schema(
        NestedField(1, "x", LongType(), required=False),
        NestedField(2, "y", DoubleType(), required=False),
        NestedField(3, "tag", StringType(), required=False),
    )
    table = catalog.create_table("ns.z", schema=schema, properties={"format-version": "2"})
    rng = random.Random(7)
    for _ in range(6):
        rows = [
            {
                "x": rng.choice([None, *range(-50, 50)]),
                "y": rng.uniform(-1e3, 1e3),
                "tag": f"t{rng.randrange(99)}",
            }
            for _ in range(500)
        ]
        table.append(pa.Table.from_pylist(rows, schema=schema.as_arrow()))
    before = live_checksum(table)
    limits = ResourceLimits(
        memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"), target_partitions=2
    )
    result = compact(
        table,
        strategy="sort",
        sort_order=f"zorder({', '.join(columns)})",
        options={"rewrite-all": "true", "var-length-contribution": str(contribution)},
        limits=limits,
    )
    assert result["rewritten_data_files_count"] == 6
    assert live_checksum(table) == before
    table.refresh()
    files = [task.file for task in table.scan().plan_files()]
    assert {f.sort_order_id for f in files} == {0}
    for data_file in files:
        rows = pq.read_table(data_file.file_path.removeprefix("file://")).to_pylist()
        kinds = [{"x": "long", "y": "double", "tag": "string"}[c] for c in columns]
        values = _reference([tuple(r[c] for c in columns) for r in rows], kinds, contribution, 2**31 - 1)
        assert values == sorted(values)


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize("columns", [("x", "ts"), ("ts",)])
def test_zorder_of_longs_and_timestamps_gets_the_columns_back_from_the_z_values(
    catalog: Catalog, tmp_path: Path, columns: tuple[str, ...], partitioned: bool
) -> None:
    """Longs and timestamps are staged only as their z-value and a null mask: every value and null comes
    back (checksum by PyIceberg's scan), with the extremes of both types, and the rows in z-value order."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import TimestamptzType

    schema = Schema(
        NestedField(1, "x", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "tag", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "tag")) if partitioned else None
    kwargs = {"partition_spec": spec} if spec else {}
    table = catalog.create_table("ns.zl", schema=schema, properties={"format-version": "2"}, **kwargs)
    rng = random.Random(11)
    extremes = [-(2**63), 2**63 - 1, 0, -1]
    for _ in range(5):
        rows = [
            {
                "x": rng.choice([None, *extremes, rng.randint(-(2**63), 2**63 - 1)]),
                "ts": rng.choice([None, -(2**55), 2**57, 0, rng.randint(0, 2**53)]),
                "tag": rng.choice(["a", "b", None]),
            }
            for _ in range(400)
        ]
        arrow = pa.table(
            {
                "x": pa.array([r["x"] for r in rows], pa.int64()),
                "ts": pa.array([r["ts"] for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "tag": pa.array([r["tag"] for r in rows], pa.string()),
            }
        )
        table.append(arrow.cast(schema.as_arrow()))
    before = live_checksum(table)
    limits = ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))
    compact(
        table,
        strategy="sort",
        sort_order=f"zorder({', '.join(columns)})",
        options={"rewrite-all": "true"},
        limits=limits,
    )
    assert live_checksum(table) == before
    table.refresh()
    for data_file in (task.file for task in table.scan().plan_files()):
        written = pq.read_table(data_file.file_path.removeprefix("file://"))
        numbers = [written.column(c).cast(pa.int64()).to_pylist() for c in columns]
        values = _reference(list(zip(*numbers, strict=True)), ["long"] * len(columns), 8, 2**31 - 1)
        assert values == sorted(values)
