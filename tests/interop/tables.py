"""Iceberg tables written by Java Iceberg 1.10 (Spark 3.5 SQL, and Iceberg's Java API over py4j for the
equality deletes Spark never writes). Each builder returns a :class:`BuiltTable` whose
``metadata_location`` is the metadata.json to register in a PyIceberg catalog or to read with
:func:`tests.interop.spark.spark_rows_checksum`.

The kinds, what each table holds and which live rows it must show: see :data:`KINDS` and docs/interop.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.interop.spark import CATALOG, NAMESPACE, java_table, metadata_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

V2_UNPARTITIONED = "v2_unpartitioned"
V2_PARTITIONED = "v2_partitioned"
V2_POSITION_DELETES = "v2_position_deletes"
V3_DELETION_VECTORS = "v3_deletion_vectors"
V2_EQUALITY_DELETES = "v2_equality_deletes"
V2_SPEC_EVOLVED_DELETES = "v2_spec_evolved_deletes"
V3_UPGRADED_MIXED_DELETES = "v3_upgraded_mixed_deletes"

MOR_PROPERTIES = (
    "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
    "'write.merge.mode'='merge-on-read'"
)


@dataclass(frozen=True)
class BuiltTable:
    kind: str
    name: str  # the Spark identifier is spark_cat.db.<name>
    metadata_location: str
    expected_ids: tuple[int, ...]  # the ``id`` column of the live rows, sorted (duplicates kept)

    @property
    def spark_identifier(self) -> str:
        return f"{CATALOG}.{NAMESPACE}.{self.name}"


def _ident(name: str) -> str:
    return f"{CATALOG}.{NAMESPACE}.{name}"


def _ids(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(values))


# --- (a) v2, unpartitioned, every common type --------------------------------------------------------


def build_v2_unpartitioned(spark: SparkSession, name: str) -> BuiltTable:
    """Three appends (two files each) of 20 rows over most Iceberg types, nulls in every nullable
    column: ids 0..59."""
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (
            id INT NOT NULL, big BIGINT, name STRING, price DECIMAL(10, 2), ratio DOUBLE, flag BOOLEAN,
            day DATE, ts TIMESTAMP, ts_ntz TIMESTAMP_NTZ, payload BINARY,
            point STRUCT<x: INT, y: STRING>, tags ARRAY<STRING>)
        USING iceberg TBLPROPERTIES ('format-version'='2')"""
    )
    for lo in (0, 20, 40):
        spark.sql(
            f"""INSERT INTO {t}
            SELECT CAST(id AS INT), id * 1000000007,
                   IF(id % 7 = 0, NULL, concat('name-', id)),
                   IF(id % 11 = 0, NULL, CAST(id / 3 AS DECIMAL(10, 2))),
                   IF(id % 13 = 0, NULL, id * 0.5 - 3),
                   IF(id % 5 = 0, NULL, id % 2 = 0),
                   IF(id % 9 = 0, NULL, date_add(DATE'2024-02-27', CAST(id AS INT))),
                   IF(id % 8 = 0, NULL,
                      TIMESTAMP'2024-01-01' + make_interval(0, 0, 0, 0, 0, CAST(id AS INT), 0.123456)),
                   IF(id % 6 = 0, NULL,
                      TIMESTAMP_NTZ'2024-01-01 12:00:00' + make_interval(0, 0, 0, CAST(id AS INT))),
                   IF(id % 4 = 0, NULL, CAST(concat('bin', id) AS BINARY)),
                   IF(id % 10 = 0, NULL,
                      named_struct('x', CAST(id AS INT), 'y', IF(id % 3 = 0, NULL, concat('y', id)))),
                   IF(id % 12 = 0, NULL, array(concat('t', id % 3), NULL))
            FROM range({lo}, {lo + 20}, 1, 2)"""
        )
    return BuiltTable(V2_UNPARTITIONED, name, metadata_location(spark, name), _ids(range(60)))


# --- (b) v2, partitioned by identity + days, many small files ------------------------------------------


