"""Format-version 3 tables written by Spark 3.5 + Iceberg 1.10 (merge-on-read DELETE and UPDATE writing
deletion vectors, row lineage), compacted by us: Spark then reads the same rows with the same
``_row_id`` and ``_last_updated_sequence_number``, commits on top of our metadata, and we compact again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests
from tests.interop.fixtures import JavaTables
from tests.interop.spark import metadata_location
from tests.interop.tables import V3_DELETION_VECTORS, V3_UPGRADED_MIXED_DELETES, publish_to_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Checksum = Callable[[str], tuple[int, int]]
Lineage = dict[int, tuple[int, int]]


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _spark_lineage(spark: SparkSession, location: str) -> Lineage:
    """``id -> (_row_id, _last_updated_sequence_number)`` of every live row, as Java reads them."""
    df = spark.read.format("iceberg").load(location)
    rows = df.select("id", "_row_id", "_last_updated_sequence_number").collect()
    lineage = {int(r["id"]): (r["_row_id"], r["_last_updated_sequence_number"]) for r in rows}
    assert len(lineage) == len(rows)  # ids are unique in these tables
    return lineage


def _metadata(location: str) -> dict[str, Any]:
    return json.loads(Path(urlparse(location).path).read_text())


def _assert_row_ids_consistent(location: str) -> None:
    """The current snapshot's range starts at the previous next-row-id and ends at the table's."""
    raw = _metadata(location)
    current = next(s for s in raw["snapshots"] if s["snapshot-id"] == raw["current-snapshot-id"])
    parent = next(
        (s for s in raw["snapshots"] if s["snapshot-id"] == current.get("parent-snapshot-id")), None
    )
    assert raw["format-version"] == 3
    assert current["first-row-id"] + current["added-rows"] == raw["next-row-id"]
    if parent is not None and "first-row-id" in parent:
        assert current["first-row-id"] >= parent["first-row-id"] + parent["added-rows"]


def _compact(catalog: SqlCatalog, name: str, location: str, tmp_path: Path, **kwargs: Any) -> str:
    table = catalog.register_table(f"ns.{name}", location)
    result = compact(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path), **kwargs)
    assert result["rewritten_data_files_count"] > 0
    table.refresh()
    assert table.metadata_location != location
    return table.metadata_location


@pytest.mark.parametrize(
    ("kind", "strategy"),
    [(V3_DELETION_VECTORS, "binpack"), (V3_DELETION_VECTORS, "sort"), (V3_UPGRADED_MIXED_DELETES, "binpack")],
    ids=["dvs-binpack", "dvs-sort", "upgraded-binpack"],
)
def test_spark_reads_the_same_rows_ids_and_sequence_numbers_after_our_compactions(
    kind: str,
    strategy: str,
    java_table: JavaTables,
    spark: SparkSession,
    spark_rows_checksum: Checksum,
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    built = java_table.fresh(kind)
    rows, lineage = (
        spark_rows_checksum(built.metadata_location),
        _spark_lineage(spark, built.metadata_location),
    )
    assert all(row_id is not None and seq is not None for row_id, seq in lineage.values())
    sort = {"strategy": "sort", "sort_order": "id DESC"} if strategy == "sort" else {}

    ours = _compact(catalog, "first", built.metadata_location, tmp_path, **sort)

    assert spark_rows_checksum(ours) == rows
    assert _spark_lineage(spark, ours) == lineage
    _assert_row_ids_consistent(ours)

    # Spark takes our metadata as its table's current version and commits on top: an INSERT and a
    # merge-on-read DELETE (a DV on one of our files).
    published = publish_to_spark(spark, built.name, ours)
    assert _spark_lineage(spark, published) == lineage
    spark.sql(f"INSERT INTO {built.spark_identifier} VALUES (1000, 'z', 'inserted')")
    spark.sql(f"DELETE FROM {built.spark_identifier} WHERE id = 2")
    spark_location = metadata_location(spark, built.name)
    rows, lineage = spark_rows_checksum(spark_location), _spark_lineage(spark, spark_location)
    assert 2 not in lineage
    assert lineage[1000][0] >= _metadata(ours)["next-row-id"]  # Spark continued from our next-row-id

    again = _compact(catalog, "second", spark_location, tmp_path, **sort)

    assert spark_rows_checksum(again) == rows
    assert _spark_lineage(spark, again) == lineage
    _assert_row_ids_consistent(again)


def test_spark_reads_the_lineage_our_copy_on_write_delete_and_update_keep(
    java_table: JavaTables, spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Copied rows keep both values; an updated row keeps its ``_row_id`` and reads our commit's
    sequence number (we write it null, Java's rule); the deleted row is gone."""
    built = java_table.fresh(V3_DELETION_VECTORS)
    before = _spark_lineage(spark, built.metadata_location)
    table = catalog.register_table("ns.cow", built.metadata_location)

    cow_rewrite(table, operation="delete", where="id = 10", limits=_limits(tmp_path))
    cow_rewrite(
        table, operation="update", where="id = 12", set_columns={"v": "'ours'"}, limits=_limits(tmp_path)
    )

    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    after = _spark_lineage(spark, table.metadata_location)
    assert after[12] == (before[12][0], snapshot.sequence_number)
    assert {i: v for i, v in after.items() if i != 12} == {
        i: v for i, v in before.items() if i not in (10, 12)
    }
    _assert_row_ids_consistent(table.metadata_location)
    rows = spark.read.format("iceberg").load(table.metadata_location).where("id = 12").collect()
    assert [r["v"] for r in rows] == ["ours"]


def test_spark_reads_the_same_lineage_after_our_manifest_rewrite(
    java_table: JavaTables, spark: SparkSession, spark_rows_checksum: Checksum, catalog: SqlCatalog
) -> None:
    built = java_table.fresh(V3_UPGRADED_MIXED_DELETES)
    rows, lineage = (
        spark_rows_checksum(built.metadata_location),
        _spark_lineage(spark, built.metadata_location),
    )
    table = catalog.register_table("ns.manifests", built.metadata_location)

    result = rewrite_manifests(table)

    table.refresh()
    assert result["rewritten_manifests_count"] > 1
    assert spark_rows_checksum(table.metadata_location) == rows
    assert _spark_lineage(spark, table.metadata_location) == lineage
    _assert_row_ids_consistent(table.metadata_location)


def test_a_format_version_4_table_is_refused_unchanged(
    java_table: JavaTables, spark: SparkSession, catalog: SqlCatalog
) -> None:
    built = java_table.fresh(V3_DELETION_VECTORS)
    spark.sql(f"ALTER TABLE {built.spark_identifier} SET TBLPROPERTIES ('format-version'='4')")
    location = metadata_location(spark, built.name)
    assert _metadata(location)["format-version"] == 4
    with pytest.raises(Exception, match="does not match any of the expected tags"):
        catalog.register_table("ns.v4", location)  # recorded, but PyIceberg cannot load it

    with pytest.raises(ConfigurationError, match="format version 4 is not supported") as err:
        load_table(catalog, "ns.v4")

    assert "\n" not in str(err.value)
    assert metadata_location(spark, built.name) == location
