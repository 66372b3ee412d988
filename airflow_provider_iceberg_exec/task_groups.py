"""Task-group helpers that wire the common maintenance flows.

:func:`compaction_task_group` builds ``plan >> rewrite (mapped, one task per file group) >> commit``:

>>> from airflow.sdk import DAG
>>> with DAG("maintenance", schedule=None) as dag:
...     group = compaction_task_group(table="db.events", memory_limit="1GiB")
>>> sorted(dag.task_dict)
['compaction.commit', 'compaction.plan', 'compaction.rewrite']
>>> sorted(dag.get_task("compaction.commit").upstream_task_ids)
['compaction.plan', 'compaction.rewrite']

With ``only_files_with_equality_deletes=True`` the same three tasks resolve equality deletes: the plan
selects only the data files equality deletes apply to, each rewritten with its deletes applied
(``rewrite-all``), and the commit drops the equality deletes that then apply to no live file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import TaskGroup

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook

__all__ = ["COMMIT_TRIGGER_RULE", "compaction_task_group"]

#: the commit's trigger rule: run once every rewrite is done and at least one upstream task succeeded
#: (the plan counts), so that a failed rewrite does not leave the others' files uncommitted; the commit
#: itself decides from the plan and the results whether to commit (Airflow >= 3.1)
COMMIT_TRIGGER_RULE = "all_done_min_one_success"


def _literal_pool_slots(memory_limit: str | int | None) -> int:
    """Pool slots for a literal memory limit; the configured default for none or a template."""
    if memory_limit is None or (isinstance(memory_limit, str) and ("{{" in memory_limit or not memory_limit)):
        return settings.default_pool_slots()
    return settings.pool_slots_for(memory_limit)


def compaction_task_group(
    *,
    table: str,
    group_id: str = "compaction",
    where: str | None = None,
    options: Mapping[str, Any] | str | None = None,
    strategy: str = "binpack",
    sort_order: str | None = None,
    branch: str = "main",
    memory_limit: str | int | None = None,
    iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
    pool: str | None = None,
    pool_slots: int | None = None,
    max_active_rewrites: int | None = None,
    quiet_period_seconds: float | str = 0.0,
    commit_retries: int = 3,
    payload_file_threshold: int | None = None,
    only_files_with_equality_deletes: bool = False,
    tooltip: str = "Plan, rewrite each file group (mapped), commit once",
) -> TaskGroup:
    """Build the three-task compaction in a task group: ``plan``, ``rewrite`` (mapped), ``commit``.

    The plan returns one task spec per file group; the rewrite is mapped over them (an empty plan maps
    to no task) in ``pool`` with ``pool_slots`` derived from ``memory_limit`` when it is a literal; the
    commit, given the plan's output too, commits every group's result at once.

    Its trigger rule is :data:`COMMIT_TRIGGER_RULE` (``all_done_min_one_success``): it waits until every
    rewrite is done and runs when the plan succeeded, even if some rewrites failed; it is upstream-failed
    when the plan failed, and skipped when the plan is skipped (e.g. after a soft-failed health sensor) or
    planned nothing (the mapped rewrite is then skipped). When rewrites failed, Spark's
    ``partial-progress.enabled`` decides: the groups that succeeded are committed and the failed ones
    reported as ``failed_data_files_count``; without it (the default), or when every rewrite failed,
    the commit deletes what the other rewrites wrote and fails, and the table is unchanged (see
    :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`).

    Every string argument but ``group_id`` may be a Jinja template (e.g. ``"{{ params.table }}"``).

    :param table: ``"namespace.table"``.
    :param group_id: the task group's id.
    :param where: the row filter.
    :param options: Spark's ``rewrite_data_files`` options.
    :param strategy: ``binpack`` or ``sort``.
    :param sort_order: the sort order for ``sort``.
    :param branch: the branch.
    :param memory_limit: each rewrite's memory limit; default ``[iceberg_exec] memory_limit``.
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection.
    :param pool: the rewrites' pool; default ``[iceberg_exec] pool``.
    :param pool_slots: the slots each rewrite takes; default from ``memory_limit`` (see
        :func:`airflow_provider_iceberg_exec.settings.pool_slots_for`).
    :param max_active_rewrites: at most this many rewrites of one run at once.
    :param quiet_period_seconds: see :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`.
    :param commit_retries: retries of the commit on conflicts (exponential backoff).
    :param payload_file_threshold: above this many files payloads are staged in files.
    :param only_files_with_equality_deletes: resolve equality deletes instead of compacting: see
        :class:`~airflow_provider_iceberg_exec.operators.compaction.CompactionPlanOperator`.
    :param tooltip: the task group's tooltip.
    """
    from airflow_provider_iceberg_exec.operators.commit import CommitOperator
    from airflow_provider_iceberg_exec.operators.compaction import (
        CompactionPlanOperator,
        CompactionRewriteOperator,
    )

    with TaskGroup(group_id=group_id, tooltip=tooltip) as group:
        plan = CompactionPlanOperator(
            task_id="plan",
            table=table,
            where=where,
            options=options,
            strategy=strategy,
            sort_order=sort_order,
            branch=branch,
            iceberg_exec_conn_id=iceberg_exec_conn_id,
            payload_file_threshold=payload_file_threshold,
            only_files_with_equality_deletes=only_files_with_equality_deletes,
        )
        rewrite_kwargs: dict[str, Any] = {}
        if max_active_rewrites is not None:
            rewrite_kwargs["max_active_tis_per_dagrun"] = max_active_rewrites
        rewrite = CompactionRewriteOperator.partial(
            task_id="rewrite",
            table=table,
            memory_limit=memory_limit,
            iceberg_exec_conn_id=iceberg_exec_conn_id,
            payload_file_threshold=payload_file_threshold,
            pool=pool if pool is not None else settings.default_pool(),
            pool_slots=pool_slots if pool_slots is not None else _literal_pool_slots(memory_limit),
            **rewrite_kwargs,
        ).expand(task_spec=plan.output)
        commit = CommitOperator(
            task_id="commit",
            results=rewrite.output,
            planned=plan.output,
            table=table,
            iceberg_exec_conn_id=iceberg_exec_conn_id,
            quiet_period_seconds=quiet_period_seconds,
            retries=commit_retries,
            trigger_rule=COMMIT_TRIGGER_RULE,
        )
        plan >> commit
    return group
