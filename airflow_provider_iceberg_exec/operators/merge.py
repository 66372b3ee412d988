"""MERGE INTO and upsert as Airflow tasks: a source (Parquet files, e.g. staged by an upstream task, or a
table at a snapshot) merged into a table with Spark's ``WHEN [NOT] MATCHED`` clauses.

- :class:`MergeOperator` (and :class:`UpsertOperator`, its shorthand): plan, run and commit in one task;
- for large merges, the mapped form::

      plan = MergePlanOperator(task_id="plan", table="db.accounts", on=["id"], source_files=batch,
                               when_matched=["UPDATE SET *"], when_not_matched=["INSERT *"])
      merge = MergeTaskOperator.partial(task_id="merge").expand(task_spec=plan.output)
      commit = CommitOperator(task_id="commit", results=merge.output, planned=plan.output)

  one task per group of target files (plus one for the inserts when there are several), each in the
  ``[iceberg_exec] pool``; the :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`
  commits every task's result as one snapshot, all or nothing (a missing task fails the commit).

The operators only render templates, build the engine's arguments, call the engine and return its JSON;
the engine (``engine.ops.merge``) is imported inside ``execute()`` so that parsing a DAG file never
imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    ASSET_ALIAS,
    CatalogHookMixin,
    PoolDefaultsPartial,
    commit_task_arguments,
    engine_errors,
    optional_text,
    task_commit_id,
    warn_pool_slots,
)
from airflow_provider_iceberg_exec.operators._progress import logged_progress
from airflow_provider_iceberg_exec.operators.commit import emit_table_asset, log_commit_result
from airflow_provider_iceberg_exec.operators.compaction import (
    BoundedRewriteOperator,
    _task_bytes,
    plan_and_stage,
)
from airflow_provider_iceberg_exec.operators.cow import _source_files
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

__all__ = ["MergeOperator", "MergePlanOperator", "MergeTaskOperator", "UpsertOperator"]

_SOURCE_FIELDS = ("source_files", "source_table", "source_snapshot_id")
_CLAUSE_FIELDS = ("when_matched", "when_not_matched", "when_not_matched_by_source")


def _texts(value: Sequence[str] | str | None, what: str) -> list[str]:
    """Rendered clause texts as a list: a list, a JSON array string, or one clause."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text or text in ("None", "null", "[]"):
            return []
        if not text.startswith("["):
            return [text]
        try:
            value = json.loads(text)
        except ValueError as err:
            raise ConfigurationError(f"{what} is not a JSON array of clauses: {text!r}") from err
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigurationError(f"{what} must be a list of clause texts, got {type(value).__name__}")
    return [str(item).strip() for item in value if str(item).strip()]


def _columns(value: Sequence[str] | str | None) -> list[str] | None:
    """Rendered join columns: a list, or ``"id"`` / ``"region,id"``; ``None`` when not given."""
    if isinstance(value, str):
        if value.strip().startswith("["):
            return _texts(value, "on") or None
        return [c.strip() for c in value.split(",")] if optional_text(value) else None
    return [str(c).strip() for c in value] if value else None


def _snapshot_id(value: int | str | None) -> int | None:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    text = optional_text(value)
    try:
        return None if text is None else int(text)
    except ValueError as err:
        raise ConfigurationError(f"source_snapshot_id must be a snapshot id, got {text!r}") from err


