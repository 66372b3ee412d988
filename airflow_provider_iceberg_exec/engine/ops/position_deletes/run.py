"""The one-call position-delete rewrite: plan, rewrite every group, commit, as Spark's
``rewrite_position_delete_files``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.config import PositionDeleteOptions, ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    PlanSummary,
    PositionDeleteResult,
    RewritePositionDeletesResult,
)
from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError, IcebergExecError
from airflow_provider_iceberg_exec.engine.ops.position_deletes.commit import (
    commit_position_delete_rewrite,
    landed_position_delete_result,
)
from airflow_provider_iceberg_exec.engine.ops.position_deletes.plan import plan_position_delete_rewrite
from airflow_provider_iceberg_exec.engine.ops.position_deletes.rewrite import execute_position_delete_task

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def rewrite_position_deletes(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    branch: str = "main",
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
) -> RewritePositionDeletesResult:
    """Plan, rewrite every group and commit: Spark's ``rewrite_position_delete_files`` in one call.

    Groups run one after another, each bounded by ``limits``. Without partial progress a failing group
    removes what every group wrote and raises; with it, the failure is counted and the rest commit. A
    table without position delete files, or none the options select, is a result with no snapshot.

    :param where: a PyIceberg row filter selecting the partitions whose delete files are rewritten.
    :param options: Spark's options by name.
    :param commit_id: the idempotency key; a retry with an id that landed reports what landed.
    :raises ConfigurationError: for bad options or filter, a v1 table or a version above 3.
    """
    limits = limits or ResourceLimits()
    if (
        commit_id is not None
        and (landed := landed_position_delete_result(table, branch, commit_id)) is not None
    ):
        return landed
    plan = plan_position_delete_rewrite(table, where=where, options=options, branch=branch)
    resolved = PositionDeleteOptions.from_options(plan["options"])
    results: list[PositionDeleteResult] = []
    failed_files = 0
    try:
        for number, task in enumerate(plan["tasks"], start=1):
            log.info(
                "rewriting group %d of %d (%s, %d delete files)",
                number,
                len(plan["tasks"]),
                task["group_id"],
                len(task["delete_files"]),
            )
            try:
                results.append(execute_position_delete_task(table, task, limits))
            except IcebergExecError:
                if not resolved.partial_progress_enabled:
                    raise
                failed_files += len(task["delete_files"])
                log.exception("group %s failed; continuing under partial progress", task["group_id"])
        outcome = commit_position_delete_rewrite(
            table, results, commit_id=commit_id or uuid.uuid4().hex, failed_data_files_count=failed_files
        )
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        written = [uri for done in results for uri in uris_of(done["added_delete_files"])]
        delete_unreferenced(table, written, what="output of a failed position-delete rewrite")
        raise
    outcome["plan"] = PlanSummary(
        base_snapshot_id=plan["base_snapshot_id"], groups=len(plan["tasks"]), skipped=0
    )
    return outcome
