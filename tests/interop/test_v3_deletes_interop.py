"""Our deletion-vector commits on format-version 3 tables Spark 3.5 + Iceberg 1.10 wrote (merge-on-read
DELETE/UPDATE writing DVs, row lineage on): MERGE in both modes, convert-equality-deletes and
rewrite-position-deletes.

After each of ours Spark reads exactly the rows it read before, with the same ``_row_id`` and
``_last_updated_sequence_number`` (its metadata columns); the scan itself is Java's ``DeleteFileIndex``
loading every DV (it fails on two DVs for one data file or on a DV below its data file's sequence
number); the snapshot's row-id range and ``next-row-id`` agree; then Spark commits a merge-on-read
DELETE on top of our metadata, and ours commits on top of Spark's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes
from airflow_provider_iceberg_exec.engine.ops.merge import merge
from airflow_provider_iceberg_exec.engine.ops.position_deletes import rewrite_position_deletes
from tests.helpers import live_delete_entries
from tests.interop.fixtures import JavaTables
from tests.interop.spark import metadata_location, spark_rows
from tests.interop.tables import (
    V3_DELETION_VECTORS,
    V3_UPGRADED_MIXED_DELETES,
    commit_deletes,
    publish_to_spark,
    write_equality_deletes,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Checksum = Callable[[str], tuple[int, int]]


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _lineage(spark: SparkSession, location: str) -> dict[int, tuple[int, int]]:
    rows = (
        spark.read.format("iceberg").load(location).select("id", "_row_id", "_last_updated_sequence_number")
    )
    lineage = {int(r["id"]): (r["_row_id"], r["_last_updated_sequence_number"]) for r in rows.collect()}
    assert all(row_id is not None and seq is not None for row_id, seq in lineage.values())
    return lineage


def _row_ids_consistent(location: str) -> None:
    raw = json.loads(Path(urlparse(location).path).read_text())
    current = next(s for s in raw["snapshots"] if s["snapshot-id"] == raw["current-snapshot-id"])
    assert raw["format-version"] == 3
    assert current["first-row-id"] + current["added-rows"] == raw["next-row-id"]


def _one_dv_per_data_file(table: Table) -> list[Any]:
    dvs = [f for f, _ in live_delete_entries(table) if is_deletion_vector(f)]
    targets = [referenced_data_file(f) for f in dvs]
    assert len(targets) == len(set(targets))
    return dvs


def _spark_on_top(
    spark: SparkSession, built: Any, ours: str, checksum: Checksum, lineage: dict[int, tuple[int, int]]
) -> str:
    """Spark takes our metadata and deletes id 8 (merge-on-read: a DV on top of ours); returns its
    metadata location."""
    published = publish_to_spark(spark, built.name, ours)
    assert _lineage(spark, published) == lineage
    spark.sql(f"DELETE FROM {built.spark_identifier} WHERE id = 8")
    location = metadata_location(spark, built.name)
    after = _lineage(spark, location)
    assert after == {i: v for i, v in lineage.items() if i != 8}
    assert checksum(location) != checksum(ours)
    return location


def test_our_position_delete_rewrite_of_a_spark_v3_table(
    java_table: JavaTables,
    spark: SparkSession,
    spark_rows_checksum: Checksum,
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    """Partition-scoped and file-scoped v2 position files (some applying where a DV now does) become one
    DV per data file without them; the DVs Spark wrote stay the only ones of their data files."""
    built = java_table.fresh(V3_UPGRADED_MIXED_DELETES)
    rows, lineage = spark_rows_checksum(built.metadata_location), _lineage(spark, built.metadata_location)
    table = catalog.register_table("ns.posdel", built.metadata_location)
    assert any(not is_deletion_vector(f) for f, _ in live_delete_entries(table))

    result = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="posdel-v3")

    table.refresh()
    ours = table.metadata_location
    assert result["added_delete_files_count"] > 0
    assert spark_rows_checksum(ours) == rows  # Java's DeleteFileIndex loaded every DV
    assert _lineage(spark, ours) == lineage
    _row_ids_consistent(ours)
    assert all(is_deletion_vector(f) for f, _ in live_delete_entries(table))  # no v2 position file left
    _one_dv_per_data_file(table)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary["added-dvs"] == str(result["added_delete_files_count"])
    again = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="posdel-v3-again")
    assert again["snapshot_ids"] == []

    spark_location = _spark_on_top(spark, built, ours, spark_rows_checksum, lineage)
    rows, lineage = spark_rows_checksum(spark_location), _lineage(spark, spark_location)
    mine = catalog.register_table("ns.posdel2", spark_location)
    compact(mine, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    mine.refresh()
    assert spark_rows_checksum(mine.metadata_location) == rows
    assert _lineage(spark, mine.metadata_location) == lineage


def test_our_equality_delete_conversion_of_a_spark_v3_table(
    java_table: JavaTables,
    spark: SparkSession,
    spark_rows_checksum: Checksum,
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    """Java's equality deletes on a v3 table with Spark's DVs become DVs merged with those: the rows and
    their lineage are what Spark read with the equality deletes applied."""
    built = java_table.fresh(V3_DELETION_VECTORS)
    # 2 and 6 live in data files with a Spark DV (0, 1, 4 deleted there); 15 is a row Spark's UPDATE
    # rewrote; 1000 does not exist.
    commit_deletes(
        spark,
        built.name,
        [write_equality_deletes(spark, built.name, ["id"], [(2,), (6,), (15,), (1000,)])],
    )
    location = metadata_location(spark, built.name)
    rows, lineage = spark_rows_checksum(location), _lineage(spark, location)
    assert not {2, 6, 15} & lineage.keys()
    table = catalog.register_table("ns.convert", location)

    result = convert_equality_deletes(table, limits=_limits(tmp_path), commit_id="convert-v3")

    table.refresh()
    ours = table.metadata_location
    assert result["converted_equality_delete_files_count"] == 1
    assert spark_rows_checksum(ours) == rows
    assert _lineage(spark, ours) == lineage
    _row_ids_consistent(ours)
    live = live_delete_entries(table)
    assert not [f for f, _ in live if f.content == DataFileContent.EQUALITY_DELETES]
    snapshot = table.current_snapshot()
    assert snapshot is not None
    _one_dv_per_data_file(table)
    assert snapshot.sequence_number in {seq for f, seq in live if is_deletion_vector(f)}
    assert snapshot.summary is not None
    assert int(snapshot.summary["removed-dvs"]) >= 1  # Spark's DVs of those data files were folded

    spark_location = _spark_on_top(spark, built, ours, spark_rows_checksum, lineage)
    rows, lineage = spark_rows_checksum(spark_location), _lineage(spark, spark_location)
    mine = catalog.register_table("ns.convert2", spark_location)
    compact(mine, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    mine.refresh()
    assert spark_rows_checksum(mine.metadata_location) == rows
    assert _lineage(spark, mine.metadata_location) == lineage


def _rows_by_id(spark: SparkSession, location: str) -> dict[int, tuple[str, str]]:
    return {int(r["id"]): (r["cat"], r["v"]) for r in spark_rows(spark, location)}


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_our_merge_of_a_spark_v3_table(
    mode: str,
    java_table: JavaTables,
    spark: SparkSession,
    spark_rows_checksum: Checksum,
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    """Updates of rows in files with a Spark DV (2, 6) and of a row Spark's UPDATE moved (15), a delete
    (7) and an insert (1000): Spark reads the model's rows; updated rows keep their ``_row_id`` and read
    our commit's sequence number, the others keep both values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    built = java_table.fresh(V3_DELETION_VECTORS)
    before, lineage = _rows_by_id(spark, built.metadata_location), _lineage(spark, built.metadata_location)
    table = catalog.register_table("ns.merge", built.metadata_location)
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]
    source = tmp_path / "source.parquet"
    changes = {2: "ours-2", 6: "ours-6", 15: "ours-15", 7: "gone", 1000: "new"}
    pq.write_table(
        pa.table(
            {
                "id": pa.array(list(changes), pa.int32()),
                "cat": ["z"] * len(changes),
                "v": list(changes.values()),
            }
        ),
        source,
    )

    merge(
        table,
        on=["id"],
        source_files=[str(source)],
        when_matched=["AND s.v = 'gone' THEN DELETE", "UPDATE SET t.v = s.v"],
        when_not_matched=["INSERT *"],
        mode=mode,
        limits=_limits(tmp_path),
    )

    table.refresh()
    ours = table.metadata_location
    expected = {i: row for i, row in before.items() if i != 7}
    expected.update({i: (before[i][0], changes[i]) for i in (2, 6, 15)})
    expected[1000] = ("z", "new")
    assert _rows_by_id(spark, ours) == expected  # and Java's DeleteFileIndex loaded every DV
    snapshot = table.current_snapshot()
    assert snapshot is not None
    after = _lineage(spark, ours)
    for i in (2, 6, 15):
        assert after[i] == (lineage[i][0], snapshot.sequence_number)
    assert {i: v for i, v in after.items() if i not in (2, 6, 15, 1000)} == {
        i: v for i, v in lineage.items() if i not in (2, 6, 15, 7)
    }
    assert after[1000][0] >= next_row_id
    assert after[1000][1] == snapshot.sequence_number
    _row_ids_consistent(ours)
    if mode == "merge-on-read":
        assert int(snapshot.summary["added-dvs"]) >= 1  # type: ignore[index]
    _one_dv_per_data_file(table)

    spark_location = _spark_on_top(spark, built, ours, spark_rows_checksum, after)
    rows, lineage = _rows_by_id(spark, spark_location), _lineage(spark, spark_location)
    mine = catalog.register_table("ns.merge2", spark_location)
    again = tmp_path / "again.parquet"
    pq.write_table(pa.table({"id": pa.array([9, 2], pa.int32()), "cat": ["z", "z"], "v": ["x", "y"]}), again)
    merge(
        mine,
        on=["id"],
        source_files=[str(again)],
        when_matched=["AND t.id = 9 THEN DELETE", "UPDATE SET t.v = s.v"],
        mode=mode,
        limits=_limits(tmp_path),
    )
    mine.refresh()
    top = mine.current_snapshot()
    assert top is not None
    rows.pop(9)
    rows[2] = (rows[2][0], "y")
    assert _rows_by_id(spark, mine.metadata_location) == rows
    final = _lineage(spark, mine.metadata_location)
    assert final[2] == (lineage[2][0], top.sequence_number)
    assert {i: v for i, v in final.items() if i != 2} == {i: v for i, v in lineage.items() if i not in (2, 9)}
    _row_ids_consistent(mine.metadata_location)
