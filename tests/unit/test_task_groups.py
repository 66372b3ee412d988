"""compaction_task_group wires plan >> mapped rewrite >> commit, in the pool, with the right trigger rule."""

from __future__ import annotations

from datetime import datetime

import pytest
from airflow.sdk import DAG

from airflow_provider_iceberg_exec.task_groups import compaction_task_group


def _build(**kwargs):
    with DAG(dag_id="g", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        group = compaction_task_group(table="ns.t", **kwargs)
    return dag, group


def test_group_wires_plan_mapped_rewrite_and_commit():
    dag, group = _build()
    assert group.group_id == "compaction"
    plan, rewrite, commit = (dag.task_dict[f"compaction.{t}"] for t in ("plan", "rewrite", "commit"))
    assert rewrite.upstream_task_ids == {"compaction.plan"}
    assert commit.upstream_task_ids == {"compaction.plan", "compaction.rewrite"}
    assert commit.trigger_rule == "all_done_min_one_success"
    assert type(rewrite).__name__ == "MappedOperator"
    assert commit.planned.operator is plan  # the plan's output: a failed group is not "nothing planned"
    assert plan.table == "ns.t"
    assert commit.retries == 3


@pytest.mark.parametrize(
    ("memory_limit", "slots"), [(None, 1), ("2GiB", 8), ("{{ params.m }}", 1), (512 << 20, 2)]
)
def test_rewrite_pool_slots_follow_a_literal_memory_limit(memory_limit, slots):
    dag, _ = _build(memory_limit=memory_limit)
    rewrite = dag.task_dict["compaction.rewrite"]
    assert rewrite.pool == "default_pool"
    assert rewrite.pool_slots == slots


def test_pool_and_limits_can_be_set(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__POOL", "iceberg_exec")
    dag, _ = _build(pool_slots=3, max_active_rewrites=2, commit_retries=5, quiet_period_seconds=60)
    rewrite = dag.task_dict["compaction.rewrite"]
    assert (rewrite.pool, rewrite.pool_slots, rewrite.max_active_tis_per_dagrun) == ("iceberg_exec", 3, 2)
    commit = dag.task_dict["compaction.commit"]
    assert commit.retries == 5
    assert commit.quiet_period_seconds == 60


def test_group_resolves_equality_deletes_through_the_plan():
    """The mapped path of equality-delete resolution: the same three tasks, the plan restricted."""
    dag, group = _build(group_id="resolve", only_files_with_equality_deletes=True)
    assert group.group_id == "resolve"
    assert dag.task_dict["resolve.plan"].only_files_with_equality_deletes is True
    assert {"resolve.rewrite", "resolve.commit"} <= set(dag.task_dict)
    default, _ = _build()
    assert default.task_dict["compaction.plan"].only_files_with_equality_deletes is False


def test_commit_trigger_rule_exists_in_the_installed_airflow():
    """ALL_DONE_MIN_ONE_SUCCESS came with Airflow 3.1 (apache/airflow#53959), the provider's floor."""
    from airflow.task.trigger_rule import TriggerRule

    from airflow_provider_iceberg_exec.task_groups import COMMIT_TRIGGER_RULE

    assert TriggerRule(COMMIT_TRIGGER_RULE) is TriggerRule.ALL_DONE_MIN_ONE_SUCCESS
