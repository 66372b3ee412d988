"""MERGE INTO / upsert on tables Java Iceberg 1.10 wrote (and on tables PyIceberg wrote): Java reads
exactly the rows a reference model computes, and exactly the rows Spark's own ``MERGE INTO`` leaves on
a twin of the table, in both write modes, partitioned and not, with NULL keys on both sides, over
existing position deletes (Spark merge-on-read) and equality deletes (Java API); a source whose key
matches a target row twice fails as Spark fails, and leaves the table as it was; Spark merges on top.

The model (:func:`model_merge`) is plain Python over the live rows Spark reads: Spark SQL's rules, the
first clause whose condition is TRUE wins (NULL is not TRUE), ``t.id = s.id`` never matches a NULL key,
and a target row paired with two source rows fails unless the only MATCHED clause is an unconditional
DELETE.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.merge import merge, upsert
from tests.interop.manifests import EQUALITY_DELETES, POSITION_DELETES, live_entries
from tests.interop.spark import CATALOG, NAMESPACE, metadata_location, spark_rows
from tests.interop.tables import MOR_PROPERTIES, commit_deletes, publish_to_spark, write_equality_deletes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Row = dict[str, Any]
Checksum = Callable[[str], tuple[int, int]]
COLUMNS = ("id", "cat", "v", "amount")
CARDINALITY = (
    "MERGE statement matched a single row from the target table with multiple rows of the source table"
)
MODES = ("copy-on-write", "merge-on-read")

_NAMES = itertools.count(1)

#: the side a row lacks reads as NULLs, as in SQL
NULL_TARGET: Row = dict.fromkeys(COLUMNS)
NULL_SOURCE: Row = dict.fromkeys((*COLUMNS, "op"))


# --- the reference model ------------------------------------------------------------------------------


class CardinalityViolation(Exception):
    """The model's Spark cardinality error."""


@dataclasses.dataclass(frozen=True)
class ModelClause:
    """One clause: ``condition(t, s)`` (``None``: always; a NULL result is not TRUE), ``action``, and
    ``values(t, s)``: the assigned columns (update) or the whole new row (insert)."""

    action: str
    condition: Callable[[Row, Row], bool | None] | None = None
    values: Callable[[Row, Row], Row] | None = None


def _first_true(clauses: Sequence[ModelClause], t: Row, s: Row) -> ModelClause | None:
    for clause in clauses:
        if clause.condition is None or clause.condition(t, s) is True:
            return clause
    return None


def _changed_target(clauses: Sequence[ModelClause], t: Row, s: Row) -> list[Row]:
    clause = _first_true(clauses, t, s)
    if clause is None:
        return [t]
    if clause.action == "delete":
        return []
    assert clause.values is not None
    return [{**t, **clause.values(t, s)}]


def model_merge(
    target: Sequence[Row],
    source: Sequence[Row],
    *,
    matched: Sequence[ModelClause] = (),
    not_matched: Sequence[ModelClause] = (),
    not_matched_by_source: Sequence[ModelClause] = (),
) -> list[Row]:
    """The rows of ``MERGE INTO target USING source ON t.id = s.id ...``, Spark SQL's semantics."""
    by_key: dict[Any, list[int]] = defaultdict(list)
    for i, s in enumerate(source):
        if s["id"] is not None:
            by_key[s["id"]].append(i)
    check = bool(matched) and not (
        len(matched) == 1 and matched[0].condition is None and matched[0].action == "delete"
    )
    out: list[Row] = []
    hit: set[int] = set()
    for t in target:
        pairs = by_key.get(t["id"], []) if t["id"] is not None else []
        if len(pairs) > 1 and check:
            raise CardinalityViolation(t)
        hit.update(pairs)
        if pairs:
            out.extend(_changed_target(matched, t, source[pairs[0]]))
        else:
            out.extend(_changed_target(not_matched_by_source, t, NULL_SOURCE))
    for i, s in enumerate(source):
        clause = None if i in hit else _first_true(not_matched, NULL_TARGET, s)
        if clause is not None:
            assert clause.values is not None
            out.append(clause.values(NULL_TARGET, s))
    return sorted(out, key=repr)


