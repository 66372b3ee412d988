"""Our commits through a REST catalog whose server is Java Iceberg 1.10's (tests/interop/rest_catalog.py):
PyIceberg's RestCatalog sends the table updates (our snapshot with ``first-row-id`` / ``added-rows`` on
v3) and Java's ``CatalogHandlers`` checks the requirements, applies the updates and writes the metadata.
The server's catalog is Spark's Hadoop catalog ``spark_cat``: Spark writes the rows and reads them back
(Java's view of the server's commits) after each of our operations, on format-version 2 and 3 tables."""

from __future__ import annotations

import datetime
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
from pyiceberg.exceptions import CommitFailedException

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots
from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests
from airflow_provider_iceberg_exec.engine.ops.merge import upsert
from airflow_provider_iceberg_exec.engine.ops.orphans.scan import scan_orphan_files
from tests.interop.fixtures import JavaTables
from tests.interop.rest_catalog import RestCatalogServer
from tests.interop.spark import CATALOG, NAMESPACE
from tests.interop.tables import V3_DELETION_VECTORS

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Row = tuple[int, str]
#: Java's CatalogHandlers refusing a commit whose assert-ref-snapshot-id no longer holds (HTTP 409)
_BRANCH_CHANGED = "CommitFailedException: Requirement failed: branch main has changed: expected id"
VERSIONS = pytest.mark.parametrize("version", [2, 3], ids=["v2", "v3"])


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


@pytest.fixture
def rest(rest_catalog_server: RestCatalogServer) -> Catalog:
    """A PyIceberg RestCatalog on the Java server, built as the CLI and the hook build catalogs."""
    catalog = load_catalog(CatalogConfig("rest", {"type": "rest", "uri": rest_catalog_server.uri}))
    assert (NAMESPACE,) in catalog.list_namespaces()  # Spark's, listed by the server
    return catalog


class RestTable:
    """A table of the REST server's catalog (``spark_cat.db.<name>`` to Spark, which writes its rows
    directly), and the rows it should hold."""

    def __init__(self, spark: SparkSession, rest: Catalog, name: str) -> None:
        self.spark, self.rest, self.name = spark, rest, name
        self.spark_name = f"{CATALOG}.{NAMESPACE}.{name}"
        self.model: set[Row] = set()

    @classmethod
    def create(cls, spark: SparkSession, rest: Catalog, name: str, version: int) -> RestTable:
        """An empty ``(id bigint, v string)`` table created through the server (Java's createTable)."""
        properties = {"format-version": str(version)}
        rest.create_table(f"{NAMESPACE}.{name}", schema=_schema(), properties=properties)
        return cls(spark, rest, name)

    def insert(self, rows: list[Row]) -> None:
        values = ", ".join(f"({i}, '{v}')" for i, v in rows)
        self.spark.sql(f"INSERT INTO {self.spark_name} VALUES {values}")
        self.model |= set(rows)

    def table(self) -> Table:
        return load_table(self.rest, f"{NAMESPACE}.{self.name}")

    def metadata(self) -> dict[str, Any]:
        """The metadata JSON the server's catalog points at (written by Java)."""
        return json.loads(Path(urlparse(self.table().metadata_location).path).read_text())

    def spark_rows(self) -> set[Row]:
        """The live rows, read by Spark (Java Iceberg) from the table's current version."""
        rows = self.spark.sql(f"SELECT id, v FROM {self.spark_name}").collect()
        assert len(rows) == len({(r["id"], r["v"]) for r in rows})  # no row twice
        return {(r["id"], r["v"]) for r in rows}

    def spark_lineage(self) -> dict[int, tuple[int, int]]:
        rows = self.spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {self.spark_name}")
        return {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in rows.collect()}


def _schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False)
    )


@pytest.fixture
def rest_table(request: pytest.FixtureRequest, spark: SparkSession, rest: Catalog) -> Any:
    """``rest_table(version) -> RestTable`` with four Spark inserts (four snapshots, several files)."""
    counter = iter(range(1000))

    def make(version: int) -> RestTable:
        name = f"{request.node.name}_{next(counter)}".replace("[", "_").replace("]", "").replace("-", "_")
        made = RestTable.create(spark, rest, name, version)
        for batch in range(4):
            made.insert([(batch * 10 + i, f"b{batch}") for i in range(5)])
        return made

    return make


