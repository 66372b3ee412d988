"""Compaction end to end on a real SQLite catalog and real files: the rows survive, whatever the types,
the partitioning, the schema history and the partition history (issue 2, sections 3 and 8).

Every test compares ``(row count, order-independent checksum)`` read by PyIceberg's own scan before and
after the compaction, and checks that the compaction really replaced files.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
)

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task, plan_compaction
from tests.helpers import data_files, files_under, live_checksum, local_path, table_state
from tests.integration.compaction_support import (
    all_types_rows,
    assert_rows_match_partition,
    create_all_types_table,
    limits,
    read_file,
    run_compact,
)

pytestmark = pytest.mark.integration


def _replace_snapshot_summary(table_snapshot: object) -> str:
    summary = getattr(table_snapshot, "summary", None)
    assert summary is not None
    return str(summary.operation.value)


# -- every type, partitioned and unpartitioned -----------------------------------------------------------


@pytest.mark.parametrize("partitioned", [True, False], ids=["identity-bucket-day-truncate", "unpartitioned"])
def test_every_column_type_survives_compaction(
    catalog: SqlCatalog, tmp_path: Path, partitioned: bool
) -> None:
    table = create_all_types_table(catalog, partitioned=partitioned)
    for start in range(0, 240, 40):
        table.append(all_types_rows(table, start, 40))
    before = live_checksum(table)
    files_before = data_files(table)
    assert before[0] == 240

    result = run_compact(table, tmp_path)

    assert live_checksum(table) == before
    files_after = data_files(table)
    paths_before, paths_after = {f.file_path for f in files_before}, {f.file_path for f in files_after}
    assert result["rewritten_data_files_count"] == len(paths_before - paths_after) > 0
    assert result["added_data_files_count"] == len(paths_after - paths_before) > 0
    assert len(files_after) < len(files_before) / 2
    assert _replace_snapshot_summary(table.current_snapshot()) == "replace"
    if not partitioned:
        assert len(files_after) == 1
    for data_file in files_after:
        assert data_file.spec_id == table.spec().spec_id
        if partitioned:
            assert_rows_match_partition(table, data_file)


def test_null_partition_values_and_nan_rows_are_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Rows whose partition source is null land in the null partition; NaN floats stay NaN."""
    table = create_all_types_table(catalog, partitioned=True)
    for start in range(0, 90, 30):
        table.append(all_types_rows(table, start, 30))

    def null_and_nan_ids() -> tuple[list[int], list[int]]:
        rows = table.scan(selected_fields=("id", "s", "f")).to_arrow()
        nulls = rows.filter(pc.is_null(rows["s"]))["id"].to_pylist()
        nans = rows.filter(pc.fill_null(pc.is_nan(rows["f"]), False))["id"].to_pylist()
        return sorted(nulls), sorted(nans)

    before = null_and_nan_ids()
    assert len(before[0]) == 30
    assert len(before[1]) == 18

    run_compact(table, tmp_path)

    assert null_and_nan_ids() == before
    null_files = [f for f in data_files(table) if f.partition[0] is None]
    assert null_files
    assert sum(f.record_count for f in null_files) == 30


# -- schema evolution --------------------------------------------------------------------------------


