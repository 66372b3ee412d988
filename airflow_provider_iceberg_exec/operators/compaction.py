"""Compaction (Spark's ``rewrite_data_files``) as Airflow tasks.

Three tasks for tables of any size, wired by
:func:`airflow_provider_iceberg_exec.task_groups.compaction_task_group` (``partial()`` needs the pool
slots: the operator's default applies only to a task built directly):

>>> from airflow.sdk import DAG
>>> from airflow_provider_iceberg_exec.operators.commit import CommitOperator
>>> with DAG("compaction", schedule=None) as dag:
...     plan = CompactionPlanOperator(task_id="plan", table="db.events")
...     rewrite = CompactionRewriteOperator.partial(
...         task_id="rewrite", pool_slots=settings.default_pool_slots()
...     ).expand(task_spec=plan.output)
...     commit = CommitOperator(task_id="commit", results=rewrite.output)
>>> sorted(dag.get_task("commit").upstream_task_ids), sorted(dag.get_task("rewrite").upstream_task_ids)
(['rewrite'], ['plan'])

and :class:`CompactionOperator`, one task that plans, rewrites and commits, for small tables.

Equality-delete resolution is the same flow restricted to the data files equality deletes apply to:
``CompactionPlanOperator(..., only_files_with_equality_deletes=True)`` (or
``compaction_task_group(..., only_files_with_equality_deletes=True)``) for large tables, and
:class:`~airflow_provider_iceberg_exec.operators.resolve.ResolveEqualityDeletesOperator` in one task.

The operators only render templates, build the engine's arguments, call the engine and return its JSON;
the engine (``airflow_provider_iceberg_exec.engine.ops.compaction``) is imported inside ``execute()`` so that
parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    normalize_options,
    optional_text,
    payload_name,
    payload_threshold,
    pool_arguments,
    task_commit_id,
    warn_pool_slots,
)
from airflow_provider_iceberg_exec.operators._progress import logged_progress
from airflow_provider_iceberg_exec.operators.commit import emit_table_asset, log_commit_result
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.contracts import CompactionPlan, CompactionResult, RewriteResult

__all__ = [
    "BoundedRewriteOperator",
    "CompactionOperator",
    "CompactionPlanOperator",
    "CompactionRewriteOperator",
    "OneTaskCommitOperator",
    "TablePlanOperator",
]

_GIB = 1024**3


class TablePlanOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Base of the plan tasks over a table's scope: plan with the engine, return one task spec per group.

    Subclasses name the engine call (:meth:`_plan`, which also logs what it chose) and the staged specs'
    file prefix; this class holds the scope (table, filter, options, branch) and stages the specs.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a PyIceberg row filter selecting the rows (and so the files and partitions) considered,
        e.g. ``"event_date >= '2024-01-01'"`` (templated).
    :param options: the Spark procedure's options by name, e.g. ``{"min-input-files": "2"}``; empty
        values are dropped; a JSON object string is accepted (templated).
    :param branch: the branch (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection of the catalog (templated).
    :param payload_file_threshold: above this many files the specs are staged in files under the table's
        ``metadata/iceberg-exec-staging/`` and XCom carries references; default
        ``[iceberg_exec] payload_file_threshold``.
    """

    template_fields: Sequence[str] = ("table", "where", "options", "branch", "iceberg_exec_conn_id")
    template_fields_renderers = {"options": "json", "where": "sql"}
    ui_color = "#cfe8fc"
    #: a staged spec's file name: this prefix and the spec's group or task id
    part_prefix = "group-"

    def __init__(
        self,
        *,
        table: str,
        where: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        branch: str = "main",
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        payload_file_threshold: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.where = where
        self.options = options
        self.branch = branch
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.payload_file_threshold = payload_file_threshold

    def execute(self, context: Context) -> list[dict[str, Any]]:
        """Plan and return the task specs (JSON), possibly staged; ``[]`` when there is nothing to do."""
        return plan_and_stage(self, context, self._plan, part_prefix=self.part_prefix)

    def _plan(self, table: Table) -> Mapping[str, Any]:
        """Call the engine's planner and log what it chose; return the plan document."""
        raise NotImplementedError


class CompactionPlanOperator(TablePlanOperator):
    """Plan a compaction: select the files to rewrite and group them; return one task spec per group.

    The returned list is meant for dynamic task mapping
    (``CompactionRewriteOperator.partial(...).expand(task_spec=plan.output)``). An empty list means there
    is nothing to do; it is logged and the task succeeds. When the plan lists more files than
    ``payload_file_threshold``, each task spec is staged as a JSON file under the table's
    ``metadata/iceberg-exec-staging/`` and XCom carries references.

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a filter selecting the rows whose files are rewritten, in PyIceberg's row-filter syntax,
        e.g. ``"event_date >= '2024-01-01'"`` (templated).
    :param options: Spark's ``rewrite_data_files`` options, e.g. ``{"target-file-size-bytes": "134217728"}``;
        empty values are dropped; a JSON object string is accepted (templated).
    :param strategy: ``binpack`` or ``sort`` (templated).
    :param sort_order: the sort order for ``sort``, e.g. ``"id DESC NULLS LAST"``; default the table's
        (templated).
    :param branch: the branch to compact (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection of the catalog (templated).
    :param payload_file_threshold: above this many files the specs are staged in files; default
        ``[iceberg_exec] payload_file_threshold``.
    :param only_files_with_equality_deletes: plan equality-delete resolution instead: only the data files
        that equality deletes apply to, every one of them rewritten (``rewrite-all``), as
        :class:`~airflow_provider_iceberg_exec.operators.resolve.ResolveEqualityDeletesOperator` does in
        one task; the equality deletes that then apply to no live file are dropped by the commit.
    """

    table_lineage = TableLineage("compaction")

    template_fields: Sequence[str] = (
        "table",
        "where",
        "options",
        "strategy",
        "sort_order",
        "branch",
        "iceberg_exec_conn_id",
    )

    def __init__(
        self,
        *,
        strategy: str = "binpack",
        sort_order: str | None = None,
        only_files_with_equality_deletes: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.strategy = strategy
        self.sort_order = sort_order
        self.only_files_with_equality_deletes = only_files_with_equality_deletes

    def _plan(self, table: Table) -> CompactionPlan:
        """Plan the compaction (engine ``plan_compaction``) and log what it chose."""
        from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction

        options = normalize_options(self.options)
        if self.only_files_with_equality_deletes:
            options["rewrite-all"] = "true"  # what the engine's resolve_equality_deletes does
        plan = plan_compaction(
            table,
            where=optional_text(self.where),
            options=options,
            strategy=optional_text(self.strategy) or "binpack",
            sort_order=optional_text(self.sort_order),
            branch=optional_text(self.branch) or "main",
            only_files_with_equality_deletes=bool(self.only_files_with_equality_deletes),
        )
        _log_plan(self, plan, resolving=bool(self.only_files_with_equality_deletes))
        return plan


class BoundedRewriteOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Base of the mapped tasks that run one planned task spec in one bounded-memory execution.

    Subclasses name the engine call (:meth:`run_task`) and what to log; this class renders the spec,
    resolves a staged spec, builds the limits, maps engine errors once, and stages a large result.
    """

    template_fields: Sequence[str] = ("task_spec", "table", "memory_limit", "iceberg_exec_conn_id")
    template_fields_renderers = {"task_spec": "json"}
    partial = PoolDefaultsPartial()
    #: a staged result's file name: this prefix and the result's value at ``result_name_key``
    result_name_prefix = "result-group-"
    result_name_key = "group_id"

    def __init__(
        self,
        *,
        task_spec: Mapping[str, Any],
        table: str | None = None,
        memory_limit: str | int | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        payload_file_threshold: int | None = None,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**pool_arguments(pool, pool_slots), **kwargs)
        self.task_spec = task_spec
        self.table = table
        self.memory_limit = memory_limit
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.payload_file_threshold = payload_file_threshold

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> Mapping[str, Any]:
        """Call the engine on one task spec; return its result document."""
        raise NotImplementedError

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log what the task is about to do."""

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log what the task did."""

    def execute(self, context: Context) -> dict[str, Any]:
        """Execute the task spec and return the result JSON (or a reference to it)."""
        from airflow_provider_iceberg_exec.engine.io.payloads import is_payload_ref, resolve_payload

        with engine_errors():
            table_name = self._table_name()
            limits = settings.resource_limits(self.memory_limit)
            warn_pool_slots(self, limits)
            table = self.hook.load_table(table_name)
            spec = resolve_payload(table.io, self.task_spec)
            self.log_start(table_name, spec, limits)
            with logged_progress(self.log):
                result = self.run_task(table, spec, limits)
            self.log_result(result)
            out = self._offload(context, table, result)
        if is_payload_ref(self.task_spec):
            out["staged_inputs"] = [self.task_spec["uri"]]
        return out

    def _table_name(self) -> str:
        """The table: the operator's, else the spec's (which must be one JSON object)."""
        from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

        if not isinstance(self.task_spec, Mapping):
            raise DataFileCodecError(
                f"task_spec must be one task spec (a JSON object), got {type(self.task_spec).__name__}"
            )
        return optional_text(self.table) or str(self.task_spec.get("table") or "")

    def _offload(self, context: Context, table: Table, result: Mapping[str, Any]) -> dict[str, Any]:
        """The result as it is, or, past ``payload_file_threshold`` files, a reference to a staged copy."""
        from airflow_provider_iceberg_exec.engine.io.payloads import offload_payload

        name = payload_name(
            context,
            task_id=self.task_id,
            dag_id=self.dag_id,
            part=f"{self.result_name_prefix}{result[self.result_name_key]}",
        )
        return offload_payload(
            table.io,
            table.location(),
            result,
            name=name,
            threshold=payload_threshold(self.payload_file_threshold),
        )


class CompactionRewriteOperator(BoundedRewriteOperator):
    """Rewrite one planned group of files in one bounded-memory DataFusion execution.

    Mapped over the plan: ``CompactionRewriteOperator.partial(task_id="rewrite").expand(task_spec=...)``.
    Returns the engine's rewrite result (the new files as DataFile JSON), staged in a file past
    ``payload_file_threshold`` files. Nothing is committed: the :class:`CommitOperator` commits every
    group's result at once.

    Runs in ``pool`` (default ``[iceberg_exec] pool``) with ``pool_slots`` (default: derived from
    ``[iceberg_exec] memory_limit``; when the task sets a literal ``memory_limit``, pass
    ``pool_slots=settings.pool_slots_for(memory_limit)``, as the task group helper does).

    :param task_spec: one element of the plan task's output (templated).
    :param table: the table; default the spec's (templated).
    :param memory_limit: the execution's memory limit, e.g. ``"1GiB"``; default
        ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param payload_file_threshold: see :class:`CompactionPlanOperator`.
    """

    table_lineage = TableLineage("compaction")

    ui_color = "#a9d3f5"

    def run_task(self, table: Any, spec: Mapping[str, Any], limits: ResourceLimits) -> RewriteResult:
        """Rewrite the group (engine ``execute_rewrite_task``)."""
        from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task

        return execute_rewrite_task(table, spec, limits)

    def log_start(self, table_name: str, spec: Mapping[str, Any], limits: ResourceLimits) -> None:
        """Log the group, its files and bytes, and the memory limit."""
        data_files = spec.get("data_files", [])
        self.log.info(
            "Rewriting group %s (commit batch %s) of %s: %s data files, %s bytes, memory limit %s bytes",
            spec.get("group_id"),
            spec.get("commit_batch"),
            table_name,
            len(data_files),
            _task_bytes(spec),
            limits.memory_limit_bytes,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log files, rows and bytes written, peak RSS and spill."""
        _log_rewrite(self, result)


class OneTaskCommitOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Base of the operations that plan, execute and commit in one task (for small and medium tables).

    The commit id derives from the DAG, run and task, so a retry after a commit that landed reports it and
    succeeds; the table's asset is emitted through the ``iceberg-exec-commits`` asset alias when a snapshot
    lands; bad input fails the task without retry, with a one-line reason, and leaves the table unchanged.
    Subclasses name the engine call (:meth:`_run`) and the log's verb (:attr:`_doing`).

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: a PyIceberg row filter limiting what is considered (templated).
    :param options: the Spark procedure's options by name; empty values are dropped; a JSON object string
        is accepted (templated).
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

    template_fields: Sequence[str] = (
        "table",
        "where",
        "options",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    )
    template_fields_renderers = {"options": "json", "where": "sql"}
    partial = PoolDefaultsPartial()
    ui_color = "#7fbcf0"
    #: the log's verb for what :meth:`_run` does
    _doing = "Compacting"

    def __init__(
        self,
        *,
        table: str,
        where: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        branch: str = "main",
        memory_limit: str | int | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        commit_id: str | None = None,
        asset_alias: str | None = ASSET_ALIAS,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            **commit_task_arguments(kwargs, asset_alias=asset_alias, pool=pool, pool_slots=pool_slots)
        )
        self.table = table
        self.where = where
        self.options = options
        self.branch = branch
        self.memory_limit = memory_limit
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.commit_id = commit_id
        self.asset_alias = asset_alias

    def execute(self, context: Context) -> Any:
        """Plan, execute and commit; return the engine's result JSON."""
        with engine_errors():
            commit_id = task_commit_id(self, context)
            limits = settings.resource_limits(self.memory_limit)
            warn_pool_slots(self, limits)
            table = self.hook.load_table(self.table)
            self.log.info(
                "%s %s (branch %s, where %s) with memory limit %s bytes, commit id %s",
                self._doing,
                self.table,
                self.branch,
                optional_text(self.where) or "<all rows>",
                limits.memory_limit_bytes,
                commit_id,
            )
            with logged_progress(self.log):
                result = self._run(table, limits, commit_id)
        self.log_result(result)
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=self.table, result=result)
        return result

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> Any:
        """The engine call: plan, execute and commit; return the result document."""
        raise NotImplementedError

    def log_result(self, result: Mapping[str, Any]) -> None:
        """Log what the commit did in one line."""
        log_commit_result(self, result)


class CompactionOperator(OneTaskCommitOperator):
    """Compact a table in one task: plan, rewrite every group, commit (for small tables).

    Same options and result as the three-task form, with the conventions of
    :class:`OneTaskCommitOperator` (derived commit id, asset event, pool, one-line errors).

    :param table: the table, ``"namespace.table"`` (templated).
    :param where: the row filter (templated).
    :param options: Spark's ``rewrite_data_files`` options (templated).
    :param strategy: ``binpack`` or ``sort`` (templated).
    :param sort_order: the sort order for ``sort`` (templated).
    :param branch: the branch (templated).
    :param memory_limit: the execution's memory limit; default ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the derived commit id (templated).
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    """

    table_lineage = TableLineage("compaction", output="commit")

    template_fields: Sequence[str] = (
        "table",
        "where",
        "options",
        "strategy",
        "sort_order",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    )

    def __init__(self, *, strategy: str = "binpack", sort_order: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.strategy = strategy
        self.sort_order = sort_order

    def _run(self, table: Table, limits: ResourceLimits, commit_id: str) -> CompactionResult:
        """The engine call: plan, rewrite and commit."""
        from airflow_provider_iceberg_exec.engine.ops.compaction import compact

        return compact(
            table,
            where=optional_text(self.where),
            options=normalize_options(self.options),
            strategy=optional_text(self.strategy) or "binpack",
            sort_order=optional_text(self.sort_order),
            branch=optional_text(self.branch) or "main",
            limits=limits,
            commit_id=commit_id,
        )


def plan_and_stage(
    operator: Any,
    context: Context,
    plan: Callable[[Table], Mapping[str, Any]],
    *,
    part_prefix: str,
) -> list[dict[str, Any]]:
    """The execute step of a plan task: load the table, ``plan`` it, and stage the plan's task specs.

    ``plan`` calls the engine's planner (and logs what it chose); engine errors are mapped once, and past
    the operator's ``payload_file_threshold`` files the specs are staged (:func:`stage_task_specs`).
    """
    with engine_errors():
        table = operator.hook.load_table(operator.table)
        tasks = plan(table)["tasks"]
        threshold = payload_threshold(operator.payload_file_threshold)
        return stage_task_specs(operator, context, table, tasks, threshold=threshold, part_prefix=part_prefix)


def stage_task_specs(
    operator: BaseOperator,
    context: Context,
    table: Any,
    tasks: Sequence[Mapping[str, Any]],
    *,
    threshold: int,
    part_prefix: str,
) -> list[dict[str, Any]]:
    """Return ``tasks`` as they are, or, past ``threshold`` files in all, each staged in its own file.

    A staged spec is a small reference document; the rewrite task resolves it. Files are named after
    ``part_prefix`` and the spec's ``group_id`` (or ``task_id``, or its index). A reference also carries
    the spec's ``task_id`` and ``data_files_count``, so that the commit can name and count the tasks
    that failed without reading the staged files.
    """
    from airflow_provider_iceberg_exec.engine.io.payloads import count_files, offload_payload

    files = count_files(tasks)
    if files <= threshold:
        return [dict(task) for task in tasks]
    location = table.location()
    staged = [
        {
            **offload_payload(
                table.io,
                location,
                task,
                name=payload_name(
                    context,
                    task_id=operator.task_id,
                    dag_id=operator.dag_id,
                    part=f"{part_prefix}{task.get('group_id', task.get('task_id', index))}",
                ),
                threshold=0,
            ),
            **{key: task[key] for key in ("task_id",) if key in task},
            # A position-delete task lists delete files instead: they are what its failure leaves.
            "data_files_count": len(task.get("data_files", task.get("delete_files", [])) or []),
        }
        for index, task in enumerate(tasks)
    ]
    operator.log.info(
        "Staged %s task specs (%s files > threshold %s) under %s", len(staged), files, threshold, location
    )
    return staged


def _task_bytes(task: Mapping[str, Any]) -> int:
    total = 0
    for entry in task.get("data_files", []) or []:
        data_file = entry.get("data-file", {}) if isinstance(entry, Mapping) else {}
        size = data_file.get("file-size-in-bytes", 0) if isinstance(data_file, Mapping) else 0
        total += size if isinstance(size, int) else 0
    return total


def _log_plan(operator: BaseOperator, plan: Mapping[str, Any], *, resolving: bool) -> None:
    """One line on what the plan chose, or why it chose nothing."""
    tasks, skipped = plan["tasks"], plan["skipped"]
    if not tasks:
        operator.log.info(
            "Nothing to compact in %s (branch %s, snapshot %s): no file group qualifies%s; %s files skipped",
            plan["table"],
            plan["branch"],
            plan["base_snapshot_id"],
            " (no data file has equality deletes)" if resolving else "",
            len(skipped),
        )
        return
    operator.log.info(
        "Planned %s groups in %s commit batches over %s data files (%s bytes) of %s at snapshot %s; "
        "%s files skipped",
        len(tasks),
        len(plan["commit_batches"]) or 1,
        sum(len(task["data_files"]) for task in tasks),
        sum(_task_bytes(task) for task in tasks),
        plan["table"],
        plan["base_snapshot_id"],
        len(skipped),
    )


def _log_rewrite(operator: BaseOperator, result: Mapping[str, Any]) -> None:
    operator.log.info(
        "Group %s done: %s data files (%s bytes, %s rows) rewritten into %s files (%s bytes, %s rows); "
        "%s rows deleted; peak RSS %s bytes, spilled %s bytes, %.1f s",
        result["group_id"],
        len(result["rewritten_data_files"]),
        result["rewritten_bytes_count"],
        result["rewritten_records"],
        len(result["added_data_files"]),
        result["added_bytes_count"],
        result["added_records"],
        result["deleted_records"],
        result["peak_rss_bytes"],
        result["spilled_bytes"],
        result["elapsed_seconds"],
    )