def _assert_row_ids_assigned(metadata: dict[str, Any], version: int, start: int | None = 0) -> None:
    """v3: every snapshot has first-row-id and added-rows, the ranges follow one another from ``start``
    (``None``: the oldest snapshot's) and end at the table's next-row-id (Java applied them:
    TableMetadata.Builder.addSnapshot)."""
    assert metadata["format-version"] == version
    if version < 3:
        assert "next-row-id" not in metadata
        assert all("first-row-id" not in s for s in metadata["snapshots"])
        return
    oldest = min(metadata["snapshots"], key=lambda s: s["sequence-number"])
    expected = oldest["first-row-id"] if start is None else start
    for snapshot in sorted(metadata["snapshots"], key=lambda s: s["sequence-number"]):
        assert snapshot["first-row-id"] == expected, snapshot
        expected += snapshot["added-rows"]
    assert metadata["next-row-id"] == expected


@VERSIONS
def test_compaction_commits_through_the_rest_server(rest_table: Any, tmp_path: Path, version: int) -> None:
    t = rest_table(version)
    lineage = t.spark_lineage() if version == 3 else None
    before, files = t.table().current_snapshot(), t.table().inspect.files().num_rows
    assert files >= 4  # one or more per Spark insert

    result = compact(t.table(), options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == files
    assert result["added_data_files_count"] == 1
    after = t.table().current_snapshot()
    assert after is not None
    assert before is not None
    assert after.parent_snapshot_id == before.snapshot_id
    assert after.summary is not None
    assert after.summary.operation.value == "replace"
    assert t.spark_rows() == t.model
    metadata = t.metadata()
    _assert_row_ids_assigned(metadata, version)
    if version == 3:
        current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == after.snapshot_id)
        assert current["added-rows"] == 20  # the rewritten rows' file is new: its range is assigned
        assert t.spark_lineage() == lineage  # the rows kept their ids and sequence numbers


@VERSIONS
def test_copy_on_write_delete_commits_through_the_rest_server(
    rest_table: Any, tmp_path: Path, version: int
) -> None:
    t = rest_table(version)
    lineage = t.spark_lineage() if version == 3 else None

    result = cow_rewrite(t.table(), operation="delete", where="id = 12 OR id = 31", limits=_limits(tmp_path))

    assert result["deleted_rows"] == 2
    t.model -= {(12, "b1"), (31, "b3")}
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(t.metadata(), version)
    if lineage is not None:
        assert t.spark_lineage() == {i: v for i, v in lineage.items() if i not in (12, 31)}

    result = cow_rewrite(
        t.table(), operation="update", where="id = 20", set_columns={"v": "'ours'"}, limits=_limits(tmp_path)
    )

    assert result["updated_rows"] == 1
    t.model = (t.model - {(20, "b2")}) | {(20, "ours")}
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(t.metadata(), version)
    if lineage is not None:
        head = t.table().current_snapshot()
        assert head is not None
        # the updated row keeps its id and reads our commit's sequence number (Java's rule)
        assert t.spark_lineage()[20] == (lineage[20][0], head.sequence_number)


