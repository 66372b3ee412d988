"""The JSON documents the steps exchange, each in a versioned envelope.

Every document carries ``"schema": "iceberg-exec/<kind>@<version>"``; bump the version when its shape
changes. Data files inside are Iceberg REST ``ContentFile`` JSON (:mod:`.datafile_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = [
    "COMPACTION_PLAN",
    "COMPACTION_RESULT",
    "COW_COMMIT_RESULT",
    "COW_PLAN",
    "COW_RESULT",
    "COW_TASK",
    "EXPIRE_SNAPSHOTS_RESULT",
    "ORPHAN_DELETE_RESULT",
    "ORPHAN_SCAN_RESULT",
    "REWRITE_RESULT",
    "REWRITE_TASK",
    "ExpireSnapshotsResult",
    "OrphanDeleteResult",
    "OrphanRemoveResult",
    "OrphanScanResult",
    "check_envelope",
    "envelope",
]

COMPACTION_PLAN = "iceberg-exec/compaction-plan@1"
REWRITE_TASK = "iceberg-exec/rewrite-task@1"
REWRITE_RESULT = "iceberg-exec/rewrite-result@1"
COMPACTION_RESULT = "iceberg-exec/compaction-result@1"

#: copy-on-write delete / update / overwrite by predicate (:mod:`.cow`): plan -> task -> result -> commit
COW_PLAN = "iceberg-exec/cow-plan@1"
COW_TASK = "iceberg-exec/cow-task@1"
COW_RESULT = "iceberg-exec/cow-result@1"
COW_COMMIT_RESULT = "iceberg-exec/cow-commit-result@1"

#: orphan files (:mod:`.orphans`): scan -> result (+ the orphan list file) -> delete -> result
ORPHAN_SCAN_RESULT = "iceberg-exec/orphan-scan-result@1"
ORPHAN_DELETE_RESULT = "iceberg-exec/orphan-delete-result@1"
#: snapshot expiry with file cleanup (:mod:`.expire`)
EXPIRE_SNAPSHOTS_RESULT = "iceberg-exec/expire-snapshots-result@1"


def envelope(schema: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap ``body`` in the envelope of ``schema``.

    >>> envelope(REWRITE_TASK, {"group_id": "g"})["schema"]
    'iceberg-exec/rewrite-task@1'
    """
    return {"schema": schema, **body}


def check_envelope(doc: Any, schema: str) -> Mapping[str, Any]:
    """Return ``doc`` if it is a document of ``schema``.

    :raises DataFileCodecError: when it is not a JSON object, or of another kind or version.

    >>> check_envelope({"schema": "iceberg-exec/rewrite-task@2"}, REWRITE_TASK)
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.DataFileCodecError: expected a iceberg-exec/rewrite-task@1 document, got schema 'iceberg-exec/rewrite-task@2'
    """  # noqa: E501
    if not isinstance(doc, Mapping):
        raise DataFileCodecError(f"expected a {schema} document (a JSON object), got {type(doc).__name__}")
    found = doc.get("schema")
    if found != schema:
        raise DataFileCodecError(f"expected a {schema} document, got schema {found!r}")
    return doc


# --- maintenance documents (orphan files, snapshot expiry) ---


class OrphanScanResult(TypedDict):
    """``iceberg-exec/orphan-scan-result@1``: what an orphan scan found (:mod:`.ops.orphans`).

    The orphans themselves are in the list file at ``orphan_list_uri``; the document is also written beside
    it, at ``result_uri``.
    """

    schema: str
    table: str
    table_uuid: str
    metadata_location: str
    snapshot_count: int
    locations: list[str]
    older_than: str
    older_than_ms: int
    prefix_mismatch_mode: str
    equal_schemes: dict[str, str]
    equal_authorities: dict[str, str]
    listed_file_count: int
    candidate_file_count: int
    referenced_file_count: int
    prefix_mismatch_file_count: int
    orphan_file_count: int
    orphan_bytes_count: int
    orphan_sample: list[str]
    orphan_list_uri: str
    result_uri: str
    dry_run: bool
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float


class OrphanDeleteResult(TypedDict):
    """``iceberg-exec/orphan-delete-result@1``: what the delete step did with a scan's orphan list."""

    schema: str
    table: str
    orphan_list_uri: str
    dry_run: bool
    candidate_file_count: int
    deleted_file_count: int
    deleted_bytes_count: int
    skipped_referenced_count: int
    skipped_referenced_sample: list[str]
    skipped_younger_count: int
    missing_file_count: int
    failed_file_count: int
    failed_sample: list[str]
    batches: int
    elapsed_seconds: float


class OrphanRemoveResult(OrphanScanResult, total=False):
    """Spark's ``remove_orphan_files`` in one call: the scan result, with the delete result unless dry run."""

    delete: OrphanDeleteResult


class ExpireSnapshotsResult(TypedDict):
    """``iceberg-exec/expire-snapshots-result@1``: the snapshots and refs expired; Java's file counts."""

    schema: str
    table: str
    dry_run: bool
    cleanup: bool
    older_than: str
    older_than_ms: int
    retain_last: int
    snapshot_ids: list[int]
    expired_snapshot_ids: list[int]
    expired_snapshot_count: int
    removed_refs: list[str]
    retained_snapshot_count: int
    #: ``None`` in a dry run (nothing is committed)
    metadata_location: str | None
    deleted_data_files_count: int
    deleted_equality_delete_files_count: int
    deleted_manifest_files_count: int
    deleted_manifest_lists_count: int
    deleted_position_delete_files_count: int
    deleted_statistics_files_count: int
    failed_delete_count: int
    kept_referenced_count: int
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float
