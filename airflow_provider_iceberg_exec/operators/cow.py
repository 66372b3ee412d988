"""Copy-on-write delete, update and overwrite by predicate as Airflow tasks.

Three tasks, the last one shared with compaction::

    plan = CowPlanOperator(task_id="plan", table="db.events", operation="delete", where="user_id = 42")
    rewrite = CowRewriteOperator.partial(task_id="rewrite").expand(task_spec=plan.output)
    commit = CommitOperator(task_id="commit", results=rewrite.output)

The plan reads metadata only and returns one task spec per group of files (an empty list when no file may
hold a matching row); each mapped rewrite runs one bounded execution and returns the removed and added
files as DataFile JSON; the :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator` commits
them as one ``overwrite`` (or ``delete``) snapshot, validated from the plan's snapshot with the predicate
and the table's isolation level.

The operators only render templates, build the engine's arguments, call the engine and return its JSON;
the engine (``engine.ops.cow``) is imported inside ``execute()`` so that parsing a
DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    CatalogHookMixin,
    normalize_options,
    optional_text,
)
from airflow_provider_iceberg_exec.operators.compaction import (
    BoundedRewriteOperator,
    _task_bytes,
    plan_and_stage,
)
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.contracts import CowPlan

__all__ = ["CowPlanOperator", "CowRewriteOperator"]


def _source_files(value: Sequence[str] | str | None) -> list[str]:
    """Rendered ``source_files`` as a list: a list, a JSON array string, or one path."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text or text in ("None", "null"):
            return []
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as err:
                raise ConfigurationError(f"source_files is not a JSON array: {text!r}") from err
        else:
            return [text]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigurationError(f"source_files must be a list of paths, got {type(value).__name__}")
    return [str(path).strip() for path in value if str(path).strip()]


class CowPlanOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Plan a copy-on-write ``delete``, ``update`` or ``overwrite``; return one task spec per group.

    Reads metadata only: files that cannot hold a matching row are left out, files whose every row
    matches (provably, from partition or metrics) are removed without being read. The returned list is
    meant for dynamic task mapping (``CowRewriteOperator.partial(...).expand(task_spec=plan.output)``);
    an empty list means no file may hold a matching row, which is logged, and the task succeeds. Above
    ``payload_file_threshold`` files, task specs are staged as JSON files under the table's
    ``metadata/iceberg-exec-staging/`` and XCom carries references.

    :param table: the table, ``"namespace.table"`` (templated).
    :param operation: ``delete``, ``update`` or ``overwrite`` (templated).
    :param where: the rows, in PyIceberg's row-filter syntax, e.g. ``"user_id = 42"``; required (templated).
    :param set_columns: for ``update``: ``{column: SQL expression}``, e.g. ``{"amount": "amount * 1.1"}``;
        a JSON object string is accepted (templated).
    :param source_files: for ``overwrite``: Parquet files whose rows replace the matching ones, every row
        matching ``where``; a list, a JSON array string or one path (templated).
    :param branch: the branch (templated).
    :param isolation_level: ``serializable`` or ``snapshot``; default the table's
        ``write.delete.isolation-level`` (``write.update.isolation-level`` for updates) (templated).
    :param task_size_bytes: bytes to read per mapped task; default 1 GiB.
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection of the catalog (templated).
    :param payload_file_threshold: above this many files the specs are staged in files; default
        ``[iceberg_exec] payload_file_threshold``.
    """

    table_lineage = TableLineage("copy-on-write")

    template_fields: Sequence[str] = (
        "table",
        "operation",
        "where",
        "set_columns",
        "source_files",
        "branch",
        "isolation_level",
        "iceberg_exec_conn_id",
    )
    template_fields_renderers = {"set_columns": "json", "where": "sql"}
    ui_color = "#f6c6a0"

    def __init__(
        self,
        *,
        table: str,
        where: str,
        operation: str = "delete",
        set_columns: Mapping[str, str] | str | None = None,
        source_files: Sequence[str] | str | None = None,
        branch: str = "main",
        isolation_level: str | None = None,
        task_size_bytes: int | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        payload_file_threshold: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.where = where
        self.operation = operation
        self.set_columns = set_columns
        self.source_files = source_files
        self.branch = branch
        self.isolation_level = isolation_level
        self.task_size_bytes = task_size_bytes
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.payload_file_threshold = payload_file_threshold

    def execute(self, context: Context) -> list[dict[str, Any]]:
        """Plan and return the task specs (JSON), possibly staged; ``[]`` when no row can match."""
        return plan_and_stage(self, context, self._plan, part_prefix="cow-task-")

    def _plan(self, table: Any) -> CowPlan:
        """Plan the rewrite (engine ``plan_cow_rewrite``) and log what it found."""
        from airflow_provider_iceberg_exec.engine.ops.cow import plan_cow_rewrite

        plan = plan_cow_rewrite(table, **self._plan_arguments())
        self._log_plan(plan)
        return plan

    def _plan_arguments(self) -> dict[str, Any]:
        """The engine's keyword arguments from the rendered fields; a blank field takes its default."""
        from airflow_provider_iceberg_exec.engine.ops.cow import DEFAULT_TASK_SIZE_BYTES

        return {
            "operation": optional_text(self.operation) or "delete",
            "where": optional_text(self.where) or "",
            "set_columns": normalize_options(self.set_columns) or None,
            "source_files": _source_files(self.source_files),
            "branch": optional_text(self.branch) or "main",
            "isolation_level": optional_text(self.isolation_level),
            "task_size_bytes": int(self.task_size_bytes or DEFAULT_TASK_SIZE_BYTES),
        }

    def _log_plan(self, plan: CowPlan) -> None:
        """Log what the plan will do, or that no data file may hold a matching row."""
        if not plan["tasks"]:
            self.log.info(
                "Nothing to %s in %s (branch %s, snapshot %s): no data file may hold a row matching %s",
                plan["operation"],
                self.table,
                plan["branch"],
                plan["base_snapshot_id"],
                plan["where"],
            )
            return
        self.log.info(
            "Planned %s of %s at snapshot %s (%s isolation) where %s: %s tasks over %s data files "
            "(%s bytes to read, %s removed without reading) and %s files to load",
            plan["operation"],
            self.table,
            plan["base_snapshot_id"],
            plan["isolation_level"],
            plan["where"],
            len(plan["tasks"]),
            plan["candidate_data_files_count"],
            sum(_task_bytes(task) for task in plan["tasks"]),
            plan["dropped_without_reading_count"],
            plan["source_files_count"],
        )


