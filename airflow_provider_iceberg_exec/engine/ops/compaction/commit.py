"""Committing rewrite results: proven against the base snapshot, one idempotent ``replace`` per batch."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    COMMIT_ID_PROPERTY,
    DanglingDeletes,
    commit_rewrite,
    find_commit,
    landed_snapshots,
)
from airflow_provider_iceberg_exec.engine.commit.verification import (
    BaseFiles,
    RemovedClaim,
    check_rows,
    verify_added_files,
)
from airflow_provider_iceberg_exec.engine.config import CompactionOptions
from airflow_provider_iceberg_exec.engine.contracts import COMPACTION_RESULT, CommitRecord, CompactionResult
from airflow_provider_iceberg_exec.engine.documents import check_rewrite_result
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.datafile_json import (
    data_file_from_json,
    removed_files_from_json,
)
from airflow_provider_iceberg_exec.engine.meta.scan import check_branch

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def commit_compaction(
    table: Table,
    results: Sequence[Mapping[str, Any]],
    *,
    commit_id: str,
    failed_data_files_count: int = 0,
    planned_entries: Sequence[Sequence[Mapping[str, Any]]] | None = None,
) -> CompactionResult:
    """Commit rewrite results as ``replace`` snapshots, one per commit batch, idempotently.

    Each batch commits with id ``<commit_id>`` (or ``<commit_id>.<batch>`` when there are several), so a
    retry of the whole call skips the batches that already landed. Under ``partial-progress.enabled`` a
    batch that fails validation is counted and skipped, up to ``partial-progress.max-failed-commits``;
    otherwise the first failure raises.

    :param failed_data_files_count: files of groups whose rewrite already failed (partial progress).
    :param planned_entries: each task's ``data_files`` of the plan the results come from, when this
        process made that plan from the base snapshot (:func:`.compact`): the removed files are proven
        against what it read there (:meth:`.BaseFiles.planned`) instead of the base's manifests read
        again. Never a document's: a plan handed in proves nothing about the base.
    :raises CommitValidationError: when validation from the base snapshot fails (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_rewrite_result(r) for r in results]
    summary = CompactionResult(
        schema=COMPACTION_RESULT,
        table=table_name(table),
        rewritten_data_files_count=0,
        added_data_files_count=0,
        rewritten_bytes_count=0,
        failed_data_files_count=failed_data_files_count,
        removed_delete_files_count=0,
        snapshot_ids=[],
        already_committed=False,
        commits=[],
        # What the executions measured; optional in a result (a null counts as nothing measured).
        peak_rss_bytes=max((int(d.get("peak_rss_bytes") or 0) for d in docs), default=0),
        spilled_bytes=sum(int(d.get("spilled_bytes") or 0) for d in docs),
    )
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return summary
    base_snapshot_id, branch = _common_base(docs, summary["table"])
    _check_groups_once(docs)
    options = CompactionOptions.from_options(docs[0].get("options"))
    batches: dict[int, list[Mapping[str, Any]]] = {}
    for doc in docs:
        batches.setdefault(int(doc["commit_batch"]), []).append(doc)
    refresh_table(table)
    check_branch(table.metadata, branch, table_name(table))
    specs, schema = table.metadata.specs(), table.metadata.schema()
    # What the results claim is proven before any batch is committed: a bad claim refuses the whole call
    # and deletes nothing (the document cannot say what is safe to delete). Batches that already landed
    # (a retry) are not proven again: their base may have expired since.
    pending = [
        doc
        for number, batch in batches.items()
        if find_commit(table.metadata, branch, _batch_id(commit_id, number, len(batches))) is None
        for doc in batch
    ]
    if pending:
        removed = {f["file-path"] for d in pending for f in d["rewritten_data_files"]}
        base_files = (
            BaseFiles(table, base_snapshot_id, only=removed)
            if planned_entries is None
            else BaseFiles.planned(
                table, base_snapshot_id, (e for task in planned_entries for e in task), only=removed
            )
        )
        _verify_batch(table, base_files, pending, specs, schema)
        del removed, base_files
    # Every result's files are read once, against this metadata, after the proofs (which read no
    # removed file decoded: a group of 500,000 files held ~400 bytes a file of them).
    files = {str(doc["group_id"]): _result_files(doc, specs, schema) for doc in docs}
    failed_commits = 0
    for number, batch in sorted(batches.items()):
        batch_id = _batch_id(commit_id, number, len(batches))
        try:
            batch_files = (
                [f for d in batch for f in files[str(d["group_id"])][0]],
                [f for d in batch for f in files[str(d["group_id"])][1]],
            )
            _commit_batch(
                table, batch, batch_files, batch_id, number, base_snapshot_id, branch, options, summary
            )
        except CommitValidationError as err:
            if not options.partial_progress_enabled:
                raise
            failed_commits += 1
            summary["failed_data_files_count"] += sum(len(d["rewritten_data_files"]) for d in batch)
            log.warning("commit batch %d failed validation: %s", number, err)
            if failed_commits > options.max_failed_commits:
                raise CommitValidationError(
                    f"{failed_commits} commit batches failed, more than partial-progress.max-failed-commits="
                    f"{options.max_failed_commits}; last: {err}"
                ) from err
    commits = summary["commits"]
    summary["already_committed"] = bool(commits) and all(c["already_committed"] for c in commits)
    return summary


