"""Table-wide dangling delete removal in the compaction ``replace`` commit (``remove-dangling-deletes``).

Tables are built so that delete files are dangling before any compaction: a position delete whose data
file another engine rewrote without removing it, and an equality delete older than every data file of
its partition. Expected rows are computed here from the data the tests wrote (not by the code under
test) and compared with what PyIceberg's own scan reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_provider_iceberg_exec.engine.commit.snapshots import commit_rewrite
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    compact,
    execute_rewrite_task,
    plan_compaction,
)
from tests.helpers import commit_position_deletes, live_checksum, row_digest
from tests.integration.test_deletes import SCHEMA, _commit_deletes, _equality_deletes, _live_delete_files

pytestmark = pytest.mark.integration

MiB = 1 << 20
_MASK = (1 << 64) - 1
BY_CATEGORY = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path / "spill"))


def _rows(ids: Sequence[int], category: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "category": pa.array([category] * len(ids), pa.string()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
        }
    )


def _checksum(rows: Sequence[pa.Table]) -> tuple[int, int]:
    """``live_checksum``'s value for exactly these rows, computed from the rows themselves."""
    count, total = 0, 0
    for table in rows:
        for row in table.to_pylist():
            count += 1
            total = (total + row_digest(row)) & _MASK
    return count, total


def _live_data_files(table: Table) -> list[DataFile]:
    """The live data files, read from the manifests (PyIceberg's planner refuses equality deletes)."""
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        e.data_file
        for m in snapshot.manifests(table.io)
        if m.content == ManifestContent.DATA
        for e in read_manifest_entries(table.io, m)
    ]


def _file_in(table: Table, category: str) -> DataFile:
    (found,) = [f for f in _live_data_files(table) if f.partition[0] == category]
    return found


def _rewrite_elsewhere(table: Table, target: DataFile, kept: pa.Table) -> None:
    """Another engine's rewrite of ``target`` (its deletes applied) that leaves its delete files behind.

    The new file gets a new data sequence number, so the old position delete no longer applies to it.
    """
    snapshot = table.current_snapshot()
    assert snapshot is not None
    output = list(_dataframe_to_data_files(table_metadata=table.metadata, df=kept, io=table.io))
    commit_rewrite(
        table,
        base_snapshot_id=snapshot.snapshot_id,
        rewritten_data_files=[target],
        added_data_files=output,
        commit_id="another-engine",
        use_starting_sequence_number=False,
    )
    table.refresh()


def _dangling_table(
    catalog: SqlCatalog, *, delete_first_row_of_b: bool = False
) -> tuple[Table, list[pa.Table], list[DataFile]]:
    """Partitions a, b, c; a dangling position delete in a and a dangling equality delete in c.

    Returns the table, its expected live rows and the two dangling deletes (position, equality), then
    the live position delete of b when ``delete_first_row_of_b``.
    """
    table = catalog.create_table(
        "ns.t", schema=SCHEMA, partition_spec=BY_CATEGORY, properties={"format-version": "2"}
    )
    table.append(_rows(range(10), "a"))
    table.append(_rows(range(10, 20), "b"))
    rows_b = _rows(range(10, 20), "b")
    # A position delete for the file of a, then another engine rewrites that file without it.
    file_a = _file_in(table, "a")
    pos_delete = commit_position_deletes(table, file_a.file_path, [0, 1, 2])
    kept_a = pq.read_table(file_a.file_path.removeprefix("file://"), partitioning=None).slice(3)
    _rewrite_elsewhere(table, file_a, kept_a)
    deletes = [pos_delete]
    if delete_first_row_of_b:
        file_b = _file_in(table, "b")
        live_b = commit_position_deletes(table, file_b.file_path, [0])
        rows_b = pq.read_table(file_b.file_path.removeprefix("file://"), partitioning=None).slice(1)
    # An equality delete in partition c, before any data of c: it never applies to anything.
    eq_delete = _equality_deletes(table, {"id": (1, pa.int64(), [25])}, spec_id=0, partition=("c",))
    _commit_deletes(table, [eq_delete])
    deletes.append(eq_delete)
    if delete_first_row_of_b:
        deletes.append(live_b)
    table.append(_rows(range(20, 30), "c"))
    expected = [kept_a, rows_b, _rows(range(20, 30), "c")]
    assert {f.file_path for f in _live_delete_files(table)} == {d.file_path for d in deletes}
    return table, expected, deletes


