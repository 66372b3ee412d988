"""The commit of files produced by other tasks: one operator shared by every file-producing operation.

The rewrite tasks return results (DataFile JSON) through XCom; :class:`CommitOperator` gathers them and
commits once (or once per commit batch under partial progress), validated against the snapshot the work
was planned on. Its commit id derives from the DAG, the run and the task, never the try number: a retry
after a commit that landed finds its snapshot and reports it instead of committing twice.

Given the plan's output too (``planned=plan.output``), the commit tells "a mapped task failed" from
"nothing was planned" (:func:`decide_commit`): under Spark's ``partial-progress.enabled`` the groups
that succeeded are committed and the failed ones counted in ``failed_data_files_count``; otherwise (and
always for copy-on-write, where a partial delete is never acceptable) nothing is committed, the files
the other tasks wrote are deleted and the task fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    ASSET_ALIAS,
    commit_id_from_context,
    engine_errors,
    optional_text,
    table_asset_uri,
    with_asset_alias,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

__all__ = [
    "COMMITTERS",
    "PARTIAL_PROGRESS_SCHEMAS",
    "CommitDecision",
    "CommitOperator",
    "PlannedTask",
    "decide_commit",
    "emit_table_asset",
    "empty_commit_result",
    "log_commit_result",
    "planned_tasks",
]

#: result schema -> the engine function that commits a list of such results
COMMITTERS: dict[str, str] = {
    "iceberg-exec/rewrite-result@1": "airflow_provider_iceberg_exec.engine.compaction.commit_compaction",
    "iceberg-exec/cow-result@1": "airflow_provider_iceberg_exec.engine.cow.commit_cow_rewrite",
}
_RESULT_SCHEMA = "iceberg-exec/compaction-result@1"
#: result schemas whose missing results ``partial-progress.enabled`` tolerates (compaction's; never a
#: copy-on-write result: committing the other tasks' removals would be a partial delete)
PARTIAL_PROGRESS_SCHEMAS = frozenset({"iceberg-exec/rewrite-result@1"})
_PAYLOAD_REF_SCHEMA = "iceberg-exec/payload-ref@1"
_NAMED_AT_MOST = 10


def empty_commit_result(table: str | None) -> dict[str, Any]:
    """The result of a commit with nothing to commit."""
    return {
        "schema": _RESULT_SCHEMA,
        "table": table,
        "rewritten_data_files_count": 0,
        "added_data_files_count": 0,
        "rewritten_bytes_count": 0,
        "failed_data_files_count": 0,
        "removed_delete_files_count": 0,
        "snapshot_ids": [],
        "already_committed": False,
        "peak_rss_bytes": 0,
        "spilled_bytes": 0,
    }


def log_commit_result(operator: BaseOperator, result: Mapping[str, Any]) -> None:
    """Log a commit result in one line."""
    operator.log.info(
        "%s %s: %s data files (%s bytes) rewritten into %s; %s failed; %s delete files removed; "
        "snapshots %s; peak RSS %s bytes, spilled %s bytes",
        "Already committed" if result.get("already_committed") else "Committed",
        result.get("table"),
        result.get("rewritten_data_files_count"),
        result.get("rewritten_bytes_count"),
        result.get("added_data_files_count"),
        result.get("failed_data_files_count"),
        result.get("removed_delete_files_count"),
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
            outlet_events[outlet].add(Asset(uri=uri), extra=extra)
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


@dataclass(frozen=True)
class PlannedTask:
    """What the commit needs of one planned task spec: cheap facts, never its file list.

    :param task_id: the spec's ``group_id`` (compaction) or ``task_id`` (copy-on-write), as text;
        ``None`` when a staged reference does not carry it.
    :param data_files_count: the data files the task was to rewrite.
    :param commit_batch: the compaction commit batch it belongs to, if any.
    :param staged_uri: the staged spec file when the spec travelled by reference.
    """

    task_id: str | None
    data_files_count: int
    commit_batch: int | None = None
    staged_uri: str | None = None


@dataclass(frozen=True)
class CommitDecision:
    """What to do with the delivered results, given the plan (see :func:`decide_commit`).

    :param missing: the planned tasks without a result (their mapped task failed).
    :param failed_data_files_count: the data files of the missing tasks, reported under partial progress.
    :param error: a one-line reason not to commit anything; ``None`` to commit the delivered results.
    """

    missing: tuple[PlannedTask, ...] = ()
    failed_data_files_count: int = 0
    error: str | None = None


def _task_key(doc: Mapping[str, Any]) -> str | None:
    for key in ("group_id", "task_id"):
        value = doc.get(key)
        if value is not None:
            return str(value)
    return None


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def planned_tasks(planned: Any) -> list[PlannedTask] | None:
    """The plan's output (task specs or staged references) as :class:`PlannedTask` entries.

    Reads only ids, counts and batch numbers: a staged spec is not resolved. A reference written by
    :func:`~airflow_provider_iceberg_exec.operators.compaction.stage_task_specs` carries its
    ``data_files_count``; an older one only its ``file_count`` (data and delete files), used instead.

    :param planned: the plan task's XCom (a list), or ``None`` when the commit was not given the plan.
    :returns: ``None`` for ``None`` (the commit then commits whatever results arrive).

    >>> planned_tasks([{"group_id": 3, "commit_batch": 0, "data_files": [{}, {}]}])
    [PlannedTask(task_id='3', data_files_count=2, commit_batch=0, staged_uri=None)]
    >>> planned_tasks(None) is None
    True
    """
    if planned is None:
        return None
    out: list[PlannedTask] = []
    for doc in _flatten(planned):
        if doc.get("schema") == _PAYLOAD_REF_SCHEMA:
            count = doc.get("data_files_count", doc.get("file_count", 0))
            staged = str(doc["uri"]) if doc.get("uri") else None
        else:
            count = len(doc.get("data_files", []) or [])
            staged = None
        out.append(
            PlannedTask(
                task_id=_task_key(doc),
                data_files_count=_int_or_none(count) or 0,
                commit_batch=_int_or_none(doc.get("commit_batch")),
                staged_uri=staged,
            )
        )
    return out


def _named(tasks: Sequence[PlannedTask]) -> str:
    ids = [t.task_id if t.task_id is not None else "?" for t in tasks]
    shown = ", ".join(ids[:_NAMED_AT_MOST])
    return shown + (f" (+{len(ids) - _NAMED_AT_MOST} more)" if len(ids) > _NAMED_AT_MOST else "")


def decide_commit(
    planned: Sequence[PlannedTask] | None, results: Sequence[Mapping[str, Any]]
) -> CommitDecision:
    """Decide whether the delivered ``results`` of a plan may be committed.

    - no plan given, or every planned task delivered: commit;
    - no result at all while tasks were planned (every mapped task failed): fail;
    - results of another schema than compaction's (copy-on-write): any missing result fails, since
      committing the others would be a partial delete or update;
    - compaction results: with ``partial-progress.enabled`` (read from the results' options) commit the
      delivered groups and report the missing groups' data files as ``failed_data_files_count``, unless
      more commit batches lost every group than ``partial-progress.max-failed-commits`` allows (Spark
      counts a commit that did not happen as a failed commit); without it, fail.

    :param planned: the planned tasks (:func:`planned_tasks`), or ``None``.
    :param results: the delivered, resolved results.
    :raises ConfigurationError: when the results' options are invalid.
    """
    from airflow_provider_iceberg_exec.engine.config import CompactionOptions

    if planned is None:
        return CommitDecision()
    delivered = [_task_key(r) for r in results]
    if all(t.task_id is not None for t in planned) and all(d is not None for d in delivered):
        planned_ids = {t.task_id for t in planned}
        strangers = sorted({d for d in delivered if d not in planned_ids}, key=str)
        if strangers:
            return CommitDecision(
                error=f"results of tasks {', '.join(map(str, strangers))} are not in the plan given as "
                "`planned`; commit each plan's results with its own plan"
            )
        missing = tuple(t for t in planned if t.task_id not in set(delivered))
    elif len(results) == len(planned):
        missing = ()
    else:
        # References without ids (staged by an older plan): only the counts can be compared.
        return CommitDecision(
            error=f"{len(planned) - len(results)} of {len(planned)} planned tasks delivered no result "
            "(their ids are unknown); nothing committed"
        )
    if not missing:
        return CommitDecision()
    failed_files = sum(t.data_files_count for t in missing)
    named = _named(missing)
    if not results:
        return CommitDecision(
            missing,
            failed_files,
            f"every planned task failed ({len(missing)}: {named}); nothing to commit",
        )
    schema = str(results[0].get("schema"))
    if schema not in PARTIAL_PROGRESS_SCHEMAS:
        return CommitDecision(
            missing,
            failed_files,
            f"{len(missing)} of {len(planned)} planned tasks delivered no result ({named}); {schema} results "
            "are committed all or nothing (a partial delete or update is never committed)",
        )
    options = CompactionOptions.from_options(results[0].get("options"))
    if not options.partial_progress_enabled:
        return CommitDecision(
            missing,
            failed_files,
            f"{len(missing)} of {len(planned)} file groups failed ({named}; {failed_files} data files) and "
            "partial-progress.enabled is false: nothing committed",
        )
    delivered_batches = {_int_or_none(r.get("commit_batch")) or 0 for r in results}
    lost_batches = {t.commit_batch for t in missing if t.commit_batch is not None} - delivered_batches
    if len(lost_batches) > options.max_failed_commits:
        return CommitDecision(
            missing,
            failed_files,
            f"{len(missing)} of {len(planned)} file groups failed ({named}) and {len(lost_batches)} commit "
            f"batches lost every group, more than partial-progress.max-failed-commits="
            f"{options.max_failed_commits}: nothing committed",
        )
    return CommitDecision(missing, failed_files)


class CommitOperator(BaseOperator):
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
    task succeeded. It compares the planned tasks with the delivered results (:func:`decide_commit`):
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
            retry_exponential_backoff=retry_exponential_backoff,
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

    @cached_property
    def hook(self) -> IcebergExecHook:
        """The catalog hook, built after the templates are rendered."""
        return IcebergExecHook(iceberg_exec_conn_id=self.iceberg_exec_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Commit the results; return the commit result JSON."""
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError
        from airflow_provider_iceberg_exec.engine.payloads import resolve_payload

        docs = _flatten(self.results)
        planned_docs = None if self.planned is None else _flatten(self.planned)
        table_name = optional_text(self.table)
        if not docs and not planned_docs:
            self.log.info("Nothing to commit to %s: no results (the plan had nothing to do)", table_name)
            return empty_commit_result(table_name)
        planned = planned_tasks(planned_docs)
        staged = _staged_uris(docs)
        with engine_errors():
            names = {str(d["table"]) for d in [*docs, *(planned_docs or [])] if d.get("table")}
            if table_name is None and len(names) == 1:
                table_name = names.pop()
            elif table_name is None or names - {table_name}:
                raise ConfigurationError(
                    f"results name tables {sorted(names)}; one commit commits to one table ({table_name!r})"
                )
            commit_id = optional_text(self.commit_id) or commit_id_from_context(
                context, task_id=self.task_id, dag_id=self.dag_id
            )
            table = self.hook.load_table(table_name)
            try:
                resolved = [
                    resolve_payload(table.io, {k: v for k, v in d.items() if k != "staged_inputs"})
                    for d in docs
                ]
            except DataFileCodecError:
                # A staged payload is gone: a previous try committed and cleaned up, then failed.
                landed = _landed_snapshot_ids(table, commit_id)
                if not landed:
                    raise
                self.log.info("Commit %s already landed as snapshots %s", commit_id, landed)
                reported = {
                    **empty_commit_result(table_name),
                    "snapshot_ids": landed,
                    "already_committed": True,
                }
                emit_table_asset(
                    self, context, catalog=self.hook.catalog_name, table=table_name, result=reported
                )
                return reported
            schemas = {str(r.get("schema")) for r in resolved}
            if resolved and (len(schemas) != 1 or next(iter(schemas)) not in COMMITTERS):
                raise DataFileCodecError(
                    f"cannot commit results of schemas {sorted(schemas)}; "
                    f"expected one of {sorted(COMMITTERS)}"
                )
            decision = decide_commit(planned, resolved)
            planned_staged = [t.staged_uri for t in planned or [] if t.staged_uri]
            if decision.error is not None:
                reason = self._abandon(table, resolved, [*staged, *planned_staged], commit_id)
                raise AirflowFailException(f"{decision.error}; {reason}")
            committer = _import_callable(COMMITTERS[schemas.pop()])
            if decision.missing:
                self.log.warning(
                    "partial-progress.enabled: %s of %s file groups failed and are left as they are "
                    "(%s data files): %s; committing the %s groups that succeeded",
                    len(decision.missing),
                    len(planned or []),
                    decision.failed_data_files_count,
                    _named(decision.missing),
                    len(resolved),
                )
            self.log.info(
                "Committing %s results (%s data files added) to %s with commit id %s",
                len(resolved),
                sum(len(r.get("added_data_files", []) or []) for r in resolved),
                table_name,
                commit_id,
            )
            quiet = float(self.quiet_period_seconds or 0)
            if quiet > 0:
                branch = str(resolved[0].get("branch") or "main")
                self._wait_for_quiet(table, branch, quiet, float(self.quiet_period_timeout_seconds))
            extra: dict[str, Any] = {}
            if decision.failed_data_files_count:
                extra["failed_data_files_count"] = decision.failed_data_files_count
            result: dict[str, Any] = committer(table, resolved, commit_id=commit_id, **extra)
        log_commit_result(self, result)
        if self.cleanup_staged and (staged or planned_staged):
            # The staged specs of failed groups too: no task will read them again.
            self._discard(table, [*staged, *planned_staged])
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=table_name, result=result)
        return result

    def _abandon(
        self, table: Table, results: Sequence[Mapping[str, Any]], staged: Sequence[str], commit_id: str
    ) -> str:
        """Delete what the delivered tasks wrote (they will never be committed); say what was done.

        Nothing is deleted when a snapshot of ``commit_id`` already landed: the files may be live.
        """
        landed = _landed_snapshot_ids(table, commit_id)
        if landed:
            self.log.warning(
                "Commit %s already landed as snapshots %s: keeping every written file", commit_id, landed
            )
            return f"commit {commit_id} already landed as snapshots {landed}, so no file was deleted"
        from airflow_provider_iceberg_exec.engine.cleanup import delete_unreferenced, uris_of

        written = [uri for r in results for uri in uris_of(r.get("added_data_files") or [])]
        report = delete_unreferenced(table, written, what=f"uncommitted output of {commit_id}")
        if self.cleanup_staged and staged:
            self._discard(table, staged)
        kept = len(report.referenced) + len(report.outside)
        return (
            f"the table is unchanged and the {len(report.deleted)} files the other tasks wrote were deleted"
            + (f" ({kept} kept: referenced by the table or outside its locations)" if kept else "")
        )

    def _wait_for_quiet(self, table: Table, branch: str, quiet: float, timeout: float) -> None:
        """Wait until ``branch`` has had no new snapshot for ``quiet`` seconds, re-checking after waiting.

        :raises CommitConflictError: when the branch does not go quiet within ``timeout`` seconds.
        """
        from airflow_provider_iceberg_exec.engine.errors import CommitConflictError

        deadline = time.monotonic() + timeout
        while True:
            table.refresh()
            head = table.snapshot_by_name(branch)
            if head is None:
                return
            age = time.time() - head.timestamp_ms / 1000.0
            if age >= quiet:
                self.log.info("Branch %s quiet for %.0f s (>= %.0f s); committing", branch, age, quiet)
                return
            wait = quiet - age
            if time.monotonic() + wait > deadline:
                raise CommitConflictError(
                    f"branch {branch!r} had a new snapshot {age:.0f} s ago and did not go quiet for "
                    f"{quiet:.0f} s within {timeout:.0f} s"
                )
            self.log.info(
                "Branch %s had snapshot %s %.0f s ago; waiting %.0f s for a quiet period of %.0f s",
                branch,
                head.snapshot_id,
                age,
                wait,
                quiet,
            )
            time.sleep(wait)

    def _discard(self, table: Table, uris: Iterable[str]) -> None:
        from airflow_provider_iceberg_exec.engine.payloads import discard_payloads

        discard_payloads(table, list(dict.fromkeys(uris)))


def _landed_snapshot_ids(table: Table, commit_id: str) -> list[int]:
    """Ids of the snapshots committed under ``commit_id`` (or its per-batch ids ``<commit_id>.<n>``)."""
    from airflow_provider_iceberg_exec.engine.commit import landed_snapshots

    table.refresh()
    return [snapshot.snapshot_id for snapshot in landed_snapshots(table.metadata, commit_id)]


def _staged_uris(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    from airflow_provider_iceberg_exec.engine.payloads import is_payload_ref

    uris: list[str] = []
    for doc in docs:
        if is_payload_ref(doc):
            uris.append(str(doc["uri"]))
        uris.extend(str(u) for u in doc.get("staged_inputs", []) or [])
    return uris


def _import_callable(path: str) -> Any:
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
