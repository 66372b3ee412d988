"""Smoke tests of the Java-written tables: they exist, Spark reads them stably and as built, PyIceberg
reads (or refuses) them, and their manifests hold the delete files each kind is about."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.interop.fixtures import JavaTables
from tests.interop.manifests import DATA, EQUALITY_DELETES, POSITION_DELETES, live_entries
from tests.interop.spark import normalize_arrow, spark_metadata_table, spark_rows
from tests.interop.tables import (
    KINDS,
    V2_EQUALITY_DELETES,
    V2_PARTITIONED,
    V2_POSITION_DELETES,
    V2_SPEC_EVOLVED_DELETES,
    V2_UNPARTITIONED,
    V3_DELETION_VECTORS,
    V3_UPGRADED_MIXED_DELETES,
    expected_equality_delete_rows,
)

pytestmark = pytest.mark.spark

FORMAT_VERSION = {kind: 3 if kind.startswith("v3") else 2 for kind in KINDS}
PYICEBERG_READABLE = [k for k in KINDS if k != V2_EQUALITY_DELETES]


def _register(catalog: SqlCatalog, java_table: JavaTables, kind: str):  # type: ignore[no-untyped-def]
    return catalog.register_table(f"ns.{kind}", java_table(kind))


@pytest.mark.parametrize("kind", list(KINDS))
def test_spark_reads_the_table_stably_and_as_built(kind, java_table, spark, spark_rows_checksum) -> None:
    built = java_table.info(kind)
    assert Path(urlparse(built.metadata_location).path).is_file()
    assert built.metadata_location.endswith(".metadata.json")

    first = spark_rows_checksum(built.metadata_location)
    second = spark_rows_checksum(built.metadata_location)
    assert first == second
    assert first[0] == len(built.expected_ids)

    df = spark.read.format("iceberg").load(built.metadata_location)
    assert tuple(sorted(r[0] for r in df.select("id").collect())) == built.expected_ids


@pytest.mark.parametrize("kind", PYICEBERG_READABLE)
def test_pyiceberg_registers_and_reads_what_spark_reads(kind, java_table, spark, catalog) -> None:
    table = _register(catalog, java_table, kind)
    assert table.format_version == FORMAT_VERSION[kind]
    assert normalize_arrow(table.scan().to_arrow()) == spark_rows(spark, java_table(kind))


def test_pyiceberg_refuses_equality_deletes(java_table, catalog) -> None:
    table = _register(catalog, java_table, V2_EQUALITY_DELETES)  # registering and planning are fine
    with pytest.raises(ValueError, match="PyIceberg does not yet support equality deletes"):
        table.scan().to_arrow()


def test_spark_applies_equality_deletes_by_the_spec(java_table, spark) -> None:
    """Sequence numbers, partition scoping, global deletes and null-matches-null, as Java applies them."""
    rows = spark_rows(spark, java_table(V2_EQUALITY_DELETES))
    got = sorted(((r["id"], r["cat"], r["name"], r["v"]) for r in rows), key=lambda r: (r[0], r[3]))
    assert got == expected_equality_delete_rows()


@pytest.mark.parametrize("kind", [V2_UNPARTITIONED, V2_PARTITIONED])
def test_append_only_tables_have_no_delete_files(kind, java_table, catalog) -> None:
    entries = live_entries(_register(catalog, java_table, kind))
    assert {e.content for e in entries} == {DATA}
    if kind == V2_PARTITIONED:
        assert len({e.partition for e in entries}) == 6  # 2 cats x 3 days
        assert len(entries) >= 24  # many small files: several per partition
        assert max(Counter(e.partition for e in entries).values()) >= 4
    # PyIceberg's own metadata table agrees on v2
    assert Counter(r["data_file"]["content"] for r in _register_inspect_entries(catalog, kind)) == {
        0: len(entries)
    }


def _register_inspect_entries(catalog: SqlCatalog, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in catalog.load_table(f"ns.{kind}").inspect.entries().to_pylist() if r["status"] != 2]


def test_v2_merge_on_read_writes_position_delete_files(java_table, catalog, spark) -> None:
    entries = live_entries(_register(catalog, java_table, V2_POSITION_DELETES))
    deletes = [e for e in entries if e.content == POSITION_DELETES]
    assert deletes
    assert {e.file_format for e in deletes} == {"PARQUET"}
    assert len([e for e in entries if e.content == DATA]) == 7  # 6 appended + 1 from the UPDATE
    assert sum(e.record_count for e in deletes) == 9 + 9 + 3  # id % 10 = 3, UPDATEd id % 10 = 5, {0, 1, 4}
    java = spark_metadata_table(spark, java_table(V2_POSITION_DELETES), "delete_files")
    assert sorted(r["file_path"] for r in java) == sorted(e.file_path for e in deletes)
    assert Counter(
        r["data_file"]["content"] for r in _register_inspect_entries(catalog, V2_POSITION_DELETES)
    ) == {
        0: 7,
        1: len(deletes),
    }


def test_v3_merge_on_read_writes_deletion_vectors(java_table, catalog, spark) -> None:
    table = _register(catalog, java_table, V3_DELETION_VECTORS)
    deletes = [e for e in live_entries(table) if e.content == POSITION_DELETES]
    assert deletes
    assert {e.file_format for e in deletes} == {"PUFFIN"}
    # Java's view: every DV names its data file and its blob's place in the Puffin file.
    java = spark_metadata_table(spark, java_table(V3_DELETION_VECTORS), "delete_files")
    assert len(java) == len(deletes)
    for r in java:
        assert r["file_format"] == "PUFFIN"
        assert r["referenced_data_file"]
        assert r["content_offset"] is not None
        assert r["content_size_in_bytes"]
    # Java merges a file's earlier deletes into its new DV: one DV per data file with deletes.
    assert len({r["referenced_data_file"] for r in java}) == len(java)
    # PyIceberg 0.12 limits this infrastructure works around (a failure here means PyIceberg improved):
    with pytest.raises(TypeError):
        table.inspect.entries()
    dv = next(m for m in table.current_snapshot().manifests(table.io) if m.content.value == 1)
    assert not hasattr(dv.fetch_manifest_entry(table.io)[0].data_file, "referenced_data_file")


def test_equality_delete_files_and_their_sequence_numbers(java_table, catalog) -> None:
    entries = live_entries(_register(catalog, java_table, V2_EQUALITY_DELETES))
    assert {e.content for e in entries} == {DATA, EQUALITY_DELETES}
    eq = sorted((e for e in entries if e.content == EQUALITY_DELETES), key=lambda e: e.sequence_number)
    assert [(e.spec_id, e.partition, e.equality_ids) for e in eq] == [
        (1, ("a",), (1,)),  # partitioned, on id
        (0, (), (1,)),  # global, on id
        (0, (), (1, 3)),  # global, on (id, name)
    ]
    assert all(e.file_format == "PARQUET" for e in eq)
    partitioned = eq[0]
    same_partition = [e.sequence_number for e in entries if e.content == DATA and e.partition == ("a",)]
    assert min(same_partition) < partitioned.sequence_number < max(same_partition)
    assert {e.spec_id for e in entries if e.content == DATA} == {0, 1}


def test_spec_evolved_table_has_position_deletes_in_both_specs(java_table, catalog) -> None:
    table = _register(catalog, java_table, V2_SPEC_EVOLVED_DELETES)
    assert sorted(table.specs()) == [0, 1]
    entries = live_entries(table)
    assert {e.spec_id for e in entries if e.content == DATA} == {0, 1}
    assert {e.spec_id for e in entries if e.content == POSITION_DELETES} == {0, 1}


def test_v3_upgraded_table_has_dvs_next_to_partition_scoped_position_deletes(
    java_table, catalog, spark
) -> None:
    table = _register(catalog, java_table, V3_UPGRADED_MIXED_DELETES)
    deletes = [e for e in live_entries(table) if e.content == POSITION_DELETES]
    assert {e.file_format for e in deletes} == {"PARQUET", "PUFFIN"}
    java = spark_metadata_table(spark, java_table(V3_UPGRADED_MIXED_DELETES), "delete_files")
    dv_partitions = {tuple(r["partition"].values()) for r in java if r["file_format"] == "PUFFIN"}
    scoped = {
        tuple(r["partition"].values())
        for r in java
        if r["file_format"] == "PARQUET" and not r["referenced_data_file"]
    }
    assert dv_partitions & scoped  # a DV and a still-live partition-scoped delete file over the same data


def test_pyiceberg_commits_to_a_java_table_and_spark_reads_the_result(
    java_table, catalog, spark_rows_checksum
) -> None:
    built = java_table.fresh(V2_POSITION_DELETES)
    before = spark_rows_checksum(built.metadata_location)
    table = catalog.register_table("ns.fresh", built.metadata_location)
    rows = pa.table({"id": pa.array([1000, 1001], pa.int32()), "cat": ["z", None], "v": ["p", "q"]})
    table.append(rows.cast(table.schema().as_arrow()))
    after = spark_rows_checksum(table.metadata_location)
    assert after[0] == before[0] + 2
    assert spark_rows_checksum(built.metadata_location) == before  # the old metadata.json is unchanged


def test_pyiceberg_cannot_commit_to_a_v3_table(java_table, catalog) -> None:
    table = catalog.register_table("ns.fresh_v3", java_table.fresh(V3_DELETION_VECTORS).metadata_location)
    rows = pa.table({"id": pa.array([1000], pa.int32()), "cat": ["z"], "v": ["p"]})
    with pytest.raises(ValueError, match="Cannot write manifest for table version: 3"):
        table.append(rows.cast(table.schema().as_arrow()))


def test_shaded_jackson_jar_is_relocated() -> None:
    import zipfile

    from tests.interop.shade_jackson import DST_SLASH, SRC_SLASH, shaded_jackson_jar

    with zipfile.ZipFile(shaded_jackson_jar()) as jar:
        names = jar.namelist()
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
        classes = [n for n in names if n.endswith(".class")]
        assert all(n.startswith("org/apache/iceberg/shaded/com/fasterxml/jackson/") for n in classes)
        data = jar.read("org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class")
        assert DST_SLASH in data
        assert SRC_SLASH not in data.replace(DST_SLASH, b"")