def _sql_eq(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a == b


def _sql_cmp(a: Any, op: str, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    return bool(a > b) if op == ">" else bool(a < b)


def _add(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


def _star(_t: Row, s: Row) -> Row:
    return {c: s[c] for c in COLUMNS}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A MERGE in Spark's words (``when_*``: the text after WHEN ...) and in the model's."""

    when_matched: tuple[str, ...]
    when_not_matched: tuple[str, ...]
    when_not_matched_by_source: tuple[str, ...]
    matched: tuple[ModelClause, ...]
    not_matched: tuple[ModelClause, ...]
    not_matched_by_source: tuple[ModelClause, ...]

    def model(self, target: Sequence[Row], source: Sequence[Row]) -> list[Row]:
        return model_merge(
            target,
            source,
            matched=self.matched,
            not_matched=self.not_matched,
            not_matched_by_source=self.not_matched_by_source,
        )

    def ours(self, table: Any, source: str, mode: str, limits: ResourceLimits) -> dict[str, Any]:
        return merge(
            table,
            on=["id"],
            source_files=[source],
            when_matched=self.when_matched,
            when_not_matched=self.when_not_matched,
            when_not_matched_by_source=self.when_not_matched_by_source,
            mode=mode,
            limits=limits,
        )

    def spark_sql(self, identifier: str, view: str) -> str:
        whens = [
            *(f"WHEN MATCHED {c}" for c in self.when_matched),
            *(f"WHEN NOT MATCHED {c}" for c in self.when_not_matched),
            *(f"WHEN NOT MATCHED BY SOURCE {c}" for c in self.when_not_matched_by_source),
        ]
        return f"MERGE INTO {identifier} t USING {view} s ON t.id = s.id " + " ".join(whens)


#: conditions on both sides, the first true clause winning, updates that move a row to another
#: partition (``UPDATE SET *`` with another cat), inserts with a column list, NOT MATCHED BY SOURCE
#: updates (NULL-key target rows) and deletes
CDC = Scenario(
    when_matched=(
        "AND s.op = 'D' THEN DELETE",
        "AND t.amount > 100 THEN UPDATE SET amount = t.amount + s.amount, v = s.v",
        "THEN UPDATE SET *",
    ),
    when_not_matched=(
        "AND s.op = 'D' THEN INSERT (id, cat, v, amount) VALUES (s.id, 'b', 'was-deleted', -1)",
        "AND s.amount IS NOT NULL THEN INSERT *",
    ),
    when_not_matched_by_source=(
        "AND t.id IS NULL THEN UPDATE SET v = 'orphan'",
        "AND t.amount < 50 THEN DELETE",
    ),
    matched=(
        ModelClause("delete", lambda t, s: _sql_eq(s["op"], "D")),
        ModelClause(
            "update",
            lambda t, s: _sql_cmp(t["amount"], ">", 100),
            lambda t, s: {"amount": _add(t["amount"], s["amount"]), "v": s["v"]},
        ),
        ModelClause("update", None, _star),
    ),
    not_matched=(
        ModelClause(
            "insert",
            lambda t, s: _sql_eq(s["op"], "D"),
            lambda t, s: {"id": s["id"], "cat": "b", "v": "was-deleted", "amount": -1},
        ),
        ModelClause("insert", lambda t, s: s["amount"] is not None, _star),
    ),
    not_matched_by_source=(
        ModelClause("update", lambda t, s: t["id"] is None, lambda t, s: {"v": "orphan"}),
        ModelClause("delete", lambda t, s: _sql_cmp(t["amount"], "<", 50)),
    ),
)

#: PyIceberg's upsert: update every column when matched, insert when not
UPSERT = Scenario(
    when_matched=("THEN UPDATE SET *",),
    when_not_matched=("THEN INSERT *",),
    when_not_matched_by_source=(),
    matched=(ModelClause("update", None, _star),),
    not_matched=(ModelClause("insert", None, _star),),
    not_matched_by_source=(),
)


# --- the tables and the source ------------------------------------------------------------------------


def _ident(name: str) -> str:
    return f"{CATALOG}.{NAMESPACE}.{name}"


def _build_spark_target(spark: SparkSession, name: str, *, partitioned: bool) -> str:
    """Spark writes ids 0..89 (cat a for even ids, amount NULL when id % 7 = 0) and two NULL-id rows;
    merge-on-read DELETE id % 10 = 3 and UPDATE id % 10 = 5 (position deletes); then Java equality
    deletes on id 2, 12 (cat a) and 61 (cat b). Returns the metadata.json location."""
    t = _ident(name)
    spec = "PARTITIONED BY (cat)" if partitioned else ""
    spark.sql(
        f"""CREATE TABLE {t} (id INT, cat STRING, v STRING, amount BIGINT) USING iceberg {spec}
        TBLPROPERTIES ('format-version'='2', {MOR_PROPERTIES})"""
    )
    for lo, hi in ((0, 60), (60, 90)):
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), concat('v', id),
            IF(id % 7 = 0, NULL, id * 5) FROM range({lo}, {hi}, 1, 2)"""
        )
    spark.sql(f"INSERT INTO {t} VALUES (NULL, 'a', 'null-a', 10), (NULL, 'b', 'null-b', 200)")
    spark.sql(f"DELETE FROM {t} WHERE id % 10 = 3")
    spark.sql(f"UPDATE {t} SET v = concat('u', id) WHERE id % 10 = 5")
    if partitioned:
        files = [
            write_equality_deletes(spark, name, ["id"], [(2,), (12,)], partition={"cat": "a"}),
            write_equality_deletes(spark, name, ["id"], [(61,)], partition={"cat": "b"}),
        ]
    else:
        files = [write_equality_deletes(spark, name, ["id"], [(2,), (12,), (61,)])]
    commit_deletes(spark, name, files)
    return metadata_location(spark, name)


def _source_rows() -> list[Row]:
    """Keys that match (10..29, some moving to the other cat, some with op 'D'), keys only deleted rows
    had (12, 13, 23: not matched, so inserted, never resurrecting the old row), new keys 100..107, a
    new key twice (200: inserted twice) and NULL keys (never matching)."""
    rows: list[Row] = []
    for i in range(10, 30):
        op = "D" if i % 4 == 0 else ("U" if i % 3 else None)
        cat = ("b" if i % 2 == 0 else "a") if i % 3 == 0 else ("a" if i % 2 == 0 else "b")
        rows.append({"id": i, "cat": cat, "v": f"s{i}", "amount": None if i % 11 == 0 else i, "op": op})
    for i in range(100, 108):
        op = "D" if i % 3 == 0 else "I"
        rows.append(
            {"id": i, "cat": "a" if i % 2 else "b", "v": f"n{i}", "amount": i if i % 5 else None, "op": op}
        )
    rows += [
        {"id": 200, "cat": "a", "v": "dup-1", "amount": 1, "op": "I"},
        {"id": 200, "cat": "b", "v": "dup-2", "amount": 2, "op": "I"},
        {"id": None, "cat": "a", "v": "null-source", "amount": 3, "op": "I"},
        {"id": None, "cat": "b", "v": "null-source-d", "amount": 4, "op": "D"},
    ]
    return rows


SOURCE_SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("cat", pa.string()),
        ("v", pa.string()),
        ("amount", pa.int64()),
        ("op", pa.string()),
    ]
)


