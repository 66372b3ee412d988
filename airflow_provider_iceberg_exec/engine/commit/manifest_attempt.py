"""One attempt of a manifest rewrite: plan and write at the branch head, then validate, as Java's
``BaseRewriteManifests``.

PyIceberg's retry loop calls the snapshot producer once per attempt, against refreshed metadata;
:func:`prepare_manifests_attempt` is what it does then:

1. a snapshot that already carries the commit id ends the commit
   (:class:`~.idempotency.AlreadyCommittedError`);
2. the operation's planner (:data:`PlanManifests`) chooses, at this head, the manifests to replace and
   writes their replacement; ``None`` (nothing to do) ends the commit (:class:`NothingToRewriteError`);
3. the rewrite is validated against the head (:func:`validate_manifest_rewrite`): every replaced manifest
   is in the head, and the replacement holds exactly as many live files as the replaced manifests.

A retry after a concurrent commit thus re-plans from the new head: what changed meanwhile is rewritten or
kept, never lost. The planner writes through the producer, which deletes what it wrote when the attempt
fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import ValidationException
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestFile, ManifestWriter
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from airflow_provider_iceberg_exec.engine.commit.idempotency import AlreadyCommittedError, find_commit
from airflow_provider_iceberg_exec.engine.commit.summary import snapshot_summary_properties
from airflow_provider_iceberg_exec.engine.meta.row_ids import snapshot_manifests

__all__ = [
    "CREATED_MANIFESTS_COUNT",
    "KEPT_MANIFESTS_COUNT",
    "PROCESSED_ENTRY_COUNT",
    "REPLACED_MANIFESTS_COUNT",
    "ManifestRewrite",
    "ManifestsAttempt",
    "NothingToRewriteError",
    "OpenManifestWriter",
    "PlanManifests",
    "prepare_manifests_attempt",
    "validate_manifest_rewrite",
]

#: Java's ``SnapshotSummary`` keys of a ``rewriteManifests`` snapshot.
CREATED_MANIFESTS_COUNT = "manifests-created"
KEPT_MANIFESTS_COUNT = "manifests-kept"
REPLACED_MANIFESTS_COUNT = "manifests-replaced"
PROCESSED_ENTRY_COUNT = "entries-processed"

#: Opens a writer of a new manifest (content, spec id) of the snapshot being produced.
OpenManifestWriter = Callable[[ManifestContent, int], ManifestWriter]


@dataclass(frozen=True)
class ManifestRewrite:
    """What a planner wrote at one head: the manifests it replaces and their replacement."""

    replaced: Sequence[ManifestFile]
    created: Sequence[ManifestFile]
    #: live entries read and written again
    entries: int


#: Chooses and rewrites manifests of ``head``, writing through the opener; ``None`` when nothing to do.
PlanManifests = Callable[[FileIO, TableMetadata, Snapshot, OpenManifestWriter], "ManifestRewrite | None"]


class NothingToRewriteError(ValidationException):
    """The planner found nothing to rewrite at the head; no snapshot is committed.

    A ValidationException, so that PyIceberg's retry loop stops and deletes what was written.
    """

    def __init__(self, head_snapshot_id: int | None) -> None:
        super().__init__(f"nothing to rewrite in snapshot {head_snapshot_id}")
        self.head_snapshot_id = head_snapshot_id


@dataclass(frozen=True)
class ManifestsAttempt:
    """One validated attempt: the head it was planned at, the rewrite, and the manifests kept as they are."""

    metadata: TableMetadata
    head: Snapshot
    rewrite: ManifestRewrite
    kept: Sequence[ManifestFile]

    @property
    def manifests(self) -> list[ManifestFile]:
        """Every manifest of the new snapshot."""
        return [*self.rewrite.created, *self.kept]

    def summary_properties(self, snapshot_properties: Mapping[str, str]) -> dict[str, str]:
        """Java's ``rewriteManifests`` summary: the four counts, then the totals carried from the head."""
        counts = {
            CREATED_MANIFESTS_COUNT: str(len(self.rewrite.created)),
            KEPT_MANIFESTS_COUNT: str(len(self.kept)),
            REPLACED_MANIFESTS_COUNT: str(len(self.rewrite.replaced)),
            PROCESSED_ENTRY_COUNT: str(self.rewrite.entries),
        }
        summary = self.head.summary
        return snapshot_summary_properties(
            self.metadata,
            added=(),
            removed=(),
            previous=summary.additional_properties if summary is not None else None,
            snapshot_properties={**counts, **snapshot_properties},
        )


def prepare_manifests_attempt(
    plan: PlanManifests,
    *,
    io: FileIO,
    metadata: TableMetadata,
    branch: str,
    head_snapshot_id: int | None,
    commit_id: str,
    open_writer: OpenManifestWriter,
) -> ManifestsAttempt:
    """Plan, write and validate one attempt at the head ``head_snapshot_id`` of ``metadata``.

    :raises AlreadyCommittedError: when a snapshot carries the commit id.
    :raises NothingToRewriteError: when the planner finds nothing to do (or the branch has no snapshot).
    :raises ValidationException: when the rewrite does not match the head (see
        :func:`validate_manifest_rewrite`).
    """
    if (found := find_commit(metadata, branch, commit_id)) is not None:
        raise AlreadyCommittedError(found)
    head = metadata.snapshot_by_id(head_snapshot_id) if head_snapshot_id is not None else None
    if head is None:
        raise NothingToRewriteError(head_snapshot_id)
    rewrite = plan(io, metadata, head, open_writer)
    if rewrite is None:
        raise NothingToRewriteError(head.snapshot_id)
    head_manifests = snapshot_manifests(io, metadata, head)  # v3: kept manifests keep first_row_id
    validate_manifest_rewrite(head.snapshot_id, head_manifests, rewrite)
    replaced = {m.manifest_path for m in rewrite.replaced}
    kept = [m for m in head_manifests if m.manifest_path not in replaced]
    return ManifestsAttempt(metadata=metadata, head=head, rewrite=rewrite, kept=kept)


def validate_manifest_rewrite(
    head_snapshot_id: int, head_manifests: Sequence[ManifestFile], rewrite: ManifestRewrite
) -> None:
    """Java's ``BaseRewriteManifests.validateDeletedManifests`` and ``validateFilesCounts``.

    :raises ValidationException: when a replaced manifest is not in the head, or when the replacement
        does not hold as many live files (added + existing) as the replaced manifests.
    """
    in_head = {m.manifest_path for m in head_manifests}
    for manifest in rewrite.replaced:
        if manifest.manifest_path not in in_head:
            raise ValidationException(
                f"Deleted manifest {manifest.manifest_path} could not be found in the latest snapshot "
                f"{head_snapshot_id}"
            )
    created = sum(_active_files(m) for m in rewrite.created)
    replaced = sum(_active_files(m) for m in rewrite.replaced)
    if created != replaced:
        raise ValidationException(
            "Replaced and created manifests must have the same number of active files: "
            f"{created} (new), {replaced} (old)"
        )


def _active_files(manifest: ManifestFile) -> int:
    if manifest.added_files_count is None or manifest.existing_files_count is None:
        raise ValidationException(f"No file counts in manifest: {manifest.manifest_path}")
    return int(manifest.added_files_count) + int(manifest.existing_files_count)
