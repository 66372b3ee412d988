"""Delete files removed by a copy-on-write commit: the dangling ones go, the ones still needed stay.

The copy-on-write commit (``commit_overwrite`` with ``DanglingDeletes.REWRITTEN``) decides on every
attempt, against the branch head it commits on, which delete files it removes: those that applied to a
data file it removes and apply to no live data file afterwards. The live rows after each step are read
by a small reader written here (PyArrow over the manifests, the spec's rules for which deletes apply),
because PyIceberg refuses tables with equality deletes; once no delete file is left, PyIceberg's own
scan (``live_checksum``) must agree too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    execute_rewrite_task,
    plan_compaction,
)
from airflow_provider_iceberg_exec.engine.ops.cow import (
    commit_cow_rewrite,
    cow_rewrite,
    execute_cow_task,
    plan_cow_rewrite,
)
from tests.helpers import commit_delete_files, commit_position_deletes, live_checksum, row_digest
from tests.integration.test_commit import _race_once, _write_position_deletes
from tests.integration.test_deletes import (
    _append,
    _commit_deletes,
    _create,
    _equality_deletes,
    _live_delete_files,
    _name,
)

pytestmark = pytest.mark.integration

MiB = 1 << 20
_MASK = (1 << 64) - 1
_ROWS = pa.schema([("id", pa.int64()), ("category", pa.string()), ("name", pa.string())])


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path / "spill"), batch_size=50)


def _checksum_of_ids(ids: Iterable[int], category: str = "a") -> tuple[int, int]:
    """``live_checksum``'s value for the rows ``_append`` wrote for ``ids``."""
    count, total = 0, 0
    for i in ids:
        count += 1
        total = (total + row_digest({"id": i, "category": category, "name": _name(i)})) & _MASK
    return count, total


def _checksum_of(rows: pa.Table) -> tuple[int, int]:
    count, total = 0, 0
    for row in rows.to_pylist():
        count += 1
        total = (total + row_digest(row)) & _MASK
    return count, total


def _local(path: str) -> str:
    return path.removeprefix("file://")


def _independent_live_rows(table: Table) -> pa.Table:
    """The live rows by the spec's scan-planning rules, read with PyArrow from PyIceberg's manifest reader.

    A position delete applies to a data file it names when its data sequence number is not below the
    file's; an equality delete (on ``id`` here) when its data sequence number is strictly above the
    file's, in the same spec and partition or from an unpartitioned spec.
    """
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    specs = table.metadata.specs()
    data: list[tuple[DataFile, int, int]] = []
    deletes: list[tuple[DataFile, int, int]] = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            assert entry.sequence_number is not None
            item = (entry.data_file, entry.sequence_number, manifest.partition_spec_id)
            (data if manifest.content == ManifestContent.DATA else deletes).append(item)
    parts = []
    for data_file, data_seq, spec_id in data:
        rows = pq.read_table(_local(data_file.file_path)).select(["id", "category", "name"])
        keep = pa.array([True] * rows.num_rows)
        for delete_file, delete_seq, delete_spec_id in deletes:
            if delete_file.content == DataFileContent.POSITION_DELETES:
                if delete_seq < data_seq:
                    continue
                positions = pq.read_table(_local(delete_file.file_path)).to_pylist()
                hit = {r["pos"] for r in positions if r["file_path"] == data_file.file_path}
                keep = pc.and_(keep, pa.array([i not in hit for i in range(rows.num_rows)]))
            else:
                same_partition = delete_spec_id == spec_id and delete_file.partition == data_file.partition
                if delete_seq <= data_seq or not (specs[delete_spec_id].is_unpartitioned() or same_partition):
                    continue
                ids = pq.read_table(_local(delete_file.file_path)).column("id")
                keep = pc.and_(keep, pc.invert(pc.is_in(rows["id"], value_set=ids)))
        parts.append(rows.filter(keep).cast(_ROWS))
    return pa.concat_tables(parts) if parts else _ROWS.empty_table()


def _live_paths(table: Table) -> list[str]:
    return sorted(f.file_path for f in _live_delete_files(table))


