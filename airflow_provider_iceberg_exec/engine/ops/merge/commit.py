"""Committing a MERGE: the results of every task of one plan as one snapshot, after proving what each
result claims against the base snapshot and the files themselves.

- Copy-on-write: ``overwrite`` (``append`` when nothing is removed) with the plan's conflict filter and
  isolation level, the deletes of the removed files dropped with them, as Spark's ``CopyOnWriteOperation``.
- Merge-on-read: a row delta (``overwrite``, or ``delete`` with deletes only) validated as Spark's MERGE
  validates it (:func:`~.commit.snapshots.commit_row_delta`).
- Only inserts (an insert-only MERGE, as Spark plans it): a plain ``append``, not validated.

The commit trusts no result: every task of the plan must be there once; removed files must be live in the
base snapshot with the deletes the result applied, and their rows must add up; every added file must
exist with its size and row count; every position of a new delete file must name a live base file that
the plan gave that task.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    CommitOutcome,
    DanglingDeletes,
    commit_overwrite,
    commit_row_delta,
    find_commit,
)
from airflow_provider_iceberg_exec.engine.commit.verification import (
    BaseFiles,
    RemovedClaim,
    check_rows,
    verify_added_files,
)
from airflow_provider_iceberg_exec.engine.contracts import MERGE_RESULT
from airflow_provider_iceberg_exec.engine.documents.merge import check_merge_task_result
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json
from airflow_provider_iceberg_exec.engine.meta.scan import check_branch, parse_where
from airflow_provider_iceberg_exec.engine.ops.merge.plan import check_merge_format

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

__all__ = ["commit_merge", "landed_merge_result"]

log = logging.getLogger(__name__)

#: the keys every result of one plan agrees on
_PLAN_KEYS = (
    "table",
    "branch",
    "base_snapshot_id",
    "schema_id",
    "mode",
    "isolation_level",
    "on",
    "clauses",
    "conflict_filter",
    "tasks_count",
    "plan_id",
)
_COUNTS = (
    "num_target_rows_updated",
    "num_target_rows_deleted",
    "num_target_rows_inserted",
    "num_target_rows_copied",
    "num_target_rows_matched",
    "read_bytes",
    "written_bytes",
)


def commit_merge(table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str) -> dict[str, Any]:
    """Commit the results of every task of one MERGE plan as one snapshot, idempotently by ``commit_id``.

    When no row changed and none is inserted, nothing is committed. When validation fails, the new files
    are deleted.

    :returns: ``iceberg-exec/merge-result@1`` with Spark's and Delta's row counts.
    :raises ConfigurationError: for results of different plans, or a plan's task missing.
    :raises DataFileCodecError: for a result whose claims do not hold.
    :raises CommitValidationError: when a concurrent commit conflicts (plan again).
    """
    docs = [check_merge_task_result(r) for r in results]
    first = _one_plan(docs, table_name(table))
    summary = _summary(table, docs, commit_id)
    refresh_table(table)
    branch = str(first["branch"])
    check_branch(table.metadata, branch, summary["table"])
    check_merge_format(table.metadata, summary["table"])  # the table may have been upgraded since the plan
    specs, schema = table.metadata.specs(), table.metadata.schema()
    removed = [data_file_from_json(f, specs, schema) for d in docs for f in d["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for d in docs for f in d["added_data_files"]]
    deletes = [data_file_from_json(f, specs, schema) for d in docs for f in d["added_delete_files"]]
    summary.update(
        removed_data_files_count=len(removed),
        added_data_files_count=len(added),
        added_delete_files_count=len(deletes),
    )
    if not (removed or added or deletes):
        log.info("merge into %s changed no row: nothing to commit", summary["table"])
        return summary
    outcome = _commit(table, docs, removed, added, deletes, commit_id=commit_id, branch=branch)
    summary["snapshot_ids"] = [outcome.snapshot_id]
    summary["snapshot_operation"] = outcome.summary.get("operation")
    summary["already_committed"] = outcome.already_committed
    summary["removed_delete_files_count"] = int(outcome.summary.get("removed-delete-files", "0"))
    log.info(
        "%s merge into %s (%s): snapshot %s (%s); rows updated %d, deleted %d, inserted %d",
        "Found" if outcome.already_committed else "Committed",
        summary["table"],
        first["mode"],
        outcome.snapshot_id,
        summary["snapshot_operation"],
        summary["num_target_rows_updated"],
        summary["num_target_rows_deleted"],
        summary["num_target_rows_inserted"],
    )
    return summary


def landed_merge_result(table: Table, branch: str, commit_id: str) -> dict[str, Any] | None:
    """The result of a merge whose ``commit_id`` already landed (its snapshot; counts are not kept), else
    ``None``.

    A retry must not plan again: against the merged table the source would match what it inserted (a
    second write, and duplicate inserted keys would even fail the cardinality check).
    """
    refresh_table(table)
    landed = find_commit(table.metadata, branch, commit_id)
    if landed is None:
        return None
    log.info("merge commit %s already landed as snapshot %s", commit_id, landed.snapshot_id)
    summary = _summary(table, [dict.fromkeys((*_COUNTS, "mode"), 0)], commit_id)
    summary.update(
        mode=None,
        snapshot_ids=[landed.snapshot_id],
        snapshot_operation=landed.summary.operation.value if landed.summary else None,
        already_committed=True,
    )
    return summary


def _one_plan(docs: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """Refuse results of several plans or another table, a task twice, or a task missing."""
    if not docs:
        raise ConfigurationError("no merge task result to commit; pass every task's result")
    first = docs[0]
    if len({tuple(repr(d[k]) for k in _PLAN_KEYS) for d in docs}) != 1:
        raise ConfigurationError("the results come from different merge plans; commit each plan alone")
    if first["table"] != name:
        raise ConfigurationError(f"the results are for table {first['table']}, not {name}")
    ids = [str(d["task_id"]) for d in docs]
    if len(set(ids)) != len(ids):
        raise DataFileCodecError("the results list a task more than once; commit each task's result once")
    if len(ids) != int(first["tasks_count"]):
        raise ConfigurationError(
            f"the plan has {first['tasks_count']} task(s) but {len(ids)} result(s) were given; a missing "
            "task would leave its rows unmerged"
        )
    if sum(1 for d in docs if d["inserts"]) > 1:
        raise DataFileCodecError("more than one result claims the inserts")
    return first


def _summary(table: Table, docs: Sequence[Mapping[str, Any]], commit_id: str) -> dict[str, Any]:
    totals = {key: sum(int(d[key]) for d in docs) for key in _COUNTS}
    return {
        "schema": MERGE_RESULT,
        "table": table_name(table),
        "mode": docs[0]["mode"],
        "commit_id": commit_id,
        "snapshot_ids": [],
        "snapshot_operation": None,
        "already_committed": False,
        **totals,
        "num_affected_rows": totals["num_target_rows_updated"]
        + totals["num_target_rows_deleted"]
        + totals["num_target_rows_inserted"],
        "removed_data_files_count": 0,
        "added_data_files_count": 0,
        "added_delete_files_count": 0,
        "removed_delete_files_count": 0,
        "peak_rss_bytes": max(int(d.get("peak_rss_bytes") or 0) for d in docs),
        "spilled_bytes": max(int(d.get("spilled_bytes") or 0) for d in docs),
    }


def _commit(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    removed: list[DataFile],
    added: list[DataFile],
    deletes: list[DataFile],
    *,
    commit_id: str,
    branch: str,
) -> CommitOutcome:
    first = docs[0]
    schema = table.metadata.schema()
    base = first["base_snapshot_id"]
    conflict_filter = parse_where(str(first["conflict_filter"]), schema)
    base_files = BaseFiles(table, base, conflict_filter)
    if find_commit(table.metadata, branch, commit_id) is None:
        for doc in docs:
            _verify(table, doc, base_files)
    common: dict[str, Any] = {
        "base_snapshot_id": None if base is None else int(base),
        "commit_id": commit_id,
        "branch": branch,
        "snapshot_properties": {"iceberg-exec.operation": "merge"},
    }
    try:
        if not removed and not deletes and _insert_only(first):
            # Spark plans an insert-only MERGE as a plain append: no validation.
            return commit_overwrite(
                table,
                deleted_data_files=[],
                added_data_files=added,
                conflict_detection_filter=conflict_filter,
                isolation_level="snapshot",
                **common,
            )
        if first["mode"] == "copy-on-write":
            return commit_overwrite(
                table,
                deleted_data_files=removed,
                added_data_files=added,
                conflict_detection_filter=conflict_filter,
                isolation_level=str(first["isolation_level"]),
                dangling_deletes=DanglingDeletes.REWRITTEN,
                **common,
            )
        referenced = sorted({p for d in docs for p in d["changed_data_files"]})
        specs, schema = table.metadata.specs(), table.metadata.schema()
        replaced = [
            data_file_from_json(f, specs, schema) for d in docs for f in d.get("rewritten_delete_files", [])
        ]
        return commit_row_delta(
            table,
            added_data_files=added,
            added_delete_files=deletes,
            removed_delete_files=replaced,
            referenced_data_files=[base_files.live[p].data_file for p in referenced],
            conflict_detection_filter=conflict_filter,
            isolation_level=str(first["isolation_level"]),
            **common,
        )
    except CommitValidationError:
        written = sorted({f.file_path for f in [*added, *deletes]})  # a Puffin holds many DVs
        delete_unreferenced(table, written, what=f"uncommitted output of merge {commit_id}")
        raise


def _insert_only(doc: Mapping[str, Any]) -> bool:
    clauses = doc["clauses"]
    return not clauses.get("when_matched") and not clauses.get("when_not_matched_by_source")


def _verify(table: Table, doc: Mapping[str, Any], base_files: BaseFiles) -> None:
    """Prove one result: its files against the storage, its removed files and rows against the base."""
    specs, schema = table.metadata.specs(), table.metadata.schema()
    removed = [data_file_from_json(f, specs, schema) for f in doc["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
    deletes = [data_file_from_json(f, specs, schema) for f in doc["added_delete_files"]]
    verify_added_files(table, [*added, *deletes])
    what = f"merge task {doc['task_id']}"
    if doc["mode"] == "copy-on-write":
        check_rows(
            base_files.check_removed([RemovedClaim.of(f) for f in removed], doc["applied_deletes"]),
            kept=int(doc["num_target_rows_copied"]),
            by_deletes=int(doc["delete_file_rows"]),
            by_operation=int(doc["num_target_rows_updated"]) + int(doc["num_target_rows_deleted"]),
            what=what,
        )
        return
    changed = set(doc["changed_data_files"])
    if missing := sorted(p for p in changed if p not in base_files.live):
        raise DataFileCodecError(f"{what}: {missing[0]} was not live in the base snapshot; nothing committed")
    if table.metadata.format_version >= 3:
        _check_dvs(table, doc, deletes, changed, base_files)
        return
    for delete_file in deletes:
        _check_positions(table, delete_file, changed, base_files, what)


def _check_dvs(
    table: Table, doc: Mapping[str, Any], dvs: Sequence[DataFile], changed: set[str], base_files: BaseFiles
) -> None:
    """v3: each DV names a changed live base file, holds every position deleted there at the base (as
    readers apply them) within its rows, and the new positions add up to the rows updated and deleted;
    each replaced delete file is a live delete of such a data file at the base."""
    import numpy as np

    from airflow_provider_iceberg_exec.engine.commit.change import file_identity
    from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
    from airflow_provider_iceberg_exec.engine.deletes.vectors import read_deletion_vector
    from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

    what = f"merge task {doc['task_id']}"
    new_rows, targets = 0, set()
    for dv in dvs:
        target = referenced_data_file(dv)
        if target is None or target not in changed or target in targets:
            raise DataFileCodecError(
                f"{what}: DV {dv.file_path} names no changed data file once; nothing committed"
            )
        targets.add(target)
        scanned = base_files.live[target]
        old, new = deleted_positions(table.io, scanned), read_deletion_vector(table.io, dv)
        if not np.isin(old, new).all() or (len(new) and new[-1] >= scanned.data_file.record_count):
            raise DataFileCodecError(
                f"{what}: the DV of {target} drops a deleted row or names a row it lacks; nothing committed"
            )
        new_rows += len(new) - len(old)
    if new_rows != int(doc["num_target_rows_updated"]) + int(doc["num_target_rows_deleted"]):
        raise DataFileCodecError(
            f"{what}: its DVs delete {new_rows} rows, not the rows it updated and deleted"
        )
    specs, schema = table.metadata.specs(), table.metadata.schema()
    for entry in doc.get("rewritten_delete_files", []):
        claimed = data_file_from_json(entry, specs, schema)
        owner = next(
            (
                p
                for p in targets
                if any(
                    file_identity(d.data_file) == file_identity(claimed)
                    for d in base_files.live[p].delete_files
                )
            ),
            None,
        )
        if owner is None:
            raise DataFileCodecError(
                f"{what}: replaced delete file {claimed.file_path} is not a live delete of a data file "
                "with a new DV; nothing committed"
            )


def _check_positions(
    table: Table, delete_file: DataFile, changed: set[str], base_files: BaseFiles, what: str
) -> None:
    """Every position of a new delete file names a changed, live base file, within its rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with table.io.new_input(delete_file.file_path).open() as stream:
        rows = pq.read_table(stream, columns=["file_path", "pos"])
    for path in pc.unique(rows.column("file_path")).to_pylist():
        if path not in changed:
            raise DataFileCodecError(
                f"{what}: delete file {delete_file.file_path} names {path}, which the task did not change; "
                "nothing committed"
            )
        positions = rows.filter(pc.equal(rows.column("file_path"), path)).column("pos")
        limit = base_files.live[path].data_file.record_count
        if pc.max(positions).as_py() >= limit or pc.min(positions).as_py() < 0:
            raise DataFileCodecError(
                f"{what}: delete file {delete_file.file_path} names a position outside {path}; "
                "nothing committed"
            )
