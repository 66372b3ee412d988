"""Planning end to end (issue 2, section 4) and the ``replace`` commit through ``compact`` and
``commit_compaction`` (section 5), including the concurrency cases of section 8.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

from airflow_provider_iceberg_exec.engine.commit.snapshots import COMMIT_ID_PROPERTY
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    compact,
    execute_rewrite_task,
    plan_compaction,
)
from tests.helpers import (
    commit_position_deletes,
    data_files,
    files_under,
    live_checksum,
    local_path,
    table_state,
)
from tests.integration.compaction_support import limits, run_compact

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
)
REGIONS = ("apac", "eu", "us")


def _rows(start: int, count: int, region: str) -> pa.Table:
    base = datetime.datetime(2026, 1, 1)
    return pa.table(
        {
            "id": list(range(start, start + count)),
            "region": [region] * count,
            "ts": [base + datetime.timedelta(minutes=k) for k in range(start, start + count)],
        },
        schema=SCHEMA.as_arrow(),
    )


def _table(
    catalog: SqlCatalog,
    *,
    partitioned: bool = True,
    files_per_region: int = 3,
    regions: tuple[str, ...] = REGIONS,
    properties: dict[str, str] | None = None,
) -> Table:
    """One file per append; in a partitioned table each region's ids are a block of 10 per file."""
    spec = (
        PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
        )
        if partitioned
        else PartitionSpec()
    )
    table = catalog.create_table(
        "ns.events",
        schema=SCHEMA,
        partition_spec=spec,
        properties={"commit.retry.min-wait-ms": "10", **(properties or {})},
    )
    start = 0
    for region in regions:
        for _ in range(files_per_region):
            table.append(_rows(start, 10, region))
            start += 10
    return table


def _paths(files: list[Any]) -> set[str]:
    return {f.file_path for f in files}


def _task_paths(plan: dict[str, Any]) -> list[str]:
    return [entry["data-file"]["file-path"] for task in plan["tasks"] for entry in task["data_files"]]


