"""Issue 15 acceptance on format-version 3 tables written by Java (Spark 3.5 + Iceberg 1.10).

Spark creates each table (unpartitioned and partitioned by ``cat``), appends in three commits, then runs
merge-on-read DELETE, UPDATE and DELETE again (deletion vectors, one Puffin file per write task, so DVs
of several data files share a Puffin file; deletes sit in the middle of the files). On it, each of our
operations commits, and afterwards Spark (Java) reads exactly the rows a model predicts with the same
``_row_id`` per row and the right ``_last_updated_sequence_number``; Java's scan planning accepts the
DVs (one per data file, sequence numbers not below their data file's, none left for a removed data
file); the snapshot summary and ``next-row-id`` are consistent. Then Spark commits on our metadata and
we commit on Spark's again.

The two base tables are built once per module and only read: each test registers the base's metadata
file under a new name in its own catalog and commits there (new metadata and data files beside the
base's, never replacing one). Tests that delete files (orphans, expiry) or commit through Spark build
their own table.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots
from airflow_provider_iceberg_exec.engine.ops.orphans import remove_orphan_files
from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes
from tests.interop.spark import CATALOG, NAMESPACE, java_table, metadata_location, spark_metadata_table
from tests.interop.tables import MOR_PROPERTIES, commit_deletes, publish_to_spark, write_equality_deletes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Row = dict[str, Any]
Model = dict[int, Row]  # id -> {"cat", "v", "_row_id", "_last_updated_sequence_number"}

UNPARTITIONED = "unpartitioned"
PARTITIONED = "partitioned"
# A global equality delete the unpartitioned base gets last (Java API): resolve-deletes has work there.
EQUALITY_DELETED = (7, 22)
# A compaction filter whose data files share a Puffin file with files it leaves alone (the UPDATE's, see
# _build; checked where it matters): the DV identity is never the path alone.
SPLITS_A_PUFFIN = "id < 45"


@dataclass
class Base:
    layout: str
    name: str
    metadata_location: str
    model: Model = field(default_factory=dict)


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _build(spark: SparkSession, name: str, layout: str) -> Base:
    t = f"{CATALOG}.{NAMESPACE}.{name}"
    partitioned = "PARTITIONED BY (cat)" if layout == PARTITIONED else ""
    spark.sql(
        f"""CREATE TABLE {t} (id INT NOT NULL, cat STRING, v STRING) USING iceberg {partitioned}
        TBLPROPERTIES ('format-version'='3', {MOR_PROPERTIES})"""
    )
    for lo in (0, 30, 60):
        spark.sql(
            f"""INSERT INTO {t} SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b'), concat('v', id)
            FROM range({lo}, {lo + 30}, 1, 2)"""
        )
    # One shuffle partition: each statement writes its DVs from one task, so into one Puffin file (the
    # UPDATE's holds a DV of every inserted file), whatever the hash of the data file paths.
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        spark.sql(f"DELETE FROM {t} WHERE id % 10 = 3")
        spark.sql(f"UPDATE {t} SET v = concat('updated-', id) WHERE id % 10 = 5")
        spark.sql(f"DELETE FROM {t} WHERE id IN (0, 1, 4, 16)")  # merged into the files' DVs
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle_partitions)
    if layout == UNPARTITIONED:
        rows = [(i,) for i in EQUALITY_DELETED]
        commit_deletes(spark, name, [write_equality_deletes(spark, name, ["id"], rows)])
    location = metadata_location(spark, name)
    return Base(layout, name, location, _spark_model(spark, location))


def _spark_model(spark: SparkSession, location: str) -> Model:
    """Every live row as Java reads it, with its lineage: ``id -> row``."""
    df = spark.read.format("iceberg").load(location)
    rows = df.select("id", "cat", "v", "_row_id", "_last_updated_sequence_number").collect()
    model = {
        int(r["id"]): {k: r[k] for k in ("cat", "v", "_row_id", "_last_updated_sequence_number")}
        for r in rows
    }
    assert len(model) == len(rows)  # ids are unique
    return model


def _metadata(location: str) -> dict[str, Any]:
    return json.loads(Path(urlparse(location).path).read_text())


def _local(uri: str) -> Path:
    return Path(urlparse(uri).path)


@dataclass(frozen=True)
class Files:
    """The live files of a table's current snapshot, as Java's ``entries`` metadata table shows them."""

    data: dict[str, int]  # data file path -> data sequence number
    dvs: dict[tuple[str, int, int], dict[str, Any]]  # (path, offset, size) -> the entry's data_file
    dv_sequence_numbers: dict[tuple[str, int, int], int]
    delete_files: list[dict[str, Any]]  # every live delete file (DVs, position and equality files)
    size: int  # Java's total-files-size: file sizes, a DV's blob size


def _files(spark: SparkSession, location: str) -> Files:
    data: dict[str, int] = {}
    dvs: dict[tuple[str, int, int], dict[str, Any]] = {}
    seqs: dict[tuple[str, int, int], int] = {}
    deletes: list[dict[str, Any]] = []
    size = 0
    for entry in spark_metadata_table(spark, location, "entries"):
        if entry["status"] == 2:
            continue
        f = entry["data_file"]
        size += f["content_size_in_bytes"] if f["file_format"] == "PUFFIN" else f["file_size_in_bytes"]
        if f["content"] == 0:
            data[f["file_path"]] = entry["sequence_number"]
            continue
        deletes.append(f)
        if f["file_format"] == "PUFFIN":
            key = (f["file_path"], f["content_offset"], f["content_size_in_bytes"])
            assert key not in dvs, f"DV listed twice: {key}"
            dvs[key], seqs[key] = f, entry["sequence_number"]
    return Files(data, dvs, seqs, deletes, size)


def _check_table(spark: SparkSession, location: str, model: Model) -> Files:
    """Java reads exactly ``model`` (rows and lineage); the DVs, the summary and the row ids are valid."""
    assert _spark_model(spark, location) == model
    files = _files(spark, location)
    referenced = [f["referenced_data_file"] for f in files.dvs.values()]
    assert len(referenced) == len(set(referenced)), "two DVs for one data file"
    for key, dv in files.dvs.items():
        target = dv["referenced_data_file"]
        assert target in files.data, f"DV {key} of a data file that is not live: {target}"
        assert files.dv_sequence_numbers[key] >= files.data[target]
    raw = _metadata(location)
    current = next(s for s in raw["snapshots"] if s["snapshot-id"] == raw["current-snapshot-id"])
    summary = current["summary"]
    assert int(summary["total-data-files"]) == len(files.data)
    assert int(summary["total-delete-files"]) == len(files.delete_files)
    assert int(summary["total-files-size"]) == files.size
    assert int(summary["total-records"]) == sum(
        f["record_count"] for f in spark_metadata_table(spark, location, "data_files")
    )
    positions = sum(f["record_count"] for f in files.delete_files if f["content"] == 1)
    assert int(summary["total-position-deletes"]) == positions
    assert raw["format-version"] == 3
    assert current["first-row-id"] + current["added-rows"] == raw["next-row-id"]
    row_ids = [row["_row_id"] for row in model.values()]
    assert len(set(row_ids)) == len(row_ids)
    assert raw["next-row-id"] >= max(row_ids) + 1
    return files


def _check_removed_dvs(before: Files, after: Files, location: str) -> None:
    """Every DV of a removed data file went in the same commit, counted as Java's SnapshotSummary does."""
    removed = {key: dv for key, dv in before.dvs.items() if key not in after.dvs}
    assert all(dv["referenced_data_file"] not in after.data for dv in removed.values())
    raw = _metadata(location)
    summary = next(s for s in raw["snapshots"] if s["snapshot-id"] == raw["current-snapshot-id"])["summary"]
    assert int(summary.get("removed-dvs", "0")) == len(removed)
    removed_positions = sum(f["record_count"] for key, f in before.dvs.items() if key in removed) + sum(
        f["record_count"]
        for f in before.delete_files
        if f["content"] == 1 and f["file_format"] != "PUFFIN" and f not in after.delete_files
    )
    assert int(summary.get("removed-position-deletes", "0")) == removed_positions


