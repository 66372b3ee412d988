"""Committing a copy-on-write: the results of one plan's tasks as one ``overwrite`` snapshot, after
proving what each result claims against the base snapshot and the files themselves.

A result is checked completely first (:func:`~.documents.check_cow_result`), then proven: its added
files exist as described, its removed files are live in the base snapshot with the deletes it applied,
and its row counts are what the removed files hold (:class:`_MatchCounter`). A bad claim refuses the
commit and deletes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import closing
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    CommitOutcome,
    DanglingDeletes,
    commit_overwrite,
    find_commit,
)
from airflow_provider_iceberg_exec.engine.commit.verification import (
    BaseFiles,
    RemovedClaim,
    check_rows,
    verify_added_files,
)
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import COW_COMMIT_RESULT, CowCommitResult
from airflow_provider_iceberg_exec.engine.documents import check_cow_result
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.io.session import track_resources
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile, check_branch, parse_where
from airflow_provider_iceberg_exec.engine.ops.cow.common import COMMON_KEYS
from airflow_provider_iceberg_exec.engine.ops.cow.plan import check_cow_format
from airflow_provider_iceberg_exec.engine.ops.cow.predicate import Predicate
from airflow_provider_iceberg_exec.engine.ops.cow.read import live_batches

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

__all__ = ["commit_cow_rewrite"]

log = logging.getLogger(__name__)


def commit_cow_rewrite(
    table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str
) -> CowCommitResult:
    """Commit the results of one plan's tasks as one snapshot, idempotently by ``commit_id``.

    The snapshot is ``overwrite`` (``delete`` when nothing is added, ``append`` when nothing is removed),
    validated from the plan's base snapshot with the predicate as the conflict-detection filter and the
    plan's isolation level (:func:`~.commit.snapshots.commit_overwrite`). When
    nothing matched, nothing is committed. When validation fails, the new files are deleted.

    :returns: ``iceberg-exec/cow-commit-result@1``.
    :raises ConfigurationError: for results of different plans.
    :raises CommitValidationError: when a concurrent commit conflicts (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_cow_result(r) for r in results]
    summary = _summary(table, docs, commit_id)
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return summary
    first = _one_plan(docs, summary["table"])
    summary["operation"] = first["operation"]
    summary["isolation_level"] = first["isolation_level"]
    refresh_table(table)
    branch = str(first["branch"])
    check_branch(table.metadata, branch, summary["table"])
    check_cow_format(table.metadata)  # the table may have been upgraded since the plan
    deleted, added = _files_of(table, docs)
    summary["deleted_data_files_count"] = len(deleted)
    summary["added_data_files_count"] = len(added)
    if not deleted and not added:
        log.info("no row of %s matches %s: nothing to commit", summary["table"], first["where"])
        return summary
    outcome = _commit(table, docs, deleted, added, commit_id=commit_id, branch=branch)
    summary["snapshot_ids"] = [outcome.snapshot_id]
    summary["removed_delete_files_count"] = int(outcome.summary.get("removed-delete-files", "0"))
    summary["snapshot_operation"] = outcome.summary.get("operation")
    summary["already_committed"] = outcome.already_committed
    log.info(
        "%s %s on %s: snapshot %s (%s): %d data file(s) removed, %d added; rows deleted %d, updated %d, "
        "inserted %d",
        "Found" if outcome.already_committed else "Committed",
        first["operation"],
        summary["table"],
        outcome.snapshot_id,
        summary["snapshot_operation"],
        len(deleted),
        len(added),
        summary["deleted_rows"],
        summary["updated_rows"],
        summary["inserted_rows"],
    )
    return summary