def _data_files_by_path(table: Table) -> list[DataFile]:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return sorted(
        (
            e.data_file
            for m in snapshot.manifests(table.io)
            if m.content == ManifestContent.DATA
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
        ),
        key=lambda f: f.file_path,
    )


def _first_id(data_file: DataFile) -> int:
    return int.from_bytes(data_file.lower_bounds[1], "little", signed=True)


def test_cow_delete_removes_dangling_deletes_and_keeps_those_still_needed(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Three files (lo, mid, hi by path), each with deletes; three deletes by predicate, one file each.

    - ``p_lo``, ``p_mid``: file-scoped position deletes of lo and mid;
    - ``p_lo_mid``: one position delete for lo and mid (bounded by their paths, so not hi);
    - ``eq``: an unpartitioned equality delete, which applies to all three files.

    Each delete file goes with the last data file it applies to, and not before.
    """
    table = _create(catalog)
    for start in (0, 10, 20):
        _append(table, range(start, start + 10))
    lo, mid, hi = _data_files_by_path(table)
    lo_start, mid_start, hi_start = (_first_id(f) for f in (lo, mid, hi))
    p_lo = commit_position_deletes(table, lo.file_path, [1])
    p_mid = commit_position_deletes(table, mid.file_path, [3])
    p_lo_mid = _write_position_deletes(table, "pd-lo-mid", [(lo.file_path, 2), (mid.file_path, 0)])
    commit_delete_files(table, [p_lo_mid])
    eq = _equality_deletes(
        table, {"id": (1, pa.int64(), [lo_start + 5, mid_start + 5, hi_start + 5])}, spec_id=0
    )
    _commit_deletes(table, [eq])
    live_ids = set(range(30)) - {
        lo_start + 1,
        mid_start + 3,
        lo_start + 2,
        mid_start,
        lo_start + 5,
        mid_start + 5,
        hi_start + 5,
    }
    assert _checksum_of(_independent_live_rows(table)) == _checksum_of_ids(live_ids)

    # 1. Rewrite lo: only its own position delete dangles; p_lo_mid still applies to mid, eq to mid and hi.
    result = cow_rewrite(
        table, operation="delete", where=f"id >= {lo_start} and id < {lo_start + 4}", limits=_limits(tmp_path)
    )
    live_ids -= set(range(lo_start, lo_start + 4))
    assert result["deleted_rows"] == 2  # lo_start and lo_start + 3; + 1 and + 2 were deleted already
    assert result["removed_delete_files_count"] == 1
    assert _live_paths(table) == sorted([p_mid.file_path, p_lo_mid.file_path, eq.file_path])
    assert p_lo.file_path not in _live_paths(table)
    assert _checksum_of(_independent_live_rows(table)) == _checksum_of_ids(live_ids)

    # 2. Rewrite mid: p_mid and p_lo_mid dangle (the new lo has a higher sequence number); eq applies to hi.
    result = cow_rewrite(table, operation="delete", where=f"id = {mid_start + 9}", limits=_limits(tmp_path))
    live_ids.discard(mid_start + 9)
    assert result["deleted_rows"] == 1
    assert result["removed_delete_files_count"] == 2
    assert _live_paths(table) == [eq.file_path]
    assert _checksum_of(_independent_live_rows(table)) == _checksum_of_ids(live_ids)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary["removed-delete-files"] == "2"
    assert snapshot.summary["removed-position-delete-files"] == "2"

    # 3. Rewrite hi: the equality delete dangles now, and PyIceberg can read the table again.
    result = cow_rewrite(table, operation="delete", where=f"id = {hi_start}", limits=_limits(tmp_path))
    live_ids.discard(hi_start)
    assert result["removed_delete_files_count"] == 1
    assert _live_paths(table) == []
    assert live_checksum(table) == _checksum_of_ids(live_ids)
    assert _checksum_of(_independent_live_rows(table)) == _checksum_of_ids(live_ids)


def test_cow_update_keeps_an_equality_delete_of_a_file_it_leaves_in_place(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Partitioned: the equality delete of partition a stays while a file of a is left untouched."""
    table = _create(catalog, partitioned_later=True)
    _append(table, range(10), "a")
    _append(table, range(10, 20), "a")
    _append(table, range(20, 30), "b")
    eq_a = _equality_deletes(table, {"id": (1, pa.int64(), [4, 14])}, spec_id=1, partition=("a",))
    eq_b = _equality_deletes(table, {"id": (1, pa.int64(), [24])}, spec_id=1, partition=("b",))
    _commit_deletes(table, [eq_a, eq_b])

    result = cow_rewrite(
        table,
        operation="update",
        where="id < 3 or id >= 25",
        set_columns={"name": "'x'"},
        limits=_limits(tmp_path),
    )

    assert result["updated_rows"] == 8
    assert result["removed_delete_files_count"] == 1  # eq_b: its only file was rewritten
    assert _live_paths(table) == [eq_a.file_path]  # eq_a still applies to the file of ids 10..19
    rows = _independent_live_rows(table).to_pylist()
    expected = [
        {"id": i, "category": "a" if i < 20 else "b", "name": "x" if i < 3 or i >= 25 else _name(i)}
        for i in sorted(set(range(30)) - {4, 14, 24})
    ]
    assert sorted(rows, key=lambda r: r["id"]) == expected


@pytest.mark.parametrize("race", [False, True], ids=["alone", "concurrent-compaction"])
def test_cow_dangling_set_is_recomputed_on_the_head_a_retry_commits_on(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, race: bool
) -> None:
    """A compaction planned before an equality delete moves rows into its partition with an old sequence
    number, while our copy-on-write delete commits.

    Spec 0 is unpartitioned, spec 1 partitions by category. File A (ids 0..9, spec 0) is not reached by
    the equality delete of spec 1, partition a; file C (ids 100..109, spec 1, partition a) is. Our delete
    rewrites C, so the equality delete is dangling when it plans and first tries to commit. The concurrent
    compaction, planned before the equality delete, rewrites A into spec 1, partition a, with its base's
    sequence number, below the delete's: the delete applies to that output. Our commit loses the catalog
    race, retries on the new head and must keep the delete.
    """
    table = _create(catalog)
    _append(table, range(10), "a")
    with table.update_spec() as update:
        update.add_field("category", IdentityTransform(), "category")
    table.refresh()
    _append(table, range(100, 110), "a")
    other_plan = plan_compaction(table, where="id < 10", options={"rewrite-all": "true"})
    other_results = [execute_rewrite_task(table, t, _limits(tmp_path)) for t in other_plan["tasks"]]
    eq = _equality_deletes(table, {"id": (1, pa.int64(), [105])}, spec_id=1, partition=("a",))
    _commit_deletes(table, [eq])
    plan = plan_cow_rewrite(table, operation="delete", where="id >= 100 and id < 102")
    results = [execute_cow_task(table, task, _limits(tmp_path)) for task in plan["tasks"]]
    assert sum(len(r["removed_data_files"]) for r in results) == 1  # the file of partition a, spec 1
    other = SqlCatalog(catalog.name, uri=catalog.properties["uri"], warehouse=catalog.properties["warehouse"])
    calls = _race_once(
        monkeypatch,
        catalog,
        (lambda: commit_compaction(other.load_table("ns.t"), other_results, commit_id="other"))
        if race
        else (lambda: None),
    )

    result = commit_cow_rewrite(table, results, commit_id="ours")

    expected_ids = set(range(10)) | (set(range(102, 110)) - {105})
    assert _checksum_of(_independent_live_rows(table)) == _checksum_of_ids(expected_ids)
    if race:
        assert len(calls) == 2  # lost the first catalog commit, retried on the new head
        assert result["removed_delete_files_count"] == 0
        assert _live_paths(table) == [eq.file_path]
        moved = [f for f in _data_files_by_path(table) if f.spec_id == 1 and _first_id(f) < 10]
        assert moved, "the concurrent compaction's files are live"
        snapshot = table.current_snapshot()
        assert snapshot is not None
        assert snapshot.summary is not None
        assert "removed-delete-files" not in snapshot.summary.additional_properties
    else:
        assert len(calls) == 1
        assert result["removed_delete_files_count"] == 1
        assert _live_paths(table) == []
        assert live_checksum(table) == _checksum_of_ids(expected_ids)
