"""The commit of files produced by other tasks: one operator shared by every file-producing operation.

The rewrite tasks return results (DataFile JSON) through XCom; :class:`CommitOperator` gathers them and
commits once (or once per commit batch under partial progress), validated against the snapshot the work
was planned on. Its commit id derives from the DAG, the run and the task, never the try number: a retry
after a commit that landed finds its snapshot and reports it instead of committing twice.

Given the plan's output too (``planned=plan.output``), the commit tells "a mapped task failed" from
"nothing was planned" (the engine decides, in ``engine/ops/results.py``): under Spark's
``partial-progress.enabled`` the groups that succeeded are committed and the failed ones counted in
``failed_data_files_count``; otherwise (and always for copy-on-write, where a partial delete is never
acceptable) nothing is committed, the files the other tasks wrote are deleted and the task fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_provider_iceberg_exec import compat
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    ASSET_ALIAS,
    CatalogHookMixin,
    engine_errors,
    optional_text,
    table_asset_uri,
    task_commit_id,
    with_asset_alias,
)
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_iceberg_exec.engine.contracts import (
        CompactionResult,
        ConvertResult,
        CowCommitResult,
        RewritePositionDeletesResult,
    )
    from airflow_provider_iceberg_exec.engine.ops.results import QuietPeriod

__all__ = ["CommitOperator", "emit_table_asset", "log_commit_result"]


def log_commit_result(operator: BaseOperator, result: Mapping[str, Any]) -> None:
    """Log a commit result in one line: its counts (whatever the operation), snapshots and resources."""
    counts = ", ".join(f"{key} {value}" for key, value in result.items() if key.endswith("_count"))
    operator.log.info(
        "%s %s: %s; snapshots %s; peak RSS %s bytes, spilled %s bytes",
        "Already committed" if result.get("already_committed") else "Committed",
        result.get("table"),
        counts,
        result.get("snapshot_ids"),
        result.get("peak_rss_bytes"),
        result.get("spilled_bytes"),
    )


def emit_table_asset(
    operator: BaseOperator, context: Context, *, catalog: str, table: str, result: Mapping[str, Any]
) -> None:
    """Attach the table's asset event to the task's outlets when a snapshot landed.

    Through every ``AssetAlias`` outlet the asset ``iceberg://<catalog>/<namespace>/<table>`` is added (so
    a templated table still produces its asset event); a declared ``Asset`` outlet with that URI gets the
    snapshot ids as its event's extra.
    """
    snapshot_ids = [int(s) for s in result.get("snapshot_ids", []) or []]
    if not snapshot_ids and not result.get("already_committed"):
        return
    outlet_events = context.get("outlet_events")
    if outlet_events is None:
        return
    uri = table_asset_uri(catalog, table)
    extra: dict[str, Any] = {
        "table": table,
        "snapshot_ids": snapshot_ids,
        "already_committed": bool(result.get("already_committed")),
    }
    for outlet in operator.outlets:
        if isinstance(outlet, AssetAlias):
            outlet_events[outlet].add(Asset(uri=uri), extra=compat.alias_event_extra(extra))
        elif isinstance(outlet, Asset) and outlet.uri == uri:
            outlet_events[outlet].extra.update(extra)
    operator.log.info("Asset %s updated (snapshots %s)", uri, snapshot_ids)


def _flatten(results: Any) -> list[Mapping[str, Any]]:
    if results is None:
        return []
    if isinstance(results, Mapping):
        return [results]
    out: list[Mapping[str, Any]] = []
    if isinstance(results, Sequence) and not isinstance(results, str):
        # index a (lazy) XCom sequence by its length: iterating it probes one item past the end
        items: Iterable[Any] = [results[index] for index in range(len(results))]
    elif isinstance(results, Iterable) and not isinstance(results, str):
        items = results
    else:
        items = [results]
    for item in items:
        if item is None:
            continue  # a mapped task that returned nothing
        if isinstance(item, Mapping):
            out.append(item)
        elif isinstance(item, Iterable) and not isinstance(item, str):
            out.extend(_flatten(item))
        else:
            out.append({"schema": None, "value": item})
    return out


class CommitOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Commit the results of file-producing tasks (e.g. the mapped rewrite) in one snapshot.

        Validated against the plan's base snapshot (carried in each result); one snapshot per commit batch
        when partial progress is enabled. No results (an empty plan) is success with an empty result. On a
        commit conflict (the table moved) the task fails and its ``retries`` apply, with exponential backoff;
        a failed validation, bad input or an unknown commit state fails it without retry.

        The table's asset ``iceberg://<catalog>/<namespace>/<table>`` is emitted through the asset alias
        ``asset_alias`` (default ``iceberg-exec-commits``) when a snapshot lands; schedule downstream DAGs on
        that asset (see :func:`airflow_provider_iceberg_exec.operators.table_asset`).

        Failed mapped tasks: give the commit the plan's output (``planned=plan.output``) and the trigger rule
        ``all_done_min_one_success``, so that it runs once every rewrite is done and at least one upstream
        task succeeded. It compares the planned tasks with the delivered results (the engine decides, in
    :mod:`airflow_provider_iceberg_exec.engine.ops.results`):
        under ``partial-progress.enabled`` the delivered groups are committed and the failed ones reported as
        ``failed_data_files_count`` (and logged); otherwise, when every task failed, and always for
        copy-on-write results, nothing is committed: the files the delivered tasks wrote and the staged
        payloads are deleted (unless this commit id already landed) and the task fails without retry, with a
        one-line reason naming the failed tasks.

        :param results: the results to commit, usually ``rewrite.output`` of a mapped task (templated).
        :param planned: the plan's output (``plan.output``: the task specs or their staged references),
            to tell a failed task from an empty plan; ``None`` commits whatever results arrive (templated).
        :param table: the table; default the results' (templated).
        :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
        :param commit_id: overrides the commit id derived from the DAG, run and task (templated).
        :param quiet_period_seconds: when > 0, commit only once the branch has had no new snapshot for this
            long (re-checked after waiting), for tables with busy writers (templated).
        :param quiet_period_timeout_seconds: give up waiting for quiet after this long; the task then fails
            with a commit conflict and retries (templated).
        :param cleanup_staged: delete the staged payload files of the results after the commit.
        :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    """

    table_lineage = TableLineage(None, output="commit")

    template_fields: Sequence[str] = (
        "results",
        "planned",
        "table",
        "iceberg_exec_conn_id",
        "commit_id",
        "quiet_period_seconds",
        "quiet_period_timeout_seconds",
    )
    template_fields_renderers = {"results": "json", "planned": "json"}
    ui_color = "#5aa7eb"

    def __init__(
        self,
        *,
        results: Any,
        planned: Any = None,
        table: str | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        commit_id: str | None = None,
        quiet_period_seconds: float | str = 0.0,
        quiet_period_timeout_seconds: float | str = 3600.0,
        cleanup_staged: bool = True,
        asset_alias: str | None = ASSET_ALIAS,
        retries: int = 3,
        retry_delay: timedelta | float = timedelta(seconds=15),
        retry_exponential_backoff: float = 2.0,
        max_retry_delay: timedelta | float = timedelta(minutes=10),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            outlets=with_asset_alias(kwargs.pop("outlets", None), asset_alias),
            retries=retries,
            retry_delay=retry_delay,
            retry_exponential_backoff=compat.retry_exponential_backoff(retry_exponential_backoff),
            max_retry_delay=max_retry_delay,
            **kwargs,
        )
        self.results = results
        self.planned = planned
        self.table = table
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.commit_id = commit_id
        self.quiet_period_seconds = quiet_period_seconds
        self.quiet_period_timeout_seconds = quiet_period_timeout_seconds
        self.cleanup_staged = cleanup_staged
        self.asset_alias = asset_alias

    def execute(
        self, context: Context
    ) -> CompactionResult | CowCommitResult | ConvertResult | RewritePositionDeletesResult:
        """Commit the results (the engine's :func:`~.engine.ops.results.commit_results`); return its JSON."""
        from airflow_provider_iceberg_exec.engine.ops.results import commit_results, results_table

        docs, planned = _flatten(self.results), None if self.planned is None else _flatten(self.planned)
        with engine_errors():
            table_name = results_table(optional_text(self.table), docs, planned or [])
            if table_name is None or not (docs or planned):
                return self._nothing_to_commit(table_name)
            result = commit_results(
                self.hook.load_table(table_name),
                docs,
                commit_id=task_commit_id(self, context),
                planned=planned,
                quiet_period=self._quiet_period(),
                discard_staged=self.cleanup_staged,
            )
        log_commit_result(self, result)
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=table_name, result=result)
        return result

    def _nothing_to_commit(self, table_name: str | None) -> CompactionResult:
        from airflow_provider_iceberg_exec.engine.ops.results import empty_commit_result

        self.log.info("Nothing to commit to %s: no results (the plan had nothing to do)", table_name)
        return empty_commit_result(table_name or "")

    def _quiet_period(self) -> QuietPeriod:
        from airflow_provider_iceberg_exec.engine.ops.results import QuietPeriod

        return QuietPeriod(float(self.quiet_period_seconds or 0), float(self.quiet_period_timeout_seconds))
