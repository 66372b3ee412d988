"""Equality deletes converted to position deletes, as Airflow tasks (Java's ``ConvertEqualityDeleteFiles``).

Only delete files and metadata are written: the rows the equality deletes match are found by a narrow,
spilling join of key columns and written as position delete files, so readers stop paying the
equality anti-join on every scan, at a fraction of a full rewrite's cost.

- :class:`ConvertEqualityDeletesOperator`: plan, convert and commit in one task;
- for large tables, the mapped form: :class:`ConvertEqualityDeletesPlanOperator` (one task spec per
  partition) >> mapped :class:`ConvertEqualityDeletesTaskOperator` >>
  :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`, which removes an equality
  delete only when every data file it applied to was converted.

The engine (``airflow_provider_iceberg_exec.engine.ops.convert``) is imported inside ``execute()`` so
that parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
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
    from airflow_provider_iceberg_exec.engine.contracts import ConvertPlan, ConvertResult, ConvertTaskResult

__all__ = [
    "ConvertEqualityDeletesOperator",
    "ConvertEqualityDeletesPlanOperator",
    "ConvertEqualityDeletesTaskOperator",
]


class ConvertEqualityDeletesOperator(OneTaskCommitOperator):
    """Convert a table's equality deletes to position deletes in one task: plan, convert, commit.

    Same conventions as :class:`~airflow_provider_iceberg_exec.operators.compaction.OneTaskCommitOperator`
    (derived commit id, asset event, pool, one-line errors). A table without equality deletes is a
    normal, empty result.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: equality deletes whose partition may hold matching rows are converted (templated).
    :param options: ``target-file-size-bytes`` and ``delete-granularity`` (``file`` or ``partition``)
        (templated).
    :param branch: the branch (templated).
    :param memory_limit: the execution's memory limit, e.g. ``"1GiB"`` (templated).
    """

    table_lineage = TableLineage("convert-equality-deletes", output="commit")

    _doing = "Converting the equality deletes of"

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> ConvertResult:
        """The engine call: plan, convert and commit."""
        from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes

        return convert_equality_deletes(
            table,
            **scope_arguments(self),
            limits=limits,
            commit_id=commit_id,
        )


class ConvertEqualityDeletesPlanOperator(TablePlanOperator):
    """Plan a conversion: one task spec per partition of the affected data files, for dynamic mapping.

    ``ConvertEqualityDeletesTaskOperator.partial(...).expand(task_spec=plan.output)``; an empty list means
    nothing to do. Past ``payload_file_threshold`` files the specs are staged in files under the
    table's ``metadata/iceberg-exec-staging/`` and XCom carries references.

    :param table: the table (templated).
    :param where: as :class:`ConvertEqualityDeletesOperator` (templated).
    :param options: as :class:`ConvertEqualityDeletesOperator` (templated).
    :param branch: the branch (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param payload_file_threshold: above this many files the specs are staged in files.
    """

    table_lineage = TableLineage("convert-equality-deletes")

    part_prefix = "convert-"

    def _plan(self, table: Table) -> ConvertPlan:
        """Plan the conversion (engine ``plan_conversion``) and log the tasks planned."""
        from airflow_provider_iceberg_exec.engine.ops.convert import plan_conversion

        plan = plan_conversion(table, **scope_arguments(self))
        self.log.info(
            "Planned the conversion of %s equality delete file(s) of %s: %s task(s)",
            plan["equality_delete_files_count"],
            self.table,
            len(plan["tasks"]),
        )
        return plan


class ConvertEqualityDeletesTaskOperator(BoundedRewriteOperator):
    """Convert one planned partition in one bounded-memory execution; nothing is committed.

    Mapped over the plan; the :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`
    commits every task's result at once (all or nothing).
    """

    table_lineage = TableLineage("convert-equality-deletes")

    ui_color = "#a9d3f5"
    result_name_prefix = "result-"
    result_name_key = "task_id"

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> ConvertTaskResult:
        """Convert the partition (engine ``convert_task``)."""
        from airflow_provider_iceberg_exec.engine.ops.convert import convert_task

        return convert_task(table, spec, limits)

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log the task, its files and the memory limit."""
        self.log.info(
            "Converting %s of %s: %s data files, %s equality delete files, memory limit %s bytes",
            spec.get("task_id"),
            table_name,
            len(spec.get("data_files", [])),
            len(spec.get("equality_delete_files", [])),
            limits.memory_limit_bytes,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log rows matched, files written, peak RSS and spill."""
        self.log.info(
            "Matched %s rows -> %s position delete files; peak RSS %s bytes, spilled %s bytes",
            result.get("matched_rows"),
            len(result.get("added_delete_files", [])),
            result.get("peak_rss_bytes"),
            result.get("spilled_bytes"),
        )
