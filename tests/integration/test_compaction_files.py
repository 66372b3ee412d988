"""What compaction writes: Parquet files with field ids, placed by the location provider, written with
the table's write properties, rolled at the target size, and described by exact DataFile metrics
(issue 2, section 3); sort order ids and sorted rows; a sort that has to spill (section 2).
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, ListType, LongType, NestedField, StringType, TimestampType

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES
from tests.helpers import data_files, live_checksum, local_path, parquet_data_page_counts
from tests.integration.compaction_support import (
    MiB,
    all_types_rows,
    create_all_types_table,
    limits,
    read_file,
    run_compact,
)

pytestmark = pytest.mark.integration

KiB = 1024


def _random_table(rng: np.random.Generator, rows: int, region: str = "eu", width: int = 30) -> pa.Table:
    """Poorly compressible rows: random ids and random digit strings."""
    return pa.table(
        {
            "id": pa.array(rng.integers(0, 2**62, rows), pa.int64()),
            "region": pa.array([region] * rows, pa.string()),
            "payload": pa.array(
                np.char.mod(f"%0{width}d", rng.integers(0, 2**62, rows)).astype(object), pa.string()
            ),
        }
    )


def _random_rows_table(
    catalog: SqlCatalog,
    name: str,
    *,
    files: int,
    rows_per_file: int,
    regions: tuple[str, ...] = ("eu",),
    properties: dict[str, str] | None = None,
    partitioned: bool = False,
) -> Table:
    rng = np.random.default_rng(7)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "payload", StringType(), required=False),
    )
    spec = (
        PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
        )
        if partitioned
        else PartitionSpec()
    )
    table = catalog.create_table(name, schema=schema, partition_spec=spec, properties=properties or {})
    for _ in range(files):
        table.append(pa.concat_tables([_random_table(rng, rows_per_file, region) for region in regions]))
    return table


def _pyiceberg_statistics(table: Table, data_file: DataFile) -> dict[str, Any]:
    """PyIceberg's own statistics of the file on disk, under the table's metrics properties."""
    schema = table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=pq.read_metadata(local_path(data_file.file_path)),
        stats_columns=compute_statistics_plan(schema, table.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return statistics.to_serialized_dict()


def _metrics(data_file: DataFile) -> dict[str, Any]:
    return {
        "record_count": data_file.record_count,
        "column_sizes": dict(data_file.column_sizes or {}),
        "value_counts": dict(data_file.value_counts or {}),
        "null_value_counts": dict(data_file.null_value_counts or {}),
        "lower_bounds": dict(data_file.lower_bounds or {}),
        "upper_bounds": dict(data_file.upper_bounds or {}),
        "split_offsets": list(data_file.split_offsets or []),
    }


def _expected_metrics(table: Table, data_file: DataFile) -> dict[str, Any]:
    expected = _pyiceberg_statistics(table, data_file)
    return {key: expected[key] for key in _metrics(data_file)}


def _row_group_offsets(path: str) -> list[int]:
    metadata = pq.read_metadata(path)
    offsets = []
    for index in range(metadata.num_row_groups):
        column = metadata.row_group(index).column(0)
        offsets.append(
            column.dictionary_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset < column.data_page_offset
            else column.data_page_offset
        )
    return offsets


# -- field ids, placement, write properties -----------------------------------------------------------


def test_output_files_carry_iceberg_field_ids_at_every_level(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_all_types_table(catalog, partitioned=False)
    for start in range(0, 60, 20):
        table.append(all_types_rows(table, start, 20))

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    file_schema = pq.read_schema(local_path(output.file_path))
    # pyarrow_to_schema refuses columns without field ids (no name mapping given).
    assert pyarrow_to_schema(file_schema).as_struct() == table.schema().as_struct()
    schema = table.schema()
    nested = file_schema.field("st").type.field("inner").type.field("x")
    assert int(nested.metadata[b"PARQUET:field_id"]) == schema.find_field("st.inner.x").field_id
    map_value = file_schema.field("m").type.item_field
    assert int(map_value.metadata[b"PARQUET:field_id"]) == schema.find_field("m.value").field_id


def test_files_are_placed_by_the_location_provider(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _random_rows_table(
        catalog, "ns.placed", files=3, rows_per_file=50, regions=("eu", "us"), partitioned=True
    )

    run_compact(table, tmp_path)

    outputs = data_files(table)
    assert sorted(f.partition[0] for f in outputs) == ["eu", "us"]
    for data_file in outputs:
        folder = f"{table.location()}/data/region={data_file.partition[0]}/"
        assert data_file.file_path.startswith(folder)
        assert os.path.exists(local_path(data_file.file_path))


def test_write_data_path_property_moves_the_files(catalog: SqlCatalog, tmp_path: Path) -> None:
    custom = f"file://{tmp_path}/elsewhere"
    table = _random_rows_table(
        catalog, "ns.moved", files=3, rows_per_file=50, properties={"write.data.path": custom}
    )

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    assert output.file_path.startswith(f"{custom}/")
    assert os.path.exists(local_path(output.file_path))


@pytest.mark.parametrize(
    ("codec", "parquet_name"),
    [(None, "ZSTD"), ("gzip", "GZIP"), ("snappy", "SNAPPY"), ("uncompressed", "UNCOMPRESSED")],
)
def test_compression_codec_property_is_honoured(
    catalog: SqlCatalog, tmp_path: Path, codec: str | None, parquet_name: str
) -> None:
    properties = {"write.parquet.compression-codec": codec} if codec else {}
    table = _random_rows_table(catalog, "ns.codec", files=3, rows_per_file=200, properties=properties)
    before = live_checksum(table)

    run_compact(table, tmp_path)

    assert live_checksum(table) == before
    (output,) = data_files(table)
    metadata = pq.read_metadata(local_path(output.file_path))
    codecs = {metadata.row_group(0).column(i).compression for i in range(metadata.num_columns)}
    assert codecs == {parquet_name}


def test_compression_level_property_is_honoured(catalog: SqlCatalog, tmp_path: Path) -> None:
    sizes = {}
    for level in ("1", "19"):
        properties = {"write.parquet.compression-codec": "zstd", "write.parquet.compression-level": level}
        table = _random_rows_table(
            catalog, f"ns.level_{level}", files=3, rows_per_file=3000, properties=properties
        )
        run_compact(table, tmp_path / level)
        (output,) = data_files(table)
        sizes[level] = output.file_size_in_bytes
    assert sizes["19"] < sizes["1"] * 0.97


def test_row_group_size_bytes_property_bounds_row_groups(catalog: SqlCatalog, tmp_path: Path) -> None:
    row_group_bytes = 256 * KiB
    table = _random_rows_table(
        catalog,
        "ns.row_groups",
        files=4,
        rows_per_file=20_000,
        properties={"write.parquet.row-group-size-bytes": str(row_group_bytes)},
    )
    before = live_checksum(table)

    run_compact(table, tmp_path)

    assert live_checksum(table) == before
    (output,) = data_files(table)
    metadata = pq.read_metadata(local_path(output.file_path))
    sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
    total = sum(sizes)
    assert metadata.num_row_groups >= total // row_group_bytes
    # The first row group is smaller on purpose (it measures the compression ratio); none is larger.
    assert all(size <= 1.1 * row_group_bytes for size in sizes), sizes
    assert output.split_offsets == _row_group_offsets(local_path(output.file_path))


def test_page_size_bytes_property_is_honoured(catalog: SqlCatalog, tmp_path: Path) -> None:
    rows = 30_000
    pages = {}
    for page_size in (4 * KiB, 1024 * KiB):
        table = _random_rows_table(
            catalog,
            f"ns.pages_{page_size}",
            files=2,
            rows_per_file=rows // 2,
            properties={
                "write.parquet.page-size-bytes": str(page_size),
                "write.parquet.dict-size-bytes": "1",
            },
        )
        run_compact(table, tmp_path / str(page_size))
        (output,) = data_files(table)
        pages[page_size] = parquet_data_page_counts(local_path(output.file_path))
    # 30000 random longs are ~234 KiB plain. PyArrow checks the page size after every 1024 values, so
    # 4 KiB pages come out as pages of 1024 longs (8 KiB): about 30. The default (1 MiB, at most 20000
    # rows per page) gives 2 or 3.
    id_pages_small, id_pages_default = pages[4 * KiB][0], pages[1024 * KiB][0]
    assert id_pages_small >= 25, pages
    assert id_pages_default <= 3, pages


def test_page_row_limit_property_caps_rows_per_page(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _random_rows_table(
        catalog,
        "ns.page_rows",
        files=2,
        rows_per_file=5_000,
        properties={"write.parquet.page-row-limit": "1000"},
    )

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    assert parquet_data_page_counts(local_path(output.file_path)) == [10, 10, 10]


# -- rolling at the target size -----------------------------------------------------------------------


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "two-partitions"])
def test_output_rolls_at_the_target_file_size(catalog: SqlCatalog, tmp_path: Path, partitioned: bool) -> None:
    target = 256 * KiB
    table = _random_rows_table(
        catalog,
        "ns.rolling",
        files=4,
        rows_per_file=16_000,
        regions=("eu", "us") if partitioned else ("eu",),
        partitioned=partitioned,
    )
    before = live_checksum(table)

    result = run_compact(
        table, tmp_path, options={"target-file-size-bytes": str(target), "rewrite-all": "true"}
    )

    assert live_checksum(table) == before
    by_partition: dict[tuple[object, ...], list[DataFile]] = {}
    for data_file in data_files(table):
        by_partition.setdefault(tuple(data_file.partition), []).append(data_file)
    assert len(by_partition) == (2 if partitioned else 1)
    assert result["added_data_files_count"] == sum(len(files) for files in by_partition.values())
    for files in by_partition.values():
        assert len(files) >= 4
        for written in _by_writer(files):
            for data_file in written[:-1]:
                assert abs(data_file.file_size_in_bytes - target) <= 0.1 * target, [
                    f.file_size_in_bytes for f in written
                ]
            assert written[-1].file_size_in_bytes <= 1.1 * target


def _by_writer(files: list[DataFile]) -> list[list[DataFile]]:
    """``files`` by the writer that wrote them (a group in two lanes has two), each in the order written:
    the writer names its files ``<group>-<write id>-<number>``, so only each one's last may be small."""
    by_writer: dict[str, list[DataFile]] = {}
    for data_file in sorted(files, key=lambda f: f.file_path):
        by_writer.setdefault(data_file.file_path.rsplit("-", 1)[0], []).append(data_file)
    return list(by_writer.values())