def build_v2_partitioned(spark: SparkSession, name: str) -> BuiltTable:
    """PARTITIONED BY (cat, days(ts)): six appends of 10 rows over 2 cats x 3 days, so several files
    per partition (about 6 files per append): ids 0..59."""
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, ts TIMESTAMP, v DOUBLE)
        USING iceberg PARTITIONED BY (cat, days(ts)) TBLPROPERTIES ('format-version'='2')"""
    )
    for k in range(6):
        spark.sql(
            f"""INSERT INTO {t}
            SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'),
                   TIMESTAMP'2024-03-01 00:00:00'
                     + make_interval(0, 0, 0, CAST(id % 3 AS INT), 0, CAST(id AS INT), 0),
                   id / 7.0
            FROM range({k * 10}, {k * 10 + 10}, 1, 2)"""
        )
    return BuiltTable(V2_PARTITIONED, name, metadata_location(spark, name), _ids(range(60)))


# --- (c)/(d) merge-on-read DELETE and UPDATE: position deletes (v2) or deletion vectors (v3) ----------


def _build_mor(spark: SparkSession, name: str, kind: str, format_version: int) -> BuiltTable:
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, v STRING)
        USING iceberg TBLPROPERTIES ('format-version'='{format_version}', {MOR_PROPERTIES})"""
    )
    for lo in (0, 30, 60):
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), concat('v', id)
            FROM range({lo}, {lo + 30}, 1, 2)"""
        )
    spark.sql(f"DELETE FROM {t} WHERE id % 10 = 3")
    spark.sql(f"UPDATE {t} SET v = concat('updated-', id) WHERE id % 10 = 5")
    # A second delete touching a data file that already has deletes: a second position delete file
    # for it in v2, a merged DV replacing the first in v3.
    spark.sql(f"DELETE FROM {t} WHERE id IN (0, 1, 4)")
    live = [i for i in range(90) if i % 10 != 3 and i not in (0, 1, 4)]
    return BuiltTable(kind, name, metadata_location(spark, name), _ids(live))


def build_v2_position_deletes(spark: SparkSession, name: str) -> BuiltTable:
    """v2, unpartitioned, merge-on-read: three appends (ids 0..89, 6 files), DELETE id % 10 = 3,
    UPDATE v where id % 10 = 5 (position deletes + new data files), DELETE ids 0, 1, 4."""
    return _build_mor(spark, name, V2_POSITION_DELETES, 2)


def build_v3_deletion_vectors(spark: SparkSession, name: str) -> BuiltTable:
    """The same as v2_position_deletes with format-version 3: Spark writes deletion vectors (Puffin)."""
    return _build_mor(spark, name, V3_DELETION_VECTORS, 3)


# --- (e) equality deletes through the Java API -------------------------------------------------------


def write_equality_deletes(
    spark: SparkSession,
    name: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    spec_id: int | None = None,
    partition: dict[str, Any] | None = None,
) -> Any:
    """Write one Parquet equality delete file keyed on ``columns`` with Java Iceberg's
    GenericAppenderFactory, in the partition ``partition`` (field name -> partition value) of the spec
    ``spec_id`` (default: the table's current spec). Returns the Java DeleteFile, not yet committed.

    py4j turns a Python int into a java Integer (an ``int`` column) unless it exceeds 32 bits; for a
    ``bigint`` key build java Longs (``spark._jvm.java.lang.Long(v)``). None is null.
    """
    jvm = spark._jvm  # type: ignore[attr-defined]
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    table = java_table(spark, name)
    schema = table.schema()
    spec = table.spec() if spec_id is None else table.specs().get(spec_id)
    names = jvm.java.util.ArrayList()
    for c in columns:
        names.add(c)
    delete_schema = schema.select(names)
    field_ids = gateway.new_array(jvm.int, len(columns))
    for i, c in enumerate(columns):
        field_ids[i] = schema.findField(c).fieldId()
    factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(schema, spec, field_ids, delete_schema, None)

    filename = f"eq-delete-{uuid.uuid4()}.parquet"
    if spec.isUnpartitioned():
        if partition:
            raise ValueError("an unpartitioned spec takes no partition values")
        part = None
        path = table.locationProvider().newDataLocation(filename)
    else:
        part = jvm.org.apache.iceberg.data.GenericRecord.create(spec.partitionType())
        for field, value in (partition or {}).items():
            part.setField(field, value)
        path = table.locationProvider().newDataLocation(spec, part, filename)
    out = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(
        table.io().newOutputFile(path)
    )
    writer = factory.newEqDeleteWriter(out, jvm.org.apache.iceberg.FileFormat.PARQUET, part)
    try:
        for row in rows:
            record = jvm.org.apache.iceberg.data.GenericRecord.create(delete_schema)
            for c, value in zip(columns, row, strict=True):
                record.setField(c, value)
            writer.write(record)
    finally:
        writer.close()
    return writer.toDeleteFile()


def commit_deletes(spark: SparkSession, name: str, delete_files: Sequence[Any]) -> None:
    """Commit Java DeleteFiles in one RowDelta (one snapshot, one sequence number)."""
    delta = java_table(spark, name).newRowDelta()
    for f in delete_files:
        delta = delta.addDeletes(f)
    delta.commit()


def _eq_row(i: int) -> tuple[int, str, str | None, int]:
    return (i, "a" if i % 2 else "b", None if i % 5 == 0 else f"n{i}", i * 10)


def build_v2_equality_deletes(spark: SparkSession, name: str) -> BuiltTable:
    """v2, spec 0 unpartitioned then spec 1 identity(cat); equality deletes written with the Java API.

    seq 1  spec 0 data: ids 1..20 (cat a for odd ids, b for even; name NULL when id % 5 = 0)
    seq 2  spec 1 data: ids 21..40 (same rules), one file per cat
    seq 3  equality delete on (id), spec 1 partition cat=a: {3, 21, 23, 24, 99}
           -> deletes 21, 23 only: 3 is in a spec-0 file (other spec), 24 is in cat b, 99 is absent
    seq 4  spec 1 data: ids 21 and 23 again (name 'again', v = -id): newer than the delete, live
    seq 5  global equality delete on (id), spec 0 (unpartitioned): {2, 30} -> deleted in both specs
    seq 6  global equality delete on (id, name): (5, NULL), (35, NULL), (31, NULL), (7, 'n7')
           -> deletes 5 and 35 (null matches null), 7; not 31 (its name is 'n31')
    """
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, name STRING, v BIGINT)
        USING iceberg TBLPROPERTIES ('format-version'='2')"""
    )

    def insert(rows: Iterable[tuple[int, str, str | None, int]]) -> None:
        values = ", ".join(f"({i}, '{c}', {'NULL' if n is None else repr(n)}, {v})" for i, c, n, v in rows)
        spark.sql(f"INSERT INTO {t} VALUES {values}")

    insert(_eq_row(i) for i in range(1, 21))
    spark.sql(f"ALTER TABLE {t} ADD PARTITION FIELD cat")
    insert(_eq_row(i) for i in range(21, 41))
    commit_deletes(
        spark,
        name,
        [
            write_equality_deletes(
                spark, name, ["id"], [(3,), (21,), (23,), (24,), (99,)], partition={"cat": "a"}
            )
        ],
    )
    insert([(21, "a", "again", -21), (23, "a", "again", -23)])
    commit_deletes(spark, name, [write_equality_deletes(spark, name, ["id"], [(2,), (30,)], spec_id=0)])
    commit_deletes(
        spark,
        name,
        [
            write_equality_deletes(
                spark, name, ["id", "name"], [(5, None), (35, None), (31, None), (7, "n7")], spec_id=0
            )
        ],
    )
    live = [i for i in range(1, 41) if i not in (2, 5, 7, 30, 35)]
    return BuiltTable(V2_EQUALITY_DELETES, name, metadata_location(spark, name), _ids(live))