def _common_base(docs: Sequence[Mapping[str, Any]], table_name: str) -> tuple[int, str]:
    """The one base snapshot and branch all results were planned on."""
    bases = {(d["table"], d["base_snapshot_id"], d["branch"]) for d in docs}
    if len(bases) != 1:
        raise ConfigurationError(
            f"results come from different plans {sorted(map(str, bases))}; commit each plan alone"
        )
    (name, base_snapshot_id, branch) = bases.pop()
    if name != table_name:
        raise ConfigurationError(f"the results are for table {name}, not {table_name}")
    return int(base_snapshot_id), str(branch)


def _result_files(
    doc: Mapping[str, Any], specs: Mapping[int, PartitionSpec], schema: Schema
) -> tuple[list[DataFile], list[DataFile]]:
    """The data files a result rewrites and the ones it adds.

    A rewritten file is only identified and proven against the base (the commit writes the base
    manifest's own entry as deleted), so its column metrics are not decoded, and the files of one
    partition share its record.
    """
    rewritten = removed_files_from_json(doc["rewritten_data_files"], specs, schema)
    added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
    return rewritten, added


def _commit_batch(
    table: Table,
    batch: Sequence[Mapping[str, Any]],
    files: tuple[list[DataFile], list[DataFile]],
    batch_id: str,
    number: int,
    base_snapshot_id: int,
    branch: str,
    options: CompactionOptions,
    summary: CompactionResult,
) -> None:
    """Commit one batch as a ``replace`` snapshot and add it to ``summary``.

    On a validation failure its new files are removed, those the table does not reference (a rerun's files
    may be live through another commit), and the error is raised: nothing was committed, and the same
    validation fails on any retry, so the files could never be committed.
    """
    rewritten, added = files
    # The deletes to drop are decided by the commit, on the branch head it commits on (on every retry):
    # those the rewrite left dangling, unless a concurrent commit made them apply again, and, with
    # remove-dangling-deletes, every other one.
    dangling = DanglingDeletes.ALL if options.remove_dangling_deletes else DanglingDeletes.REWRITTEN
    try:
        outcome = commit_rewrite(
            table,
            base_snapshot_id=base_snapshot_id,
            rewritten_data_files=rewritten,
            added_data_files=added,
            commit_id=batch_id,
            use_starting_sequence_number=options.use_starting_sequence_number,
            branch=branch,
            dangling_deletes=dangling,
        )
    except (ConfigurationError, CommitValidationError):
        # E.g. a format-version 3 table, or files gone meanwhile.
        delete_unreferenced(table, [f.file_path for f in added], what=f"uncommitted output of {batch_id}")
        raise
    summary["rewritten_data_files_count"] += len(rewritten)
    summary["added_data_files_count"] += len(added)
    summary["removed_delete_files_count"] += int(outcome.summary.get("removed-delete-files", "0"))
    summary["rewritten_bytes_count"] += sum(f.file_size_in_bytes for f in rewritten)
    summary["snapshot_ids"].append(outcome.snapshot_id)
    summary["commits"].append(
        CommitRecord(
            commit_batch=number,
            commit_id=batch_id,
            snapshot_id=outcome.snapshot_id,
            already_committed=outcome.already_committed,
            group_ids=[str(d["group_id"]) for d in batch],
        )
    )
    log.info(
        "commit batch %d: snapshot %s%s (%d files -> %d files)",
        number,
        outcome.snapshot_id,
        " (already committed)" if outcome.already_committed else "",
        len(rewritten),
        len(added),
    )


