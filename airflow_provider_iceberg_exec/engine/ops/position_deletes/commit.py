"""Committing position-delete rewrite results: proven against the base snapshot, one idempotent ``replace``
per commit batch, each new file carrying the largest data sequence number of the files it replaces."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    COMMIT_ID_PROPERTY,
    SequencedDelete,
    commit_delete_rewrite,
    find_commit,
    landed_snapshots,
)
from airflow_provider_iceberg_exec.engine.commit.verification import verify_added_files
from airflow_provider_iceberg_exec.engine.config import PositionDeleteOptions
from airflow_provider_iceberg_exec.engine.contracts import (
    REWRITE_POSITION_DELETES_RESULT,
    CommitRecord,
    RewritePositionDeletesResult,
)
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size
from airflow_provider_iceberg_exec.engine.documents import check_position_delete_result
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json
from airflow_provider_iceberg_exec.engine.meta.scan import SnapshotFiles, check_branch, scan_snapshot
from airflow_provider_iceberg_exec.engine.ops.position_deletes.plan import check_format_version
from airflow_provider_iceberg_exec.engine.ops.position_deletes.proofs import prove_dvs

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Group:
    """One result's files, decoded, and the sequence number its outputs get (proven at the base)."""

    doc: Mapping[str, Any]
    removed: list[DataFile]
    added: list[DataFile]
    sequence_number: int | None  # None on v3: the DVs take the commit's
    required: tuple[DataFile, ...] = ()  # v3: the data files the DVs name, to be unchanged since the base


def empty_position_delete_result(table: str) -> RewritePositionDeletesResult:
    """The result of a rewrite with nothing to do."""
    return RewritePositionDeletesResult(
        schema=REWRITE_POSITION_DELETES_RESULT,
        table=table,
        rewritten_delete_files_count=0,
        added_delete_files_count=0,
        rewritten_bytes_count=0,
        added_bytes_count=0,
        failed_delete_files_count=0,
        dangling_records=0,
        snapshot_ids=[],
        already_committed=False,
        commits=[],
        peak_rss_bytes=0,
        spilled_bytes=0,
    )


def commit_position_delete_rewrite(
    table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str, failed_data_files_count: int = 0
) -> RewritePositionDeletesResult:
    """Commit position-delete rewrite results as ``replace`` snapshots, one per commit batch, idempotently.

    Java's ``RewritePositionDeletesCommitManager``: ``newRewrite().validateFromSnapshot(base)``, each input
    removed, each output added with ``addFile(file, maxRewrittenDataSequenceNumber)``. Before anything is
    committed every result is proven: its outputs exist with the size and the record count it claims and
    lie in the inputs' spec and partition, and its inputs were live position delete files of the base
    snapshot; the sequence number the outputs get is the largest of the inputs' at the base, read from
    the base's manifests, not from the result. Each batch commits with id ``<commit_id>`` (``<commit_id>.
    <batch>`` when there are several). Under ``partial-progress.enabled`` a batch that fails validation
    is counted and skipped (Spark's action tolerates any number); otherwise the first failure raises.

    :param failed_data_files_count: delete files of groups whose rewrite already failed (partial progress).
    :raises CommitValidationError: when an input is no longer live (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_position_delete_result(r) for r in results]
    summary = empty_position_delete_result(table_name(table))
    summary["failed_delete_files_count"] = failed_data_files_count
    summary["peak_rss_bytes"] = max((int(d.get("peak_rss_bytes") or 0) for d in docs), default=0)
    summary["spilled_bytes"] = sum(int(d.get("spilled_bytes") or 0) for d in docs)
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return summary
    base_snapshot_id, branch = _common_base(docs, summary["table"])
    _check_groups_once(docs)
    options = PositionDeleteOptions.from_options(docs[0]["options"])
    batches: dict[int, list[Mapping[str, Any]]] = {}
    for doc in docs:
        batches.setdefault(int(doc["commit_batch"]), []).append(doc)
    refresh_table(table)
    check_format_version(table.metadata, summary["table"])
    check_branch(table.metadata, branch, summary["table"])
    pending = [
        doc
        for number, batch in batches.items()
        if find_commit(table.metadata, branch, _batch_id(commit_id, number, len(batches))) is None
        for doc in batch
    ]
    groups = _proven_groups(table, base_snapshot_id, docs, pending)
    for number, batch in sorted(batches.items()):
        batch_id = _batch_id(commit_id, number, len(batches))
        members = [groups[str(d["group_id"])] for d in batch]
        try:
            _commit_batch(table, members, batch_id, number, base_snapshot_id, branch, summary)
        except CommitValidationError as err:
            if not options.partial_progress_enabled:
                raise
            summary["failed_delete_files_count"] += sum(len(g.removed) for g in members)
            log.warning("commit batch %d failed validation: %s", number, err)
    commits = summary["commits"]
    summary["already_committed"] = bool(commits) and all(c["already_committed"] for c in commits)
    return summary


def _common_base(docs: Sequence[Mapping[str, Any]], name: str) -> tuple[int, str]:
    bases = {(d["table"], d["base_snapshot_id"], d["branch"]) for d in docs}
    if len(bases) != 1:
        raise ConfigurationError(
            f"results come from different plans {sorted(map(str, bases))}; commit each plan alone"
        )
    (table, base_snapshot_id, branch) = bases.pop()
    if table != name:
        raise ConfigurationError(f"the results are for table {table}, not {name}")
    return int(base_snapshot_id), str(branch)


def _check_groups_once(docs: Sequence[Mapping[str, Any]]) -> None:
    """A group is committed once, an input replaced once, an output added once."""
    groups = [d["group_id"] for d in docs]
    if len(set(groups)) != len(groups):
        raise DataFileCodecError("the results list a group more than once; commit each group's result once")
    removed = [_identity(e["content-file"]) for d in docs for e in d["rewritten_delete_files"]]
    if len(set(removed)) != len(removed):
        raise DataFileCodecError("the results rewrite a delete file twice; commit each plan once")
    added = [_identity(f) for d in docs for f in d["added_delete_files"]]
    if len(set(added)) != len(added) or {i[0] for i in added} & {i[0] for i in removed}:
        raise DataFileCodecError("the results add a file twice, or add a file they also rewrite")


def _identity(doc: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """A content file's identity from its JSON: a DV by path, content offset and size (they share paths)."""
    return (doc.get("file-path"), doc.get("content-offset"), doc.get("content-size-in-bytes"))


