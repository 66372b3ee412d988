"""Manifest rewrite and Java Iceberg 1.10: Spark reads exactly the same rows and the same live entries after
our ``rewrite_manifests`` of a table it wrote (many appends and merge-on-read deletes), commits on top of it,
and runs its own ``rewrite_manifests``, whose output ours then rewrites again."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests
from tests.interop.spark import CATALOG, NAMESPACE, metadata_location, spark_metadata_table
from tests.interop.tables import MOR_PROPERTIES

pytestmark = pytest.mark.spark


def _build(spark: Any, name: str) -> str:
    """Partitioned by ``cat``, merge-on-read: eight appends, a DELETE and an UPDATE (position deletes)."""
    t = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, v STRING) USING iceberg PARTITIONED BY (cat)
        TBLPROPERTIES ('format-version'='2', {MOR_PROPERTIES})"""
    )
    for lo in range(0, 80, 10):
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), IF(id % 3 = 0, NULL, concat('c', id % 3)),
            concat('v', id) FROM range({lo}, {lo + 10}, 1, 1)"""
        )
    spark.sql(f"DELETE FROM {t} WHERE id % 10 = 3")
    spark.sql(f"UPDATE {t} SET v = concat('updated-', id) WHERE id % 10 = 5")
    return metadata_location(spark, name)


def _live_entries(spark: Any, location: str) -> set[tuple[Any, ...]]:
    """Java's view of the live entries: path, content, snapshot id and both sequence numbers."""
    return {
        (
            r["data_file"]["file_path"],
            r["data_file"]["content"],
            r["snapshot_id"],
            r["sequence_number"],
            r["file_sequence_number"],
        )
        for r in spark_metadata_table(spark, location, "entries")
        if r["status"] < 2
    }


def _hand_to_spark(spark_name: str, spark: Any, our_location: str) -> None:
    """Make our commit the current version of Spark's Hadoop-catalog table (``v<N+1>.metadata.json``)."""
    metadata_dir = Path(metadata_location(spark, spark_name).removeprefix("file:").removeprefix("//")).parent
    version = 1 + max(int(p.name[1:].split(".")[0]) for p in metadata_dir.glob("v*.metadata.json"))
    shutil.copy(
        our_location.removeprefix("file:").removeprefix("//"), metadata_dir / f"v{version}.metadata.json"
    )
    (metadata_dir / "version-hint.text").write_text(str(version))
    assert metadata_location(spark, spark_name).endswith(f"v{version}.metadata.json")


def _manifest_count(spark: Any, location: str) -> int:
    return len(spark_metadata_table(spark, location, "manifests"))


def test_spark_reads_the_same_rows_and_entries_after_our_rewrite_and_builds_on_it(
    spark: Any, spark_rows_checksum: Callable[[str], tuple[int, int]], catalog: SqlCatalog
) -> None:
    name = "rm_interop"
    location = _build(spark, name)
    rows, entries = spark_rows_checksum(location), _live_entries(spark, location)
    manifests_before = _manifest_count(spark, location)
    table = catalog.register_table("ns.t", location)

    result = rewrite_manifests(table, commit_id="ours-1")

    table.refresh()
    ours = table.metadata_location
    assert result["rewritten_manifests_count"] > result["added_manifests_count"] > 0
    assert _manifest_count(spark, ours) < manifests_before
    assert spark_rows_checksum(ours) == rows
    assert _live_entries(spark, ours) == entries
    delete_files = [e for e in entries if e[1] != 0]
    assert delete_files, "the table must have delete files for this test"

    # Spark commits on top of our snapshot, then rewrites the manifests itself
    _hand_to_spark(name, spark, ours)
    t = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(f"INSERT INTO {t} VALUES (1000, 'c1', 'after-ours'), (1001, NULL, 'after-ours')")
    spark.sql(f"DELETE FROM {t} WHERE id = 7")
    spark.sql(f"CALL {CATALOG}.system.rewrite_manifests(table => '{NAMESPACE}.{name}')")
    spark.sql(f"INSERT INTO {t} VALUES (1002, 'c2', 'after-spark')")
    java = metadata_location(spark, name)
    assert spark_rows_checksum(java)[0] == rows[0] + 3 - 1
    rows_java, entries_java = spark_rows_checksum(java), _live_entries(spark, java)

    # ours again, over Spark's optimized manifests and its later append
    again_table = catalog.register_table("ns.t_again", java)
    again = rewrite_manifests(again_table, commit_id="ours-2")

    again_table.refresh()
    assert again["rewritten_manifests_count"] >= 2
    assert spark_rows_checksum(again_table.metadata_location) == rows_java
    assert _live_entries(spark, again_table.metadata_location) == entries_java
