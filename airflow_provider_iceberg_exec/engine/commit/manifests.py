"""Commit a manifest rewrite: Java's ``RewriteManifests`` (operation ``replace``, no data change).

:func:`commit_manifest_rewrite` commits what an operation's planner (:data:`~.manifest_attempt.PlanManifests`)
writes, idempotently by commit id (:mod:`.idempotency`), through the snapshot producer of
:mod:`.pyiceberg_producer` with PyIceberg's retries. The planner runs on every attempt at the branch head,
and every attempt is validated as Java's ``BaseRewriteManifests`` validates it
(:func:`~.manifest_attempt.validate_manifest_rewrite`). What a failed attempt wrote is deleted; after an
unknown outcome nothing is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from airflow_provider_iceberg_exec.engine.commit.failures import commit_failure
from airflow_provider_iceberg_exec.engine.commit.idempotency import (
    COMMIT_ID_PROPERTY,
    AlreadyCommittedError,
    find_commit,
)
from airflow_provider_iceberg_exec.engine.commit.manifest_attempt import (
    CREATED_MANIFESTS_COUNT,
    KEPT_MANIFESTS_COUNT,
    PROCESSED_ENTRY_COUNT,
    REPLACED_MANIFESTS_COUNT,
    ManifestRewrite,
    NothingToRewriteError,
    OpenManifestWriter,
    PlanManifests,
)
from airflow_provider_iceberg_exec.engine.commit.pyiceberg_producer import stage_manifests
from airflow_provider_iceberg_exec.engine.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    TableNotFoundError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import catalog_errors, table_name
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format

__all__ = [
    "ManifestRewrite",
    "ManifestRewriteOutcome",
    "OpenManifestWriter",
    "PlanManifests",
    "check_manifest_rewrite_table",
    "commit_manifest_rewrite",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManifestRewriteOutcome:
    """What :func:`commit_manifest_rewrite` committed, found already committed, or found nothing to do.

    :param snapshot_id: the snapshot carrying the commit id; ``None`` when nothing was to be done.
    :param already_committed: a snapshot with this commit id already existed (an idempotent retry).
    :param summary: the snapshot summary, ``operation`` included (empty when nothing was done).
    """

    snapshot_id: int | None
    commit_id: str
    already_committed: bool
    summary: dict[str, str]

    def count(self, key: str) -> int:
        """A count of the summary (``manifests-created``, ...), 0 when absent."""
        try:
            return int(self.summary.get(key, "0"))
        except ValueError:
            return 0

    @property
    def replaced_manifests(self) -> int:
        """Manifests replaced (Spark's ``rewritten_manifests_count``)."""
        return self.count(REPLACED_MANIFESTS_COUNT)

    @property
    def created_manifests(self) -> int:
        """Manifests written (Spark's ``added_manifests_count``)."""
        return self.count(CREATED_MANIFESTS_COUNT)

    @property
    def kept_manifests(self) -> int:
        """Manifests of the head carried as they are."""
        return self.count(KEPT_MANIFESTS_COUNT)

    @property
    def entries(self) -> int:
        """Live entries rewritten."""
        return self.count(PROCESSED_ENTRY_COUNT)


def check_manifest_rewrite_table(metadata: TableMetadata, branch: str, name: str) -> None:
    """Refuse a table this commit cannot write and a tag as the branch.

    :raises ConfigurationError: with the one-line reason the other commits give.
    """
    check_writable_format(metadata, name)
    ref = metadata.refs.get(branch)
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise ConfigurationError(f"{branch} is a tag of {name}, not a branch")


def commit_manifest_rewrite(
    table: Table,
    plan: PlanManifests,
    *,
    commit_id: str,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
) -> ManifestRewriteOutcome:
    """Commit the manifests ``plan`` writes at the head of ``branch`` as one ``replace`` snapshot.

    :param table: the table; refreshed first, and holding the new metadata afterwards.
    :param plan: called on every attempt with the head; writes the new manifests through the opener it
        is given and returns them with the manifests they replace, or ``None`` when there is nothing to do.
    :param commit_id: the idempotency key, stored under :data:`~.idempotency.COMMIT_ID_PROPERTY`.
    :param branch: the branch to commit to.
    :param snapshot_properties: extra summary properties.
    :returns: the outcome; ``snapshot_id`` is ``None`` when nothing was to be done.
    :raises ConfigurationError: for bad arguments, a tag, or a format-version 3 table.
    :raises TableNotFoundError: when the table no longer exists.
    :raises CommitValidationError: when an attempt's rewrite does not match the head.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown; check the table first.
    """
    if not commit_id:
        raise ConfigurationError("commit_id must be a non-empty string")
    properties = dict(snapshot_properties or {})
    if reserved := {"operation", COMMIT_ID_PROPERTY} & properties.keys():
        raise ConfigurationError(f"snapshot_properties cannot set {', '.join(sorted(reserved))}")
    properties[COMMIT_ID_PROPERTY] = commit_id
    name = table_name(table)
    try:
        with catalog_errors(name):
            table.refresh()
    except NoSuchTableError as err:
        raise TableNotFoundError(f"table {name} does not exist") from err
    check_manifest_rewrite_table(table.metadata, branch, name)
    if (found := find_commit(table.metadata, branch, commit_id)) is not None:
        log.info("Commit %s is already in %s as snapshot %s", commit_id, name, found.snapshot_id)
        return _outcome(found, commit_id, already_committed=True)

    staged = stage_manifests(table, plan, commit_id=commit_id, branch=branch, snapshot_properties=properties)
    try:
        attempt = staged.commit()
    except AlreadyCommittedError as err:
        log.info("Commit %s landed in %s meanwhile as snapshot %s", commit_id, name, err.snapshot.snapshot_id)
        return _outcome(err.snapshot, commit_id, already_committed=True)
    except NothingToRewriteError as err:
        log.info("No manifest of %s to rewrite at snapshot %s", name, err.head_snapshot_id)
        return ManifestRewriteOutcome(None, commit_id, already_committed=False, summary={})
    except Exception as err:
        if (mapped := commit_failure(err, commit_id, name)) is None:
            raise
        raise mapped from err
    snapshot = table.metadata.snapshot_by_id(staged.producer.snapshot_id)
    if snapshot is None:  # pragma: no cover - the catalog returned metadata without our snapshot
        raise CommitStateUnknownError(f"snapshot {staged.producer.snapshot_id} is missing after {commit_id}")
    log.info(
        "Committed %s to %s as replace snapshot %s: %s manifests replaced by %s, %s kept, %s entries",
        commit_id,
        name,
        snapshot.snapshot_id,
        len(attempt.rewrite.replaced),
        len(attempt.rewrite.created),
        len(attempt.kept),
        attempt.rewrite.entries,
    )
    return _outcome(snapshot, commit_id, already_committed=False)


def _outcome(snapshot: Snapshot, commit_id: str, *, already_committed: bool) -> ManifestRewriteOutcome:
    summary = snapshot.summary
    return ManifestRewriteOutcome(
        snapshot_id=snapshot.snapshot_id,
        commit_id=commit_id,
        already_committed=already_committed,
        summary={"operation": summary.operation.value, **summary.additional_properties} if summary else {},
    )
