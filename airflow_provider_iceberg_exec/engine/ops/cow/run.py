"""A copy-on-write in one call and one process: plan, every task one after another, one commit; the CLI's
way to run it. On failure before the catalog accepted the commit, every file written is removed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import CowResult, CowRewriteResult
from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError
from airflow_provider_iceberg_exec.engine.ops.cow.commit import commit_cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.cow.plan import plan_cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.cow.task import execute_cow_task, task_totals
from airflow_provider_iceberg_exec.engine.progress import track

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["cow_rewrite"]

log = logging.getLogger(__name__)


def cow_rewrite(
    table: Table,
    *,
    operation: str,
    where: str,
    set_columns: Mapping[str, str] | None = None,
    source_files: Sequence[str] = (),
    branch: str = "main",
    isolation_level: str | None = None,
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
) -> CowRewriteResult:
    """Plan, run every task and commit a copy-on-write ``delete``, ``update`` or ``overwrite`` in one call.

    Tasks run one after another, each bounded by ``limits``. When anything fails before the catalog
    accepted the commit, every file written is removed and the table is unchanged.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> result = cow_rewrite(table, operation="delete", where="id = 1", limits=ResourceLimits())
    >>> result["deleted_rows"], sorted(table.scan().to_arrow()["id"].to_pylist())
    (1, [0, 2])
    >>> catalog.engine.dispose(); workdir.cleanup()

    :returns: the commit result (``iceberg-exec/cow-commit-result@1``) with a ``plan`` summary.
    :raises ConfigurationError: for bad input (nothing was changed).
    """
    limits = limits or ResourceLimits()
    plan = plan_cow_rewrite(
        table,
        operation=operation,
        where=where,
        set_columns=set_columns,
        source_files=source_files,
        branch=branch,
        isolation_level=isolation_level,
    )
    results: list[CowResult] = []
    totals = [task_totals(task) for task in plan["tasks"]]
    files, size = sum(t[0] for t in totals), sum(t[1] for t in totals)
    try:
        with track(plan["operation"], files_total=files, bytes_total=size):
            for number, task in enumerate(plan["tasks"], start=1):
                log.info("running %s task %d of %d", plan["operation"], number, len(plan["tasks"]))
                results.append(execute_cow_task(table, task, limits))
        outcome = commit_cow_rewrite(table, results, commit_id=commit_id or uuid.uuid4().hex)
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        # Nothing this call wrote can be committed any more; what the table does not reference goes.
        written = [uri for result in results for uri in uris_of(result["added_data_files"])]
        delete_unreferenced(table, written, what=f"output of a failed {operation}")
        raise
    return {
        **outcome,
        "plan": {
            "base_snapshot_id": plan["base_snapshot_id"],
            "tasks": len(plan["tasks"]),
            "candidate_data_files_count": plan["candidate_data_files_count"],
            "dropped_without_reading_count": plan["dropped_without_reading_count"],
        },
    }
