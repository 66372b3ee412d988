"""engine/ops/results.py: the commit given the plan (``decide_commit`` is pure: planned tasks + delivered
results -> commit or a reason not to), and the other pure helpers of the commit step."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    ConfigurationError,
    DataFileCodecError,
    IncompleteRunError,
)
from airflow_provider_iceberg_exec.engine.io.payloads import offload_payload
from airflow_provider_iceberg_exec.engine.ops.results import (
    PlannedTask,
    QuietPeriod,
    commit_results,
    decide_commit,
    empty_commit_result,
    planned_tasks,
    results_table,
    wait_for_quiet,
)
from tests.unit.support import PARTIAL, TABLE, cow_result, rewrite_result, rewrite_spec

# ---------------------------------------------------------------- decide_commit


def test_without_the_plan_whatever_arrived_is_committed():
    """Backward compatible: a commit not given the plan cannot tell a failed task from none planned."""
    decision = decide_commit(None, [rewrite_result(rewrite_spec(0, 2))])
    assert decision.error is None
    assert decision.missing == ()


def test_every_planned_group_delivered_commits_with_no_failure():
    specs = [rewrite_spec(0, 2), rewrite_spec(1, 3)]
    decision = decide_commit(planned_tasks(specs), [rewrite_result(s) for s in specs])
    assert (decision.error, decision.missing, decision.failed_data_files_count) == (None, (), 0)


def test_partial_progress_commits_the_rest_and_counts_the_failed_groups_files():
    specs = [
        rewrite_spec(0, 2, options=PARTIAL),
        rewrite_spec(1, 3, options=PARTIAL),
        rewrite_spec(2, 4, options=PARTIAL),
    ]
    decision = decide_commit(planned_tasks(specs), [rewrite_result(specs[0]), rewrite_result(specs[2])])
    assert decision.error is None
    assert [t.task_id for t in decision.missing] == ["1"]
    assert decision.failed_data_files_count == 3


def test_without_partial_progress_a_failed_group_fails_the_commit_naming_it():
    specs = [rewrite_spec(0, 2), rewrite_spec(1, 3), rewrite_spec(2, 4)]
    decision = decide_commit(planned_tasks(specs), [rewrite_result(specs[0])])
    assert decision.error is not None
    assert "\n" not in decision.error
    assert "2 of 3 file groups failed (1, 2; 7 data files)" in decision.error
    assert "partial-progress.enabled is false" in decision.error


def test_partial_progress_disabled_explicitly_is_the_same_as_the_default():
    specs = [rewrite_spec(0, 1, options={"partial-progress.enabled": "false"}), rewrite_spec(1, 1)]
    assert decide_commit(planned_tasks(specs), [rewrite_result(specs[0])]).error is not None


def test_every_group_failed_fails_even_under_partial_progress():
    """The trigger rule lets the commit run (the plan succeeded); the commit must then fail the run."""
    specs = [rewrite_spec(0, 2, options=PARTIAL), rewrite_spec(1, 3, options=PARTIAL)]
    decision = decide_commit(planned_tasks(specs), [])
    assert decision.error is not None
    assert decision.error.startswith("every planned task failed (2: 0, 1)")
    assert decision.failed_data_files_count == 5


def test_an_empty_plan_with_no_result_commits_nothing_without_error():
    assert decide_commit(planned_tasks([]), []).error is None


def test_a_missing_copy_on_write_result_always_fails():
    """A partial delete is never acceptable: copy-on-write results are all or nothing."""
    planned = [PlannedTask("0", 1), PlannedTask("1", 1)]
    decision = decide_commit(planned, [cow_result(0, [])])
    assert decision.error is not None
    assert "iceberg-exec/cow-result@1 results are committed all or nothing" in decision.error
    assert [t.task_id for t in decision.missing] == ["1"]


def test_results_of_tasks_not_in_the_plan_are_refused():
    decision = decide_commit(
        planned_tasks([rewrite_spec(0, 1)]),
        [rewrite_result(rewrite_spec(0, 1)), rewrite_result(rewrite_spec(7, 1))],
    )
    assert decision.error is not None
    assert "results of tasks 7 are not in the plan" in decision.error


def test_a_commit_batch_that_lost_every_group_counts_against_max_failed_commits():
    """Spark counts a commit batch that never happened as a failed commit."""
    options = {**PARTIAL, "partial-progress.max-failed-commits": "0"}
    specs = [rewrite_spec(0, 1, batch=0, options=options), rewrite_spec(1, 1, batch=1, options=options)]
    specs.append(rewrite_spec(2, 1, batch=1, options=options))
    half_a_batch = decide_commit(planned_tasks(specs), [rewrite_result(specs[0]), rewrite_result(specs[1])])
    assert half_a_batch.error is None  # batch 1 still commits group 1
    whole_batch = decide_commit(planned_tasks(specs), [rewrite_result(specs[0])])
    assert whole_batch.error is not None
    assert "partial-progress.max-failed-commits=0" in whole_batch.error


def test_planned_tasks_read_ids_and_counts_of_staged_references_without_reading_the_files():
    refs = [
        {"schema": "iceberg-exec/payload-ref@1", "uri": "file:///s/a.json", "group_id": "4",
         "commit_batch": 2, "file_count": 9, "data_files_count": 7},
        {"schema": "iceberg-exec/payload-ref@1", "uri": "file:///s/b.json", "task_id": 3, "file_count": 5},
    ]  # fmt: skip
    assert planned_tasks(refs) == [
        PlannedTask("4", 7, 2, "file:///s/a.json"),
        PlannedTask("3", 5, None, "file:///s/b.json"),  # an older reference: its file count
    ]


def test_references_without_ids_can_only_be_compared_by_count():
    planned = [PlannedTask(None, 1), PlannedTask(None, 1)]
    assert (
        decide_commit(planned, [rewrite_result(rewrite_spec(0, 1)), rewrite_result(rewrite_spec(1, 1))]).error
        is None
    )
    short = decide_commit(planned, [rewrite_result(rewrite_spec(0, 1))])
    assert short.error is not None
    assert "1 of 2 planned tasks delivered no result" in short.error


def test_many_failed_groups_are_named_up_to_ten():
    specs = [rewrite_spec(i, 1) for i in range(15)]
    decision = decide_commit(planned_tasks(specs), [rewrite_result(specs[0])])
    assert decision.error is not None
    assert "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (+4 more)" in decision.error


# ---------------------------------------------------------------- results_table, empty_commit_result


def test_the_results_table_is_the_one_they_name_or_the_given_one() -> None:
    assert results_table(None, [], []) is None
    assert results_table(None, [{"table": TABLE}], [{"table": TABLE}]) == TABLE
    assert results_table(TABLE, [{"table": TABLE}], []) == TABLE
    assert results_table(TABLE, [], []) == TABLE


@pytest.mark.parametrize(
    ("table", "docs"),
    [(None, [{"table": "ns.a"}, {"table": "ns.b"}]), ("ns.a", [{"table": "ns.b"}])],
)
def test_results_of_another_or_of_two_tables_are_refused(table, docs) -> None:
    with pytest.raises(ConfigurationError, match="one commit commits to one table"):
        results_table(table, docs, [])


def test_an_empty_commit_result_counts_nothing_and_landed_nothing() -> None:
    result = empty_commit_result(TABLE)
    assert result["schema"] == "iceberg-exec/compaction-result@1"
    assert result["table"] == TABLE
    assert result["snapshot_ids"] == []
    assert result["already_committed"] is False
    assert {k: v for k, v in result.items() if k.endswith("_count")} == dict.fromkeys(
        [k for k in result if k.endswith("_count")], 0
    )


# ---------------------------------------------------------------- commit_results on a real table


@pytest.fixture
def table(catalog):
    """``ns.events`` with one small append: one snapshot, one live data file."""
    import pyarrow as pa

    table = catalog.create_table(TABLE, schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    return table


def _written(table, name: str) -> str:
    path = Path(table.location().removeprefix("file://")) / "data" / name
    path.write_bytes(b"PAR1")
    return f"file://{path}"


def test_nothing_delivered_and_nothing_planned_is_an_empty_commit(table) -> None:
    head = table.current_snapshot().snapshot_id
    assert commit_results(table, [], commit_id="c", planned=[]) == empty_commit_result(TABLE)
    assert table.refresh().current_snapshot().snapshot_id == head


def test_results_of_two_operations_are_refused(table) -> None:
    spec = rewrite_spec(0, 1)
    with pytest.raises(DataFileCodecError, match="cannot commit results of schemas"):
        commit_results(table, [rewrite_result(spec), cow_result(1, [])], commit_id="c")


def test_a_failed_group_without_partial_progress_deletes_what_the_others_wrote(table) -> None:
    head = table.current_snapshot().snapshot_id
    specs = [rewrite_spec(0, 1), rewrite_spec(1, 1)]
    written = _written(table, "0-out.parquet")
    with pytest.raises(IncompleteRunError, match="1 of 2 file groups failed") as err:
        commit_results(table, [rewrite_result(specs[0], [written])], commit_id="c", planned=specs)
    assert "the table is unchanged and the 1 files the other tasks wrote were deleted" in str(err.value)
    assert not Path(written.removeprefix("file://")).exists()
    assert table.refresh().current_snapshot().snapshot_id == head


def test_a_staged_result_gone_before_any_commit_landed_is_an_error(table) -> None:
    spec = rewrite_spec(0, 1)
    ref = offload_payload(table.io, table.location(), rewrite_result(spec), name="r0", threshold=0)
    table.io.delete(ref["uri"])
    with pytest.raises(DataFileCodecError):
        commit_results(table, [ref], commit_id="never-landed")


def test_a_branch_that_just_moved_is_not_quiet(table) -> None:
    with pytest.raises(CommitConflictError, match="did not go quiet for 3600 s within 0 s"):
        wait_for_quiet(table, "main", QuietPeriod(seconds=3600, timeout_seconds=0))
    wait_for_quiet(table, "main", QuietPeriod(seconds=0))
    wait_for_quiet(table, "no-such-branch", QuietPeriod(seconds=3600, timeout_seconds=0))