@VERSIONS
@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_an_upsert_commits_through_the_rest_server(
    rest_table: Any, tmp_path: Path, mode: str, version: int
) -> None:
    """In merge-on-read mode the snapshot the server applies adds a delete manifest: position deletes on
    v2, one deletion vector on v3. On v3 the updated row keeps its id and reads our commit's sequence
    number; the inserted row gets an id above every earlier one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = rest_table(version)
    lineage = t.spark_lineage() if version == 3 else None
    source = [(12, "upserted"), (500, "inserted")]
    path = tmp_path / "source.parquet"
    pq.write_table(pa.table({"id": [i for i, _ in source], "v": [v for _, v in source]}), path)

    table = t.table()
    result = upsert(table, join_cols=["id"], source_files=[str(path)], mode=mode, limits=_limits(tmp_path))

    assert (result["rows_updated"], result["rows_inserted"]) == (1, 1)
    t.model = (t.model - {(12, "b1")}) | set(source)
    assert t.spark_rows() == t.model
    head = t.table().current_snapshot()
    assert head is not None
    assert head.summary is not None
    delete_files = int(head.summary.get("total-delete-files", "0"))
    assert delete_files == (1 if mode == "merge-on-read" else 0)
    _assert_row_ids_assigned(t.metadata(), version)
    if lineage is not None:
        assert head.summary.get("added-dvs") == ("1" if mode == "merge-on-read" else None)
        after = t.spark_lineage()
        assert after[12] == (lineage[12][0], head.sequence_number)
        assert after[500][0] > max(row_id for row_id, _ in lineage.values())
        assert {i: v for i, v in after.items() if i not in (12, 500)} == {
            i: v for i, v in lineage.items() if i != 12
        }


@VERSIONS
def test_rewrite_manifests_then_expiry_commit_through_the_rest_server(
    rest_table: Any, tmp_path: Path, version: int
) -> None:
    t = rest_table(version)
    lineage = t.spark_lineage() if version == 3 else None

    rewritten = rewrite_manifests(t.table())

    assert rewritten["rewritten_manifests_count"] == 4
    assert rewritten["added_manifests_count"] == 1
    assert len(t.table().inspect.manifests()) == 1
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(t.metadata(), version)

    compact(t.table(), options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    expired = expire_snapshots(
        t.table(), older_than=datetime.datetime.now(datetime.UTC), retain_last=1, limits=_limits(tmp_path)
    )

    assert expired["expired_snapshot_count"] == 5
    assert expired["deleted_data_files_count"] >= 4  # the files the compaction replaced
    metadata = t.metadata()
    assert [s["snapshot-id"] for s in metadata["snapshots"]] == [metadata["current-snapshot-id"]]
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(metadata, version, start=None)
    if lineage is not None:
        assert t.spark_lineage() == lineage


def test_orphan_scan_of_a_rest_table_finds_only_the_planted_file(rest_table: Any, tmp_path: Path) -> None:
    t = rest_table(3)
    table = t.table()
    planted = Path(urlparse(table.location()).path) / "data" / "stray.parquet"
    planted.write_bytes(b"not referenced by any snapshot")
    ten_days_ago = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)).timestamp()
    os.utime(planted, (ten_days_ago, ten_days_ago))

    result = scan_orphan_files(table, limits=_limits(tmp_path))

    assert result["orphan_file_count"] == 1
    assert [urlparse(p).path for p in result["orphan_sample"]] == [str(planted)]
    assert t.spark_rows() == t.model  # a scan commits nothing


def test_compaction_of_a_java_v3_table_with_deletion_vectors_through_the_rest_server(
    java_table: JavaTables, rest: Catalog, spark_rows_checksum: Any, spark: SparkSession, tmp_path: Path
) -> None:
    """Spark's table (merge-on-read DELETE/UPDATE: DVs, row lineage), loaded and committed through the
    server: Java reads the same rows with the same ``_row_id`` and sequence numbers."""
    built = java_table.fresh(V3_DELETION_VECTORS)
    t = RestTable(spark, rest, built.name)  # Spark's table, no row model: checked by its checksum
    rows, lineage = spark_rows_checksum(built.metadata_location), t.spark_lineage()

    result = compact(t.table(), options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] > 0
    location = t.table().metadata_location
    assert location != built.metadata_location
    assert spark_rows_checksum(location) == rows
    assert t.spark_lineage() == lineage
    metadata = t.metadata()
    current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    assert current["first-row-id"] + current["added-rows"] == metadata["next-row-id"]
    assert t.table().inspect.delete_files().num_rows == 0  # the DVs were applied and removed


@VERSIONS
def test_a_concurrent_append_between_plan_and_commit_is_retried_on_the_new_head(
    rest_table: Any, rest: Catalog, tmp_path: Path, version: int
) -> None:
    """Spark appends while our compaction commits: Java's requirement check (assert-ref-snapshot-id)
    refuses our first attempt (409), and the retry lands on Spark's snapshot, v3 row ids after its."""
    t = rest_table(version)
    planned_files, planned_head = t.table().inspect.files().num_rows, t.metadata()["current-snapshot-id"]
    refusals = _race(rest, lambda: t.insert([(100, "raced"), (101, "raced")]))

    result = compact(t.table(), options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == planned_files  # planned before Spark's append
    metadata = t.metadata()
    ours = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    spark_snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == ours["parent-snapshot-id"])
    assert [str(e) for e in refusals] == [
        f"{_BRANCH_CHANGED} {planned_head} != {spark_snapshot['snapshot-id']}"
    ]
    assert spark_snapshot["summary"]["operation"] == "append"
    assert spark_snapshot["summary"]["added-records"] == "2"
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(metadata, version)
    if version == 3:
        assert ours["first-row-id"] == spark_snapshot["first-row-id"] + spark_snapshot["added-rows"]