def _summary(table: Table, docs: Sequence[Mapping[str, Any]], commit_id: str) -> CowCommitResult:
    """The commit result before anything is committed: the results' totals, no snapshot yet."""

    def total(key: str) -> int:
        return sum(int(d.get(key, 0)) for d in docs)

    return {
        "schema": COW_COMMIT_RESULT,
        "table": table_name(table),
        "operation": None,
        "snapshot_operation": None,
        "commit_id": commit_id,
        "snapshot_ids": [],
        "already_committed": False,
        "isolation_level": None,
        "deleted_data_files_count": 0,
        "added_data_files_count": 0,
        "removed_delete_files_count": 0,
        "untouched_data_files_count": total("untouched_data_files_count"),
        "dropped_without_reading_count": total("dropped_without_reading_count"),
        "deleted_rows": total("deleted_rows"),
        "updated_rows": total("updated_rows"),
        "inserted_rows": total("inserted_rows"),
        "rewritten_rows": total("rewritten_rows"),
        "read_bytes": total("read_bytes"),
        "written_bytes": total("written_bytes"),
        # What the executions measured; optional in a result (a null counts as nothing measured).
        "peak_rss_bytes": max((int(d.get("peak_rss_bytes") or 0) for d in docs), default=0),
        "spilled_bytes": max((int(d.get("spilled_bytes") or 0) for d in docs), default=0),
    }


