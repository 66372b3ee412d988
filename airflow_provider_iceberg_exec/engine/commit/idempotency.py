"""Commit ids in snapshot summaries: what makes a retried commit idempotent.

Every commit writes the caller's commit id under :data:`COMMIT_ID_PROPERTY`; before committing, and again
on every attempt of PyIceberg's retry loop, a snapshot that already carries it is the commit, done.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException
from pyiceberg.table.snapshots import ancestors_of

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["COMMIT_ID_PROPERTY", "AlreadyCommittedError", "find_commit", "landed_snapshots"]

log = logging.getLogger(__name__)

#: Snapshot summary key carrying the caller's commit id; it makes a retried commit idempotent.
COMMIT_ID_PROPERTY = "iceberg-exec.commit-id"


def _commit_id_of(snapshot: Snapshot) -> str | None:
    return snapshot.summary.additional_properties.get(COMMIT_ID_PROPERTY) if snapshot.summary else None


def landed_snapshots(metadata: TableMetadata, commit_id: str, branch: str | None = None) -> list[Snapshot]:
    """The snapshots committed under ``commit_id`` or its per-batch ids ``<commit_id>.<n>``, oldest first.

    :param branch: only the branch's ancestry; ``None`` for every snapshot of the table.
    """
    if branch is None:
        snapshots = list(metadata.snapshots)
    else:
        snapshots = list(ancestors_of(metadata.snapshot_by_name(branch), metadata))
        snapshots.reverse()
    landed = []
    for snapshot in snapshots:
        found = _commit_id_of(snapshot)
        if found is not None and (found == commit_id or found.startswith(f"{commit_id}.")):
            landed.append(snapshot)
    return landed


def find_commit(metadata: TableMetadata, branch: str, commit_id: str) -> Snapshot | None:
    """Find the snapshot carrying exactly ``commit_id``: on the branch's ancestry first, then anywhere."""
    for snapshot in ancestors_of(metadata.snapshot_by_name(branch), metadata):
        if _commit_id_of(snapshot) == commit_id:
            return snapshot
    for snapshot in metadata.snapshots:
        if _commit_id_of(snapshot) == commit_id:
            # Landed, then the branch moved away from it (a rollback, say): applying it again would
            # undo that decision, so report it as done.
            log.warning(
                "Commit %s is snapshot %s, which is not on branch %s", commit_id, snapshot.snapshot_id, branch
            )
            return snapshot
    return None


class AlreadyCommittedError(ValidationException):
    """A snapshot with our commit id appeared during a retry.

    A ValidationException, so that PyIceberg's retry loop stops and deletes the manifests we wrote.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(f"commit already landed as snapshot {snapshot.snapshot_id}")
        self.snapshot = snapshot
