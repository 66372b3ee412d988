"""Position-delete compaction (Spark's ``rewrite_position_delete_files``) as Airflow tasks.

Merge-on-read writers (Spark's DELETE, UPDATE and MERGE in ``merge-on-read`` mode) add position delete
files at every commit; this rewrites the small ones of each partition into a few, dropping the positions
of data files that are no longer live. Format-version 2 tables only.

Three tasks for tables of any size, the commit shared with compaction:

>>> from airflow.sdk import DAG
>>> from airflow_provider_iceberg_exec import settings
>>> from airflow_provider_iceberg_exec.operators.commit import CommitOperator
>>> with DAG("position_deletes", schedule=None) as dag:
...     plan = PositionDeletePlanOperator(task_id="plan", table="db.events")
...     rewrite = PositionDeleteRewriteOperator.partial(
...         task_id="rewrite", pool_slots=settings.default_pool_slots()
...     ).expand(task_spec=plan.output)
...     commit = CommitOperator(task_id="commit", results=rewrite.output, planned=plan.output)
>>> sorted(dag.get_task("commit").upstream_task_ids)
['plan', 'rewrite']

and :class:`RewritePositionDeletesOperator`, one task that plans, rewrites and commits.

The engine (``airflow_provider_iceberg_exec.engine.ops.position_deletes``) is imported inside
``execute()`` so that parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.operators._common import scope_arguments
from airflow_provider_iceberg_exec.operators.compaction import (
    BoundedRewriteOperator,
    OneTaskCommitOperator,
    TablePlanOperator,
)
from airflow_provider_iceberg_exec.operators.lineage import TableLineage

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.contracts import (
        PositionDeletePlan,
        PositionDeleteResult,
        RewritePositionDeletesResult,
    )

__all__ = ["PositionDeletePlanOperator", "PositionDeleteRewriteOperator", "RewritePositionDeletesOperator"]


class PositionDeletePlanOperator(TablePlanOperator):
    """Plan a position-delete rewrite: group each partition's position delete files; one spec per group.

    The returned list is meant for dynamic task mapping
    (``PositionDeleteRewriteOperator.partial(...).expand(task_spec=plan.output)``). An empty list means
    there is nothing to do (no position delete files, or none the options select). Past
    ``payload_file_threshold`` files the specs are staged as JSON files and XCom carries references.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a PyIceberg row filter selecting the partitions considered (templated).
    :param options: Spark's ``rewrite_position_delete_files`` options, e.g. ``{"min-input-files": "2"}``;
        empty values are dropped; a JSON object string is accepted (templated).
    :param branch: the branch (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection of the catalog (templated).
    :param payload_file_threshold: above this many files the specs are staged in files; default
        ``[iceberg_exec] payload_file_threshold``.
    """

    table_lineage = TableLineage("rewrite-position-deletes")

    ui_color = "#e3d5f5"
    part_prefix = "posdel-group-"

    def _plan(self, table: Table) -> PositionDeletePlan:
        """Plan the rewrite (engine ``plan_position_delete_rewrite``) and log the groups planned."""
        from airflow_provider_iceberg_exec.engine.ops.position_deletes import plan_position_delete_rewrite

        plan = plan_position_delete_rewrite(table, **scope_arguments(self))
        self.log.info(
            "Planned %s groups over %s position delete files of %s at snapshot %s",
            len(plan["tasks"]),
            sum(len(t["delete_files"]) for t in plan["tasks"]),
            plan["table"],
            plan["base_snapshot_id"],
        )
        return plan


class PositionDeleteRewriteOperator(BoundedRewriteOperator):
    """Rewrite one planned group of position delete files in one bounded-memory execution.

    Mapped over the plan; returns the engine's result (the new delete files as DataFile JSON). Nothing
    is committed: the :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator` commits
    every group's result. Parameters as
    :class:`~airflow_provider_iceberg_exec.operators.compaction.CompactionRewriteOperator`.
    """

    table_lineage = TableLineage("rewrite-position-deletes")

    ui_color = "#c9b3eb"
    result_name_prefix = "result-posdel-group-"

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> PositionDeleteResult:
        """Rewrite the group (engine ``execute_position_delete_task``)."""
        from airflow_provider_iceberg_exec.engine.ops.position_deletes import execute_position_delete_task

        return execute_position_delete_task(table, spec, limits)

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log the group, its files and the memory limit."""
        self.log.info(
            "Rewriting position delete group %s (commit batch %s) of %s: %s files, %s bytes, memory limit %s",
            spec.get("group_id"),
            spec.get("commit_batch"),
            table_name,
            len(spec.get("delete_files", []) or []),
            spec.get("input_bytes"),
            limits.memory_limit_bytes,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log files and positions read and written."""
        self.log.info(
            "Group %s done: %s delete files (%s positions) into %s files (%s positions); %s dangling and %s "
            "repeated positions dropped; peak RSS %s bytes, spilled %s bytes",
            result["group_id"],
            len(result["rewritten_delete_files"]),
            result["rewritten_records"],
            len(result["added_delete_files"]),
            result["added_records"],
            result["dangling_records"],
            result["duplicate_records"],
            result["peak_rss_bytes"],
            result["spilled_bytes"],
        )


class RewritePositionDeletesOperator(OneTaskCommitOperator):
    """Rewrite a table's position delete files in one task: plan, rewrite every group, commit.

    Same conventions as :class:`~airflow_provider_iceberg_exec.operators.compaction.OneTaskCommitOperator`
    (derived commit id, asset event, pool, one-line errors). Nothing to rewrite is a normal, empty result;
    bad input (an unknown option, a v1 table) fails the task.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a PyIceberg row filter selecting the partitions considered (templated).
    :param options: Spark's ``rewrite_position_delete_files`` options (templated).
    :param branch: the branch (templated).
    :param memory_limit: the execution's memory limit; default ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the derived commit id (templated).
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    """

    table_lineage = TableLineage("rewrite-position-deletes", output="commit")

    ui_color = "#b39ddb"
    _doing = "Rewriting the position delete files of"

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> RewritePositionDeletesResult:
        """The engine call: plan, rewrite and commit."""
        from airflow_provider_iceberg_exec.engine.ops.position_deletes import rewrite_position_deletes

        return rewrite_position_deletes(table, **scope_arguments(self), limits=limits, commit_id=commit_id)

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log the files rewritten, the dangling positions dropped and the snapshots."""
        self.log.info(
            "%s %s: %s position delete files (%s bytes) rewritten into %s (%s bytes); %s dangling positions "
            "dropped; snapshots %s",
            "Already committed" if result["already_committed"] else "Committed",
            self.table,
            result["rewritten_delete_files_count"],
            result["rewritten_bytes_count"],
            result["added_delete_files_count"],
            result["added_bytes_count"],
            result["dangling_records"],
            result["snapshot_ids"],
        )
