"""The one-call compaction: plan, rewrite every group and commit, as Spark's ``rewrite_data_files``."""

from __future__ import annotations

import collections
import contextvars
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    CompactionResult,
    PlanSummary,
    RewriteResult,
    RewriteTask,
)
from airflow_provider_iceberg_exec.engine.documents.packed import PackedEntries
from airflow_provider_iceberg_exec.engine.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    IcebergExecError,
)
from airflow_provider_iceberg_exec.engine.io.session import release_memory
from airflow_provider_iceberg_exec.engine.ops.compaction.commit import commit_compaction, landed_result
from airflow_provider_iceberg_exec.engine.ops.compaction.common import strategy_of
from airflow_provider_iceberg_exec.engine.ops.compaction.plan import plan_compaction
from airflow_provider_iceberg_exec.engine.ops.compaction.rewrite import execute_rewrite_task
from airflow_provider_iceberg_exec.engine.progress import track

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def compact(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    strategy: str = "binpack",
    sort_order: str | None = None,
    branch: str = "main",
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
    only_files_with_equality_deletes: bool = False,
) -> CompactionResult:
    """Plan, rewrite every group and commit: Spark's ``rewrite_data_files`` in one call.

    Groups run one after another, each bounded by ``limits``, but for small groups without deletes, which
    run several at once within a share of ``limits`` each (:func:`execute_rewrite_tasks`). Without partial
    progress a failing group removes what every group wrote and raises; with it, the failure is counted and
    the rest commit.

    >>> import tempfile, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(5):  # Spark's default min-input-files
    ...     table.append(pa.table({"id": [i]}))
    >>> result = compact(table, options={"target-file-size-bytes": "134217728"}, limits=ResourceLimits())
    >>> result["rewritten_data_files_count"], result["added_data_files_count"], len(result["snapshot_ids"])
    (5, 1, 1)
    >>> compact(table)["snapshot_ids"]  # one file left: nothing to do
    []
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    limits = limits or ResourceLimits()
    if commit_id is not None and (landed := landed_result(table, branch, commit_id)) is not None:
        # A retry after the commit landed: re-planning would find the work done (or, after a partial
        # landing, plan new batches whose ids the landed ones already carry). Report what landed.
        return landed
    plan = plan_compaction(
        table,
        where=where,
        options=options,
        strategy=strategy,
        sort_order=sort_order,
        branch=branch,
        only_files_with_equality_deletes=only_files_with_equality_deletes,
        # Held until the commit, by the tasks and then by their results: packed, not a dict a file.
        packed=True,
    )
    resolved = CompactionOptions.from_options(plan["options"])
    summary = PlanSummary(
        base_snapshot_id=plan["base_snapshot_id"], groups=len(plan["tasks"]), skipped=len(plan["skipped"])
    )
    files = sum(len(task["data_files"]) for task in plan["tasks"])
    input_bytes = sum(
        int(e["data-file"]["file-size-in-bytes"]) for t in plan["tasks"] for e in t["data_files"]
    )
    # Each task is let go once rewritten: its result keeps only what the commit reads. The commit proves
    # the results against the plan's own entries (the results hold them too: no copy).
    planned_entries = [task["data_files"] for task in plan["tasks"]]
    tasks = collections.deque(plan["tasks"])
    del plan
    release_memory(arrow=False)  # the planner's candidates: the rewrite starts without their pages
    results: list[RewriteResult] = []
    try:
        with track("compaction", files_total=files, bytes_total=input_bytes):
            failed_files = execute_rewrite_tasks(
                table,
                tasks,
                limits,
                results,
                partial_progress=resolved.partial_progress_enabled,
                max_at_once=resolved.max_concurrent_file_group_rewrites,
            )
        release_memory()  # the rewrite's buffers: the commit starts without their pages
        outcome = commit_compaction(
            table,
            results,
            commit_id=commit_id or uuid.uuid4().hex,
            failed_data_files_count=failed_files,
            planned_entries=planned_entries,
        )
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        # Nothing this call wrote can be committed any more; what the table does not reference goes.
        written = [uri for done in results for uri in uris_of(done["added_data_files"])]
        delete_unreferenced(table, written, what="output of a failed compaction")
        raise
    outcome["plan"] = summary
    return outcome


def execute_rewrite_tasks(
    table: Table,
    tasks: collections.deque[RewriteTask],
    limits: ResourceLimits,
    results: list[RewriteResult],
    *,
    partial_progress: bool = False,
    max_at_once: int | None = None,
) -> int:
    """Rewrite a plan's groups (:func:`.execute_rewrite_task` each) into ``results``, in plan order,
    taking each task off ``tasks``; return the files of the groups that failed under ``partial_progress``.

    When no group has deletes or moves rows to another spec (:func:`_groups_at_once`), the groups too
    small to be split into lanes run :attr:`ResourceLimits.shares` at a time (at most ``max_at_once``,
    ``max-concurrent-file-group-rewrites``), each within :meth:`ResourceLimits.shared` limits: one lane,
    its share of the memory, the whole's row groups. A table of many small partitions otherwise writes one
    small file after another while the other cores wait (a 30-day table took 1.6x the floor to binpack,
    2.4x to sort). A group large enough for lanes runs alone, in its lanes, within the whole limits.
    Without partial progress the first failure starts no other group; the groups still running finish,
    their results join ``results`` (so that the caller removes their files), and the failure is raised.
    """
    at_once = min(_groups_at_once(tasks, limits), max(1, max_at_once or len(tasks)))
    share = limits.shared(at_once)
    pool = ThreadPoolExecutor(at_once, thread_name_prefix="iceberg-exec-group") if at_once > 1 else None
    running: collections.deque[_Running] = collections.deque()
    groups, started, failed_files = len(tasks), 0, 0
    failure: BaseException | None = None
    try:
        while tasks or running:
            while tasks and failure is None and _may_start(tasks[0], running, at_once):
                task = tasks.popleft()
                started += 1
                log.info(
                    "rewriting group %d of %d (%s, %d files)",
                    started,
                    groups,
                    task.get("group_id"),
                    _file_count(task),
                )
                alone = at_once == 1 or _has_lanes(task)
                future = _start(pool, execute_rewrite_task, table, task, limits if alone else share)
                running.append(_Running(task, alone, future))
            if not running:
                break
            done = running.popleft()
            try:
                results.append(done.future.result())
            except IcebergExecError as err:
                if not partial_progress:
                    failure = failure or err
                    continue
                failed_files += _file_count(done.task)
                log.exception("group %s failed; continuing under partial progress", done.task.get("group_id"))
            except BaseException as err:
                failure = failure or err
    finally:
        if pool is not None:
            pool.shutdown(wait=True)  # a group stops between its batches only when it fails
            _collect(running, results)  # interrupted: what the running groups wrote is the caller's to remove
    if failure is not None:
        raise failure
    return failed_files


def _file_count(task: RewriteTask) -> int:
    """The task's input files, as far as it says (a malformed task fails its own check as it runs)."""
    files = task.get("data_files")
    return len(files) if isinstance(files, Sized) else 0