def test_schema_evolution_between_appends_reads_by_field_id(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Rename, add, drop, int->long, float->double and decimal widening, with files of every version."""
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "score", FloatType(), required=False),
        NestedField(4, "amount", DecimalType(9, 2), required=False),
        NestedField(5, "gone", StringType(), required=False),
    )
    table = catalog.create_table("ns.evolving", schema=schema)
    v1 = table.schema().as_arrow()
    for n in range(2):
        table.append(
            pa.table(
                {
                    "id": pa.array([n * 10 + k for k in range(10)], pa.int32()),
                    "name": [f"n{n}-{k}" for k in range(10)],
                    "score": pa.array([k / 4 if k != 3 else float("nan") for k in range(10)], pa.float32()),
                    "amount": [decimal.Decimal(k * 101) / 100 for k in range(10)],
                    "gone": [f"dropped-{k}" for k in range(10)],
                },
                schema=v1,
            )
        )
    with table.update_schema() as update:
        update.rename_column("name", "label")
        update.add_column("added", LongType())
        update.delete_column("gone")
        update.update_column("id", LongType())
        update.update_column("score", DoubleType())
        update.update_column("amount", DecimalType(12, 2))
    v2 = table.schema().as_arrow()
    table.append(
        pa.table(
            {
                "id": pa.array([2**40 + k for k in range(10)], pa.int64()),
                "label": [f"v2-{k}" for k in range(10)],
                "score": [1e300 * k for k in range(10)],
                "amount": [decimal.Decimal("1234567890.12") - k for k in range(10)],
                "added": list(range(10)),
            },
            schema=v2,
        )
    )
    before = live_checksum(table)
    assert before[0] == 30

    run_compact(table, tmp_path)

    assert live_checksum(table) == before
    (output,) = data_files(table)
    written = read_file(output)
    expected_ids = {f.name: str(f.field_id) for f in table.schema().fields}
    assert {f.name: f.metadata[b"PARQUET:field_id"].decode() for f in written.schema} == expected_ids
    assert written.schema.field("id").type == pa.int64()
    assert written.schema.field("score").type == pa.float64()
    assert written.schema.field("amount").type == pa.decimal128(12, 2)
    rows = {row["id"]: row for row in written.to_pylist()}
    assert rows[3]["label"] == "n0-3"
    assert rows[3]["added"] is None
    assert rows[1]["score"] == 0.25
    assert rows[12]["amount"] == decimal.Decimal("2.02")
    assert rows[2**40 + 2]["added"] == 2


def test_file_without_field_ids_is_read_through_the_name_mapping(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = catalog.create_table(
        "ns.mapped",
        schema=Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "payload", StringType(), required=False),
            NestedField(3, "ts", TimestampType(), required=False),
        ),
    )
    base = datetime.datetime(2026, 1, 1)
    plain = pa.table(  # columns in another order than the table's, and no field ids
        {
            "ts": pa.array([base + datetime.timedelta(seconds=k) for k in range(20)], pa.timestamp("us")),
            "payload": [f"external-{k}" for k in range(20)],
            "id": pa.array(range(100, 120), pa.int64()),
        }
    )
    external = tmp_path / "external.parquet"
    pq.write_table(plain, external)
    assert pq.read_schema(external).field("id").metadata is None
    table.add_files([f"file://{external}"])  # sets schema.name-mapping.default
    assert table.metadata.name_mapping() is not None
    table.append(
        pa.table(
            {"id": list(range(20)), "payload": [f"own-{k}" for k in range(20)], "ts": [base] * 20},
            schema=table.schema().as_arrow(),
        )
    )
    before = live_checksum(table)

    run_compact(table, tmp_path)

    assert live_checksum(table) == before == (40, before[1])
    (output,) = data_files(table)
    assert output.file_path.startswith(f"{table.location()}/data/")
    assert pq.read_schema(local_path(output.file_path)).field("id").metadata[b"PARQUET:field_id"] == b"1"


def test_file_without_field_ids_and_without_name_mapping_is_refused(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = catalog.create_table(
        "ns.unmapped", schema=Schema(NestedField(1, "id", LongType(), required=False))
    )
    for n in range(2):
        external = tmp_path / f"external-{n}.parquet"
        pq.write_table(pa.table({"id": pa.array([n], pa.int64())}), external)
        table.add_files([f"file://{external}"])
    with table.transaction() as tx:
        tx.remove_properties("schema.name-mapping.default")
    state, written = table_state(table), files_under(table)
    plan = plan_compaction(table, options={"min-input-files": "2"})

    with pytest.raises(ConfigurationError, match="no Iceberg field ids and the table has no name mapping"):
        execute_rewrite_task(table, plan["tasks"][0], limits(tmp_path))

    assert table_state(table) == state
    assert files_under(table) == written


# -- partition evolution -----------------------------------------------------------------------------


def _events(start: int, count: int) -> pa.Table:
    base = datetime.datetime(2026, 1, 1)
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "region": [("eu", "us", "apac")[k % 3] for k in range(start, start + count)],
            "ts": pa.array([base + datetime.timedelta(hours=5 * k) for k in range(start, start + count)]),
        }
    )


def _events_table(catalog: SqlCatalog, name: str = "ns.events") -> Table:
    return catalog.create_table(
        name,
        schema=Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "region", StringType(), required=False),
            NestedField(3, "ts", TimestampType(), required=False),
        ),
        partition_spec=PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
        ),
    )


def test_old_spec_files_are_repartitioned_into_the_current_spec(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _events_table(catalog)
    for start in range(0, 120, 30):
        table.append(_events(start, 30))
    with table.update_spec() as update:
        update.remove_field("region")
        update.add_field("id", BucketTransform(4), "id_bucket")
        update.add_field("ts", DayTransform(), "ts_day")
    current = table.spec()
    assert current.spec_id == 1
    for start in range(120, 180, 30):
        table.append(_events(start, 30))
    before = live_checksum(table)
    old_spec_files = [f for f in data_files(table) if f.spec_id == 0]
    assert len(old_spec_files) == 12

    result = run_compact(table, tmp_path, options={"rewrite-all": "true"})

    assert live_checksum(table) == before
    after = data_files(table)
    assert result["rewritten_data_files_count"] > len(old_spec_files)
    assert {f.spec_id for f in after} == {current.spec_id}
    partitions = set()
    for data_file in after:
        assert len(data_file.partition) == 2
        assert_rows_match_partition(table, data_file)
        partitions.add(tuple(data_file.partition))
        assert f"/data/id_bucket={data_file.partition[0]}/" in data_file.file_path
    assert len(partitions) == len(after)  # one file per partition: rows of a partition are clustered


def test_output_spec_id_writes_into_an_older_spec(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _events_table(catalog, "ns.events_back")
    with table.update_spec() as update:
        update.add_field("ts", DayTransform(), "ts_day")
    for start in range(0, 90, 30):
        table.append(_events(start, 30))
    before = live_checksum(table)
    assert {f.spec_id for f in data_files(table)} == {1}

    run_compact(table, tmp_path, options={"rewrite-all": "true", "output-spec-id": "0"})

    assert live_checksum(table) == before
    after = data_files(table)
    assert {f.spec_id for f in after} == {0}
    assert sorted(f.partition[0] for f in after) == ["apac", "eu", "us"]
    for data_file in after:
        assert_rows_match_partition(table, data_file)


def test_sort_over_our_output_and_a_later_pyiceberg_append(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Our files and PyIceberg's project a string column to large_string and string: the staged sort
    input must still be one schema (it failed with ArrowInvalid "Schema at index 1 was different")."""
    arrow = pa.schema([("id", pa.int64()), ("category", pa.string())])
    table = catalog.create_table("ns.mixed", schema=arrow)
    for i in range(3):
        table.append(pa.table({"id": [i], "category": ["a"]}, schema=arrow))
    run_compact(table, tmp_path, options={"rewrite-all": "true"})
    table.append(pa.table({"id": [9], "category": ["b"]}, schema=arrow))
    before = live_checksum(table)

    run_compact(table, tmp_path, options={"rewrite-all": "true"}, strategy="sort", sort_order="id DESC")

    assert live_checksum(table) == before
    assert len(data_files(table)) == 1
