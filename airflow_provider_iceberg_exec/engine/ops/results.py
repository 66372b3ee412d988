"""Commit the results of a run, whatever produced them: the one policy every caller applies.

Airflow's ``CommitOperator`` and the CLI's ``commit`` both call :func:`commit_results`, which

1. resolves staged payload references (a payload already gone after a commit that landed is reported as
   that commit, not as an error);
2. dispatches on the results' schema to the operation's commit (compaction's ``replace``, copy-on-write's
   ``overwrite``); results of mixed or unknown schemas are refused;
3. compares them with the plan when it is given (:func:`decide_commit`): under Spark's
   ``partial-progress.enabled`` the delivered compaction groups commit and the failed ones are counted;
   otherwise, and always for copy-on-write and MERGE (a partial delete or merge is never committed),
   nothing commits, the files the delivered tasks wrote are deleted if the table does not reference them, and
   :class:`~airflow_provider_iceberg_exec.engine.errors.IncompleteRunError` says why;
4. waits for a quiet period on the branch when asked, commits, and discards the staged payloads.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, discard_payloads, uris_of
from airflow_provider_iceberg_exec.engine.commit.snapshots import landed_snapshots
from airflow_provider_iceberg_exec.engine.config import CompactionOptions, PositionDeleteOptions
from airflow_provider_iceberg_exec.engine.contracts import (
    COMPACTION_RESULT,
    CONVERT_TASK_RESULT,
    COW_RESULT,
    MERGE_TASK_RESULT,
    POSITION_DELETE_RESULT,
    REWRITE_RESULT,
    CompactionResult,
    ConvertResult,
    CowCommitResult,
    RewritePositionDeletesResult,
)
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    ConfigurationError,
    DataFileCodecError,
    IncompleteRunError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.io.payloads import PAYLOAD_REF_SCHEMA, resolve_payload

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = [
    "COMMITTERS",
    "PARTIAL_PROGRESS_SCHEMAS",
    "CommitDecision",
    "PlannedTask",
    "QuietPeriod",
    "commit_results",
    "decide_commit",
    "empty_commit_result",
    "planned_tasks",
    "results_table",
]

log = logging.getLogger(__name__)

#: result schema -> (module of engine.ops, the function committing a list of such results)
COMMITTERS: dict[str, tuple[str, str]] = {
    REWRITE_RESULT: ("compaction", "commit_compaction"),
    COW_RESULT: ("cow", "commit_cow_rewrite"),
    CONVERT_TASK_RESULT: ("convert", "commit_conversion"),
    POSITION_DELETE_RESULT: ("position_deletes", "commit_position_delete_rewrite"),
    MERGE_TASK_RESULT: ("merge", "commit_merge"),
}
#: result schemas whose missing results ``partial-progress.enabled`` tolerates (compaction's and
#: position-delete compaction's; never a copy-on-write or merge result: committing the other tasks'
#: changes would be a partial delete, update or merge)
PARTIAL_PROGRESS_SCHEMAS = frozenset({REWRITE_RESULT, POSITION_DELETE_RESULT})
_NAMED_AT_MOST = 10


def empty_commit_result(table: str) -> CompactionResult:
    """The result of a commit with nothing to commit.

    >>> empty_commit_result("ns.t")["snapshot_ids"]
    []
    """
    return CompactionResult(
        schema=COMPACTION_RESULT,
        table=table,
        rewritten_data_files_count=0,
        added_data_files_count=0,
        rewritten_bytes_count=0,
        failed_data_files_count=0,
        removed_delete_files_count=0,
        snapshot_ids=[],
        already_committed=False,
        commits=[],
        peak_rss_bytes=0,
        spilled_bytes=0,
    )


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


@dataclass(frozen=True)
class QuietPeriod:
    """Commit only once the branch has had no new snapshot for ``seconds`` (re-checked after waiting).

    :param seconds: the quiet time wanted; 0 commits at once.
    :param timeout_seconds: give up after this long with a :class:`CommitConflictError` (retry later).
    """

    seconds: float = 0.0
    timeout_seconds: float = 3600.0


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


def planned_tasks(planned: Sequence[Mapping[str, Any]] | None) -> list[PlannedTask] | None:
    """The plan's task specs (or their staged references) as :class:`PlannedTask` entries.

    Reads only ids, counts and batch numbers: a staged spec is not resolved. A staged reference carries
    its ``data_files_count``; an older one only its ``file_count`` (data and delete files), used instead.

    :param planned: the plan's task specs, or ``None`` when the commit was not given the plan.
    :returns: ``None`` for ``None`` (the commit then commits whatever results arrive).

    >>> planned_tasks([{"group_id": 3, "commit_batch": 0, "data_files": [{}, {}]}])
    [PlannedTask(task_id='3', data_files_count=2, commit_batch=0, staged_uri=None)]
    >>> planned_tasks(None) is None
    True
    """
    if planned is None:
        return None
    out: list[PlannedTask] = []
    for doc in planned:
        if doc.get("schema") == PAYLOAD_REF_SCHEMA:
            count = doc.get("data_files_count", doc.get("file_count", 0))
            staged = str(doc["uri"]) if doc.get("uri") else None
        else:
            # A compaction task rewrites data files; a position-delete task, delete files.
            count = len(doc.get("data_files", doc.get("delete_files", [])) or [])
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


def _missing_tasks(
    planned: Sequence[PlannedTask], results: Sequence[Mapping[str, Any]]
) -> tuple[tuple[PlannedTask, ...], str | None]:
    """The planned tasks without a result, or a reason the results cannot be matched to the plan."""
    delivered = [_task_key(r) for r in results]
    if all(t.task_id is not None for t in planned) and all(d is not None for d in delivered):
        planned_ids = {t.task_id for t in planned}
        strangers = sorted({d for d in delivered if d not in planned_ids}, key=str)
        if strangers:
            return (), (
                f"results of tasks {', '.join(map(str, strangers))} are not in the plan given as "
                "`planned`; commit each plan's results with its own plan"
            )
        return tuple(t for t in planned if t.task_id not in set(delivered)), None
    if len(results) == len(planned):
        return (), None
    # References without ids (staged by an older plan): only the counts can be compared.
    return (), (
        f"{len(planned) - len(results)} of {len(planned)} planned tasks delivered no result "
        "(their ids are unknown); nothing committed"
    )


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
    if planned is None:
        return CommitDecision()
    missing, error = _missing_tasks(planned, results)
    if error is not None:
        return CommitDecision(error=error)
    if not missing:
        return CommitDecision()
    failed_files = sum(t.data_files_count for t in missing)
    named = _named(missing)
    if not results:
        return CommitDecision(
            missing, failed_files, f"every planned task failed ({len(missing)}: {named}); nothing to commit"
        )
    schema = str(results[0].get("schema"))
    if schema not in PARTIAL_PROGRESS_SCHEMAS:
        return CommitDecision(
            missing,
            failed_files,
            f"{len(missing)} of {len(planned)} planned tasks delivered no result ({named}); {schema} results "
            "are committed all or nothing (a partial delete or update is never committed)",
        )
    options = _partial_progress_options(schema, results[0].get("options"))
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


def _partial_progress_options(
    schema: str, options: Mapping[str, Any] | None
) -> CompactionOptions | PositionDeleteOptions:
    """The partial-progress options of a result's operation, read from its options."""
    if schema == POSITION_DELETE_RESULT:
        return PositionDeleteOptions.from_options(options)
    return CompactionOptions.from_options(options)