class _MergeSpecOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """What every MERGE task is given: the table, the join columns, the source, the clauses, the mode."""

    table_lineage = TableLineage("merge")

    def __init__(
        self,
        *,
        table: str,
        on: Sequence[str] | str | None = None,
        source_files: Sequence[str] | str | None = None,
        source_table: str | None = None,
        source_snapshot_id: int | str | None = None,
        when_matched: Sequence[str] | str | None = None,
        when_not_matched: Sequence[str] | str | None = None,
        when_not_matched_by_source: Sequence[str] | str | None = None,
        mode: str | None = None,
        isolation_level: str | None = None,
        branch: str = "main",
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.on = on
        self.source_files = source_files
        self.source_table = source_table
        self.source_snapshot_id = source_snapshot_id
        self.when_matched = when_matched
        self.when_not_matched = when_not_matched
        self.when_not_matched_by_source = when_not_matched_by_source
        self.mode = mode
        self.isolation_level = isolation_level
        self.branch = branch
        self.iceberg_exec_conn_id = iceberg_exec_conn_id

    def _source_arguments(self) -> dict[str, Any]:
        return {
            "source_files": _source_files(self.source_files),
            "source_table": optional_text(self.source_table),
            "source_snapshot_id": _snapshot_id(self.source_snapshot_id),
        }

    def _merge_arguments(self) -> dict[str, Any]:
        """The engine's keyword arguments from the rendered fields; a blank field takes its default."""
        return {
            "on": _columns(self.on) or [],
            **self._source_arguments(),
            **{name: _texts(getattr(self, name), name) for name in _CLAUSE_FIELDS},
            "mode": optional_text(self.mode),
            "isolation_level": optional_text(self.isolation_level),
            "branch": optional_text(self.branch) or "main",
        }


class MergeOperator(_MergeSpecOperator):
    """MERGE a source into a table in one task: plan, run every task within the memory limit, commit.

    Spark's semantics: the join is ``t.k = s.k`` on each ``on`` column (NULL keys never match); clauses are
    Spark's words after ``WHEN MATCHED`` etc. (``"AND s.op = 'D' THEN DELETE"``, ``"UPDATE SET *"``,
    ``"INSERT *"``), ``t`` the target row and ``s`` the source row, the first true clause wins; a target
    row matched by two source rows fails the task without retry and the table is unchanged. The commit id
    derives from the DAG, run and task (never the try number): a retry after the commit landed reports
    that snapshot and merges nothing again. The table's asset is emitted through the asset alias when a
    snapshot lands. See docs/merge.md.

    :param table: the target table, ``"namespace.table"`` (templated).
    :param on: the join columns: a list, or ``"id"`` / ``"region,id"`` (templated).
    :param source_files: Parquet files of the source rows: a list (e.g. an upstream task's XCom of file
        URIs), a JSON array string or one path (templated).
    :param source_table: instead of files, a table whose rows are the source (templated).
    :param source_snapshot_id: the source table's snapshot; default its current one (templated).
    :param when_matched: ``WHEN MATCHED`` clauses, in order (templated).
    :param when_not_matched: ``WHEN NOT MATCHED`` clauses, in order (templated).
    :param when_not_matched_by_source: ``WHEN NOT MATCHED BY SOURCE`` clauses, in order (templated).
    :param mode: ``copy-on-write`` or ``merge-on-read``; default the table's ``write.merge.mode``
        (templated).
    :param isolation_level: ``serializable`` or ``snapshot``; default the table's
        ``write.merge.isolation-level``, else serializable (templated).
    :param branch: the branch (templated).
    :param memory_limit: the execution's memory limit, e.g. ``"1GiB"``; default
        ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the derived commit id (templated).
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    """

    table_lineage = TableLineage("merge", output="commit")

    template_fields: Sequence[str] = (
        "table",
        "on",
        *_SOURCE_FIELDS,
        *_CLAUSE_FIELDS,
        "mode",
        "isolation_level",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    )
    template_fields_renderers = {"source_files": "json"}
    partial = PoolDefaultsPartial()
    ui_color = "#b9e3c6"

    def __init__(
        self,
        *,
        memory_limit: str | int | None = None,
        commit_id: str | None = None,
        asset_alias: str | None = ASSET_ALIAS,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            **commit_task_arguments(kwargs, asset_alias=asset_alias, pool=pool, pool_slots=pool_slots)
        )
        self.memory_limit = memory_limit
        self.commit_id = commit_id
        self.asset_alias = asset_alias

    def execute(self, context: Context) -> dict[str, Any]:
        """Plan, run and commit the merge; return the merge result JSON."""
        with engine_errors():
            commit_id = task_commit_id(self, context)
            limits = settings.resource_limits(self.memory_limit)
            warn_pool_slots(self, limits)
            table = self.hook.load_table(self.table)
            self.log.info(
                "Merging into %s with memory limit %s bytes, commit id %s",
                self.table,
                limits.memory_limit_bytes,
                commit_id,
            )
            with logged_progress(self.log):
                result = self._run(table, limits, commit_id)
        log_commit_result(self, result)
        self.log.info(
            "Rows updated %s, deleted %s, inserted %s (%s)",
            result.get("num_target_rows_updated"),
            result.get("num_target_rows_deleted"),
            result.get("num_target_rows_inserted"),
            result.get("mode"),
        )
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=self.table, result=result)
        return result

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> dict[str, Any]:
        """The engine call: ``merge``."""
        from airflow_provider_iceberg_exec.engine.ops.merge import merge

        return merge(table, **self._merge_arguments(), limits=limits, commit_id=commit_id)


