"""convert-equality-deletes on tables Java Iceberg 1.10 wrote: Spark (Java) reads exactly the rows it read
before, no equality delete is left (so PyIceberg, which cannot apply one, reads the table too), the new
position delete files carry Java's sequence numbers, and Spark commits, merges and rewrites on top.

Spark is the reference: each case first checks its model of the live rows against Spark reading the
equality deletes itself, then Spark reads the converted table, its metadata tables and every manifest of
ours, including those holding equality delete entries (whose ``equality_ids`` must be the spec's
``list<int>``: PyIceberg 0.12's schema says ``list<long>``, which Java refuses).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable
from pyiceberg.table.snapshots import Operation

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import ConvertResult
from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes
from tests.interop.fixtures import JavaTables
from tests.interop.manifests import DATA, EQUALITY_DELETES, POSITION_DELETES, ContentEntry, live_entries
from tests.interop.spark import (
    CATALOG,
    NAMESPACE,
    metadata_location,
    normalize_arrow,
    spark_metadata_table,
    spark_rows,
)
from tests.interop.tables import (
    V2_EQUALITY_DELETES,
    V2_PARTITIONED,
    V2_POSITION_DELETES,
    V2_SPEC_EVOLVED_DELETES,
    BuiltTable,
    commit_deletes,
    publish_to_spark,
    write_equality_deletes,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

try:
    from py4j.protocol import Py4JJavaError
except ImportError:  # no Spark test dependencies: every test here is skipped
    Py4JJavaError = Exception

pytestmark = pytest.mark.spark


Checksum = Callable[[str], tuple[int, int]]

_NAMES = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Case:
    """A private Java-written table with equality deletes, and what Spark must read from it."""

    built: BuiltTable  # metadata_location: after the equality deletes
    expected_ids: tuple[int, ...]
    matched_rows: int  # live rows only equality deletes remove (not also deleted by position)
    merges_position_deletes: bool  # some matched data file has a Spark position delete file


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _local(uri: str) -> str:
    return urlparse(uri).path


def _spark_ids(spark: SparkSession, location: str) -> tuple[int, ...]:
    df = spark.read.format("iceberg").load(location)
    return tuple(sorted(r[0] for r in df.select("id").collect()))


def _arrow_ids(table: pa.Table) -> tuple[int, ...]:
    return tuple(sorted(table.column("id").to_pylist()))


def _entries(catalog: SqlCatalog, location: str) -> list[ContentEntry]:
    """The live data and delete files of the table at ``location`` (registered under a new name), by
    the tests' own manifest reader. Not Java's metadata tables: see
    test_java_metadata_tables_read_the_converted_table."""
    return live_entries(catalog.register_table(f"ns.read_{next(_NAMES)}", location))


def _delete_files(catalog: SqlCatalog, location: str) -> list[ContentEntry]:
    return [e for e in _entries(catalog, location) if e.content != DATA]


def _named_data_files(delete_file: str) -> set[str]:
    """The data files a position delete file names (its ``file_path`` column, read with pyarrow)."""
    return set(pq.read_table(_local(delete_file), columns=["file_path"]).column("file_path").to_pylist())


def _files_of_rows(spark: SparkSession, identifier: str) -> dict[int, str]:
    """``id -> data file`` of the live rows, by Spark's ``_file`` metadata column."""
    return {r["id"]: r["_file"] for r in spark.sql(f"SELECT id, _file FROM {identifier}").collect()}


def _with_location(spark: SparkSession, built: BuiltTable) -> BuiltTable:
    return dataclasses.replace(built, metadata_location=metadata_location(spark, built.name))


# --- the tables ---------------------------------------------------------------------------------------


def _java_equality(spark: SparkSession, tables: JavaTables) -> Case:
    """v2_equality_deletes: partition-scoped (older than some data), global, on two columns, NULL keys."""
    built = tables.fresh(V2_EQUALITY_DELETES)
    # The old 21 and 23 (cat a, seq 2), then 2, 30 (global on id), then 5, 35, 7 (global on id, name).
    return Case(built, built.expected_ids, matched_rows=7, merges_position_deletes=False)


