"""Spark's partial progress through Airflow's mapped tasks: a real dag.test() of compaction_task_group.

The table is the demo's: 12 appends over three ``region`` partitions, so the plan makes one group per
partition. Between the plan and the rewrites a task moves one ``apac`` data file aside, so the real
engine's ``apac`` rewrite fails (its input is missing) while ``eu`` and ``us`` succeed; the test puts the
file back after the run, before reading the table. dag.test() goes on past a failed task instance (it
logs it and keeps scheduling), so the commit's trigger rule is exercised as the scheduler applies it.

- ``partial-progress.enabled=true``: the run succeeds, the commit commits ``eu`` and ``us``, reports the
  ``apac`` files as ``failed_data_files_count`` and leaves them untouched; the live rows are unchanged.
- partial progress off (the default): the commit fails, the run fails, the table is unchanged and no file
  written by the successful rewrites is left behind.
- a failed plan: the commit is upstream-failed, it never runs.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import files_under, live_checksum, local_path, table_state
from tests.system.conftest import TABLE
from tests.system.dagbag import register
from tests.system.equality_support import data_files_by_region

pytestmark = pytest.mark.system


def _compaction_dag(dag_id: str, options: dict[str, str], *, move: tuple[str, str] | None):
    from airflow.sdk import DAG, task

    from airflow_provider_iceberg_exec.task_groups import compaction_task_group

    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        compaction_task_group(table=TABLE, options=options, memory_limit="128MiB", commit_retries=0)
        if move is not None:

            @task
            def lose_one_input() -> None:
                """Between plan and rewrite: one planned input file of one partition disappears."""
                os.rename(*move)

            lost = lose_one_input()
            dag.task_dict["compaction.plan"] >> lost >> dag.task_dict["compaction.rewrite"]
    register(dag)
    return dag


def _states(run) -> dict[str, str]:
    return {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in run.get_task_instances()}


def _rewrite_states(run) -> list[str]:
    return sorted(state for key, state in _states(run).items() if key.startswith("compaction.rewrite["))


def _staged(table) -> list[Path]:
    from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR

    return list((Path(local_path(table.location())) / STAGING_DIR).glob("*.json"))


def _run_with_one_apac_file_missing(demo_table, tmp_path, dag_id: str, options: dict[str, str]):
    victim = local_path(sorted(data_files_by_region(demo_table)["apac"])[0])
    aside = str(tmp_path / "moved-aside.parquet")
    dag = _compaction_dag(dag_id, {"min-input-files": "2", **options}, move=(victim, aside))
    try:
        return dag.test()
    finally:
        if os.path.exists(aside):
            os.rename(aside, victim)


def test_partial_progress_commits_the_groups_that_succeeded(airflow_db, demo_table, tmp_path):
    before_rows = live_checksum(demo_table)
    before = data_files_by_region(demo_table)
    assert {region: len(paths) for region, paths in before.items()} == {"eu": 12, "us": 12, "apac": 12}

    run = _run_with_one_apac_file_missing(
        demo_table, tmp_path, "partial_progress_on", {"partial-progress.enabled": "true"}
    )

    states = _states(run)
    assert str(run.state) == "success", states
    assert _rewrite_states(run) == ["failed", "success", "success"]
    assert states["compaction.commit[-1]"] == "success"
    commit = next(ti for ti in run.get_task_instances() if ti.task_id == "compaction.commit")
    result = commit.xcom_pull(task_ids="compaction.commit")
    assert result["failed_data_files_count"] == 12
    assert result["rewritten_data_files_count"] == 24
    after = data_files_by_region(demo_table)
    assert after["apac"] == before["apac"]  # the failed partition's files are untouched
    assert len(after["eu"]) == len(after["us"]) == 1
    assert demo_table.current_snapshot().summary.operation.value == "replace"
    assert live_checksum(demo_table) == before_rows
    assert _staged(demo_table) == []


def test_without_partial_progress_a_failed_group_fails_the_run_and_leaves_nothing(
    airflow_db, demo_table, tmp_path
):
    before_rows = live_checksum(demo_table)
    before_state = table_state(demo_table)
    before_files = files_under(demo_table)

    run = _run_with_one_apac_file_missing(demo_table, tmp_path, "partial_progress_off", {})

    states = _states(run)
    assert str(run.state) == "failed", states
    assert _rewrite_states(run) == ["failed", "success", "success"]  # eu and us wrote files ...
    assert states["compaction.commit[-1]"] == "failed"
    assert table_state(demo_table) == before_state
    assert files_under(demo_table) == before_files  # ... which the failed commit deleted
    assert live_checksum(demo_table) == before_rows
    assert _staged(demo_table) == []


def test_a_failed_plan_never_runs_the_commit(airflow_db, demo_table):
    before_state = table_state(demo_table)
    run = _compaction_dag("partial_progress_bad_plan", {"no-such-option": "1"}, move=None).test()
    states = _states(run)
    assert str(run.state) == "failed", states
    assert states["compaction.plan[-1]"] == "failed"
    assert states["compaction.commit[-1]"] == "upstream_failed"
    assert table_state(demo_table) == before_state


# ---------------------------------------------------------------- copy-on-write through the same commit


def test_erasure_example_deletes_one_users_rows_through_the_planned_commit(airflow_db, demo_table):
    """The CoW example wires planned=plan.output and the new trigger rule: the happy path still commits."""
    from tests.system.test_example_dags import _load_dag

    user = demo_table.scan(selected_fields=("user_id",)).to_arrow()["user_id"][0].as_py()
    expected = live_checksum(demo_table, row_filter=f"user_id != {user}")
    run = _load_dag("example_iceberg_erasure").test(run_conf={"table": TABLE, "user_id": str(user)})
    states = _states(run)
    assert str(run.state) == "success", states
    assert states["commit[-1]"] == "success"
    assert live_checksum(demo_table) == expected
    assert _staged(demo_table) == []


def test_a_failed_copy_on_write_task_fails_the_commit_and_leaves_the_table_unchanged(
    airflow_db, demo_table, tmp_path
):
    """Never a partial delete: whatever partial-progress says, a missing CoW result fails the commit."""
    from airflow.sdk import DAG, task

    from airflow_provider_iceberg_exec import settings
    from airflow_provider_iceberg_exec.operators.commit import CommitOperator
    from airflow_provider_iceberg_exec.operators.cow import CowPlanOperator, CowRewriteOperator
    from airflow_provider_iceberg_exec.task_groups import COMMIT_TRIGGER_RULE

    before_rows = live_checksum(demo_table)
    before_state = table_state(demo_table)
    before_files = files_under(demo_table)
    sizes = [task.file.file_size_in_bytes for task in demo_table.scan().plan_files()]
    victim = local_path(sorted(data_files_by_region(demo_table)["apac"])[0])
    aside = str(tmp_path / "moved-aside.parquet")
    with DAG(dag_id="cow_task_lost", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        plan = CowPlanOperator(
            task_id="plan", table=TABLE, where="user_id < 50000", task_size_bytes=sum(sizes) // 3 + 1
        )
        rewrite = CowRewriteOperator.partial(
            task_id="rewrite",
            memory_limit="128MiB",
            pool=settings.default_pool(),
            pool_slots=settings.default_pool_slots(),
        ).expand(task_spec=plan.output)
        commit = CommitOperator(
            task_id="commit",
            results=rewrite.output,
            planned=plan.output,
            table=TABLE,
            retries=0,
            trigger_rule=COMMIT_TRIGGER_RULE,
        )

        @task
        def lose_one_input() -> None:
            os.rename(victim, aside)

        plan >> lose_one_input() >> rewrite
        plan >> commit
    register(dag)
    try:
        run = dag.test()
    finally:
        if os.path.exists(aside):
            os.rename(aside, victim)

    states = _states(run)
    assert str(run.state) == "failed", states
    rewrites = sorted(state for key, state in states.items() if key.startswith("rewrite["))
    assert rewrites.count("failed") == 1
    assert rewrites.count("success") >= 1, rewrites
    assert states["commit[-1]"] == "failed"
    assert table_state(demo_table) == before_state
    assert files_under(demo_table) == before_files
    assert live_checksum(demo_table) == before_rows