class UpsertOperator(MergeOperator):
    """Update the matched rows and insert the others (MERGE's shorthand), with PyIceberg's argument names.

    As :class:`MergeOperator` without clauses: ``UPDATE SET *`` when matched, ``INSERT *`` when not
    (the source must have every table column). The result adds PyIceberg's ``rows_updated`` and
    ``rows_inserted``.

    :param join_cols: the join columns; default the table's identifier fields (templated).
    :param when_matched_update_all: update the matched rows.
    :param when_not_matched_insert_all: insert the source rows no target row matches.
    """

    table_lineage = TableLineage("upsert", output="commit")

    template_fields: Sequence[str] = (
        "table",
        "join_cols",
        *_SOURCE_FIELDS,
        "mode",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    )

    def __init__(
        self,
        *,
        join_cols: Sequence[str] | str | None = None,
        when_matched_update_all: bool = True,
        when_not_matched_insert_all: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.join_cols = join_cols
        self.when_matched_update_all = when_matched_update_all
        self.when_not_matched_insert_all = when_not_matched_insert_all

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> dict[str, Any]:
        """The engine call: ``upsert``."""
        from airflow_provider_iceberg_exec.engine.ops.merge import upsert

        return upsert(
            table,
            join_cols=_columns(self.join_cols),
            **self._source_arguments(),
            when_matched_update_all=bool(self.when_matched_update_all),
            when_not_matched_insert_all=bool(self.when_not_matched_insert_all),
            mode=optional_text(self.mode),
            branch=optional_text(self.branch) or "main",
            limits=limits,
            commit_id=commit_id,
        )


class MergePlanOperator(_MergeSpecOperator):
    """Plan a MERGE; return its tasks for ``MergeTaskOperator.partial(...).expand(task_spec=...)``.

    Reads metadata only (manifests, the source's Parquet footers). The target files that may hold a
    source key are packed into tasks of ``task_size_bytes``; with several, one more task finds the
    inserts. Every task must be committed together: give the
    :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator` ``planned=plan.output``.
    Past ``payload_file_threshold`` files the tasks are staged in files under the table's
    ``metadata/iceberg-exec-staging/`` and XCom carries references.

    Parameters as :class:`MergeOperator` (all templated), and:

    :param task_size_bytes: target-file bytes per mapped task; default 1 GiB.
    :param payload_file_threshold: above this many files the tasks are staged in files; default
        ``[iceberg_exec] payload_file_threshold``.
    """

    table_lineage = TableLineage("merge")

    template_fields: Sequence[str] = (
        "table",
        "on",
        *_SOURCE_FIELDS,
        *_CLAUSE_FIELDS,
        "mode",
        "isolation_level",
        "branch",
        "iceberg_exec_conn_id",
    )
    template_fields_renderers = {"source_files": "json"}
    ui_color = "#d7f0de"

    def __init__(
        self,
        *,
        task_size_bytes: int | None = None,
        payload_file_threshold: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.task_size_bytes = task_size_bytes
        self.payload_file_threshold = payload_file_threshold

    def execute(self, context: Context) -> list[dict[str, Any]]:
        """Plan and return the tasks (JSON), possibly staged."""
        return plan_and_stage(self, context, self._plan, part_prefix="merge-task-")

    def _plan(self, table: Table) -> Mapping[str, Any]:
        """Plan the merge (engine ``plan_merge``) and log what it found."""
        from airflow_provider_iceberg_exec.engine.ops.merge import DEFAULT_TASK_SIZE_BYTES, plan_merge

        plan = plan_merge(
            table,
            **self._merge_arguments(),
            task_size_bytes=int(self.task_size_bytes or DEFAULT_TASK_SIZE_BYTES),
        )
        self.log.info(
            "Planned a %s merge into %s at snapshot %s: %s candidate data files, %s source rows, "
            "%s tasks (conflict filter %s)",
            plan["mode"],
            self.table,
            plan["base_snapshot_id"],
            plan["candidate_data_files_count"],
            plan["source_rows"],
            len(plan["tasks"]),
            plan["conflict_filter"],
        )
        return plan


class MergeTaskOperator(BoundedRewriteOperator):
    """Run one planned MERGE task in one bounded-memory execution; nothing is committed.

    Mapped over the plan; runs in ``pool`` (default ``[iceberg_exec] pool``) with ``pool_slots``
    (default: derived from ``[iceberg_exec] memory_limit``). A target row matched by two source rows fails
    the task without retry. The :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator`
    commits every task's result at once.

    :param task_spec: one element of the plan task's output (templated).
    :param table: the table; default the spec's (templated).
    :param memory_limit: the execution's memory limit (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param payload_file_threshold: see :class:`MergePlanOperator`.
    """

    table_lineage = TableLineage("merge")

    ui_color = "#8fd1a4"
    result_name_prefix = "result-merge-task-"
    result_name_key = "task_id"

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> dict[str, Any]:
        """Run the task (engine ``execute_merge_task``)."""
        from airflow_provider_iceberg_exec.engine.ops.merge import execute_merge_task

        return execute_merge_task(table, spec, limits)

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log the task, its files and bytes, and the memory limit."""
        self.log.info(
            "Running merge task %s of %s into %s (%s): %s target data files (%s bytes), inserts %s, "
            "memory limit %s bytes",
            spec.get("task_id"),
            spec.get("tasks_count"),
            table_name,
            spec.get("mode"),
            len(spec.get("data_files", []) or []),
            _task_bytes(spec),
            spec.get("inserts"),
            limits.memory_limit_bytes,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log rows and files changed, peak RSS and spill."""
        self.log.info(
            "Merge task %s done: rows updated %s, deleted %s, inserted %s, copied %s; %s data files "
            "removed, %s added, %s delete files added; peak RSS %s bytes, spilled %s bytes",
            result["task_id"],
            result["num_target_rows_updated"],
            result["num_target_rows_deleted"],
            result["num_target_rows_inserted"],
            result["num_target_rows_copied"],
            len(result["removed_data_files"]),
            len(result["added_data_files"]),
            len(result["added_delete_files"]),
            result.get("peak_rss_bytes"),
            result.get("spilled_bytes"),
        )