def _with_position_deletes(spark: SparkSession, tables: JavaTables) -> Case:
    """v2_position_deletes (Spark merge-on-read) plus two global equality deletes, over rows with and
    without position deletes, and over the rows Spark's UPDATE rewrote."""
    built = tables.fresh(V2_POSITION_DELETES)
    # 3 is deleted by position already; 15 lives in the UPDATE's data file; 1000 does not exist.
    by_id = [(2,), (3,), (15,), (50,), (51,), (1000,)]
    commit_deletes(spark, built.name, [write_equality_deletes(spark, built.name, ["id"], by_id)])
    # 'v25' is 25 before the UPDATE (deleted by position), 'updated-25' its live row.
    by_v = [("v12",), ("updated-25",), ("v25",)]
    commit_deletes(spark, built.name, [write_equality_deletes(spark, built.name, ["v"], by_v)])
    gone = {2, 15, 50, 51, 12, 25}
    expected = tuple(i for i in built.expected_ids if i not in gone)
    return Case(_with_location(spark, built), expected, matched_rows=len(gone), merges_position_deletes=True)


def _spec_evolved(spark: SparkSession, tables: JavaTables) -> Case:
    """v2_spec_evolved_deletes plus a partition-scoped equality delete in each spec: each reaches only the
    data files of its own spec and partition."""
    built = tables.fresh(V2_SPEC_EVOLVED_DELETES)
    rows = spark.sql(
        "SELECT id, _spec_id AS spec, _partition.cat AS cat, _partition.id_bucket_4 AS bucket "
        f"FROM {built.spark_identifier}"
    ).collect()
    where = {r["id"]: (r["spec"], r["cat"], r["bucket"]) for r in rows}
    # Spec 0, cat=c1: 1, 4, 10 live there, 7 is deleted by position; 43 is c1 but in spec 1, 2 is c2.
    spec0 = [1, 4, 7, 10, 43, 2]
    spec0_gone = {i for i in spec0 if where.get(i) == (0, "c1", None)}
    _, cat, bucket = where[min(i for i, p in where.items() if p[0] == 1)]
    victims = sorted(i for i, p in where.items() if p == (1, cat, bucket))[:3]
    decoys = [
        min(i for i, p in where.items() if p[0] == 1 and p[1] == cat and p[2] != bucket),
        min(i for i, p in where.items() if p[0] == 0 and p[1] == cat and i not in spec0_gone),
    ]
    files = [
        write_equality_deletes(
            spark, built.name, ["id"], [(i,) for i in spec0], spec_id=0, partition={"cat": "c1"}
        ),
        write_equality_deletes(
            spark,
            built.name,
            ["id"],
            [(i,) for i in [*victims, *decoys]],
            spec_id=1,
            partition={"cat": cat, "id_bucket_4": bucket},
        ),
    ]
    commit_deletes(spark, built.name, files)
    gone = spec0_gone | set(victims)
    assert spec0_gone == {1, 4, 10}
    expected = tuple(i for i in built.expected_ids if i not in gone)
    return Case(_with_location(spark, built), expected, matched_rows=len(gone), merges_position_deletes=True)


CASES: dict[str, Callable[[SparkSession, JavaTables], Case]] = {
    "java_equality_deletes": _java_equality,
    "with_spark_position_deletes": _with_position_deletes,
    "spec_evolved": _spec_evolved,
}


def _convert(catalog: SqlCatalog, case: Case, tmp_path: Path, **kwargs: Any) -> tuple[str, ConvertResult]:
    """Register the table, convert it; return the converted metadata.json and the result."""
    table = catalog.register_table(f"ns.{case.built.name}", case.built.metadata_location)
    result = convert_equality_deletes(table, limits=_limits(tmp_path), **kwargs)
    table.refresh()
    return table.metadata_location, result


# --- 1. Java reads what it read, PyIceberg reads it too, Spark commits on top ---------------------------


