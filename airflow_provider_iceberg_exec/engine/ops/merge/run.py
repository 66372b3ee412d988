"""A MERGE in one call and one process: plan, every task one after another, one commit; the CLI's way
to run it, and ``upsert``, its shorthand. On failure before the catalog accepted the commit, every file
written is removed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import CommitStateUnknownError
from airflow_provider_iceberg_exec.engine.ops.merge.commit import commit_merge, landed_merge_result
from airflow_provider_iceberg_exec.engine.ops.merge.plan import DEFAULT_TASK_SIZE_BYTES, plan_merge
from airflow_provider_iceberg_exec.engine.ops.merge.task import execute_merge_task, task_totals
from airflow_provider_iceberg_exec.engine.progress import track

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["merge", "upsert"]

log = logging.getLogger(__name__)


def merge(
    table: Table,
    *,
    on: Sequence[str],
    source_files: Sequence[str] = (),
    source_table: str | None = None,
    source_snapshot_id: int | None = None,
    when_matched: Sequence[str] = (),
    when_not_matched: Sequence[str] = (),
    when_not_matched_by_source: Sequence[str] = (),
    mode: str | None = None,
    isolation_level: str | None = None,
    branch: str = "main",
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
    task_size_bytes: int = DEFAULT_TASK_SIZE_BYTES,
) -> dict[str, Any]:
    """MERGE a source into ``table``: plan, run every task within ``limits``, commit one snapshot.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    >>> table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    >>> pq.write_table(pa.table({"id": [2, 3], "v": ["B", "C"]}), f"{workdir.name}/src.parquet")
    >>> result = merge(table, on=["id"], source_files=[f"{workdir.name}/src.parquet"],
    ...                when_matched=["UPDATE SET *"], when_not_matched=["INSERT *"])
    >>> result["num_target_rows_updated"], result["num_target_rows_inserted"]
    (1, 1)
    >>> sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    [{'id': 1, 'v': 'a'}, {'id': 2, 'v': 'B'}, {'id': 3, 'v': 'C'}]
    >>> catalog.engine.dispose(); workdir.cleanup()

    :param commit_id: the idempotency key; when a snapshot with it already landed, that snapshot is
        reported (``already_committed``, zero counts, ``plan`` ``None``) and nothing is planned or written.
    :returns: the commit result (``iceberg-exec/merge-result@1``) with a ``plan`` summary.
    :raises ConfigurationError: for bad input, or a target row matched by two source rows (nothing changed).
    """
    limits = limits or ResourceLimits()
    if commit_id is not None and (landed := landed_merge_result(table, branch, commit_id)) is not None:
        return {**landed, "plan": None}  # a retry after the commit landed: report it, merge nothing again
    plan = plan_merge(
        table,
        on=on,
        source_files=source_files,
        source_table=source_table,
        source_snapshot_id=source_snapshot_id,
        when_matched=when_matched,
        when_not_matched=when_not_matched,
        when_not_matched_by_source=when_not_matched_by_source,
        mode=mode,
        isolation_level=isolation_level,
        branch=branch,
        task_size_bytes=task_size_bytes,
    )
    results: list[dict[str, Any]] = []
    totals = [task_totals(task) for task in plan["tasks"]]
    try:
        with track("merge", files_total=sum(t[0] for t in totals), bytes_total=sum(t[1] for t in totals)):
            for number, task in enumerate(plan["tasks"], start=1):
                log.info("running merge task %d of %d", number, len(plan["tasks"]))
                results.append(execute_merge_task(table, task, limits))
        outcome = commit_merge(table, results, commit_id=commit_id or uuid.uuid4().hex)
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        written = [
            uri for r in results for uri in uris_of([*r["added_data_files"], *r["added_delete_files"]])
        ]
        delete_unreferenced(table, written, what="output of a failed merge")
        raise
    return {
        **outcome,
        "plan": {
            "base_snapshot_id": plan["base_snapshot_id"],
            "tasks": len(plan["tasks"]),
            "candidate_data_files_count": plan["candidate_data_files_count"],
            "conflict_filter": plan["conflict_filter"],
            "source_rows": plan["source_rows"],
        },
    }


def upsert(
    table: Table,
    *,
    join_cols: Sequence[str] | None = None,
    source_files: Sequence[str] = (),
    source_table: str | None = None,
    source_snapshot_id: int | None = None,
    when_matched_update_all: bool = True,
    when_not_matched_insert_all: bool = True,
    mode: str | None = None,
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
    branch: str = "main",
) -> dict[str, Any]:
    """Update the matched rows and insert the others: MERGE's shorthand, with PyIceberg's argument names.

    ``join_cols`` defaults to the table's identifier fields, as PyIceberg's ``upsert``. Unlike PyIceberg,
    a matched row is rewritten even when its values are unchanged (Spark's ``UPDATE SET *``), the result
    is one snapshot, and duplicate source keys fail only where they match a target row.

    :returns: as :func:`merge`, plus PyIceberg's ``rows_updated`` and ``rows_inserted``.
    """
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if not join_cols:
        schema = table.metadata.schema()
        join_cols = [schema.find_column_name(i) or "" for i in schema.identifier_field_ids]
        if not join_cols:
            raise ConfigurationError(
                "give the join columns (join_cols / --on): the table has no identifier fields to default to"
            )
    if not (when_matched_update_all or when_not_matched_insert_all):
        raise ConfigurationError("an upsert that neither updates nor inserts does nothing; enable one")
    result = merge(
        table,
        on=list(join_cols),
        source_files=source_files,
        source_table=source_table,
        source_snapshot_id=source_snapshot_id,
        when_matched=["UPDATE SET *"] if when_matched_update_all else [],
        when_not_matched=["INSERT *"] if when_not_matched_insert_all else [],
        mode=mode,
        limits=limits,
        commit_id=commit_id,
        branch=branch,
    )
    return {
        **result,
        "rows_updated": result["num_target_rows_updated"],
        "rows_inserted": result["num_target_rows_inserted"],
    }