def test_target_size_comes_from_the_table_property(catalog: SqlCatalog, tmp_path: Path) -> None:
    target = 200 * KiB
    table = _random_rows_table(
        catalog,
        "ns.property_target",
        files=4,
        rows_per_file=10_000,
        properties={"write.target-file-size-bytes": str(target)},
    )

    result = run_compact(table, tmp_path, options={"rewrite-all": "true"})

    files = data_files(table)
    assert result["added_data_files_count"] == len(files) >= 3
    for written in _by_writer(files):
        for data_file in written[:-1]:
            assert abs(data_file.file_size_in_bytes - target) <= 0.1 * target


# -- DataFile metrics ---------------------------------------------------------------------------------


def test_datafile_metrics_are_exact(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_all_types_table(
        catalog, partitioned=False, properties={"write.parquet.row-group-size-bytes": str(16 * KiB)}
    )
    for start in range(0, 600, 150):
        table.append(all_types_rows(table, start, 150))

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    path = local_path(output.file_path)
    rows = read_file(output)
    assert output.record_count == rows.num_rows == pq.read_metadata(path).num_rows == 600
    assert output.file_size_in_bytes == os.path.getsize(path)
    # Everything PyIceberg derives from the footer, as PyIceberg itself computes it for this file.
    assert _metrics(output) == _expected_metrics(table, output)
    # Several row groups: split offsets are their ascending starts.
    assert len(output.split_offsets) > 1
    assert output.split_offsets == sorted(output.split_offsets) == _row_group_offsets(path)
    # Counts against the data itself.
    ids = {f.name: f.field_id for f in table.schema().fields}
    inner_x, map_value = (table.schema().find_field(n).field_id for n in ("st.inner.x", "m.value"))
    for name in ("id", "i", "f", "d", "s", "dec", "ts", "u", "bin", "fx"):
        assert output.value_counts[ids[name]] == 600, name
        assert output.null_value_counts[ids[name]] == rows.column(name).null_count, name
    assert output.nan_value_counts == {
        ids["f"]: pc.sum(pc.is_nan(rows.column("f"))).as_py(),
        ids["d"]: pc.sum(pc.is_nan(rows.column("d"))).as_py(),
        inner_x: sum(
            1 for r in rows.column("st").to_pylist() if r and r["inner"] and math.isnan(r["inner"]["x"])
        ),
        map_value: sum(
            1 for m in rows.column("m").to_pylist() if m for _k, v in m if v is not None and math.isnan(v)
        ),
    }
    assert output.nan_value_counts[map_value] > 0
    # Bounds: exact for longs, NaN never a bound, -0.0 below +0.0.
    id_type, d_type, f_type = (table.schema().find_field(n).field_type for n in ("id", "d", "f"))
    assert from_bytes(id_type, output.lower_bounds[ids["id"]]) == 0
    assert from_bytes(id_type, output.upper_bounds[ids["id"]]) == 599
    finite_d = [v for v in rows.column("d").to_pylist() if v is not None and not math.isnan(v)]
    lower_d = from_bytes(d_type, output.lower_bounds[ids["d"]])
    assert lower_d == 0.0
    assert math.copysign(1.0, lower_d) == -1.0
    assert from_bytes(d_type, output.upper_bounds[ids["d"]]) == max(finite_d)
    assert not math.isnan(from_bytes(f_type, output.upper_bounds[ids["f"]]))
    assert not math.isnan(from_bytes(f_type, output.lower_bounds[ids["f"]]))


def test_all_nan_column_has_nan_count_and_no_bounds(catalog: SqlCatalog, tmp_path: Path) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "x", DoubleType(), required=False),
    )
    table = catalog.create_table("ns.all_nan", schema=schema)
    for start in range(0, 30, 10):
        table.append(
            pa.table(
                {"id": list(range(start, start + 10)), "x": [float("nan")] * 10}, schema=schema.as_arrow()
            )
        )

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    assert output.nan_value_counts == {2: 30}
    assert output.value_counts[2] == 30
    assert output.null_value_counts[2] == 0
    assert 2 not in (output.lower_bounds or {})
    assert 2 not in (output.upper_bounds or {})
    assert _metrics(output) == _expected_metrics(table, output)


