"""The JSON documents the steps exchange, each in a versioned envelope.

Every document carries ``"schema": "iceberg-exec/<kind>@<version>"``; bump the version when its shape
changes. Data files inside are Iceberg REST ``ContentFile`` JSON (:mod:`.datafile_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = [
    "COMPACTION_PLAN",
    "COMPACTION_RESULT",
    "CONVERT_PLAN",
    "CONVERT_RESULT",
    "CONVERT_TASK",
    "CONVERT_TASK_RESULT",
    "COW_COMMIT_RESULT",
    "COW_PLAN",
    "COW_RESULT",
    "COW_TASK",
    "EXPIRE_SNAPSHOTS_RESULT",
    "MERGE_PLAN",
    "MERGE_RESULT",
    "MERGE_TASK",
    "MERGE_TASK_RESULT",
    "ORPHAN_DELETE_RESULT",
    "ORPHAN_SCAN_RESULT",
    "POSITION_DELETE_PLAN",
    "POSITION_DELETE_RESULT",
    "POSITION_DELETE_TASK",
    "REWRITE_MANIFESTS_RESULT",
    "REWRITE_POSITION_DELETES_RESULT",
    "REWRITE_RESULT",
    "REWRITE_TASK",
    "CommitRecord",
    "CompactionPlan",
    "CompactionResult",
    "ConvertPlan",
    "ConvertResult",
    "ConvertTask",
    "ConvertTaskResult",
    "CowCommitResult",
    "CowDocument",
    "CowPlan",
    "CowPlanSummary",
    "CowResult",
    "CowRewriteResult",
    "CowSourceFile",
    "CowTask",
    "ExpireSnapshotsResult",
    "OrphanDeleteResult",
    "OrphanRemoveResult",
    "OrphanScanResult",
    "PlanSummary",
    "PositionDeletePlan",
    "PositionDeleteResult",
    "PositionDeleteTask",
    "RewriteManifestsResult",
    "RewritePositionDeletesResult",
    "RewriteResult",
    "RewriteTask",
    "SkippedFile",
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

#: MERGE and upsert (:mod:`.ops.merge`): plan -> task -> task result -> commit -> result
MERGE_PLAN = "iceberg-exec/merge-plan@1"
MERGE_TASK = "iceberg-exec/merge-task@1"
MERGE_TASK_RESULT = "iceberg-exec/merge-task-result@1"
MERGE_RESULT = "iceberg-exec/merge-result@1"

#: orphan files (:mod:`.orphans`): scan -> result (+ the orphan list file) -> delete -> result
ORPHAN_SCAN_RESULT = "iceberg-exec/orphan-scan-result@1"
ORPHAN_DELETE_RESULT = "iceberg-exec/orphan-delete-result@1"
#: position-delete compaction (:mod:`.ops.position_deletes`, Spark's ``rewrite_position_delete_files``)
POSITION_DELETE_PLAN = "iceberg-exec/position-delete-plan@1"
POSITION_DELETE_TASK = "iceberg-exec/position-delete-task@1"
POSITION_DELETE_RESULT = "iceberg-exec/position-delete-result@1"
REWRITE_POSITION_DELETES_RESULT = "iceberg-exec/rewrite-position-deletes-result@1"
#: snapshot expiry with file cleanup (:mod:`.expire`)
EXPIRE_SNAPSHOTS_RESULT = "iceberg-exec/expire-snapshots-result@1"
#: manifest rewrite (:mod:`.manifests`)
REWRITE_MANIFESTS_RESULT = "iceberg-exec/rewrite-manifests-result@1"


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


#: an Iceberg REST ``ContentFile`` JSON object (:mod:`.meta.datafile_json`)
ContentFileJson = dict[str, Any]
#: a task's input: ``{"data-file", "data-sequence-number", "delete-files"}`` (:mod:`.meta.task_files`)
TaskFileJson = dict[str, Any]


# --- compaction documents (:mod:`.ops.compaction`) ---


class SkippedFile(TypedDict):
    path: str
    reason: str


class RewriteTask(TypedDict):
    """One file group to rewrite: the input of ``execute_rewrite_task``."""

    schema: str
    table: str
    branch: str
    group_id: str
    commit_batch: int
    base_snapshot_id: int
    base_sequence_number: int | None
    strategy: str
    sort_order: str | None
    options: dict[str, str]
    output_spec_id: int
    needs_repartition: bool
    input_bytes: int
    data_files: list[TaskFileJson]


class CompactionPlan(TypedDict):
    """What ``plan_compaction`` chose: one task per group, and the commit batches over the groups."""

    schema: str
    table: str
    branch: str
    base_snapshot_id: int | None
    strategy: str
    sort_order: str | None
    where: str | None
    options: dict[str, str]
    tasks: list[RewriteTask]
    skipped: list[SkippedFile]
    commit_batches: list[list[str]]


class RewriteResult(TypedDict):
    """One rewritten group: its new files, what it read and deleted, and what the execution cost."""

    schema: str
    table: str
    branch: str
    group_id: str
    commit_batch: int
    base_snapshot_id: int
    options: dict[str, str]
    rewritten_data_files: list[ContentFileJson]
    added_data_files: list[ContentFileJson]
    #: per rewritten file path: its data sequence number and each delete file applied to it
    #: (:func:`.documents.applied_deletes_of`)
    applied_deletes: dict[str, dict[str, Any]]
    rewritten_bytes_count: int
    added_bytes_count: int
    rewritten_records: int
    added_records: int
    deleted_records: int
    position_deleted_records: int
    equality_deleted_records: int
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float


class CommitRecord(TypedDict):
    """One snapshot a commit produced (or found already committed)."""

    commit_id: str | None
    snapshot_id: int | None
    already_committed: bool
    commit_batch: NotRequired[int]
    group_ids: NotRequired[list[str]]


class PlanSummary(TypedDict):
    base_snapshot_id: int | None
    groups: int
    skipped: int


class CompactionResult(TypedDict):
    """What ``commit_compaction`` (or ``compact``) committed."""

    schema: str
    table: str
    rewritten_data_files_count: int
    added_data_files_count: int
    rewritten_bytes_count: int
    failed_data_files_count: int
    removed_delete_files_count: int
    snapshot_ids: list[int]
    already_committed: bool
    commits: list[CommitRecord]
    peak_rss_bytes: int
    spilled_bytes: int
    #: only from ``compact``: the plan it made
    plan: NotRequired[PlanSummary]


# --- position-delete compaction documents (:mod:`.ops.position_deletes`) ---

#: an input of a position-delete task: ``{"content-file", "data-sequence-number"}``
SequencedFileJson = dict[str, Any]


class PositionDeleteTask(TypedDict):
    """One group of position delete files of one partition to rewrite into fewer files."""

    schema: str
    table: str
    branch: str
    group_id: str
    commit_batch: int
    base_snapshot_id: int
    options: dict[str, str]
    spec_id: int
    #: the group's partition values, REST-encoded in the spec's field order
    partition: list[Any]
    input_bytes: int
    #: the position delete files, each with its data sequence number
    delete_files: list[SequencedFileJson]
    #: the live data files at the base that an input applies to (``{"file-path",
    #: "data-sequence-number"}``): positions of any other file are dangling and dropped
    live_data_files: list[dict[str, Any]]


class PositionDeletePlan(TypedDict):
    """What ``plan_position_delete_rewrite`` chose: one task per group, and the commit batches."""

    schema: str
    table: str
    branch: str
    base_snapshot_id: int | None
    where: str | None
    options: dict[str, str]
    tasks: list[PositionDeleteTask]
    commit_batches: list[list[str]]


class PositionDeleteResult(TypedDict):
    """One rewritten group of position delete files."""

    schema: str
    table: str
    branch: str
    group_id: str
    commit_batch: int
    base_snapshot_id: int
    options: dict[str, str]
    #: the inputs, as the task listed them (with their data sequence numbers)
    rewritten_delete_files: list[SequencedFileJson]
    added_delete_files: list[ContentFileJson]
    #: the data sequence number of every added file: the largest of the inputs'
    data_sequence_number: int
    rewritten_bytes_count: int
    added_bytes_count: int
    #: positions read, written, dropped as dangling, and dropped as repeated
    rewritten_records: int
    added_records: int
    dangling_records: int
    duplicate_records: int
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float


class RewritePositionDeletesResult(TypedDict):
    """What ``commit_position_delete_rewrite`` (or ``rewrite_position_deletes``) committed, in Spark's
    ``rewrite_position_delete_files`` result names."""

    schema: str
    table: str
    rewritten_delete_files_count: int
    added_delete_files_count: int
    rewritten_bytes_count: int
    added_bytes_count: int
    #: groups whose rewrite or commit failed under partial progress (their files are left as they are)
    failed_delete_files_count: int
    dangling_records: int
    snapshot_ids: list[int]
    already_committed: bool
    commits: list[CommitRecord]
    peak_rss_bytes: int
    spilled_bytes: int
    #: only from ``rewrite_position_deletes``: the plan it made
    plan: NotRequired[PlanSummary]


# --- copy-on-write documents ---

#: a Parquet file an ``overwrite`` loads, as a copy-on-write task lists it
CowSourceFile = TypedDict("CowSourceFile", {"path": str, "size-in-bytes": int, "record-count": int})


class CowDocument(TypedDict):
    """The keys every copy-on-write plan, task and result carries: what the plan was asked to do."""

    schema: str
    table: str
    branch: str
    operation: str
    where: str
    set: dict[str, str] | None
    base_snapshot_id: int | None
    isolation_level: str


class CowTask(CowDocument):
    """``iceberg-exec/cow-task@1``: one group of files of a plan, run by one bounded execution.

    ``data_files`` are the planned entries (``data-file``, its ``delete-files`` and ``all-rows-match``),
    DataFile JSON inside.
    """

    schema_id: int
    output_spec_id: int
    task_id: int
    data_files: list[dict[str, Any]]
    source_files: list[CowSourceFile]


class CowPlan(CowDocument):
    """``iceberg-exec/cow-plan@1``: the tasks of one copy-on-write, planned on ``base_snapshot_id``."""

    schema_id: int
    output_spec_id: int
    tasks: list[CowTask]
    candidate_data_files_count: int
    dropped_without_reading_count: int
    source_files_count: int


class CowResult(CowDocument):
    """``iceberg-exec/cow-result@1``: what one task removed and added (DataFile JSON), rows and bytes."""

    task_id: int
    removed_data_files: list[dict[str, Any]]
    applied_deletes: dict[str, dict[str, Any]]
    added_data_files: list[dict[str, Any]]
    rewritten_data_files_count: int
    dropped_data_files_count: int
    dropped_without_reading_count: int
    probed_data_files_count: int
    untouched_data_files_count: int
    deleted_rows: int
    updated_rows: int
    inserted_rows: int
    rewritten_rows: int
    delete_file_rows: int
    read_bytes: int
    written_bytes: int
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float


class CowCommitResult(TypedDict):
    """``iceberg-exec/cow-commit-result@1``: the snapshot a plan's results landed in, and their totals.

    ``operation``, ``snapshot_operation`` and ``isolation_level`` are ``None`` when there was nothing to
    commit (no result; no snapshot).
    """

    schema: str
    table: str
    operation: str | None
    snapshot_operation: str | None
    commit_id: str
    snapshot_ids: list[int]
    already_committed: bool
    isolation_level: str | None
    deleted_data_files_count: int
    added_data_files_count: int
    removed_delete_files_count: int
    untouched_data_files_count: int
    dropped_without_reading_count: int
    deleted_rows: int
    updated_rows: int
    inserted_rows: int
    rewritten_rows: int
    read_bytes: int
    written_bytes: int
    peak_rss_bytes: int
    spilled_bytes: int


class CowPlanSummary(TypedDict):
    """What a one-call copy-on-write reports of its plan."""

    base_snapshot_id: int | None
    tasks: int
    candidate_data_files_count: int
    dropped_without_reading_count: int


class CowRewriteResult(CowCommitResult):
    """The commit result of a one-call copy-on-write (:func:`~.ops.cow.cow_rewrite`), with its plan."""

    plan: CowPlanSummary


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


# --- equality -> position delete conversion (:mod:`.ops.convert`): plan -> task -> task result -> commit ---

CONVERT_PLAN = "iceberg-exec/convert-plan@1"
CONVERT_TASK = "iceberg-exec/convert-task@1"
CONVERT_TASK_RESULT = "iceberg-exec/convert-task-result@1"
CONVERT_RESULT = "iceberg-exec/convert-result@1"


class ConvertTask(TypedDict):
    """The data files of one partition and the equality deletes to convert that apply to them."""

    schema: str
    table: str
    branch: str
    base_snapshot_id: int
    task_id: str
    options: dict[str, str]
    equality_delete_files: list[str]
    data_files: list[TaskFileJson]
    #: equality deletes of the plan that apply to no data file (on the first task only)
    dangling_equality_delete_files: NotRequired[list[str]]


class ConvertPlan(TypedDict):
    """What ``plan_conversion`` chose: a task per partition; deletes applying to no data file."""

    schema: str
    table: str
    branch: str
    base_snapshot_id: int | None
    options: dict[str, str]
    equality_delete_files_count: int
    tasks: list[ConvertTask]
    dangling_equality_delete_files: NotRequired[list[str]]


class ConvertTaskResult(TypedDict):
    """One converted partition: the position delete files written and what was examined and merged."""

    schema: str
    table: str
    branch: str
    base_snapshot_id: int
    task_id: str
    equality_delete_files: list[str]
    #: every data file examined (its rows matched against the deletes), with or without matches
    data_files: list[str]
    #: file-scoped position delete files whose positions the new files carry (removed by the commit)
    merged_position_delete_files: list[str]
    added_delete_files: list[ContentFileJson]
    #: v3 only: the old DVs and file-scoped position delete files the new DVs replace (the commit
    #: removes them; a DV by its file path, content offset and size)
    rewritten_delete_files: NotRequired[list[ContentFileJson]]
    dangling_equality_delete_files: list[str]
    matched_rows: int
    data_rows_read: int
    delete_rows_read: int
    peak_rss_bytes: int
    spilled_bytes: int
    elapsed_seconds: float


class ConvertResult(TypedDict):
    """``convert_equality_deletes``: Java's ``ConvertEqualityDeleteFiles.Result`` names, plus what it cost."""

    schema: str
    table: str
    converted_equality_delete_files_count: int
    added_position_delete_files_count: int
    removed_position_delete_files_count: int
    matched_rows_count: int
    added_bytes_count: int
    kept_equality_delete_files: list[str]
    snapshot_ids: list[int]
    already_committed: bool
    peak_rss_bytes: int
    spilled_bytes: int


class RewriteManifestsResult(TypedDict):
    """``iceberg-exec/rewrite-manifests-result@1``: Spark's ``rewrite_manifests`` columns and the commit.

    All counts are 0 and ``snapshot_ids`` empty when there was nothing to rewrite.
    """

    schema: str
    table: str
    branch: str
    spec_id: int
    #: the partition fields clustered by; empty for all of the spec's, in order
    sort_by: list[str]
    target_size_bytes: int
    #: Spark's result columns
    rewritten_manifests_count: int
    added_manifests_count: int
    #: manifests of the head carried as they are (other specs, content left alone)
    kept_manifests_count: int
    #: live entries rewritten (the summary's ``entries-processed``)
    rewritten_entries_count: int
    snapshot_ids: list[int]
    commit_id: str
    already_committed: bool