@pytest.fixture(scope="module")
def bases(spark: SparkSession) -> dict[str, Base]:
    built = {layout: _build(spark, f"accept_{layout}", layout) for layout in (UNPARTITIONED, PARTITIONED)}
    for base in built.values():
        files = _files(spark, base.metadata_location)
        paths = [key[0] for key in files.dvs]
        assert len(set(paths)) < len(paths), "no Puffin file holds two DVs: the identity checks are moot"
    return built


_counter = iter(range(1, 1 << 30))


def _register(catalog: SqlCatalog, base: Base) -> Table:
    return catalog.register_table(f"ns.t{next(_counter)}", base.metadata_location)


def _commit_location(table: Table, base_location: str) -> str:
    table.refresh()
    assert table.metadata_location != base_location
    return table.metadata_location


def _sequence_number(table: Table) -> int:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot.sequence_number


@pytest.mark.parametrize("layout", [UNPARTITIONED, PARTITIONED])
@pytest.mark.parametrize(
    "how",
    [
        {"options": {"rewrite-all": "true"}},
        {"options": {"rewrite-all": "true"}, "where": SPLITS_A_PUFFIN},
        {"options": {"rewrite-all": "true"}, "strategy": "sort", "sort_order": "id DESC"},
    ],
    ids=["binpack-all", "binpack-subset", "sort"],
)
def test_compaction_keeps_rows_and_lineage(
    layout: str,
    how: dict[str, Any],
    bases: dict[str, Base],
    spark: SparkSession,
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    base = bases[layout]
    before = _files(spark, base.metadata_location)
    table = _register(catalog, base)

    result = compact(table, limits=_limits(tmp_path), **how)

    assert result["rewritten_data_files_count"] > 0
    location = _commit_location(table, base.metadata_location)
    after = _check_table(spark, location, base.model)
    _check_removed_dvs(before, after, location)
    if "where" in how:  # the files outside the filter keep their DVs, one Puffin on either side
        kept = {key[0] for key in before.dvs if key in after.dvs}
        assert kept & {key[0] for key in before.dvs if key not in after.dvs}


@pytest.mark.parametrize("layout", [UNPARTITIONED, PARTITIONED])
def test_copy_on_write_delete_and_update_keep_lineage(
    layout: str, bases: dict[str, Base], spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Rows in files with DVs (deletes before and after them): copied rows keep both values, the
    updated row keeps its ``_row_id`` and reads our commit's sequence number, the deleted row is gone."""
    base = bases[layout]
    table = _register(catalog, base)
    before = _files(spark, base.metadata_location)

    cow_rewrite(table, operation="delete", where="id = 12", limits=_limits(tmp_path))
    deleted = _files(spark, _commit_location(table, base.metadata_location))
    _check_removed_dvs(before, deleted, table.metadata_location)
    cow_rewrite(
        table, operation="update", where="id = 47", set_columns={"v": "'ours'"}, limits=_limits(tmp_path)
    )

    location = _commit_location(table, base.metadata_location)
    model = {i: dict(row) for i, row in base.model.items() if i != 12}
    model[47].update(v="ours", _last_updated_sequence_number=_sequence_number(table))
    after = _check_table(spark, location, model)
    _check_removed_dvs(deleted, after, location)


def test_resolve_deletes_applies_equality_deletes_and_dvs_and_keeps_lineage(
    bases: dict[str, Base], spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    base = bases[UNPARTITIONED]
    assert not set(EQUALITY_DELETED) & set(base.model)
    before = _files(spark, base.metadata_location)
    table = _register(catalog, base)

    result = resolve_equality_deletes(table, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] > 0
    assert result["removed_delete_files_count"] >= 1
    location = _commit_location(table, base.metadata_location)
    after = _check_table(spark, location, base.model)
    assert not [f for f in after.delete_files if f["content"] == 2]
    _check_removed_dvs(before, after, location)


def _age_all_files(root: Path, days: int) -> None:
    old = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days)).timestamp()
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


def _all_puffins(spark: SparkSession, location: str) -> set[str]:
    """The Puffin files of every DV any retained snapshot references (Java's ``all_delete_files``)."""
    return {
        f["file_path"]
        for f in spark_metadata_table(spark, location, "all_delete_files")
        if f["file_format"] == "PUFFIN"
    }


@pytest.fixture
def fresh(spark: SparkSession, request: pytest.FixtureRequest) -> Base:
    """A table of its own (the layout is the parameter) for a test that deletes files or commits in Spark."""
    layout = request.param
    return _build(spark, f"accept_{request.node.name.split('[')[0][-20:]}_{layout}_{next(_counter)}", layout)


@pytest.mark.parametrize("fresh", [PARTITIONED], indirect=True)
def test_orphan_removal_never_takes_a_referenced_puffin(
    fresh: Base, spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """A Puffin file is referenced when any live or retained DV is in it; a stray copy is an orphan."""
    table = _register(catalog, fresh)
    compact(table, where=SPLITS_A_PUFFIN, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    location = _commit_location(table, fresh.metadata_location)
    puffins = _all_puffins(spark, location)
    current = {key[0] for key in _files(spark, location).dvs}
    assert puffins - current, "no Puffin file only a retained snapshot references"
    some_puffin = _local(sorted(puffins)[0])
    stray = some_puffin.with_name(f"stray-{some_puffin.name}")
    stray.write_bytes(some_puffin.read_bytes())
    _age_all_files(_local(table.location()), days=10)

    result = remove_orphan_files(table, limits=_limits(tmp_path))

    deleted = {_local(p) for p in _orphan_paths(result)}
    assert stray in deleted
    assert not stray.exists()
    assert all(_local(p).exists() for p in puffins)
    _check_table(spark, location, fresh.model)
    for snapshot in table.metadata.snapshots:  # Java reads every retained snapshot still
        spark.read.format("iceberg").option("snapshot-id", snapshot.snapshot_id).load(location).count()


def _orphan_paths(result: Any) -> list[str]:
    uri = result["orphan_list_uri"]
    return [line for line in _local(uri).read_text().splitlines() if line]


@pytest.mark.parametrize("fresh", [UNPARTITIONED], indirect=True)
def test_expiry_deletes_a_puffin_only_when_no_retained_dv_is_in_it(
    fresh: Base, spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Expired DVs' Puffin files go, except one that a retained DV shares (the filtered compaction
    removed one DV of it and kept another)."""
    before = _files(spark, fresh.metadata_location)
    table = _register(catalog, fresh)
    compact(table, where=SPLITS_A_PUFFIN, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    location = _commit_location(table, fresh.metadata_location)
    every = _all_puffins(spark, location)
    live = _files(spark, location).dvs
    kept = {key[0] for key in live}
    assert kept & {key[0] for key in before.dvs if key not in live}
    assert every - kept

    now = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=5)
    result = expire_snapshots(table, older_than=now, retain_last=1, limits=_limits(tmp_path), now=now)

    assert result["expired_snapshot_count"] > 0
    table.refresh()
    assert all(_local(p).exists() for p in kept)
    assert not [p for p in every - kept if _local(p).exists()]
    assert _all_puffins(spark, table.metadata_location) == kept
    _check_table(spark, table.metadata_location, fresh.model)


@pytest.mark.parametrize("fresh", [UNPARTITIONED, PARTITIONED], indirect=True)
def test_spark_commits_on_ours_and_we_on_spark_s(
    fresh: Base, spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _register(catalog, fresh)
    compact(table, where=SPLITS_A_PUFFIN, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    ours = _commit_location(table, fresh.metadata_location)
    _check_table(spark, ours, fresh.model)

    published = publish_to_spark(spark, fresh.name, ours)
    t = f"{CATALOG}.{NAMESPACE}.{fresh.name}"
    spark.sql(f"DELETE FROM {t} WHERE id IN (2, 14, 50, 51)")  # our files and Java's files with DVs
    spark.sql(f"INSERT INTO {t} VALUES (1000, 'a', 'inserted')")
    theirs = metadata_location(spark, fresh.name)
    assert theirs != published
    model = {i: row for i, row in fresh.model.items() if i not in (2, 14, 50, 51)}
    inserted = _spark_model(spark, theirs)[1000]
    assert inserted["_row_id"] >= _metadata(ours)["next-row-id"]
    model[1000] = inserted
    _check_table(spark, theirs, model)

    again = catalog.register_table(f"ns.t{next(_counter)}", theirs)
    cow_rewrite(
        again, operation="update", where="id = 56", set_columns={"v": "'again'"}, limits=_limits(tmp_path)
    )
    model = {i: dict(row) for i, row in model.items()}
    model[56].update(v="again", _last_updated_sequence_number=_sequence_number(again))
    _check_table(spark, _commit_location(again, theirs), model)
    compact(again, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    _check_table(spark, _commit_location(again, theirs), model)


def _tree(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file())


def test_a_v3_table_with_a_default_value_is_refused_in_one_line_unchanged(
    spark: SparkSession, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Java 1.10 gives a column a default value (v3 only); our writers do not implement defaults."""
    name = f"accept_defaults_{next(_counter)}"
    t = f"{CATALOG}.{NAMESPACE}.{name}"
    spark.sql(
        f"CREATE TABLE {t} (id INT NOT NULL, v STRING) USING iceberg TBLPROPERTIES ('format-version'='3')"
    )
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    jvm = spark._jvm  # type: ignore[attr-defined]
    java_table(spark, name).updateSchema().addColumn(
        "d",
        jvm.org.apache.iceberg.types.Types.IntegerType.get(),
        "with a default",
        jvm.org.apache.iceberg.expressions.Literal.of(5),
    ).commit()
    location = metadata_location(spark, name)
    table = catalog.register_table(f"ns.t{next(_counter)}", location)
    before = _tree(_local(table.location()))

    for run in (
        lambda: compact(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path)),
        lambda: cow_rewrite(table, operation="delete", where="id = 2", limits=_limits(tmp_path)),
    ):
        with pytest.raises(ConfigurationError, match="default value of column 'd' is not supported") as err:
            run()
        assert "\n" not in str(err.value)

    table.refresh()
    assert table.metadata_location == location
    assert _tree(_local(table.location())) == before
    assert sorted(r["id"] for r in spark.read.format("iceberg").load(location).collect()) == [1, 2, 3]
