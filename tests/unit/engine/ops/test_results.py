"""engine/ops/results.py: the commit given the plan (``decide_commit`` is pure: planned tasks + delivered
results -> commit or a reason not to), and the other pure helpers of the commit step."""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.results import PlannedTask, decide_commit, planned_tasks
from tests.unit.support import PARTIAL, cow_result, rewrite_result, rewrite_spec

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