@VERSIONS
def test_a_concurrent_delete_of_a_compacted_file_fails_our_commit_and_keeps_sparks(
    rest_table: Any, rest: Catalog, tmp_path: Path, version: int
) -> None:
    """Spark's copy-on-write DELETE replaces a file our compaction rewrites: our retry's validation fails
    and the table stays at Spark's commit."""
    t = rest_table(version)
    planned_head = t.metadata()["current-snapshot-id"]

    def spark_delete() -> None:
        t.spark.sql(f"DELETE FROM {t.spark_name} WHERE id = 21")
        t.model.discard((21, "b2"))

    refusals = _race(rest, spark_delete)
    with pytest.raises(CommitValidationError, match="Missing required files to delete"):
        compact(t.table(), options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    metadata = t.metadata()
    head = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    # refused by the server, then our retry's validation failed
    assert [str(e) for e in refusals] == [f"{_BRANCH_CHANGED} {planned_head} != {head['snapshot-id']}"]
    assert head["summary"]["operation"] in ("delete", "overwrite")  # Spark's, not ours
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(metadata, version)


def _race(rest: Catalog, concurrent: Any) -> list[Exception]:
    """Run ``concurrent`` (a Spark commit) right before the catalog sends our first commit request;
    the returned list gets the server's refusal of that request."""
    original = rest.commit_table
    refusals: list[Exception] = []

    def racing_commit_table(table: Any, requirements: Any, updates: Any) -> Any:
        if vars(rest).get("commit_table") is not racing_commit_table:
            return original(table, requirements, updates)
        del rest.commit_table  # once
        concurrent()
        try:
            return original(table, requirements, updates)
        except CommitFailedException as err:
            refusals.append(err)
            raise

    rest.commit_table = racing_commit_table  # type: ignore[method-assign]
    return refusals


def test_the_cli_compacts_a_v3_table_of_a_rest_catalog_configured_the_pyiceberg_way(
    rest_table: Any, rest_catalog_server: RestCatalogServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_iceberg_exec.cli import main

    t = rest_table(3)
    lineage = t.spark_lineage()
    monkeypatch.setenv("PYICEBERG_CATALOG__JAVAREST__TYPE", "rest")
    monkeypatch.setenv("PYICEBERG_CATALOG__JAVAREST__URI", rest_catalog_server.uri)
    out = io.StringIO()

    argv = ["--catalog", "javarest", "compact", f"{NAMESPACE}.{t.name}", "--option", "rewrite-all=true"]
    code = main(
        [*argv, "--spill-dir", str(tmp_path / "spill"), "--json"],
        out=out,
    )

    assert code == 0, out.getvalue()
    assert json.loads(out.getvalue())["rewritten_data_files_count"] >= 4
    assert t.spark_rows() == t.model
    assert t.spark_lineage() == lineage
    _assert_row_ids_assigned(t.metadata(), 3)


def test_the_hook_builds_the_rest_catalog_from_an_airflow_connection(
    rest_table: Any, rest_catalog_server: RestCatalogServer, tmp_path: Path
) -> None:
    from airflow.sdk import Connection

    from airflow_provider_iceberg_exec.hooks.iceberg_exec import catalog_config_from_connection

    t = rest_table(3)
    conn = Connection(
        conn_id="iceberg_exec_default",
        conn_type="iceberg_exec",
        host=rest_catalog_server.uri,
        extra=json.dumps({"catalog_type": "rest", "catalog_name": "javarest"}),
    )
    catalog = load_catalog(catalog_config_from_connection(conn))

    table = load_table(catalog, f"{NAMESPACE}.{t.name}")
    result = cow_rewrite(table, operation="delete", where="id < 10", limits=_limits(tmp_path))

    assert result["deleted_rows"] == 5
    t.model = {row for row in t.model if row[0] >= 10}
    assert t.spark_rows() == t.model
    _assert_row_ids_assigned(t.metadata(), 3)


def test_the_server_refuses_a_v3_snapshot_whose_row_ids_overlap_and_the_table_is_unchanged(
    rest_table: Any, rest: Catalog
) -> None:
    """The server is no rubber stamp: Java's v3 rule (first-row-id >= next-row-id) refuses a snapshot
    that reuses assigned row ids, which is what the tests above rely on to judge our commits."""
    from pyiceberg.exceptions import BadRequestError
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId

    t = rest_table(3)
    table = t.table()
    head = table.current_snapshot()
    assert head is not None
    before = table.metadata_location
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]
    reused = head.model_copy(
        update={
            "snapshot_id": head.snapshot_id + 1,
            "parent_snapshot_id": head.snapshot_id,
            "sequence_number": head.sequence_number + 1,
            "first_row_id": next_row_id - 1,
            "added_rows": 1,
        }
    )
    requirement = AssertRefSnapshotId(ref="main", snapshot_id=head.snapshot_id)

    with pytest.raises(BadRequestError, match="first-row-id is behind table next-row-id"):
        rest.commit_table(table, (requirement,), (AddSnapshotUpdate(snapshot=reused),))

    assert t.table().metadata_location == before
    assert t.spark_rows() == t.model


def test_a_lost_answer_of_the_server_is_an_unknown_state_and_the_retried_commit_finds_it_landed(
    rest_table: Any, rest: Catalog, tmp_path: Path
) -> None:
    """The server applied our v3 commit but its answer was lost (what PyIceberg reads as a 500): the
    commit step says the state is unknown, and the retried step (same commit id) finds its snapshot
    and commits nothing twice."""
    from pyiceberg.exceptions import CommitStateUnknownException

    from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError
    from airflow_provider_iceberg_exec.engine.ops.compaction import (
        commit_compaction,
        execute_rewrite_task,
        plan_compaction,
    )

    t = rest_table(3)
    lineage = t.spark_lineage()
    plan = plan_compaction(t.table(), options={"rewrite-all": "true"})
    results = [execute_rewrite_task(t.table(), task, _limits(tmp_path)) for task in plan["tasks"]]
    original = rest.commit_table

    def answer_lost(table: Any, requirements: Any, updates: Any) -> Any:
        del rest.commit_table  # once
        original(table, requirements, updates)
        raise CommitStateUnknownException("the server's answer was lost")

    rest.commit_table = answer_lost  # type: ignore[method-assign]
    with pytest.raises(CommitStateUnknownError):
        commit_compaction(t.table(), results, commit_id="rest-lost-answer")
    landed = t.metadata()
    assert landed["current-snapshot-id"] != plan["base_snapshot_id"]  # the server did commit it

    again = commit_compaction(t.table(), results, commit_id="rest-lost-answer")

    assert again["already_committed"] is True
    assert again["snapshot_ids"] == [landed["current-snapshot-id"]]
    assert t.metadata()["current-snapshot-id"] == landed["current-snapshot-id"]  # nothing new
    assert t.spark_rows() == t.model
    assert t.spark_lineage() == lineage
    _assert_row_ids_assigned(t.metadata(), 3)