def _one_plan(docs: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """Refuse results of several plans, of another table, or a task's result twice; return the first.

    :raises ConfigurationError: for results of different plans or of another table.
    :raises DataFileCodecError: for a task listed twice.
    """
    plans = {tuple(str(d.get(key)) for key in COMMON_KEYS) for d in docs}
    if len(plans) != 1:
        raise ConfigurationError("results come from different plans; commit each plan alone")
    first = docs[0]
    if first["table"] != name:
        raise ConfigurationError(f"the results are for table {first['table']}, not {name}")
    if len({d["task_id"] for d in docs}) != len(docs):
        raise DataFileCodecError("the results list a task more than once; commit each task's result once")
    return first


def _files_of(table: Table, docs: Sequence[Mapping[str, Any]]) -> tuple[list[DataFile], list[DataFile]]:
    """The data files the results remove and add, each once (in the table's current specs and schema)."""
    schema = table.metadata.schema()
    specs = table.metadata.specs()
    deleted = [data_file_from_json(f, specs, schema) for d in docs for f in d["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for d in docs for f in d["added_data_files"]]
    if len({f.file_path for f in deleted}) != len(deleted):
        raise ConfigurationError("results remove the same data file twice; commit each plan once")
    if len({f.file_path for f in added}) != len(added):
        raise DataFileCodecError("the results add the same file twice; commit each plan once")
    return deleted, added


def _commit(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    deleted: list[DataFile],
    added: list[DataFile],
    *,
    commit_id: str,
    branch: str,
) -> CommitOutcome:
    """Prove the results (unless ``commit_id`` already landed) and commit them as one ``overwrite``.

    When validation fails, the added files the table does not reference are deleted.
    """
    first = docs[0]
    schema = table.metadata.schema()
    base = first["base_snapshot_id"]
    predicate = parse_where(str(first["where"]), schema)
    if find_commit(table.metadata, branch, commit_id) is None:
        # What the results claim is proven first; a bad claim refuses and deletes nothing.
        _verify_results(table, docs, BaseFiles(table, base, predicate), table.metadata.specs(), schema)
    try:
        # The deletes to drop are decided by the commit, on the branch head it commits on (on every
        # retry): those that applied to the removed files and, after the commit, apply to no live data
        # file (their DVs and file-scoped position deletes are among
        # them; so is a partition-scoped or equality delete whose files all go). One that a concurrent
        # commit made apply to another live file again is kept, never removed with its rows.
        return commit_overwrite(
            table,
            base_snapshot_id=int(base) if base is not None else None,
            deleted_data_files=deleted,
            added_data_files=added,
            dangling_deletes=DanglingDeletes.REWRITTEN,
            conflict_detection_filter=predicate,
            isolation_level=str(first["isolation_level"]),
            commit_id=commit_id,
            branch=branch,
            snapshot_properties={"iceberg-exec.operation": str(first["operation"])},
        )
    except CommitValidationError:
        # A validation failure repeats on any retry: these files can never be committed. Only those
        # the table does not reference go (the same results may have landed under another commit id).
        delete_unreferenced(table, [f.file_path for f in added], what=f"uncommitted output of {commit_id}")
        raise


class _MatchCounter:
    """Counts, from the removed files themselves, their live rows and those matching the predicate, so
    that a result cannot say which rows the predicate removed; one per commit (the predicate is the plan's).

    A file without delete files whose metrics prove that every row matches is not read.
    """

    def __init__(self, table: Table, where: str, limits: ResourceLimits, spill_dir: str) -> None:
        from pyiceberg.schema import prune_columns

        schema = table.metadata.schema()
        self.table, self.limits, self.spill_dir = table, limits, spill_dir
        self.predicate = Predicate(where, schema)
        self.every_row_matches = self.predicate.strict_evaluator(table.metadata)
        field_ids = self.predicate.field_ids
        self.projection = prune_columns(schema, field_ids, select_full_types=False) if field_ids else schema

    def count(self, scanned: ScannedFile) -> tuple[int, int]:
        """``(live rows, matching live rows)`` of one data file."""
        import pyarrow.compute as pc

        if not scanned.delete_files and self.every_row_matches(scanned.data_file):
            return scanned.data_file.record_count, scanned.data_file.record_count
        live = matched = 0
        batches = live_batches(self.table, scanned, self.projection, self.limits, self.spill_dir)
        with closing(batches):  # type: ignore[type-var]  # a generator: closes the file now
            for batch in batches:
                live += batch.num_rows
                matched += int(pc.sum(self.predicate.matches(batch)).as_py() or 0)
        return live, matched


def _prove_matches(doc: Mapping[str, Any], base_files: BaseFiles, counter: _MatchCounter) -> None:
    """Refuse a result whose row counts differ from what its removed files hold (:class:`_MatchCounter`).

    :raises DataFileCodecError: naming the counts that differ.
    """
    stored = live = matched = 0
    for removed in doc["removed_data_files"]:
        scanned = base_files.live[str(removed["file-path"])]
        stored += scanned.data_file.record_count
        file_live, file_matched = counter.count(scanned)
        live += file_live
        matched += file_matched
    by_predicate = "updated_rows" if doc["operation"] == "update" else "deleted_rows"
    claimed = (int(doc[by_predicate]), int(doc["rewritten_rows"]), int(doc["delete_file_rows"]))
    if claimed != (matched, live - matched, stored - live):
        raise DataFileCodecError(
            f"task {doc['task_id']}: its removed files hold {matched} matching and {live - matched} other "
            f"live rows ({stored - live} removed by delete files), but the result says {by_predicate} "
            f"{claimed[0]}, rewritten_rows {claimed[1]}, delete_file_rows {claimed[2]}; nothing committed"
        )


def _verify_results(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    base_files: BaseFiles,
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """Prove each task result against the base snapshot and the storage, its rows included."""
    limits = ResourceLimits()
    with track_resources(limits) as (spill_dir, _stats):
        counter = _MatchCounter(table, str(docs[0]["where"]), limits, spill_dir)
        for doc in docs:
            _verify_result(table, doc, base_files, counter, specs, schema)


def _verify_result(
    table: Table,
    doc: Mapping[str, Any],
    base_files: BaseFiles,
    counter: _MatchCounter,
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """One result: its added files, its removed files and deletes, its rows (see the module docstring)."""
    removed = [data_file_from_json(f, specs, schema) for f in doc["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
    verify_added_files(table, added)
    check_rows(
        base_files.check_removed([RemovedClaim.of(f) for f in removed], doc["applied_deletes"]),
        kept=sum(f.record_count for f in added) - int(doc["inserted_rows"]),
        by_deletes=int(doc["delete_file_rows"]),
        by_operation=int(doc["deleted_rows"]),
        what=f"task {doc['task_id']}",
    )
    _prove_matches(doc, base_files, counter)
