"""The one-call compaction: plan, rewrite every group and commit, as Spark's ``rewrite_data_files``."""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    CompactionResult,
    PlanSummary,
    RewriteResult,
    RewriteTask,
)
from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.session import release_memory
from airflow_provider_iceberg_exec.engine.ops.compaction.commit import commit_compaction, landed_result
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

    Groups run one after another, each bounded by ``limits``. Without partial progress a failing group
    removes what every group wrote and raises; with it, the failure is counted and the rest commit.

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
            failed_files = _rewrite_groups(table, tasks, limits, resolved, results)
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


def _rewrite_groups(
    table: Table,
    tasks: collections.deque[RewriteTask],
    limits: ResourceLimits,
    resolved: CompactionOptions,
    results: list[RewriteResult],
) -> int:
    """Rewrite the groups one after another into ``results``, taking each task off ``tasks``; return the
    files of failed groups."""
    failed_files = 0
    groups = len(tasks)
    for number in range(1, groups + 1):
        task = tasks.popleft()
        log.info(
            "rewriting group %d of %d (%s, %d files)",
            number,
            groups,
            task["group_id"],
            len(task["data_files"]),
        )
        try:
            results.append(execute_rewrite_task(table, task, limits))
        except IcebergExecError:
            if not resolved.partial_progress_enabled:
                raise
            failed_files += len(task["data_files"])
            log.exception("group %s failed; continuing under partial progress", task["group_id"])
    return failed_files