def expected_equality_delete_rows() -> list[tuple[int, str, str | None, int]]:
    """The live rows of v2_equality_deletes, as (id, cat, name, v), sorted."""
    rows = [_eq_row(i) for i in range(1, 41) if i not in (2, 5, 7, 21, 23, 30, 35)]
    rows += [(21, "a", "again", -21), (23, "a", "again", -23)]
    return sorted(rows, key=lambda r: (r[0], r[3]))


# --- (f) partition spec evolution with position deletes on both specs ---------------------------------


def build_v2_spec_evolved_deletes(spark: SparkSession, name: str) -> BuiltTable:
    """v2 merge-on-read, spec 0 = identity(cat) with ids 0..39, then ADD PARTITION FIELD bucket(4, id)
    (spec 1) with ids 40..79, then DELETE id % 7 = 0: position delete files in both specs."""
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, v STRING)
        USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2', {MOR_PROPERTIES})"""
    )

    def insert(lo: int, hi: int) -> None:
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), concat('c', id % 3), concat('v', id)
            FROM range({lo}, {hi}, 1, 2)"""
        )

    insert(0, 40)
    spark.sql(f"ALTER TABLE {t} ADD PARTITION FIELD bucket(4, id)")
    insert(40, 80)
    spark.sql(f"DELETE FROM {t} WHERE id % 7 = 0")
    live = [i for i in range(80) if i % 7]
    return BuiltTable(V2_SPEC_EVOLVED_DELETES, name, metadata_location(spark, name), _ids(live))


# --- (g) v2 position deletes of both granularities, upgraded to v3, then deletion vectors ---------------


def build_v3_upgraded_mixed_deletes(spark: SparkSession, name: str) -> BuiltTable:
    """Created v2, merge-on-read, PARTITIONED BY (cat), three appends (ids 0..89, one file per cat per
    append); DELETE id % 9 = 3 with write.delete.granularity=partition (partition-scoped position
    delete files, each applying to several data files); DELETE id % 10 = 5 with granularity=file (so
    some data files have two position delete files); upgrade to format-version 3; DELETE ids 0, 1, 4, 31:
    deletion vectors for the touched files, into which Java merged those files' earlier position
    deletes (their file-scoped delete files are removed; the partition-scoped ones stay live and must
    no longer apply where a DV does)."""
    t = _ident(name)
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, v STRING)
        USING iceberg PARTITIONED BY (cat)
        TBLPROPERTIES ('format-version'='2', {MOR_PROPERTIES}, 'write.delete.granularity'='partition')"""
    )
    for lo in (0, 30, 60):
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), concat('v', id)
            FROM range({lo}, {lo + 30}, 1, 2)"""
        )
    spark.sql(f"DELETE FROM {t} WHERE id % 9 = 3")
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('write.delete.granularity'='file')")
    spark.sql(f"DELETE FROM {t} WHERE id % 10 = 5")
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"DELETE FROM {t} WHERE id IN (0, 1, 4, 31)")
    live = [i for i in range(90) if i % 9 != 3 and i % 10 != 5 and i not in (0, 1, 4, 31)]
    return BuiltTable(V3_UPGRADED_MIXED_DELETES, name, metadata_location(spark, name), _ids(live))


KINDS: dict[str, Callable[[SparkSession, str], BuiltTable]] = {
    V2_UNPARTITIONED: build_v2_unpartitioned,
    V2_PARTITIONED: build_v2_partitioned,
    V2_POSITION_DELETES: build_v2_position_deletes,
    V3_DELETION_VECTORS: build_v3_deletion_vectors,
    V2_EQUALITY_DELETES: build_v2_equality_deletes,
    V2_SPEC_EVOLVED_DELETES: build_v2_spec_evolved_deletes,
    V3_UPGRADED_MIXED_DELETES: build_v3_upgraded_mixed_deletes,
}


def build_table(spark: SparkSession, kind: str, name: str | None = None) -> BuiltTable:
    """Build a table of ``kind`` as ``spark_cat.db.<name>`` (default: the kind itself)."""
    try:
        builder = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown Java table kind {kind!r}; one of {sorted(KINDS)}") from None
    return builder(spark, name or kind)


# --- a commit made outside Spark, made current in the Hadoop catalog ----------------------------------


def publish_to_spark(spark: SparkSession, name: str, committed_location: str) -> str:
    """Make ``committed_location`` (a metadata.json that a PyIceberg catalog wrote when it committed to
    the registered ``spark_cat.db.<name>``) the current version of that Hadoop-catalog table, as
    Java's ``HadoopTableOperations.commit`` does: copy it to ``v<N+1>.metadata.json`` beside the
    current ``v<N>``, then write ``version-hint.text``. Spark can then commit on top by its name.

    Refuses (ValueError) a metadata file whose metadata-log does not reach Spark's current version (a
    commit not based on it would silently drop Spark's later commits). Returns the new location.
    """
    import json
    import shutil
    from pathlib import Path
    from urllib.parse import urlparse

    current = Path(urlparse(metadata_location(spark, name)).path)
    source = Path(urlparse(committed_location).path)
    log = json.loads(source.read_text()).get("metadata-log", [])
    if str(current) not in {urlparse(e["metadata-file"]).path for e in log}:
        raise ValueError(f"{committed_location} is not based on Spark's current {current}")
    version = int(current.name.removeprefix("v").split(".", 1)[0])
    target = current.with_name(f"v{version + 1}.metadata.json")
    if target.exists():
        raise ValueError(f"{target} exists: Spark committed meanwhile")
    shutil.copyfile(source, target)
    (current.parent / "version-hint.text").write_text(str(version + 1))
    published = metadata_location(spark, name)
    if Path(urlparse(published).path) != target:
        raise ValueError(f"Spark reads {published}, not the published {target}")
    return published