def _proven_groups(
    table: Table,
    base_snapshot_id: int,
    docs: Sequence[Mapping[str, Any]],
    pending: Sequence[Mapping[str, Any]],
) -> dict[str, _Group]:
    """Every result decoded; those not yet committed proven against the base snapshot and the storage.

    Batches that already landed (a retry) are not proven again: their base may have expired since.
    """
    from pyiceberg.manifest import DataFileContent

    metadata = table.metadata
    specs, schema = metadata.specs(), metadata.schema()
    pending_ids = {str(d["group_id"]) for d in pending}
    base_sequences: dict[tuple[Any, Any, Any], int] = {}
    base: SnapshotFiles | None = None
    if pending:
        snapshot = metadata.snapshot_by_id(base_snapshot_id)
        if snapshot is None:
            raise DataFileCodecError(f"base snapshot {base_snapshot_id} is not a snapshot of the table")
        base = scan_snapshot(table.io, metadata, snapshot)
        base_sequences = {
            file_identity(d.data_file): d.data_sequence_number
            for d in base.delete_files
            if d.data_file.content == DataFileContent.POSITION_DELETES
        }
    groups: dict[str, _Group] = {}
    for doc in docs:
        group_id = str(doc["group_id"])
        inputs = [e["content-file"] for e in doc["rewritten_delete_files"]]
        removed = [data_file_from_json(f, specs, schema) for f in inputs]
        added = [data_file_from_json(f, specs, schema) for f in doc["added_delete_files"]]
        sequence: int | None = int(doc["data_sequence_number"])
        required: tuple[DataFile, ...] = ()
        if group_id in pending_ids:
            sequence = _proven_sequence(doc, base_sequences, base_snapshot_id)
            _check_layout(group_id, inputs, doc["added_delete_files"])
            verify_added_files(table, added)
            if metadata.format_version >= 3:
                assert base is not None
                required = prove_dvs(table, base, removed, added, group_id)
        if metadata.format_version >= 3:
            sequence = None  # a DV takes the new commit's sequence number, above its data file's
        groups[group_id] = _Group(doc, removed, added, sequence, required)
    return groups


def _proven_sequence(
    doc: Mapping[str, Any], base_sequences: Mapping[tuple[Any, Any, Any], int], base_snapshot_id: int
) -> int:
    """The largest data sequence number of the group's inputs at the base, which the result must claim."""
    for entry in doc["rewritten_delete_files"]:
        path, key = entry["content-file"]["file-path"], _identity(entry["content-file"])
        if key not in base_sequences:
            raise DataFileCodecError(
                f"rewritten delete file {path} was not a live position delete file in base snapshot "
                f"{base_snapshot_id}; nothing committed"
            )
        if base_sequences[key] != int(entry["data-sequence-number"]):
            raise DataFileCodecError(
                f"rewritten delete file {path} has data sequence number {base_sequences[key]} in the base "
                f"snapshot, the result says {entry['data-sequence-number']}; nothing committed"
            )
    sequence = max(base_sequences[_identity(e["content-file"])] for e in doc["rewritten_delete_files"])
    if sequence != int(doc["data_sequence_number"]):
        raise DataFileCodecError(f"group {doc['group_id']}: the outputs' sequence number is not {sequence}")
    return sequence


