"""Position-delete compaction against Java Iceberg 1.10: Spark reads exactly the same rows after our
``rewrite_position_deletes``, on tables Spark wrote with merge-on-read DELETE and UPDATE (several commits
of position deletes) and on tables we wrote, sees each new file's data sequence number as the largest of
the files it replaced, and commits on top of the result."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.position_deletes import rewrite_position_deletes
from tests.helpers import commit_position_deletes, data_files
from tests.interop.fixtures import JavaTables
from tests.interop.spark import CATALOG, NAMESPACE, metadata_location, spark_metadata_table
from tests.interop.tables import MOR_PROPERTIES, V2_POSITION_DELETES

pytestmark = pytest.mark.spark


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _position_entries(spark: Any, location: str) -> list[dict[str, Any]]:
    """Java's view of the live position delete entries: status, sequence number, data file."""
    return [
        e
        for e in spark_metadata_table(spark, location, "entries")
        if e["status"] != 2 and e["data_file"]["content"] == 1
    ]


def _spark_ids(spark: Any, location: str) -> list[int]:
    return sorted(r["id"] for r in spark.read.format("iceberg").load(location).select("id").collect())


def _adopt(spark: Any, name: str, location: str) -> None:
    """Make our metadata.json the Hadoop catalog's current version of ``spark_cat.db.<name>``."""
    metadata_dir = Path(location.removeprefix("file:")).parent
    hint = metadata_dir / "version-hint.text"
    version = int(hint.read_text().strip()) + 1
    shutil.copyfile(location.removeprefix("file:"), metadata_dir / f"v{version}.metadata.json")
    hint.write_text(str(version))
    spark.sql(f"REFRESH TABLE {CATALOG}.{NAMESPACE}.{name}")


def _check_sequence_numbers(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """Every new file, as Java reads it, carries the largest data sequence number of the replaced files
    (one group per partition here)."""
    for entry in after:
        partition = entry["data_file"].get("partition")
        replaced = [e["sequence_number"] for e in before if e["data_file"].get("partition") == partition]
        assert entry["sequence_number"] == max(replaced)


def test_spark_reads_the_same_rows_after_we_rewrite_its_position_deletes_and_commits_on_top(
    java_table: JavaTables,
    spark_rows_checksum: Callable[[str], tuple[int, int]],
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    spark = java_table.spark
    built = java_table.fresh(V2_POSITION_DELETES)
    before = spark_rows_checksum(built.metadata_location)
    inputs = _position_entries(spark, built.metadata_location)
    assert len(inputs) >= 5
    table = catalog.register_table("ns.t", built.metadata_location)

    result = rewrite_position_deletes(table, limits=_limits(tmp_path))

    table.refresh()
    assert spark_rows_checksum(table.metadata_location) == before
    outputs = _position_entries(spark, table.metadata_location)
    assert result["rewritten_delete_files_count"] == len(inputs)
    # File granularity: one new file per data file with deletes (Spark's own count here, 6 for 6).
    assert result["added_delete_files_count"] == len(outputs) <= len(inputs)
    assert {e["snapshot_id"] for e in outputs} == set(result["snapshot_ids"])
    _check_sequence_numbers(inputs, outputs)
    # Spark commits a merge-on-read DELETE on top of our snapshot and reads the rows it expects.
    _adopt(spark, built.name, table.metadata_location)
    spark.sql(f"DELETE FROM {built.spark_identifier} WHERE id IN (10, 11, 12)")
    expected = sorted(i for i in built.expected_ids if i not in (10, 11, 12))
    assert _spark_ids(spark, metadata_location(spark, built.name)) == expected


def test_spark_reads_the_same_rows_of_a_partitioned_table_it_wrote(
    java_table: JavaTables,
    spark_rows_checksum: Callable[[str], tuple[int, int]],
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    spark = java_table.spark
    name = "posdel_partitioned"
    ident = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(
        f"""CREATE TABLE {ident} (id INT NOT NULL, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat)
        TBLPROPERTIES ('format-version'='2', 'write.delete.granularity'='partition', {MOR_PROPERTIES})"""
    )
    spark.sql(f"INSERT INTO {ident} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), 'x' FROM range(0, 60)")
    for residue in range(6):
        spark.sql(f"DELETE FROM {ident} WHERE id % 10 = {residue}")
    spark.sql(f"UPDATE {ident} SET v = 'y' WHERE id % 10 = 7")
    location = metadata_location(spark, name)
    before = spark_rows_checksum(location)
    inputs = _position_entries(spark, location)
    table = catalog.register_table("ns.p", location)

    # Partition granularity: Spark adds a partition-scoped delete file at every commit (file-scoped ones
    # it would rewrite itself); three or four per partition, below min-input-files, so all are asked for.
    rewrite_position_deletes(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    table.refresh()
    assert spark_rows_checksum(table.metadata_location) == before
    outputs = _position_entries(spark, table.metadata_location)
    # The table's granularity: one file per partition.
    assert len(outputs) == 2 < len(inputs)
    _check_sequence_numbers(inputs, outputs)


def test_spark_reads_the_same_rows_after_we_rewrite_our_own_position_deletes(
    spark_rows_checksum: Callable[[str], tuple[int, int]], catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = catalog.create_table(
        "ns.ours",
        schema=pa.schema([("id", pa.int64()), ("v", pa.string())]),
        properties={"format-version": "2"},
    )
    for lo in (0, 40):
        table.append(pa.table({"id": list(range(lo, lo + 40)), "v": [f"v{i}" for i in range(lo, lo + 40)]}))
    for row in range(0, 12, 2):
        for data_file in data_files(table):
            commit_position_deletes(table, data_file.file_path, [row])
    table.refresh()
    before = spark_rows_checksum(table.metadata_location)
    assert before[0] == 80 - 12

    result = rewrite_position_deletes(table, limits=_limits(tmp_path))

    table.refresh()
    assert result["rewritten_delete_files_count"] == 12
    assert result["added_delete_files_count"] == 2
    assert spark_rows_checksum(table.metadata_location) == before
