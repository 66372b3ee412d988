"""Equality-delete resolution as an Airflow task.

Tables written by Flink (or any merge-on-read writer) accumulate equality delete files, which every reader
must apply with an anti-join and which PyIceberg 0.12 cannot read at all. Resolving them rewrites every
data file that an equality delete applies to, with the deletes applied, in one ``replace`` snapshot that
also drops the equality deletes that then apply to no live file. It is a compaction restricted to those
files, with ``rewrite-all``:

- :class:`ResolveEqualityDeletesOperator`: plan, rewrite and commit in one task (small and medium tables);
- for large tables, the mapped three-task form: ``compaction_task_group(...,
  only_files_with_equality_deletes=True)``, i.e.
  ``CompactionPlanOperator(..., only_files_with_equality_deletes=True)`` >> mapped
  ``CompactionRewriteOperator`` >> ``CommitOperator``.

The engine (``airflow_provider_iceberg_exec.engine.ops.resolve``) is imported inside ``execute()`` so that
parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.operators._common import scope_arguments
from airflow_provider_iceberg_exec.operators.compaction import OneTaskCommitOperator
from airflow_provider_iceberg_exec.operators.lineage import TableLineage

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.contracts import CompactionResult

__all__ = ["ResolveEqualityDeletesOperator"]


class ResolveEqualityDeletesOperator(OneTaskCommitOperator):
    """Resolve a table's equality deletes in one task: rewrite the files they apply to, then commit.

    Every data file that an equality delete applies to (within ``where``) is rewritten with its deletes
    applied, grouped by partition, each group in one bounded-memory execution; one ``replace`` snapshot
    swaps them and drops the equality delete files that no longer apply to any live data file. Afterwards
    readers without equality-delete support (PyIceberg) can read the table. A table without equality
    deletes is a normal, empty result.

    Same conventions as :class:`~airflow_provider_iceberg_exec.operators.compaction.OneTaskCommitOperator`:
    the commit id derives from the DAG, run and task, so a retry after a commit that landed reports it and
    succeeds; the table's asset is emitted through the ``iceberg-exec-commits`` asset alias when a snapshot
    lands; bad input fails the task without retry, with a one-line reason, and leaves the table unchanged.
    For large tables use the mapped form,
    ``compaction_task_group(..., only_files_with_equality_deletes=True)``.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a PyIceberg row filter limiting the data files considered (templated).
    :param options: further Spark ``rewrite_data_files`` options, e.g. ``{"target-file-size-bytes": ...}``;
        ``rewrite-all`` is always on; empty values are dropped; a JSON object string is accepted
        (templated).
    :param branch: the branch (templated).
    :param memory_limit: the execution's memory limit, e.g. ``"1GiB"``; default
        ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the derived commit id (templated).
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    :param pool: the task's pool; default ``[iceberg_exec] pool``.
    :param pool_slots: the slots the task takes; default derived from ``[iceberg_exec] memory_limit`` (for
        a literal ``memory_limit``, pass ``settings.pool_slots_for(memory_limit)``).
    """

    table_lineage = TableLineage("resolve-equality-deletes", output="commit")

    _doing = "Resolving the equality deletes of"

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> CompactionResult:
        """The engine call: resolve the equality deletes and commit."""
        from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes

        result = resolve_equality_deletes(
            table,
            **scope_arguments(self),
            limits=limits,
            commit_id=commit_id,
        )
        if not result["snapshot_ids"] and not result["already_committed"]:
            self.log.info("Nothing to resolve in %s: no data file has equality deletes", self.table)
        return result