_METRICS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
    NestedField(4, "tags", ListType(5, StringType(), element_required=False), required=False),
)


def _metrics_table(catalog: SqlCatalog, properties: dict[str, str]) -> Table:
    table = catalog.create_table("ns.metrics", schema=_METRICS_SCHEMA, properties=properties)
    for start in range(0, 30, 10):
        table.append(
            pa.table(
                {
                    "id": list(range(start, start + 10)),
                    "name": [
                        None if k % 4 == 0 else f"name-{k:04d}-with-a-long-tail"
                        for k in range(start, start + 10)
                    ],
                    "score": [float("nan") if k % 3 == 0 else k / 2 for k in range(start, start + 10)],
                    "tags": [["a", None] for _ in range(10)],
                },
                schema=_METRICS_SCHEMA.as_arrow(),
            )
        )
    return table


@pytest.mark.parametrize(
    ("properties", "counted", "bounded"),
    [
        ({"write.metadata.metrics.default": "none"}, set(), set()),
        ({"write.metadata.metrics.default": "counts"}, {1, 2, 3, 5}, set()),
        ({"write.metadata.metrics.default": "truncate(4)"}, {1, 2, 3, 5}, {1, 2, 3}),
        ({}, {1, 2, 3, 5}, {1, 2, 3}),
        (
            {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.name": "full"},
            {2},
            {2},
        ),
    ],
    ids=["none", "counts", "truncate-4", "default-truncate-16", "none-but-name-full"],
)
def test_metrics_modes_are_respected(
    catalog: SqlCatalog, tmp_path: Path, properties: dict[str, str], counted: set[int], bounded: set[int]
) -> None:
    table = _metrics_table(catalog, properties)

    run_compact(table, tmp_path)

    (output,) = data_files(table)
    assert _metrics(output) == _expected_metrics(table, output)
    assert set(output.value_counts or {}) == counted
    assert set(output.null_value_counts or {}) == counted
    assert set(output.nan_value_counts or {}) == counted & {3}
    assert set(output.lower_bounds or {}) == bounded == set(output.upper_bounds or {})
    assert set(output.column_sizes) == {1, 2, 3, 5}
    if 3 in counted:
        assert output.nan_value_counts[3] == 10
        assert output.null_value_counts[2] == 8
    if 2 in bounded:
        lower, upper = output.lower_bounds[2].decode(), output.upper_bounds[2].decode()
        mode = properties.get("write.metadata.metrics.column.name") or properties.get(
            "write.metadata.metrics.default", "truncate(16)"
        )
        if mode == "full":
            assert (lower, upper) == ("name-0001-with-a-long-tail", "name-0029-with-a-long-tail")
        elif mode == "truncate(4)":
            assert (lower, upper) == ("name", "namf")
        else:
            assert (lower, upper) == ("name-0001-with-a", "name-0029-with-b")


# -- sort order ids and sorted rows ------------------------------------------------------------------


def _sort_table(catalog: SqlCatalog, name: str) -> Table:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
    )
    table = catalog.create_table(name, schema=schema)
    rng = np.random.default_rng(3)
    base = datetime.datetime(2026, 1, 1)
    for _ in range(4):
        ids = rng.permutation(2_000)
        table.append(
            pa.table(
                {
                    "id": pa.array([None if k % 97 == 0 else int(k) for k in ids], pa.int64()),
                    "name": [None if k % 89 == 0 else f"n{(k * 7919) % 1000:04d}" for k in ids],
                    "ts": [base + datetime.timedelta(minutes=37 * int(k)) for k in ids],
                },
                schema=schema.as_arrow(),
            )
        )
    return table