# spec_evolved: Java merged the spec-1 equality delete into a manifest with Spark's position deletes; our
# rewrite of it keeps the DELETED equality entry beside live ones, so Java's scan planning reads it.
@pytest.mark.parametrize("name", sorted(CASES))
def test_java_reads_the_same_rows_and_no_equality_delete_is_left(
    name: str,
    spark: SparkSession,
    java_table: JavaTables,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    case = CASES[name](spark, java_table)
    before = spark_rows_checksum(case.built.metadata_location)
    assert _spark_ids(spark, case.built.metadata_location) == case.expected_ids  # the model is Java's
    deletes_before = _delete_files(catalog, case.built.metadata_location)

    converted, result = _convert(catalog, case, tmp_path)

    assert spark_rows_checksum(converted) == before
    assert _spark_ids(spark, converted) == case.expected_ids
    _check_the_delete_files(catalog, deletes_before, converted, result)
    assert result["matched_rows_count"] == case.matched_rows
    assert (result["removed_position_delete_files_count"] > 0) == case.merges_position_deletes
    # PyIceberg refuses any table with a live equality delete: reading it proves there is none.
    pyiceberg_rows = StaticTable.from_metadata(converted).scan().to_arrow()
    assert normalize_arrow(pyiceberg_rows) == spark_rows(spark, case.built.metadata_location)

    _spark_deletes_and_inserts_on_top(spark, catalog, case, deletes_before, converted)


def test_spec_evolved_conversion_keeps_the_rows_java_read(
    spark: SparkSession, java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """The spec_evolved case read by PyIceberg: each equality delete reached only its own spec and
    partition, as Java applied it before the conversion."""
    case = _spec_evolved(spark, java_table)
    java_rows = spark_rows(spark, case.built.metadata_location)
    deletes_before = _delete_files(catalog, case.built.metadata_location)

    converted, result = _convert(catalog, case, tmp_path)

    assert normalize_arrow(StaticTable.from_metadata(converted).scan().to_arrow()) == java_rows
    assert _arrow_ids(StaticTable.from_metadata(converted).scan().to_arrow()) == case.expected_ids
    _check_the_delete_files(catalog, deletes_before, converted, result)
    assert result["matched_rows_count"] == case.matched_rows
    assert result["removed_position_delete_files_count"] > 0


def _check_the_delete_files(
    catalog: SqlCatalog, deletes_before: list[ContentEntry], converted: str, result: ConvertResult
) -> None:
    equality_before = {e.file_path for e in deletes_before if e.content == EQUALITY_DELETES}
    positions_before = {e.file_path for e in deletes_before if e.content == POSITION_DELETES}
    deletes_after = _delete_files(catalog, converted)
    assert equality_before
    assert {e.content for e in deletes_after} == {POSITION_DELETES}
    positions_after = {e.file_path for e in deletes_after}
    assert result["converted_equality_delete_files_count"] == len(equality_before)
    assert result["kept_equality_delete_files"] == []
    assert result["added_position_delete_files_count"] == len(positions_after - positions_before)
    assert result["removed_position_delete_files_count"] == len(positions_before - positions_after)
    # File granularity, existing file-scoped deletes merged in: one position delete file per data file.
    named = Counter(p for f in positions_after for p in _named_data_files(f))
    assert set(named.values()) == {1}
    snapshot = StaticTable.from_metadata(converted).current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert [snapshot.snapshot_id, snapshot.summary.operation] == [*result["snapshot_ids"], Operation.REPLACE]


def _spark_deletes_and_inserts_on_top(
    spark: SparkSession, catalog: SqlCatalog, case: Case, deletes_before: list[ContentEntry], converted: str
) -> None:
    """Spark DELETEs two live rows of a data file our conversion wrote a position delete file for, and
    INSERTs copies of two others; Spark and PyIceberg read the result."""
    publish_to_spark(spark, case.built.name, converted)
    ident = case.built.spark_identifier
    before = {e.file_path for e in deletes_before}
    ours = {
        e.file_path: _named_data_files(e.file_path)
        for e in _delete_files(catalog, converted)
        if e.file_path not in before
    }
    file_of = _files_of_rows(spark, ident)
    covered = set().union(*ours.values())
    gone = sorted(i for i, f in file_of.items() if f in covered)[:2]
    touched = {file_of[i] for i in gone}
    copied = [i for i in case.expected_ids if i not in gone][:2]
    spark.sql(f"DELETE FROM {ident} WHERE id IN ({', '.join(map(str, gone))})")
    columns = ", ".join("id + 1000 AS id" if c == "id" else f"`{c}`" for c in spark.table(ident).columns)
    spark.sql(
        f"INSERT INTO {ident} SELECT {columns} FROM {ident} WHERE id IN ({', '.join(map(str, copied))})"
    )

    final = metadata_location(spark, case.built.name)
    expected = tuple(sorted([*(i for i in case.expected_ids if i not in gone), *(i + 1000 for i in copied)]))
    assert _spark_ids(spark, final) == expected
    assert _arrow_ids(StaticTable.from_metadata(final).scan().to_arrow()) == expected
    if _merge_on_read(spark, ident):
        # Java took our files for file-scoped ones: its merge-on-read DELETE merged the one of each
        # data file it touched into its own delete file.
        live = {e.file_path for e in _delete_files(catalog, final)}
        assert {f for f, named in ours.items() if named & touched and f in live} == set()


def _merge_on_read(spark: SparkSession, identifier: str) -> bool:
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {identifier}").collect()}
    return props.get("write.delete.mode") == "merge-on-read"


# --- 2. an equality delete between data files: the newer rows stay --------------------------------------


def _build_interleaved(spark: SparkSession) -> tuple[BuiltTable, list[dict[str, Any]]]:
    """PARTITIONED BY (cat), equality deletes on id in cat=a (seq 2) and cat=b (seq 4) between appends:

    seq 1  ids 0..19, cat a for even ids, b for odd, v 'first'
    seq 2  delete (cat=a) ids 0, 2, 4, 1 (cat b: stays), 40 (absent)
    seq 3  (0, a), (2, a), (1, b), (3, b), v 'second': the a rows are newer than the delete, live
    seq 4  delete (cat=b) ids 1, 3, 5: the first and second 1 and 3, the first 5
    seq 5  (3, b), (4, a), v 'third'
    """
    name = f"convert_interleaved_{next(_NAMES)}"
    ident = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(
        f"""CREATE TABLE {ident} (id INT NOT NULL, cat STRING, v STRING)
        USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2')"""
    )
    spark.sql(
        f"INSERT INTO {ident} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), 'first' "
        "FROM range(0, 20, 1, 2)"
    )
    a = write_equality_deletes(spark, name, ["id"], [(0,), (2,), (4,), (1,), (40,)], partition={"cat": "a"})
    commit_deletes(spark, name, [a])
    spark.sql(
        f"INSERT INTO {ident} VALUES "
        "(0, 'a', 'second'), (2, 'a', 'second'), (1, 'b', 'second'), (3, 'b', 'second')"
    )
    b = write_equality_deletes(spark, name, ["id"], [(1,), (3,), (5,)], partition={"cat": "b"})
    commit_deletes(spark, name, [b])
    spark.sql(f"INSERT INTO {ident} VALUES (3, 'b', 'third'), (4, 'a', 'third')")
    first = [
        {"id": i, "cat": "a" if i % 2 == 0 else "b", "v": "first"} for i in range(20) if i not in range(6)
    ]
    later = [("a", 0, "second"), ("a", 2, "second"), ("b", 3, "third"), ("a", 4, "third")]
    rows = first + [{"id": i, "cat": c, "v": v} for c, i, v in later]
    built = BuiltTable(
        "interleaved", name, metadata_location(spark, name), tuple(sorted(r["id"] for r in rows))
    )
    return built, sorted(rows, key=repr)


def test_equality_deletes_between_appends_keep_the_newer_rows(
    spark: SparkSession, catalog: SqlCatalog, spark_rows_checksum: Checksum, tmp_path: Path
) -> None:
    built, expected_rows = _build_interleaved(spark)
    assert spark_rows(spark, built.metadata_location) == expected_rows  # the model is Java's
    before = spark_rows_checksum(built.metadata_location)
    case = Case(built, built.expected_ids, matched_rows=8, merges_position_deletes=False)

    converted, result = _convert(catalog, case, tmp_path)

    assert result["converted_equality_delete_files_count"] == 2
    assert result["matched_rows_count"] == 8  # first 0, 2, 4, 1, 3, 5; second 1, 3
    assert spark_rows_checksum(converted) == before
    assert spark_rows(spark, converted) == expected_rows
    assert normalize_arrow(StaticTable.from_metadata(converted).scan().to_arrow()) == expected_rows
    entries = _entries(catalog, converted)
    assert {e.content for e in entries} == {DATA, POSITION_DELETES}
    data_sequence = {e.file_path: e.sequence_number for e in entries if e.content == DATA}
    positions = {
        e.file_path: (e.partition[0], e.sequence_number) for e in entries if e.content == POSITION_DELETES
    }
    # Each keeps the sequence number of the equality delete it replaces: 2 in cat a, 4 in cat b.
    assert set(positions.values()) == {("a", 2), ("b", 4)}
    for path, (_cat, sequence) in positions.items():
        assert all(data_sequence[p] <= sequence for p in _named_data_files(path))


# --- 3. Java rewrites our position delete files, then the data files -----------------------------------


@pytest.mark.parametrize("name", ["java_equality_deletes", "with_spark_position_deletes"])
def test_spark_rewrites_the_data_files_of_the_converted_table(
    name: str,
    spark: SparkSession,
    java_table: JavaTables,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    case = CASES[name](spark, java_table)
    before = spark_rows_checksum(case.built.metadata_location)
    converted, _result = _convert(catalog, case, tmp_path)
    publish_to_spark(spark, case.built.name, converted)

    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{NAMESPACE}.{case.built.name}', "
        "options => map('rewrite-all', 'true'))"
    )

    final = metadata_location(spark, case.built.name)
    assert final != converted
    assert spark_rows_checksum(final) == before
    assert _arrow_ids(StaticTable.from_metadata(final).scan().to_arrow()) == case.expected_ids


@pytest.mark.parametrize("name", ["java_equality_deletes", "with_spark_position_deletes"])
def test_spark_rewrites_our_position_delete_files(
    name: str,
    spark: SparkSession,
    java_table: JavaTables,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    """Java's rewrite_position_delete_files reads every live position delete file (ours and Spark's)
    through its position_deletes metadata table, and writes new ones: the rows stay."""
    case = CASES[name](spark, java_table)
    before = spark_rows_checksum(case.built.metadata_location)
    converted, _result = _convert(catalog, case, tmp_path)
    publish_to_spark(spark, case.built.name, converted)
    live = {e.file_path for e in _delete_files(catalog, converted)}

    rewritten = spark.sql(
        f"CALL {CATALOG}.system.rewrite_position_delete_files(table => '{NAMESPACE}.{case.built.name}', "
        "options => map('rewrite-all', 'true'))"
    ).collect()[0]

    assert rewritten["rewritten_delete_files_count"] == len(live)
    final = metadata_location(spark, case.built.name)
    assert spark_rows_checksum(final) == before
    assert not live & {e.file_path for e in _delete_files(catalog, final)}
    assert _arrow_ids(StaticTable.from_metadata(final).scan().to_arrow()) == case.expected_ids


def test_java_metadata_tables_read_the_converted_table(
    spark: SparkSession, java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Java's delete_files, entries and files metadata tables agree with our manifest reader."""
    case = _java_equality(spark, java_table)
    converted, _result = _convert(catalog, case, tmp_path)
    ours = sorted(e.file_path for e in _delete_files(catalog, converted))

    java = spark_metadata_table(spark, converted, "delete_files")

    assert sorted(r["file_path"] for r in java) == ours
    assert {r["content"] for r in java} == {POSITION_DELETES}
    entries = spark_metadata_table(spark, converted, "entries")
    assert {r["data_file"]["content"] for r in entries if r["status"] == 2} == {EQUALITY_DELETES}
    assert len(spark_metadata_table(spark, converted, "files")) == len(_entries(catalog, converted))


def test_spark_reads_a_table_whose_kept_equality_delete_we_rewrote(
    spark: SparkSession, catalog: SqlCatalog, spark_rows_checksum: Checksum, tmp_path: Path
) -> None:
    """Two equality deletes in one Java manifest (one RowDelta), only cat=a's converted (``where``): the
    commit rewrites that manifest, the cat=b delete stays live in it, and Java must still read it."""
    name = f"convert_partial_{next(_NAMES)}"
    ident = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(
        f"""CREATE TABLE {ident} (id INT NOT NULL, cat STRING)
        USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2')"""
    )
    spark.sql(f"INSERT INTO {ident} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b') FROM range(0, 10)")
    a = write_equality_deletes(spark, name, ["id"], [(0,), (2,)], partition={"cat": "a"})
    b = write_equality_deletes(spark, name, ["id"], [(1,), (3,)], partition={"cat": "b"})
    commit_deletes(spark, name, [a, b])
    built = BuiltTable("partial", name, metadata_location(spark, name), tuple(range(4, 10)))
    before = spark_rows_checksum(built.metadata_location)
    case = Case(built, built.expected_ids, matched_rows=2, merges_position_deletes=False)

    converted, result = _convert(catalog, case, tmp_path, where="cat = 'a'")

    assert result["converted_equality_delete_files_count"] == 1
    assert [e.content for e in _delete_files(catalog, converted)].count(EQUALITY_DELETES) == 1
    assert _spark_ids(spark, converted) == built.expected_ids
    assert spark_rows_checksum(converted) == before


# --- 4. delete-granularity=partition --------------------------------------------------------------------


def _partitioned_case(spark: SparkSession, tables: JavaTables) -> tuple[Case, dict[int, str]]:
    """v2_partitioned (cat x days(ts), several data files per partition) and one equality delete per
    partition: the ids with id % 4 in (0, 1) there, and one of the same cat on another day (stays)."""
    built = tables.fresh(V2_PARTITIONED)
    file_of = _files_of_rows(spark, built.spark_identifier)
    first_day = (date(2024, 3, 1) - date(1970, 1, 1)).days
    files = []
    for cat, parity in (("a", 0), ("b", 1)):
        for day in range(3):
            ids = [i for i in range(60) if i % 2 == parity and i % 3 == day]
            decoy = next(i for i in range(60) if i % 2 == parity and i % 3 != day and i % 4 in (2, 3))
            keys = [(i,) for i in ids if i % 4 in (0, 1)] + [(decoy,)]
            partition = {"cat": cat, "ts_day": first_day + day}
            files.append(write_equality_deletes(spark, built.name, ["id"], keys, partition=partition))
    commit_deletes(spark, built.name, files)
    expected = tuple(i for i in range(60) if i % 4 in (2, 3))
    return Case(_with_location(spark, built), expected, 30, merges_position_deletes=False), file_of


def test_partition_granularity_writes_one_file_per_partition(
    spark: SparkSession,
    java_table: JavaTables,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    per_file, file_of = _partitioned_case(spark, java_table)
    per_partition, partition_file_of = _partitioned_case(spark, java_table)
    before = spark_rows_checksum(per_file.built.metadata_location)
    assert spark_rows_checksum(per_partition.built.metadata_location) == before
    assert _spark_ids(spark, per_file.built.metadata_location) == per_file.expected_ids

    by_file, file_result = _convert(catalog, per_file, tmp_path / "file")
    by_partition, partition_result = _convert(
        catalog, per_partition, tmp_path / "partition", options={"delete-granularity": "partition"}
    )

    matched_files = {file_of[i] for i in range(60) if i % 4 in (0, 1)}
    partition_matched = {partition_file_of[i] for i in range(60) if i % 4 in (0, 1)}
    assert file_result["added_position_delete_files_count"] == len(matched_files)
    assert partition_result["added_position_delete_files_count"] == 6
    assert len(matched_files) > 6
    for location in (by_file, by_partition):
        assert spark_rows_checksum(location) == before
        assert _spark_ids(spark, location) == per_file.expected_ids
        assert {e.content for e in _delete_files(catalog, location)} == {POSITION_DELETES}
        assert _arrow_ids(StaticTable.from_metadata(location).scan().to_arrow()) == per_file.expected_ids
    scoped = [_named_data_files(e.file_path) for e in _delete_files(catalog, by_partition)]
    assert set().union(*scoped) == partition_matched
    assert sum(len(s) for s in scoped) == len(partition_matched)
    assert max(len(s) for s in scoped) > 1


def test_java_reads_our_conversion_of_a_table_we_wrote(
    spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """A table written by PyIceberg, equality deletes committed by our commit layer, converted by us:
    Java reads exactly the rows the model keeps (the newer copies of deleted keys included)."""
    from tests.helpers import commit_delete_files
    from tests.integration.maintenance_support import (
        create_table,
        rows,
        write_equality_deletes,
    )

    table = create_table(catalog, "ns.ours_converted", partition_name="category")
    table.append(rows(0, 200, "a"))
    table.append(rows(200, 100, "b"))
    commit_delete_files(
        table, [write_equality_deletes(table, range(50), "a"), write_equality_deletes(table, [200], "b")]
    )
    table.append(rows(0, 5, "a"))  # newer copies of deleted keys: the older delete must not reach them

    result = convert_equality_deletes(
        table, limits=ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))
    )

    assert result["converted_equality_delete_files_count"] == 2
    expected = sorted([*range(50, 200), *range(201, 300), *range(5)])
    java_ids = sorted(r["id"] for r in spark_rows(spark, table.metadata_location))
    assert java_ids == expected