def results_table(
    table: str | None, results: Sequence[Mapping[str, Any]], planned: Sequence[Mapping[str, Any]]
) -> str | None:
    """The one table the results (and the plan) are for; ``table`` when given, which they must match.

    :raises ConfigurationError: when they name several tables, or another than ``table``.

    >>> results_table(None, [{"table": "ns.t"}], [])
    'ns.t'
    """
    names = {str(d["table"]) for d in [*results, *planned] if d.get("table")}
    if table is None and len(names) <= 1:
        return names.pop() if names else None
    if table is None or names - {table}:
        raise ConfigurationError(
            f"results name tables {sorted(names)}; one commit commits to one table ({table!r})"
        )
    return table


def _staged_uris(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    uris: list[str] = []
    for doc in docs:
        if doc.get("schema") == PAYLOAD_REF_SCHEMA:
            uris.append(str(doc["uri"]))
        uris.extend(str(u) for u in doc.get("staged_inputs", []) or [])
    return uris


def _landed_ids(table: Table, commit_id: str) -> list[int]:
    refresh_table(table)
    return [snapshot.snapshot_id for snapshot in landed_snapshots(table.metadata, commit_id)]


def commit_results(
    table: Table,
    results: Sequence[Mapping[str, Any]],
    *,
    commit_id: str,
    planned: Sequence[Mapping[str, Any]] | None = None,
    quiet_period: QuietPeriod | None = None,
    discard_staged: bool = True,
) -> CompactionResult | CowCommitResult | ConvertResult | RewritePositionDeletesResult:
    """Commit the delivered results of one run, with the rules of the module docstring.

    .. code-block:: python

        result = commit_results(table, results, commit_id="nightly-2026-11-30", planned=plan["tasks"])

    :param table: the table the results are for.
    :param results: result documents or their staged references, as the tasks delivered them.
    :param commit_id: the idempotency key: a commit id that already landed is reported, never repeated.
    :param planned: the plan's task specs (or references), to tell a failed task from an empty plan.
    :param quiet_period: wait until the branch has been quiet this long before committing.
    :param discard_staged: delete the staged payloads of the results and of the plan afterwards.
    :returns: the operation's commit result document.
    :raises IncompleteRunError: when planned tasks failed and the results may not be committed without
        them; the table is unchanged.
    :raises DataFileCodecError: for results of mixed or unknown schemas, or bad documents.
    """
    planned_specs = planned_tasks(planned)
    staged = _staged_uris(results)
    planned_staged = [t.staged_uri for t in planned_specs or [] if t.staged_uri]
    if not results and not planned_specs:
        return empty_commit_result(table_name(table))
    try:
        resolved = [
            resolve_payload(table.io, {k: v for k, v in d.items() if k != "staged_inputs"}) for d in results
        ]
    except DataFileCodecError:
        # A staged payload is gone: a previous try committed and cleaned up, then failed.
        landed = _landed_ids(table, commit_id)
        if not landed:
            raise
        log.info("Commit %s already landed as snapshots %s", commit_id, landed)
        landed_result = empty_commit_result(table_name(table))
        landed_result["snapshot_ids"] = landed
        landed_result["already_committed"] = True
        return landed_result
    schemas = {str(r.get("schema")) for r in resolved}
    if resolved and (len(schemas) != 1 or next(iter(schemas)) not in COMMITTERS):
        raise DataFileCodecError(
            f"cannot commit results of schemas {sorted(schemas)}; expected one of {sorted(COMMITTERS)}"
        )
    decision = decide_commit(planned_specs, resolved)
    cleanup = [*staged, *planned_staged] if discard_staged else []
    if decision.error is not None:
        raise IncompleteRunError(f"{decision.error}; {_abandon(table, resolved, cleanup, commit_id)}")
    if decision.missing:
        log.warning(
            "partial-progress.enabled: %s of %s file groups failed and are left as they are (%s data "
            "files): %s; committing the %s groups that succeeded",
            len(decision.missing),
            len(planned_specs or []),
            decision.failed_data_files_count,
            _named(decision.missing),
            len(resolved),
        )
    if quiet_period is not None and quiet_period.seconds > 0:
        wait_for_quiet(table, str(resolved[0].get("branch") or "main"), quiet_period)
    module, function = COMMITTERS[schemas.pop()]
    committer = getattr(
        importlib.import_module(f"airflow_provider_iceberg_exec.engine.ops.{module}"), function
    )
    extra = {"failed_data_files_count": decision.failed_data_files_count} if decision.missing else {}
    result: CompactionResult | CowCommitResult | ConvertResult | RewritePositionDeletesResult = committer(
        table, resolved, commit_id=commit_id, **extra
    )
    if cleanup:
        # The staged specs of failed groups too: no task will read them again.
        discard_payloads(table, cleanup)
    return result


def _abandon(
    table: Table, results: Sequence[Mapping[str, Any]], staged: Sequence[str], commit_id: str
) -> str:
    """Delete what the delivered tasks wrote (they will never be committed); say what was done.

    Nothing is deleted when a snapshot of ``commit_id`` already landed: the files may be live.
    """
    landed = _landed_ids(table, commit_id)
    if landed:
        log.warning("Commit %s already landed as snapshots %s: keeping every written file", commit_id, landed)
        return f"commit {commit_id} already landed as snapshots {landed}, so no file was deleted"
    written = [
        uri
        for r in results
        for uri in uris_of([*(r.get("added_data_files") or []), *(r.get("added_delete_files") or [])])
    ]
    report = delete_unreferenced(table, written, what=f"uncommitted output of {commit_id}")
    if staged:
        discard_payloads(table, staged)
    kept = len(report.referenced) + len(report.outside) + len(report.unproven)
    return (
        f"the table is unchanged and the {len(report.deleted)} files the other tasks wrote were deleted"
        + (f" ({kept} kept: referenced by the table, outside its locations or unproven)" if kept else "")
    )


def wait_for_quiet(table: Table, branch: str, quiet: QuietPeriod) -> None:
    """Wait until ``branch`` has had no new snapshot for ``quiet.seconds``, re-checking after waiting.

    :raises CommitConflictError: when the branch does not go quiet within ``quiet.timeout_seconds``.
    """
    deadline = time.monotonic() + quiet.timeout_seconds
    while True:
        refresh_table(table)
        head = table.snapshot_by_name(branch)
        if head is None:
            return
        age = time.time() - head.timestamp_ms / 1000.0
        if age >= quiet.seconds:
            log.info("Branch %s quiet for %.0f s (>= %.0f s); committing", branch, age, quiet.seconds)
            return
        wait = quiet.seconds - age
        if time.monotonic() + wait > deadline:
            raise CommitConflictError(
                f"branch {branch!r} had a new snapshot {age:.0f} s ago and did not go quiet for "
                f"{quiet.seconds:.0f} s within {quiet.timeout_seconds:.0f} s"
            )
        log.info(
            "Branch %s had snapshot %s %.0f s ago; waiting %.0f s for a quiet period of %.0f s",
            branch,
            head.snapshot_id,
            age,
            wait,
            quiet.seconds,
        )
        time.sleep(wait)
