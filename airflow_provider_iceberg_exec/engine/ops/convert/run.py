"""The one-call conversion: plan, convert every partition, commit (Java's ``ConvertEqualityDeleteFiles``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.commit.snapshots import find_commit
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    CONVERT_TASK_RESULT,
    ConvertPlan,
    ConvertResult,
    ConvertTaskResult,
)
from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.ops.convert.commit import commit_conversion, empty_convert_result
from airflow_provider_iceberg_exec.engine.ops.convert.plan import plan_conversion
from airflow_provider_iceberg_exec.engine.ops.convert.task import convert_task

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["convert_equality_deletes"]

log = logging.getLogger(__name__)


def convert_equality_deletes(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    branch: str = "main",
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
) -> ConvertResult:
    """Convert the equality deletes of ``table`` into position deletes, committed as one ``replace``.

    Only delete files and metadata are written: the rows equality deletes match are found by a narrow,
    spilling join of key columns, and their positions written as position delete files (merged with the
    file-scoped position deletes of the same data files). A table without equality deletes has nothing
    to do.

    >>> import tempfile, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> table.append(pa.table({"id": [1, 2]}))
    >>> result = convert_equality_deletes(table, limits=ResourceLimits(memory_limit_bytes=256 * 2**20))
    >>> result["converted_equality_delete_files_count"], result["snapshot_ids"]
    (0, [])
    >>> catalog.engine.dispose(); workdir.cleanup()

    :param where: a PyIceberg row filter: equality deletes whose partition may match it are converted.
    :param options: ``target-file-size-bytes``, ``delete-granularity`` (``file`` or ``partition``).
    :param commit_id: the idempotency key; a retry with a commit id that landed reports that commit.
    :raises ConfigurationError: for a v1 table, bad options or filter (table unchanged).
    :raises CommitValidationError: when the table changed in a conflicting way; run it again.
    """
    limits = limits or ResourceLimits()
    commit_id = commit_id or uuid.uuid4().hex
    refresh_table(table)
    if (landed := find_commit(table.metadata, branch, commit_id)) is not None:
        result = empty_convert_result(table_name(table))
        result["snapshot_ids"] = [landed.snapshot_id]
        result["already_committed"] = True
        return result
    plan = plan_conversion(table, where=where, options=options, branch=branch)
    results: list[ConvertTaskResult] = []
    try:
        for number, task in enumerate(plan["tasks"], start=1):
            log.info(
                "converting task %d of %d (%d data files)",
                number,
                len(plan["tasks"]),
                len(task["data_files"]),
            )
            results.append(convert_task(table, task, limits))
        dangling = plan.get("dangling_equality_delete_files", [])
        if not results and dangling:
            # Only deletes that apply to no data file: nothing to match, just remove them.
            return _remove_dangling(table, plan, dangling, commit_id)
        return commit_conversion(table, results, commit_id=commit_id)
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        written = [uri for done in results for uri in uris_of(done["added_delete_files"])]
        delete_unreferenced(table, written, what="output of a failed conversion")
        raise


def _remove_dangling(table: Table, plan: ConvertPlan, dangling: list[str], commit_id: str) -> ConvertResult:
    """Commit the removal of equality deletes that apply to no live data file (re-proven at the base)."""
    base = plan["base_snapshot_id"]
    assert base is not None  # a plan with deletes has a snapshot
    empty = ConvertTaskResult(
        schema=CONVERT_TASK_RESULT,
        table=plan["table"],
        branch=plan["branch"],
        base_snapshot_id=base,
        task_id="convert-dangling",
        equality_delete_files=dangling,
        data_files=[],
        merged_position_delete_files=[],
        added_delete_files=[],
        dangling_equality_delete_files=dangling,
        matched_rows=0,
        data_rows_read=0,
        delete_rows_read=0,
        peak_rss_bytes=0,
        spilled_bytes=0,
        elapsed_seconds=0.0,
    )
    return commit_conversion(table, [empty], commit_id=commit_id)