def _run_tasks(table: Table, plan: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    return [execute_rewrite_task(table, task, limits(tmp_path)) for task in plan["tasks"]]


def _added_paths(results: list[dict[str, Any]]) -> set[str]:
    return {f["file-path"] for result in results for f in result["added_data_files"]}


# -- planning -----------------------------------------------------------------------------------------


def test_where_selects_only_the_matching_partitions(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog)
    before = live_checksum(table)
    others = {f.file_path for f in data_files(table) if f.partition[0] != "eu"}

    plan = plan_compaction(table, where="region = 'eu'", options={"min-input-files": "2"})
    result = compact(table, where="region = 'eu'", options={"min-input-files": "2"}, limits=limits(tmp_path))

    assert len(plan["tasks"]) == 1
    assert len(_task_paths(plan)) == 3
    assert {e["data-file"]["partition"][0] for t in plan["tasks"] for e in t["data_files"]} == {"eu"}
    assert live_checksum(table) == before
    after = data_files(table)
    assert others <= _paths(after)
    assert len([f for f in after if f.partition[0] == "eu"]) == 1
    assert result["rewritten_data_files_count"] == 3
    assert result["added_data_files_count"] == 1


def test_where_on_a_data_column_selects_files_that_may_match(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False, files_per_region=2)  # six files: ids 0-9, 10-19, ...
    by_first_id = {f.lower_bounds[1]: f.file_path for f in data_files(table)}
    assert len(by_first_id) == 6
    before = live_checksum(table)

    plan = plan_compaction(table, where="id < 25 and id >= 12", options={"min-input-files": "2"})

    # Files with ids 10-19 and 20-29 may hold matching rows; the others are pruned by their bounds.
    expected = {path for path in by_first_id.values() if _first_id(table, path) in (10, 20)}
    assert set(_task_paths(plan)) == expected
    compact(table, where="id < 25 and id >= 12", options={"min-input-files": "2"}, limits=limits(tmp_path))
    assert live_checksum(table) == before
    assert len(data_files(table)) == 5


def _first_id(table: Table, path: str) -> int:
    (data_file,) = (f for f in data_files(table) if f.file_path == path)
    return int.from_bytes(data_file.lower_bounds[1], "little", signed=True)


def test_min_input_files_decides_whether_a_group_is_rewritten(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu",))
    state, before = table_state(table), live_checksum(table)

    result = run_compact(table, tmp_path, options={"min-input-files": "4"})

    assert result["rewritten_data_files_count"] == 0
    assert result["snapshot_ids"] == []
    assert table_state(table) == state

    result = run_compact(table, tmp_path, options={"min-input-files": "3"})

    assert result["rewritten_data_files_count"] == 3
    assert len(result["snapshot_ids"]) == 1
    assert live_checksum(table) == before
    assert len(data_files(table)) == 1


def test_default_min_input_files_is_five(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu", "us"), files_per_region=5)
    catalog.load_table("ns.events").append(_rows(1000, 10, "eu"))
    table.refresh()

    plan = plan_compaction(table)

    assert plan["options"]["min-input-files"] == "5"
    assert sorted(len(task["data_files"]) for task in plan["tasks"]) == [5, 6]


def test_rewrite_all_rewrites_files_already_in_the_size_range(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu", "us"), files_per_region=1)
    size = max(f.file_size_in_bytes for f in data_files(table))
    options = {"target-file-size-bytes": str(size), "min-input-files": "1"}
    assert plan_compaction(table, options=options)["tasks"] == []
    before = live_checksum(table)
    originals = _paths(data_files(table))

    result = run_compact(table, tmp_path, options={**options, "rewrite-all": "true"})

    assert result["rewritten_data_files_count"] == 2
    assert not originals & _paths(data_files(table))
    assert live_checksum(table) == before


def test_max_files_to_rewrite_caps_the_plan(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False, files_per_region=2)
    before = live_checksum(table)
    originals = _paths(data_files(table))

    plan = plan_compaction(table, options={"min-input-files": "2", "max-files-to-rewrite": "4"})
    result = run_compact(table, tmp_path, options={"max-files-to-rewrite": "4"})

    assert len(_task_paths(plan)) == 4
    assert result["rewritten_data_files_count"] == 4
    assert len(originals & _paths(data_files(table))) == 2
    assert live_checksum(table) == before


def test_target_size_defaults_to_the_table_property(catalog: SqlCatalog) -> None:
    table = _table(catalog, properties={"write.target-file-size-bytes": "123456"})

    assert plan_compaction(table)["options"]["target-file-size-bytes"] == "123456"
    explicit = plan_compaction(table, options={"target-file-size-bytes": "654321"})
    assert explicit["options"]["target-file-size-bytes"] == "654321"
    assert explicit["options"]["min-file-size-bytes"] == str(int(654321 * 0.75))


def test_rewrite_job_order_orders_the_tasks(catalog: SqlCatalog) -> None:
    table = _table(catalog, files_per_region=2)
    catalog.load_table("ns.events").append(_rows(1000, 10, "us"))
    table.refresh()

    plan = plan_compaction(table, options={"min-input-files": "2", "rewrite-job-order": "files-desc"})

    assert [len(task["data_files"]) for task in plan["tasks"]] == [3, 2, 2]


def test_the_plan_is_deterministic(catalog: SqlCatalog) -> None:
    table = _table(catalog)
    first = plan_compaction(table, options={"min-input-files": "2", "partial-progress.enabled": "true"})
    second = plan_compaction(table, options={"partial-progress.enabled": "true", "min-input-files": "2"})
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert len(first["tasks"]) == 3


# -- the commit -----------------------------------------------------------------------------------------


def test_commit_is_a_replace_with_the_base_sequence_number(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu", "us"))
    base = table.current_snapshot()
    assert base is not None
    before = live_checksum(table)
    inputs = data_files(table)

    result = run_compact(table, tmp_path, commit_id="job-1")

    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation == Operation.REPLACE
    assert snapshot.parent_snapshot_id == base.snapshot_id
    assert snapshot.summary[COMMIT_ID_PROPERTY] == "job-1"
    assert snapshot.summary["deleted-data-files"] == "6"
    assert snapshot.summary["added-data-files"] == "2"
    assert snapshot.summary["added-records"] == snapshot.summary["deleted-records"] == "60"
    assert snapshot.summary["total-records"] == "60"
    assert snapshot.summary["total-data-files"] == "2"
    entries = table.inspect.entries(snapshot_id=snapshot.snapshot_id).to_pylist()
    added = [e for e in entries if e["status"] == 1]
    assert len(added) == 2
    for entry in added:
        assert entry["sequence_number"] == base.sequence_number
        assert entry["file_sequence_number"] == snapshot.sequence_number
    assert {e["data_file"]["file_path"] for e in entries if e["status"] == 2} == _paths(inputs)
    assert live_checksum(table) == before
    assert result["rewritten_data_files_count"] == 6
    assert result["added_data_files_count"] == 2
    assert result["rewritten_bytes_count"] == sum(f.file_size_in_bytes for f in inputs)
    assert result["failed_data_files_count"] == 0
    assert result["removed_delete_files_count"] == 0
    assert result["peak_rss_bytes"] > 0
    assert result["spilled_bytes"] == 0


def test_without_starting_sequence_number_added_files_get_the_new_one(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _table(catalog, regions=("eu",))
    base = table.current_snapshot()
    assert base is not None

    run_compact(table, tmp_path, options={"use-starting-sequence-number": "false"})

    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.sequence_number == base.sequence_number + 1
    (added,) = (
        e for e in table.inspect.entries(snapshot_id=snapshot.snapshot_id).to_pylist() if e["status"] == 1
    )
    assert added["sequence_number"] == snapshot.sequence_number


def test_committing_the_same_results_twice_is_a_no_op(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog)
    before = live_checksum(table)
    plan = plan_compaction(table, options={"min-input-files": "2"})
    results = _run_tasks(table, plan, tmp_path)

    first = commit_compaction(table, results, commit_id="same-id")
    snapshots = len(table.metadata.snapshots)
    second = commit_compaction(table, results, commit_id="same-id")

    assert first["already_committed"] is False
    assert second["already_committed"] is True
    assert second["snapshot_ids"] == first["snapshot_ids"]
    table.refresh()
    assert len(table.metadata.snapshots) == snapshots
    assert live_checksum(table) == before
    assert _added_paths(results) == _paths(data_files(table))


def test_an_append_between_plan_and_commit_is_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu",))
    plan = plan_compaction(table, options={"min-input-files": "2"})
    results = _run_tasks(table, plan, tmp_path)
    other_writer = catalog.load_table("ns.events")
    other_writer.append(_rows(500, 7, "eu"))
    appended = _paths(data_files(other_writer)) - set(_task_paths(plan))
    before = live_checksum(table)
    assert before[0] == 37

    outcome = commit_compaction(table, results, commit_id="after-append")

    assert outcome["rewritten_data_files_count"] == 3
    assert live_checksum(table) == before
    assert _paths(data_files(table)) == appended | _added_paths(results)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation == Operation.REPLACE


def test_a_replaced_file_deleted_meanwhile_fails_validation(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False)
    plan = plan_compaction(table, options={"min-input-files": "2"})
    results = _run_tasks(table, plan, tmp_path)
    added = _added_paths(results)
    assert all(files_under(table) >= {local_path(p)} for p in added)
    other_writer = catalog.load_table("ns.events")
    other_writer.delete("id < 10")  # drops the whole first file
    state, before = table_state(table), live_checksum(table)
    assert before[0] == 80

    with pytest.raises(CommitValidationError) as raised:
        commit_compaction(table, results, commit_id="stale")

    assert "\n" not in str(raised.value)
    assert table_state(table) == state
    assert live_checksum(table) == before
    assert not {local_path(p) for p in added} & files_under(table)


def test_a_new_position_delete_for_a_replaced_file_fails_validation(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _table(catalog, regions=("eu",))
    plan = plan_compaction(table, options={"min-input-files": "2"})
    results = _run_tasks(table, plan, tmp_path)
    commit_position_deletes(table, _task_paths(plan)[1], [2])
    state, before = table_state(table), live_checksum(table)

    with pytest.raises(CommitValidationError, match="position delete"):
        commit_compaction(table, results, commit_id="deleted-meanwhile")

    assert table_state(table) == state
    assert live_checksum(table) == before == (29, before[1])


def test_two_racing_compactions_one_wins_the_other_fails_cleanly(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog)
    before = live_checksum(table)
    rival = catalog.load_table("ns.events")
    plan_a = plan_compaction(table, options={"min-input-files": "2"})
    plan_b = plan_compaction(rival, options={"min-input-files": "2"})
    results_a = _run_tasks(table, plan_a, tmp_path / "a")
    results_b = _run_tasks(rival, plan_b, tmp_path / "b")
    assert _added_paths(results_a).isdisjoint(_added_paths(results_b))

    won = commit_compaction(table, results_a, commit_id="a")
    state = table_state(table)
    with pytest.raises(CommitValidationError):
        commit_compaction(rival, results_b, commit_id="b")

    assert won["rewritten_data_files_count"] == 9
    assert table_state(table) == state
    assert _paths(data_files(table)) == _added_paths(results_a)
    assert not {local_path(p) for p in _added_paths(results_b)} & files_under(table)
    assert live_checksum(table) == before


def test_partial_progress_commits_several_snapshots(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("apac", "eu", "us", "za"), files_per_region=2)
    base = table.current_snapshot()
    assert base is not None
    before = live_checksum(table)

    result = run_compact(
        table, tmp_path, options={"partial-progress.enabled": "true", "partial-progress.max-commits": "2"}
    )

    assert len(result["snapshot_ids"]) == 2
    assert [len(c["group_ids"]) for c in result["commits"]] == [2, 2]
    first, second = (table.snapshot_by_id(i) for i in result["snapshot_ids"])
    assert first is not None
    assert second is not None
    assert first.parent_snapshot_id == base.snapshot_id
    assert second.parent_snapshot_id == first.snapshot_id
    assert all(s.summary is not None and s.summary.operation == Operation.REPLACE for s in (first, second))
    assert result["rewritten_data_files_count"] == 8
    assert len(data_files(table)) == 4
    assert live_checksum(table) == before


def test_partial_progress_commits_the_batches_that_validate(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, regions=("eu", "us"), files_per_region=2)
    plan = plan_compaction(
        table,
        options={
            "min-input-files": "2",
            "partial-progress.enabled": "true",
            "partial-progress.max-commits": "2",
        },
    )
    results = _run_tasks(table, plan, tmp_path)
    first_batch = next(r for r in results if r["commit_batch"] == 0)
    doomed = first_batch["rewritten_data_files"][0]["file-path"]
    ids = sorted(f.lower_bounds[1] for f in data_files(table) if f.file_path == doomed)
    start = int.from_bytes(ids[0], "little", signed=True)
    catalog.load_table("ns.events").delete(f"id >= {start} and id < {start + 10}")
    before = live_checksum(table)

    outcome = commit_compaction(table, results, commit_id="partial")

    assert outcome["failed_data_files_count"] == 2
    assert outcome["rewritten_data_files_count"] == 2
    assert len(outcome["snapshot_ids"]) == 1
    assert live_checksum(table) == before
    failed_outputs = {local_path(f["file-path"]) for f in first_batch["added_data_files"]}
    assert not failed_outputs & files_under(table)


@pytest.mark.parametrize("max_commits", [1, 3])
def test_compact_again_with_a_landed_commit_id_reports_it_without_rewriting(
    catalog: SqlCatalog, tmp_path: Path, max_commits: int
) -> None:
    """A retried task (same commit id) finds its snapshots, in one batch or several, and plans nothing."""
    table = _table(catalog)
    options = {"partial-progress.enabled": "true", "partial-progress.max-commits": str(max_commits)}
    first = run_compact(table, tmp_path, options, commit_id="run-1")
    table.refresh()
    head = table.current_snapshot()
    files = _paths(data_files(table))

    again = run_compact(table, tmp_path, options, commit_id="run-1")

    table.refresh()
    assert table.current_snapshot() == head
    assert _paths(data_files(table)) == files
    assert again["already_committed"] is True
    assert again["snapshot_ids"] == first["snapshot_ids"]
    assert len(again["snapshot_ids"]) == max_commits
    for key in ("rewritten_data_files_count", "added_data_files_count", "rewritten_bytes_count"):
        assert again[key] == first[key], key
    # Another commit id is another run: it plans afresh (nothing is left to compact here).
    other = run_compact(table, tmp_path, options, commit_id="run-2")
    assert other["snapshot_ids"] == []
    assert other["already_committed"] is False