def _verify_batch(
    table: Table,
    base_files: BaseFiles,
    batch: Sequence[Mapping[str, Any]],
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """Prove each result of a commit batch against the base snapshot and the storage, rows included."""
    for doc in batch:
        added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
        verify_added_files(table, added)
        removed = base_files.check_removed(
            [RemovedClaim.of_json(f) for f in doc["rewritten_data_files"]], doc["applied_deletes"]
        )
        check_rows(
            removed,
            kept=sum(f.record_count for f in added),
            by_deletes=int(doc["deleted_records"]),
            by_position_deletes=int(doc["position_deleted_records"]),
            what=f"group {doc['group_id']}",
        )


def _batch_id(commit_id: str, number: int, batches: int) -> str:
    """The commit id of one commit batch: the caller's id, or ``<id>.<batch>`` when there are several."""
    return commit_id if batches == 1 else f"{commit_id}.{number}"


def _check_groups_once(docs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse results that repeat a group or rewrite a file twice: a file is replaced once."""
    groups = [d["group_id"] for d in docs]
    if len(set(groups)) != len(groups):
        raise DataFileCodecError("the results list a group more than once; commit each group's result once")
    paths = [f["file-path"] for d in docs for f in d["rewritten_data_files"]]
    if len(set(paths)) != len(paths):
        raise DataFileCodecError("the results rewrite a data file twice; commit each plan once")
    added = [f["file-path"] for d in docs for f in d["added_data_files"]]
    if len(set(added)) != len(added) or set(added) & set(paths):
        raise DataFileCodecError("the results add a file twice, or add a file they also rewrite")


def landed_result(table: Table, branch: str, commit_id: str) -> CompactionResult | None:
    """The compaction result of the snapshots on ``branch`` that carry ``commit_id`` (or its batch ids).

    Counts come from the snapshot summaries; ``rewritten_bytes_count`` is their ``removed-files-size``,
    which also counts the bytes of the delete files removed.
    """
    refresh_table(table)
    landed = landed_snapshots(table.metadata, commit_id, branch)
    if not landed:
        return None

    def total(key: str) -> int:
        return sum(int(s.summary.additional_properties.get(key, "0")) for s in landed if s.summary)

    log.info("commit id %s already landed on %s: %d snapshot(s)", commit_id, branch, len(landed))
    return CompactionResult(
        schema=COMPACTION_RESULT,
        table=table_name(table),
        rewritten_data_files_count=total("deleted-data-files"),
        added_data_files_count=total("added-data-files"),
        rewritten_bytes_count=total("removed-files-size"),
        failed_data_files_count=0,
        removed_delete_files_count=total("removed-delete-files"),
        snapshot_ids=[s.snapshot_id for s in landed],
        already_committed=True,
        commits=[
            CommitRecord(
                commit_id=s.summary.additional_properties.get(COMMIT_ID_PROPERTY) if s.summary else None,
                snapshot_id=s.snapshot_id,
                already_committed=True,
            )
            for s in landed
        ],
        peak_rss_bytes=0,
        spilled_bytes=0,
    )