class CowRewriteOperator(BoundedRewriteOperator):
    """Run one planned copy-on-write task in one bounded-memory execution; return its result.

    Mapped over the plan: ``CowRewriteOperator.partial(task_id="rewrite").expand(task_spec=plan.output)``.
    Each data file is read once on the predicate's columns; a file without a matching row is left
    untouched, the others are rewritten without (or with updated) matching rows; rows loaded by an
    overwrite are checked against the predicate. Returns the engine's result (removed and added files as
    DataFile JSON, rows and bytes), staged in a file past ``payload_file_threshold`` files. Nothing is
    committed: the :class:`~airflow_provider_iceberg_exec.operators.commit.CommitOperator` commits every
    task's result at once.

    Runs in ``pool`` (default ``[iceberg_exec] pool``) with ``pool_slots`` (default: derived from
    ``[iceberg_exec] memory_limit``).

    :param task_spec: one element of the plan task's output (templated).
    :param table: the table; default the spec's (templated).
    :param memory_limit: the execution's memory limit, e.g. ``"1GiB"``; default
        ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param payload_file_threshold: see :class:`CowPlanOperator`.
    """

    table_lineage = TableLineage("copy-on-write")

    ui_color = "#f0a86e"
    result_name_prefix = "result-cow-task-"
    result_name_key = "task_id"

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> dict[str, Any]:
        """Run the copy-on-write task (engine ``execute_cow_task``)."""
        from airflow_provider_iceberg_exec.engine.ops.cow import execute_cow_task

        return dict(execute_cow_task(table, spec, limits))

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log the operation, its files and bytes, and the memory limit."""
        self.log.info(
            "Running %s task %s of %s: %s data files (%s bytes), %s files to load, memory limit %s bytes",
            spec.get("operation"),
            spec.get("task_id"),
            table_name,
            len(spec.get("data_files", []) or []),
            _task_bytes(spec),
            len(spec.get("source_files", []) or []),
            limits.memory_limit_bytes,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log files removed and added, rows, bytes, peak RSS and spill (of a ``cow-result``)."""
        self.log.info(
            "Task %s done: %s data files removed (%s unread, %s untouched), %s added; rows deleted %s, "
            "updated %s, inserted %s, copied %s; %s bytes read, %s written; peak RSS %s bytes, "
            "spilled %s bytes",
            result["task_id"],
            len(result["removed_data_files"]),
            result["dropped_without_reading_count"],
            result["untouched_data_files_count"],
            len(result["added_data_files"]),
            result["deleted_rows"],
            result["updated_rows"],
            result["inserted_rows"],
            result["rewritten_rows"],
            result["read_bytes"],
            result["written_bytes"],
            result["peak_rss_bytes"],
            result["spilled_bytes"],
        )