def _check_layout(
    group_id: str, inputs: Sequence[Mapping[str, Any]], added: Sequence[Mapping[str, Any]]
) -> None:
    """Inputs and outputs of a group share one spec and partition: a position delete moved to another
    partition would apply to other data files (or to none)."""
    layouts = {(f.get("spec-id"), repr(f.get("partition"))) for f in [*inputs, *added]}
    if len(layouts) != 1:
        raise DataFileCodecError(
            f"group {group_id}: its delete files span several partitions {sorted(map(str, layouts))}; "
            "nothing committed"
        )


def _commit_batch(
    table: Table,
    groups: Sequence[_Group],
    batch_id: str,
    number: int,
    base_snapshot_id: int,
    branch: str,
    summary: RewritePositionDeletesResult,
) -> None:
    """Commit one batch as a ``replace`` snapshot and add it to ``summary``.

    On a validation failure its new files are removed, those the table does not reference (a rerun's
    files may be live through another commit), and the error is raised.
    """
    removed = [f for g in groups for f in g.removed]
    added = [SequencedDelete(f, g.sequence_number) for g in groups for f in g.added]
    try:
        outcome = commit_delete_rewrite(
            table,
            base_snapshot_id=base_snapshot_id,
            removed_delete_files=removed,
            added_delete_files=added,
            # v3: the data files the DVs name must be unchanged since the base (validateDataFilesExist)
            required_data_files=[f for g in groups for f in g.required],
            commit_id=batch_id,
            branch=branch,
        )
    except (ConfigurationError, CommitValidationError):
        paths = sorted({d.delete_file.file_path for d in added})  # a Puffin holds many DVs
        delete_unreferenced(table, paths, what=f"uncommitted output of {batch_id}")
        raise
    summary["rewritten_delete_files_count"] += len(removed)
    summary["added_delete_files_count"] += len(added)
    summary["rewritten_bytes_count"] += sum(content_size(f) for f in removed)
    summary["added_bytes_count"] += sum(content_size(d.delete_file) for d in added)
    summary["dangling_records"] += sum(int(g.doc["dangling_records"]) for g in groups)
    summary["snapshot_ids"].append(outcome.snapshot_id)
    summary["commits"].append(
        CommitRecord(
            commit_batch=number,
            commit_id=batch_id,
            snapshot_id=outcome.snapshot_id,
            already_committed=outcome.already_committed,
            group_ids=[str(g.doc["group_id"]) for g in groups],
        )
    )
    log.info(
        "commit batch %d: snapshot %s%s (%d delete files -> %d)",
        number,
        outcome.snapshot_id,
        " (already committed)" if outcome.already_committed else "",
        len(removed),
        len(added),
    )


def _batch_id(commit_id: str, number: int, batches: int) -> str:
    return commit_id if batches == 1 else f"{commit_id}.{number}"


def landed_position_delete_result(
    table: Table, branch: str, commit_id: str
) -> RewritePositionDeletesResult | None:
    """The result of the snapshots on ``branch`` that carry ``commit_id`` (or its batch ids), from their
    summaries; ``None`` when none landed."""
    refresh_table(table)
    landed = landed_snapshots(table.metadata, commit_id, branch)
    if not landed:
        return None

    def total(key: str) -> int:
        return sum(int(s.summary.additional_properties.get(key, "0")) for s in landed if s.summary)

    log.info("commit id %s already landed on %s: %d snapshot(s)", commit_id, branch, len(landed))
    result = empty_position_delete_result(table_name(table))
    result["rewritten_delete_files_count"] = total("removed-delete-files")
    result["added_delete_files_count"] = total("added-delete-files")
    result["rewritten_bytes_count"] = total("removed-files-size")
    result["added_bytes_count"] = total("added-files-size")
    result["snapshot_ids"] = [s.snapshot_id for s in landed]
    result["already_committed"] = True
    result["commits"] = [
        CommitRecord(
            commit_id=s.summary.additional_properties.get(COMMIT_ID_PROPERTY) if s.summary else None,
            snapshot_id=s.snapshot_id,
            already_committed=True,
        )
        for s in landed
    ]
    return result