class _Running(NamedTuple):
    task: RewriteTask
    #: runs with the whole limits, no other group beside it
    alone: bool
    future: Future[RewriteResult]


def _may_start(task: RewriteTask, running: Sequence[_Running], at_once: int) -> bool:
    """Whether ``task`` starts now: nothing runs, or it and the running groups are all small, and fewer
    than ``at_once`` of them."""
    if not running:
        return True
    return len(running) < at_once and not running[0].alone and not _has_lanes(task)


def _has_lanes(task: RewriteTask) -> bool:
    """Whether the group holds two target sizes, which :func:`.rewrite._lanes` would split (a plain
    binpack's live bytes are its stored bytes); a task that does not say runs alone."""
    target = CompactionOptions.from_options(task.get("options")).target_file_size_bytes
    size = task.get("input_bytes")
    return not isinstance(size, int) or size >= 2 * max(1, target)


def _groups_at_once(tasks: Sequence[RewriteTask], limits: ResourceLimits) -> int:
    """How many small groups run at once: :attr:`ResourceLimits.shares` when every group is plain, else
    one.

    A plain group (a binpack or a sort, no rows moving to another spec, no delete file) is bounded by its
    limits whatever they are: a binpack holds one lane's reader and writer, a sort sizes its runs and merge
    from its share (two 29 MB days sorted at once, 128 MiB each: 13.7 s and 490 MiB for 30 days, against
    22.9 s and 445 MiB one after another; at the whole limit each, 14.2 s and 585 MiB). Deletes and
    repartitioning are not measured at a share: their groups run one at a time.
    """
    at_once = min(limits.shares, len(tasks))
    if at_once < 2:
        return 1
    return at_once if all(_plain(task) for task in tasks) else 1


def _plain(task: RewriteTask) -> bool:
    """Whether ``task`` is plain (a binpack or a sort without deletes, its rows kept in their spec); a
    malformed one is not (each task is checked as it runs)."""
    try:
        strategy_of(str(task.get("strategy", "binpack")))  # an unknown one fails its task as it runs
        entries = task["data_files"]
        if isinstance(entries, PackedEntries):
            return not task.get("needs_repartition") and not entries.has_delete_files()
        return not task.get("needs_repartition") and not any(entry.get("delete-files") for entry in entries)
    except (ConfigurationError, KeyError, TypeError, AttributeError):
        return False


def _start(
    pool: ThreadPoolExecutor | None, rewrite: Callable[..., RewriteResult], *args: Any
) -> Future[RewriteResult]:
    """``rewrite(*args)`` on the pool, in this context (the operation's progress tracker), or here."""
    if pool is not None:
        return pool.submit(contextvars.copy_context().run, rewrite, *args)
    done: Future[RewriteResult] = Future()
    try:
        done.set_result(rewrite(*args))
    except BaseException as err:  # raised again by result(), as the pool's would be
        done.set_exception(err)
    return done


def _collect(running: collections.deque[_Running], results: list[RewriteResult]) -> None:
    """Add the results of the groups done that succeeded (a failed one removed what it wrote)."""
    while running:
        future = running.popleft().future
        if not future.cancelled() and future.exception() is None:
            results.append(future.result())