def _write_source(path: Path, rows: Sequence[Row]) -> str:
    pq.write_table(pa.Table.from_pylist(list(rows), schema=SOURCE_SCHEMA), path)
    return str(path)


def _spark_view(spark: SparkSession, path: str) -> str:
    view = f"merge_source_{next(_NAMES)}"
    spark.read.parquet(path).createOrReplaceTempView(view)
    return view


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _delete_kinds(table: Any) -> set[int]:
    return {e.content for e in live_entries(table) if e.content in (POSITION_DELETES, EQUALITY_DELETES)}


def _set_mode(spark: SparkSession, identifier: str, mode: str) -> None:
    spark.sql(f"ALTER TABLE {identifier} SET TBLPROPERTIES ('write.merge.mode'='{mode}')")


# --- 1. Spark-written targets: ours == the model == Spark's MERGE INTO; Spark merges on top ----------------


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize("mode", MODES)
def test_java_reads_the_model_rows_and_spark_merge_agrees(
    mode: str,
    partitioned: bool,
    spark: SparkSession,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    ours_name, twin_name = f"merge_ours_{next(_NAMES)}", f"merge_twin_{next(_NAMES)}"
    location = _build_spark_target(spark, ours_name, partitioned=partitioned)
    twin = _build_spark_target(spark, twin_name, partitioned=partitioned)
    target = spark_rows(spark, location)
    assert target == spark_rows(spark, twin)
    assert {None, 0, 1} <= {r["id"] for r in target}
    assert not {2, 3, 12, 13, 23, 61} & {r["id"] for r in target}  # the deletes apply
    table = catalog.register_table(f"ns.{ours_name}", location)
    assert _delete_kinds(table) == {POSITION_DELETES, EQUALITY_DELETES}
    source = _source_rows()
    path = _write_source(tmp_path / "source.parquet", source)
    expected = CDC.model(target, source)

    result = CDC.ours(table, path, mode, _limits(tmp_path))

    table.refresh()
    assert spark_rows(spark, table.metadata_location) == expected
    _set_mode(spark, _ident(twin_name), mode)
    spark.sql(CDC.spark_sql(_ident(twin_name), _spark_view(spark, path)))
    spark_result = metadata_location(spark, twin_name)
    assert spark_rows_checksum(table.metadata_location) == spark_rows_checksum(spark_result)
    assert spark_rows(spark, spark_result) == expected
    _check_counts(result, target, source, expected)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.snapshot_id in result["snapshot_ids"]
    assert snapshot.summary is not None
    added_deletes = int(snapshot.summary.get("added-delete-files") or 0)
    assert (added_deletes > 0) == (mode == "merge-on-read")

    _spark_merges_on_top(spark, ours_name, table.metadata_location, expected, tmp_path)


def _check_counts(result: dict[str, Any], target: list[Row], source: list[Row], expected: list[Row]) -> None:
    """The result's row counts against the model: deleted = target rows gone, inserted = new rows."""
    target_keys = {r["id"] for r in target if r["id"] is not None}
    inserted = [
        s for s in source if s["id"] not in target_keys and (s["op"] == "D" or s["amount"] is not None)
    ]
    assert result["num_target_rows_inserted"] == len(inserted)
    assert len(expected) == len(target) - result["num_target_rows_deleted"] + len(inserted)


def _spark_merges_on_top(
    spark: SparkSession, name: str, ours: str, expected: list[Row], tmp_path: Path
) -> None:
    """Spark takes our commit as its table's current version and runs an upsert MERGE (one source row
    matching both live 200s: allowed) and an INSERT."""
    publish_to_spark(spark, name, ours)
    ident = _ident(name)
    second = [
        {"id": i, "cat": "a", "v": f"again{i}", "amount": i, "op": None} for i in (1, 14, 17, 100, 200, 300)
    ]
    view = _spark_view(spark, _write_source(tmp_path / "second.parquet", second))
    spark.sql(UPSERT.spark_sql(ident, view))
    spark.sql(f"INSERT INTO {ident} VALUES (400, 'b', 'inserted', 4)")

    final = [*UPSERT.model(expected, second), {"id": 400, "cat": "b", "v": "inserted", "amount": 4}]
    assert spark_rows(spark, metadata_location(spark, name)) == sorted(final, key=repr)


# --- 2. the cardinality check: Spark's error, the table unchanged -----------------------------------------


@pytest.mark.parametrize(
    ("when_matched", "fails"),
    [
        (("THEN UPDATE SET *",), True),
        (("AND s.v = 'never' THEN DELETE",), True),  # no condition true for the pair: still an error
        (("THEN DELETE",), False),  # a single unconditional DELETE is exempt
    ],
    ids=["update", "false-condition", "unconditional-delete"],
)
@pytest.mark.parametrize("mode", MODES)
def test_a_target_row_matched_twice_fails_as_spark_fails(
    mode: str,
    when_matched: tuple[str, ...],
    fails: bool,
    spark: SparkSession,
    catalog: SqlCatalog,
    spark_rows_checksum: Checksum,
    tmp_path: Path,
) -> None:
    name = f"merge_dup_{next(_NAMES)}"
    ident = _ident(name)
    spark.sql(
        f"""CREATE TABLE {ident} (id INT, cat STRING, v STRING, amount BIGINT) USING iceberg
        TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='{mode}')"""
    )
    spark.sql(f"INSERT INTO {ident} VALUES (1, 'a', 'one', 1), (2, 'b', 'two', 2), (NULL, 'a', 'n', 3)")
    location = metadata_location(spark, name)
    table = catalog.register_table(f"ns.{name}", location)
    source = [
        {"id": 2, "cat": "a", "v": "x", "amount": 5, "op": None},
        {"id": 2, "cat": "b", "v": "y", "amount": 6, "op": None},
        {"id": None, "cat": "b", "v": "z", "amount": 7, "op": None},
        {"id": None, "cat": "b", "v": "z", "amount": 7, "op": None},  # NULL keys never match: no error
    ]
    path = _write_source(tmp_path / "dups.parquet", source)
    before = spark_rows_checksum(location)
    snapshot_before = table.current_snapshot()
    scenario = dataclasses.replace(UPSERT, when_matched=when_matched, when_not_matched=())

    if fails:
        with pytest.raises(ConfigurationError, match=CARDINALITY):
            scenario.ours(table, path, mode, _limits(tmp_path))
        table.refresh()
        assert table.current_snapshot() == snapshot_before
        assert spark_rows_checksum(table.metadata_location) == before
        with pytest.raises(Exception, match=CARDINALITY):
            spark.sql(scenario.spark_sql(ident, _spark_view(spark, path)))
    else:
        scenario.ours(table, path, mode, _limits(tmp_path))
        table.refresh()
        expected = [
            {"id": 1, "cat": "a", "v": "one", "amount": 1},
            {"id": None, "cat": "a", "v": "n", "amount": 3},
        ]
        assert spark_rows(spark, table.metadata_location) == sorted(expected, key=repr)
        spark.sql(scenario.spark_sql(ident, _spark_view(spark, path)))
        assert spark_rows_checksum(metadata_location(spark, name)) == spark_rows_checksum(
            table.metadata_location
        )


# --- 3. PyIceberg-written targets: the upsert, read by Java ---------------------------------------------


def _pyiceberg_target(catalog: SqlCatalog, name: str, *, partitioned: bool) -> Any:
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "cat", StringType(), required=False),
        NestedField(3, "v", StringType(), required=False),
        NestedField(4, "amount", LongType(), required=False),
    )
    spec = (
        PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat")) if partitioned else PartitionSpec()
    )
    table = catalog.create_table(f"ns.{name}", schema=schema, partition_spec=spec)
    arrow = table.metadata.schema().as_arrow()
    for lo, hi in ((0, 40), (40, 80)):
        rows = [
            {"id": i, "cat": "a" if i % 2 == 0 else "b", "v": f"v{i}", "amount": None if i % 7 == 0 else i}
            for i in range(lo, hi)
        ]
        table.append(pa.Table.from_pylist(rows, schema=arrow))
    table.append(pa.Table.from_pylist([{"id": None, "cat": "a", "v": "null", "amount": 1}], schema=arrow))
    return table


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize("mode", MODES)
def test_java_reads_our_upsert_of_a_pyiceberg_table(
    mode: str, partitioned: bool, spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _pyiceberg_target(catalog, f"merge_py_{next(_NAMES)}", partitioned=partitioned)
    target = spark_rows(spark, table.metadata_location)
    source = [r for r in _source_rows() if r["id"] != 200]  # upsert: no duplicate key may match
    path = _write_source(tmp_path / "source.parquet", source)

    result = upsert(table, join_cols=["id"], source_files=[path], mode=mode, limits=_limits(tmp_path))

    table.refresh()
    expected = UPSERT.model(target, source)
    assert spark_rows(spark, table.metadata_location) == expected
    assert result["rows_updated"] == sum(1 for s in source if s["id"] is not None and s["id"] < 80)
    assert result["rows_inserted"] == len(source) - result["rows_updated"]
    # PyIceberg reads it too (no equality delete here): a third reader.
    assert sorted(table.scan().to_arrow().to_pylist(), key=repr) == expected