def test_sort_with_the_table_order_stamps_its_id(catalog: SqlCatalog, tmp_path: Path) -> None:
    """The table order ``day(ts) DESC NULLS LAST, id ASC NULLS FIRST``: a transform key and a plain key."""
    table = _sort_table(catalog, "ns.sorted")
    with table.update_sort_order() as update:
        update.desc("ts", DayTransform(), NullOrder.NULLS_LAST)
        update.asc("id", IdentityTransform(), NullOrder.NULLS_FIRST)
    order_id = table.sort_order().order_id
    assert order_id == 1
    before = live_checksum(table)

    run_compact(table, tmp_path, strategy="sort", options={"target-file-size-bytes": str(48 * KiB)})

    assert live_checksum(table) == before
    outputs = data_files(table)
    assert len(outputs) >= 2
    epoch = datetime.datetime(1970, 1, 1)
    for data_file in outputs:
        assert data_file.sort_order_id == order_id
        rows = read_file(data_file).to_pylist()
        keys = [(-(r["ts"] - epoch).days, -1 if r["id"] is None else r["id"]) for r in rows]
        assert keys == sorted(keys)


def test_sort_with_a_custom_order_stamps_unsorted(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _sort_table(catalog, "ns.custom_sorted")
    with table.update_sort_order() as update:
        update.asc("id", IdentityTransform())
    before = live_checksum(table)

    run_compact(table, tmp_path, strategy="sort", sort_order="name DESC NULLS FIRST, id ASC NULLS LAST")

    assert live_checksum(table) == before
    (output,) = data_files(table)
    assert output.sort_order_id == 0
    rows = read_file(output).to_pylist()
    assert rows[0]["name"] is None
    named = [(r["name"], r["id"] is None, r["id"] or 0) for r in rows if r["name"] is not None]
    assert [n for n, _, _ in named] == sorted((n for n, _, _ in named), reverse=True)
    for previous, current in itertools.pairwise(named):
        if previous[0] == current[0]:
            assert previous[1:] <= current[1:]


def _wide_table(catalog: SqlCatalog, name: str, rows: int) -> Table:
    rng = np.random.default_rng(11)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "payload", StringType(), required=False),
    )
    table = catalog.create_table(name, schema=schema)
    for _ in range(4):
        keys = rng.integers(0, 2**62, rows // 4)
        table.append(
            pa.table(
                {
                    "id": pa.array(keys, pa.int64()),
                    "payload": pa.array(np.char.mod("%0100d", keys).astype(object), pa.string()),
                },
                schema=schema.as_arrow(),
            )
        )
    return table


def _assert_sorted_by_payload(table: Table) -> None:
    for data_file in data_files(table):
        payload = pq.read_table(local_path(data_file.file_path), columns=["payload"]).column("payload")
        assert pc.all(pc.less_equal(payload[:-1], payload[1:])).as_py()


def test_sort_that_does_not_fit_spills_and_finishes(catalog: SqlCatalog, tmp_path: Path) -> None:
    """About 16 MB of rows, twice that with the sort key, sorted in a 32 MiB pool (a 64 MiB limit)."""
    table = _wide_table(catalog, "ns.spilling", rows=150_000)
    before = live_checksum(table)
    memory = max(64 * MiB, MIN_MEMORY_LIMIT_BYTES)

    result = run_compact(
        table, tmp_path, strategy="sort", sort_order="payload", limits=limits(tmp_path, memory)
    )

    assert result["spilled_bytes"] > 0
    assert live_checksum(table) == before
    _assert_sorted_by_payload(table)


def _sort_on_two_cores(table: Table, tmp_path: Path, target_sizes: float) -> dict[str, Any]:
    """Sort ``table`` by payload on two cores at a 256 MiB limit (a sort lane per 128 MiB), with a target
    that makes its one group ``target_sizes`` target sizes."""
    target = int(sum(f.file_size_in_bytes for f in data_files(table)) / target_sizes)
    return run_compact(
        table,
        tmp_path,
        options={"target-file-size-bytes": str(target)},
        strategy="sort",
        sort_order="payload",
        limits=limits(tmp_path, 256 * MiB, target_partitions=2),
    )


def test_sort_on_two_cores_writes_files_of_disjoint_key_ranges(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A sort that spills, of a group of two target sizes, merges and writes its key ranges in two lanes:
    every file is sorted, no two files' key ranges overlap, and the live rows are the same."""
    table = _wide_table(catalog, "ns.lanes", rows=400_000)
    before = live_checksum(table)

    result = _sort_on_two_cores(table, tmp_path, target_sizes=2)

    assert result["spilled_bytes"] > 0
    assert live_checksum(table) == before
    _assert_sorted_by_payload(table)
    ranges = []
    for data_file in data_files(table):
        payload = pq.read_table(local_path(data_file.file_path), columns=["payload"]).column("payload")
        ranges.append((payload[0].as_py(), payload[-1].as_py()))
    assert len(ranges) >= 2
    ranges.sort()
    assert all(one[1] < other[0] for one, other in itertools.pairwise(ranges))


def test_sort_that_fits_does_not_report_spill(catalog: SqlCatalog, tmp_path: Path) -> None:
    """The control for the test above: with room enough the same kind of sort spills nothing."""
    table = _wide_table(catalog, "ns.not_spilling", rows=20_000)

    result = run_compact(
        table, tmp_path, strategy="sort", sort_order="payload", limits=limits(tmp_path, 1024 * MiB)
    )

    assert result["spilled_bytes"] == 0
    _assert_sorted_by_payload(table)


def test_sorted_group_under_two_target_sizes_is_one_file_on_two_cores(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """The same sort of a group under two target sizes keeps one lane: one file, as Spark writes it, not
    one a lane (a lane must be worth a full file)."""
    table = _wide_table(catalog, "ns.one_lane", rows=400_000)
    before = live_checksum(table)

    _sort_on_two_cores(table, tmp_path, target_sizes=5 / 6)

    assert live_checksum(table) == before
    _assert_sorted_by_payload(table)
    assert len(data_files(table)) == 1