def test_pre_existing_dangling_deletes_are_removed_with_the_option(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Neither delete touches the rewritten partition b: they go because they apply to nothing."""
    table, expected, _deletes = _dangling_table(catalog)

    result = compact(
        table,
        where="category = 'b'",
        options={"rewrite-all": "true", "remove-dangling-deletes": "true"},
        limits=_limits(tmp_path),
    )

    assert result["rewritten_data_files_count"] == 1
    assert result["removed_delete_files_count"] == 2
    assert _live_delete_files(table) == []
    # PyIceberg can read the table again (it refuses equality deletes) and sees exactly the live rows.
    assert live_checksum(table) == _checksum(expected)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary["removed-delete-files"] == "2"


def test_pre_existing_dangling_deletes_are_kept_without_the_option(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Spark's default: remove-dangling-deletes is false, so deletes the rewrite did not touch stay."""
    table, _expected, (pos_delete, eq_delete) = _dangling_table(catalog)

    result = compact(table, where="category = 'b'", options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == 1
    assert result["removed_delete_files_count"] == 0
    assert {f.file_path for f in _live_delete_files(table)} == {pos_delete.file_path, eq_delete.file_path}


def test_position_delete_of_a_file_outside_the_plan_is_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    table, expected, (_pos, _eq, live_b) = _dangling_table(catalog, delete_first_row_of_b=True)

    result = compact(
        table,
        where="category = 'c'",
        options={"rewrite-all": "true", "remove-dangling-deletes": "true"},
        limits=_limits(tmp_path),
    )

    assert result["removed_delete_files_count"] == 2
    assert [f.file_path for f in _live_delete_files(table)] == [live_b.file_path]
    assert live_checksum(table) == _checksum(expected)


def test_equality_delete_of_a_file_outside_the_plan_is_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    """An equality delete newer than the data of partition b applies there: it stays."""
    table, _expected, (pos_delete, eq_delete) = _dangling_table(catalog)
    live_eq = _equality_deletes(table, {"id": (1, pa.int64(), [11])}, spec_id=0, partition=("b",))
    _commit_deletes(table, [live_eq])

    result = compact(
        table,
        where="category = 'c'",
        options={"rewrite-all": "true", "remove-dangling-deletes": "true"},
        limits=_limits(tmp_path),
    )

    assert result["removed_delete_files_count"] == 2
    remaining = {f.file_path for f in _live_delete_files(table)}
    assert remaining == {live_eq.file_path}
    assert not remaining & {pos_delete.file_path, eq_delete.file_path}


def test_equality_delete_that_reaches_the_new_files_is_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Committed after the plan, an equality delete of the rewritten partition is newer than the output
    (which keeps the plan's sequence number): it applies to the new files and is not dangling."""
    table, _expected, _deletes = _dangling_table(catalog)
    plan = plan_compaction(
        table, where="category = 'b'", options={"rewrite-all": "true", "remove-dangling-deletes": "true"}
    )
    results = [execute_rewrite_task(table, task, _limits(tmp_path)) for task in plan["tasks"]]
    late = _equality_deletes(table, {"id": (1, pa.int64(), [12])}, spec_id=0, partition=("b",))
    _commit_deletes(table, [late])

    result = commit_compaction(table, results, commit_id="c1")

    assert result["removed_delete_files_count"] == 2  # the two pre-existing dangling ones
    assert [f.file_path for f in _live_delete_files(table)] == [late.file_path]


@pytest.mark.parametrize("race", [False, True], ids=["alone", "concurrent-compaction"])
def test_dangling_set_is_recomputed_on_the_head_a_retry_commits_on(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, race: bool
) -> None:
    """A compaction planned before an equality delete adds files with its old sequence number.

    Spec 0 is unpartitioned; spec 1 partitions by category. The equality delete of spec 1, partition a,
    applies to no data file while every file is in spec 0, so it is dangling when our compaction (of
    partition b, with remove-dangling-deletes) plans and first tries to commit. A concurrent compaction
    planned earlier then moves the rows of a into spec 1 with its base's (older) sequence number: the
    delete now applies to them. Our commit loses the race, retries on the new head, and must keep it.
    """
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"format-version": "2"})
    table.append(_rows(range(10), "a"))
    table.append(_rows(range(10, 20), "b"))
    with table.update_spec() as update:
        update.add_field("category", IdentityTransform(), "category")
    table.refresh()
    other_plan = plan_compaction(table, where="category = 'a'", options={"rewrite-all": "true"})
    other_results = [execute_rewrite_task(table, t, _limits(tmp_path)) for t in other_plan["tasks"]]
    eq_delete = _equality_deletes(table, {"id": (1, pa.int64(), [3])}, spec_id=1, partition=("a",))
    _commit_deletes(table, [eq_delete])
    ours = plan_compaction(
        table, where="category = 'b'", options={"rewrite-all": "true", "remove-dangling-deletes": "true"}
    )
    our_results = [execute_rewrite_task(table, t, _limits(tmp_path)) for t in ours["tasks"]]
    other = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )

    calls: list[int] = []
    original = catalog.commit_table

    def racing_commit_table(tbl: Table, requirements: Any, updates: Any) -> Any:
        if race and not calls:
            commit_compaction(other.load_table("ns.t"), other_results, commit_id="other")
        calls.append(1)
        return original(tbl, requirements, updates)

    monkeypatch.setattr(catalog, "commit_table", racing_commit_table)

    result = commit_compaction(table, our_results, commit_id="ours")

    assert result["rewritten_data_files_count"] == 1
    live = {f.file_path for f in _live_delete_files(table)}
    if race:
        assert len(calls) == 2  # lost the first catalog commit, retried on the new head
        assert result["removed_delete_files_count"] == 0
        assert live == {eq_delete.file_path}
        moved = [f for f in _live_data_files(table) if f.spec_id == 1 and f.partition[0] == "a"]
        assert moved, "the concurrent compaction's files are live"
    else:
        assert len(calls) == 1
        assert result["removed_delete_files_count"] == 1
        assert live == set()
