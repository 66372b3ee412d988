"""Commit rewritten files as one snapshot: Java's ``RewriteFiles`` and ``OverwriteFiles`` on PyIceberg 0.12.

The public commit API. Three commits, which differ only in their operation and their validation:

- :func:`commit_rewrite` (compaction) commits ``replace``, as Java's ``RewriteFiles``;
- :func:`commit_delete_rewrite` (equality deletes converted to positions, position deletes compacted)
  commits ``replace`` of delete files by delete files, each added with an explicit data sequence number
  (``RewriteFiles.deleteFile(old).addFile(new, seq)``);
- :func:`commit_row_delta` (merge-on-read MERGE) adds data files and position deletes, Java's ``RowDelta``
  (``overwrite``, or ``delete`` when it adds only deletes);
- :func:`commit_overwrite` (copy-on-write delete, update and overwrite by predicate) commits ``overwrite``
  (``delete`` when it only removes files, ``append`` when it only adds), as Java's ``OverwriteFiles`` does
  for Spark's copy-on-write writes, with the table's isolation level (see :func:`commit_overwrite`).

Java's compaction commits with
``table.newRewrite().validateFromSnapshot(start).dataSequenceNumber(startSeq)...commit()``. Both commits
describe what they remove and add as a :class:`~.change.FilesChange`, committed idempotently by commit id
(:mod:`.idempotency`) through the snapshot producer of :mod:`.pyiceberg_producer`, the one module that
relies on PyIceberg's private commit API, with PyIceberg's retries; :mod:`.failures` says what an error
of that commit means.

Validation follows Java's ``MergingSnapshotProducer`` (:mod:`.conflicts`): the base snapshot must be an
ancestor of the branch head; every file to remove must still be live; no delete file committed after the
base (data sequence number above the base's) may apply to a removed data file, where a ``replace`` with
``use_starting_sequence_number`` counts only position deletes, because its added files keep the base's
sequence number and newer equality deletes still apply to them. A commit that removes delete files
(given, or dangling ones it finds, see :class:`DanglingDeletes` and :mod:`.dangling`) checks on every
attempt, against the head it commits on, that none of them applies to a live data file afterwards. An
``overwrite`` under serializable isolation also fails when a data file that may hold rows matching its
conflict-detection filter was appended since the base (``BaseOverwriteFiles.validate``).

Manifests are written by :mod:`airflow_provider_iceberg_exec.engine.meta.manifests`, which also writes
delete manifests.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot

from airflow_provider_iceberg_exec.engine.commit.change import (
    DanglingDeletes,
    FilesChange,
    SequencedDelete,
    file_identity,
)
from airflow_provider_iceberg_exec.engine.commit.conflicts import (
    DeleteRewriteValidation,
    OverwriteValidation,
    RowDeltaValidation,
    validate_rewrite,
)
from airflow_provider_iceberg_exec.engine.commit.dvs import check_added_dvs_arguments, check_replaced_deletes
from airflow_provider_iceberg_exec.engine.commit.failures import commit_failure
from airflow_provider_iceberg_exec.engine.commit.idempotency import (
    COMMIT_ID_PROPERTY,
    AlreadyCommittedError,
    find_commit,
    landed_snapshots,
)
from airflow_provider_iceberg_exec.engine.commit.pyiceberg_producer import stage_files
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    TableNotFoundError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import catalog_errors, table_name
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format
from airflow_provider_iceberg_exec.engine.meta.manifests import to_record_layout

# The commit API: the commit functions, their options and results, and the commit-id look-ups the
# operations reconcile with (defined in .change and .idempotency, which the commit rules share).
__all__ = [
    "COMMIT_ID_PROPERTY",
    "CommitOutcome",
    "DanglingDeletes",
    "IsolationLevel",
    "SequencedDelete",
    "commit_delete_rewrite",
    "commit_overwrite",
    "commit_rewrite",
    "commit_row_delta",
    "find_commit",
    "landed_snapshots",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitOutcome:
    """What :func:`commit_rewrite` or :func:`commit_overwrite` committed, or found already committed.

    :param snapshot_id: the snapshot carrying the commit id.
    :param sequence_number: its sequence number; ``None`` for a v1 table.
    :param commit_id: the caller's commit id.
    :param already_committed: ``True`` when a snapshot with this commit id already existed, so nothing
        was written (an idempotent retry).
    :param summary: the snapshot summary, ``operation`` included.
    """

    snapshot_id: int
    sequence_number: int | None
    commit_id: str
    already_committed: bool
    summary: dict[str, str]


def commit_rewrite(
    table: Table,
    *,
    base_snapshot_id: int,
    rewritten_data_files: Sequence[DataFile],
    added_data_files: Sequence[DataFile],
    removed_delete_files: Sequence[DataFile] = (),
    commit_id: str,
    use_starting_sequence_number: bool = True,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
    dangling_deletes: DanglingDeletes | str = DanglingDeletes.NONE,
) -> CommitOutcome:
    """Replace data files with their rewritten output in one ``replace`` snapshot, as Java's RewriteFiles.

    The new snapshot's parent is the current head of ``branch``, which may be newer than the base: files
    appended meanwhile are kept. Validation runs from ``base_snapshot_id`` on every attempt.

    .. code-block:: python

        outcome = commit_rewrite(
            table,
            base_snapshot_id=plan_snapshot_id,
            rewritten_data_files=inputs,
            added_data_files=outputs,
            commit_id="compaction-2026-01-01T00:00:00-group-3",
        )

    :param table: the table; refreshed first, and holding the new metadata afterwards.
    :param base_snapshot_id: the snapshot the rewrite was planned and read from.
    :param rewritten_data_files: data files replaced by the output; each must still be live.
    :param added_data_files: the rewritten output, written but not committed. A file without a
        ``spec_id`` is taken to use the table's default spec.
    :param removed_delete_files: delete files to drop in the same snapshot (for example deletes of the
        rewritten files); each must still be live and must apply to no live data file after the commit
        (that would bring deleted rows back).
    :param commit_id: the caller's idempotency key, stored in the summary under
        :data:`COMMIT_ID_PROPERTY`. A snapshot that already carries it is returned instead of
        committing again.
    :param use_starting_sequence_number: give the added files the base snapshot's sequence number
        (Spark's ``use-starting-sequence-number``), so equality deletes committed meanwhile still apply.
    :param branch: the branch to commit to.
    :param snapshot_properties: extra summary properties.
    :param dangling_deletes: which other delete files to remove, computed at the branch head on every
        attempt (see :class:`DanglingDeletes`). The summary's ``removed-delete-files`` counts them all.
    :returns: the committed (or already committed) snapshot.
    :raises ConfigurationError: for bad arguments, or a format version above 3.
    :raises TableNotFoundError: when the table no longer exists.
    :raises CommitValidationError: when validation from the base fails; the work must be planned again.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown; check the table first.
    """
    dangling = _dangling_mode(dangling_deletes)
    properties = _check_arguments(
        rewritten_data_files, added_data_files, removed_delete_files, commit_id, snapshot_properties
    )
    return _commit_files(
        table,
        branch=branch,
        commit_id=commit_id,
        removed_delete_files=removed_delete_files,
        snapshot_properties=properties,
        change=lambda: FilesChange(
            operation=Operation.REPLACE,
            base_snapshot_id=base_snapshot_id,
            removed_data_files=list(rewritten_data_files),
            removed_delete_files=list(removed_delete_files),
            added=[to_record_layout(data_file) for data_file in added_data_files],
            commit_id=commit_id,
            branch=branch,
            explicit_sequence_number=use_starting_sequence_number,
            dangling_deletes=dangling,
            validate=validate_rewrite,
        ),
        what=(
            f"{len(rewritten_data_files)} data files rewritten, {len(added_data_files)} added, "
            f"{len(removed_delete_files)} deletes removed (dangling deletes: {dangling.value})"
        ),
    )


def commit_delete_rewrite(
    table: Table,
    *,
    base_snapshot_id: int,
    removed_delete_files: Sequence[DataFile],
    added_delete_files: Sequence[SequencedDelete],
    required_data_files: Sequence[DataFile] = (),
    commit_id: str,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
) -> CommitOutcome:
    """Replace delete files by equivalent delete files in one ``replace`` snapshot; no data file changes.

    Java's ``newRewrite().validateFromSnapshot(base).deleteFile(old)...addFile(new, seq)``. Every removed
    delete file must still be live ("Missing required files to delete"). With ``required_data_files``
    (the data files an equality delete was resolved against), each must also still be live and have no
    delete committed after the base, as Flink's equality-delete conversion validates: a compaction that
    rewrote one meanwhile may keep rows the removed equality deletes had to reach.

    .. code-block:: python

        outcome = commit_delete_rewrite(
            table,
            base_snapshot_id=plan_snapshot_id,
            removed_delete_files=equality_deletes,
            added_delete_files=[SequencedDelete(position_delete, 7)],
            required_data_files=data_files_with_matches,
            commit_id="convert-2026-12-01",
        )

    :param table: the table; refreshed first, and holding the new metadata afterwards.
    :param base_snapshot_id: the snapshot the rewrite was planned and read from.
    :param removed_delete_files: delete files replaced; at least one.
    :param added_delete_files: the new delete files, written but not committed, each with the data
        sequence number it must carry (at least the sequence number of every data file it names).
    :param required_data_files: data files that must be unchanged since the base.
    :param commit_id: the caller's idempotency key (see :func:`commit_rewrite`).
    :param branch: the branch to commit to.
    :param snapshot_properties: extra summary properties.
    :returns: the committed (or already committed) snapshot.
    :raises ConfigurationError: for bad arguments, a v1 table or a format version above 3.
    :raises TableNotFoundError: when the table no longer exists.
    :raises CommitValidationError: when validation from the base fails; the work must be planned again.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown; check the table first.
    """
    properties = _check_delete_rewrite_arguments(
        removed_delete_files, added_delete_files, required_data_files, commit_id, snapshot_properties
    )
    return _commit_files(
        table,
        branch=branch,
        commit_id=commit_id,
        removed_delete_files=removed_delete_files,
        snapshot_properties=properties,
        change=lambda: FilesChange(
            operation=Operation.REPLACE,
            base_snapshot_id=base_snapshot_id,
            removed_data_files=[],
            removed_delete_files=list(removed_delete_files),
            added=[],
            commit_id=commit_id,
            branch=branch,
            explicit_sequence_number=False,
            dangling_deletes=DanglingDeletes.NONE,
            validate=DeleteRewriteValidation(tuple(required_data_files)),
            added_deletes=[
                SequencedDelete(to_record_layout(d.delete_file), d.data_sequence_number)
                for d in added_delete_files
            ],
            rewrites_deletes=True,
        ),
        what=(
            f"{len(removed_delete_files)} delete files rewritten, {len(added_delete_files)} added, "
            f"{len(required_data_files)} data files validated"
        ),
    )


def _check_delete_rewrite_arguments(
    removed: Sequence[DataFile],
    added: Sequence[SequencedDelete],
    required: Sequence[DataFile],
    commit_id: str,
    snapshot_properties: Mapping[str, str] | None,
) -> dict[str, str]:
    """Check what Java's BaseRewriteFiles checks for delete files; return the summary properties."""
    if not removed:
        raise ConfigurationError("Files to delete cannot be empty")
    if bad := [f.file_path for f in removed if f.content == DataFileContent.DATA]:
        raise ConfigurationError(f"removed delete files must be delete files: {', '.join(bad)}")
    if bad := [d.delete_file.file_path for d in added if d.delete_file.content == DataFileContent.DATA]:
        raise ConfigurationError(f"added delete files must be delete files: {', '.join(bad)}")
    if bad := [
        d.delete_file.file_path
        for d in added
        if (d.data_sequence_number is None and not is_deletion_vector(d.delete_file))
        or (d.data_sequence_number is not None and d.data_sequence_number < 0)
    ]:
        raise ConfigurationError(f"added delete files need a data sequence number >= 0: {', '.join(bad)}")
    if bad := [f.file_path for f in required if f.content != DataFileContent.DATA]:
        raise ConfigurationError(f"required data files must have content DATA: {', '.join(bad)}")
    _check_added_deletes([d.delete_file for d in added], removed)
    return _check_common([], [], commit_id, snapshot_properties)


def _check_added_deletes(added: Sequence[DataFile], removed: Sequence[DataFile]) -> None:
    """Each added delete file once and none also removed, by identity (DVs share a Puffin path)."""
    added_ids = [file_identity(f) for f in added]
    if len(set(added_ids)) != len(added_ids):
        raise ConfigurationError("added_delete_files lists a file more than once")
    if overlap := set(added_ids) & {file_identity(f) for f in removed}:
        raise ConfigurationError(
            f"files cannot be both removed and added: {', '.join(sorted(i[0] for i in overlap))}"
        )


def _dangling_mode(value: DanglingDeletes | str) -> DanglingDeletes:
    try:
        return DanglingDeletes(value)
    except ValueError:
        raise ConfigurationError(f"unknown dangling_deletes {value!r}; use none, rewritten or all") from None


class IsolationLevel(str, enum.Enum):
    """Java's ``IsolationLevel`` of a copy-on-write commit (``write.delete.isolation-level`` and friends)."""

    SERIALIZABLE = "serializable"
    SNAPSHOT = "snapshot"

    @classmethod
    def parse(cls, text: str | IsolationLevel) -> IsolationLevel:
        """Parse a level name, case-insensitively.

        :raises ConfigurationError: for another name.

        >>> IsolationLevel.parse("SNAPSHOT")
        <IsolationLevel.SNAPSHOT: 'snapshot'>
        """
        if isinstance(text, IsolationLevel):
            return text
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            raise ConfigurationError(
                f"unknown isolation level {text!r}; use serializable or snapshot"
            ) from None


def commit_overwrite(
    table: Table,
    *,
    base_snapshot_id: int | None,
    deleted_data_files: Sequence[DataFile],
    added_data_files: Sequence[DataFile],
    conflict_detection_filter: BooleanExpression,
    isolation_level: IsolationLevel | str = IsolationLevel.SERIALIZABLE,
    commit_id: str,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
    removed_delete_files: Sequence[DataFile] = (),
    dangling_deletes: DanglingDeletes | str = DanglingDeletes.NONE,
) -> CommitOutcome:
    """Remove and add data files in one snapshot, as Java's OverwriteFiles in Spark's copy-on-write commit.

    The operation is ``overwrite``, or ``delete`` when no file is added (``append`` when none is removed),
    as Java's ``BaseOverwriteFiles.operation()``. The added files inherit the new snapshot's sequence
    number. Validation runs from ``base_snapshot_id`` on every attempt, as Spark's
    ``CopyOnWriteOperation`` sets it up (``validateFromSnapshot``, ``conflictDetectionFilter``):

    - under both levels: every removed file must still be live ("Missing required files to delete"),
      and no delete file committed after the base may apply to a removed file (its rows would be
      resurrected by the copy) -- ``validateNoConflictingDeletes``; unlike Java, which first prunes those
      delete files by the conflict filter, every delete that applies to a removed file counts;
    - under ``serializable`` also: no data file added since the base by an ``append`` or ``overwrite``
      may hold rows matching ``conflict_detection_filter`` (partition projection and column metrics) --
      ``validateNoConflictingData``. ``snapshot`` isolation accepts such files.

    .. code-block:: python

        outcome = commit_overwrite(
            table,
            base_snapshot_id=plan_snapshot_id,
            deleted_data_files=rewritten_inputs,
            added_data_files=outputs,
            conflict_detection_filter=parse("user_id = 42"),
            isolation_level="serializable",
            commit_id="erasure-request-17",
        )

    :param table: the table; refreshed first, and holding the new metadata afterwards.
    :param base_snapshot_id: the snapshot the rewrite was planned and read from; ``None`` when the branch
        had no snapshot, in which case the whole history of the branch is validated.
    :param deleted_data_files: data files removed (rewritten or dropped); each must still be live.
    :param added_data_files: the new files, written but not committed.
    :param conflict_detection_filter: the user's predicate (unbound or bound to the table schema).
    :param isolation_level: ``serializable`` (the default) or ``snapshot``.
    :param commit_id: the caller's idempotency key (see :func:`commit_rewrite`).
    :param branch: the branch to commit to.
    :param snapshot_properties: extra summary properties.
    :param removed_delete_files: delete files to drop in the same snapshot: those that applied only to
        removed data files (their deletion vectors and file-scoped position deletes); each must still be
        live and must apply to no live data file after the commit.
    :param dangling_deletes: which other delete files to remove, computed at the branch head on every
        attempt (see :class:`DanglingDeletes`); ``rewritten`` is what a copy-on-write commit wants: the
        deletes that applied to the removed files and to nothing else. The added files get a new data
        sequence number, so no existing delete applies to them. The summary's ``removed-delete-files``
        counts every delete file removed.
    :returns: the committed (or already committed) snapshot.
    :raises ConfigurationError: for bad arguments, or a format version above 3.
    :raises TableNotFoundError: when the table no longer exists.
    :raises CommitValidationError: when validation from the base fails; the work must be planned again.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown; check the table first.
    """
    level = IsolationLevel.parse(isolation_level)
    dangling = _dangling_mode(dangling_deletes)
    properties = _check_overwrite_arguments(
        deleted_data_files, added_data_files, removed_delete_files, commit_id, snapshot_properties
    )
    return _commit_files(
        table,
        branch=branch,
        commit_id=commit_id,
        removed_delete_files=removed_delete_files,
        snapshot_properties=properties,
        change=lambda: FilesChange(
            operation=_overwrite_operation(deleted_data_files, added_data_files),
            base_snapshot_id=base_snapshot_id,
            removed_data_files=list(deleted_data_files),
            removed_delete_files=list(removed_delete_files),
            added=[to_record_layout(data_file) for data_file in added_data_files],
            commit_id=commit_id,
            branch=branch,
            explicit_sequence_number=False,
            dangling_deletes=dangling,
            validate=OverwriteValidation(
                conflict_detection_filter, serializable=level is IsolationLevel.SERIALIZABLE
            ),
        ),
        what=(
            f"{len(deleted_data_files)} data files removed, {len(added_data_files)} added, "
            f"{len(removed_delete_files)} deletes removed (dangling deletes: {dangling.value}), "
            f"{level.value} isolation"
        ),
    )


def commit_row_delta(
    table: Table,
    *,
    base_snapshot_id: int | None,
    added_data_files: Sequence[DataFile],
    added_delete_files: Sequence[DataFile],
    referenced_data_files: Sequence[DataFile],
    conflict_detection_filter: BooleanExpression,
    isolation_level: IsolationLevel | str = IsolationLevel.SERIALIZABLE,
    commit_id: str,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
    removed_delete_files: Sequence[DataFile] = (),
) -> CommitOutcome:
    """Add data files and position deletes (DVs on v3) in one snapshot: Java's ``RowDelta`` as Spark's
    MERGE uses it.

    On a format-version 3 table the added deletes are DVs, one per data file, and
    ``removed_delete_files`` are the deletes they replace (the data file's old DV and file-scoped
    position files: Spark's ``removeDeletes`` of ``rewrittenDeleteFiles``), removed by identity in the
    same snapshot; a removed file no longer live fails the attempt ("Missing required files to
    delete"), and so does a DV another commit added since the base for one of the same data files
    (Java's ``validateAddedDVs``) or a second live DV for one (:mod:`.dvs`).

    The operation is ``overwrite``, or ``delete`` when only delete files are added (Java 1.10's
    ``BaseRowDelta.operation()``: a delta of data files alone is ``overwrite`` too). Added files of both
    kinds inherit the new snapshot's sequence number, so the new deletes apply to the older data files
    they name and not to the rows added beside them. Validation from ``base_snapshot_id`` on every attempt
    (:class:`~.conflicts.RowDeltaValidation`): the data files the deletes name are still live and got no
    new delete; under ``serializable`` also no data file appended since the base matches the filter.

    :param referenced_data_files: the live data files the added deletes name.
    :returns: the committed (or already committed) snapshot.
    :raises ConfigurationError: for bad arguments, a v1 table or a format version above 3.
    :raises CommitValidationError: when validation from the base fails; the work must be planned again.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown; check the table first.
    """
    level = IsolationLevel.parse(isolation_level)
    if not added_data_files and not added_delete_files:
        raise ConfigurationError("a row delta must add at least one data or delete file")
    if bad := [f.file_path for f in added_delete_files if f.content != DataFileContent.POSITION_DELETES]:
        raise ConfigurationError(f"a row delta adds position delete files only: {', '.join(bad)}")
    if bad := [f.file_path for f in removed_delete_files if f.content == DataFileContent.DATA]:
        raise ConfigurationError(f"removed delete files must be delete files: {', '.join(bad)}")
    _check_added_deletes(added_delete_files, removed_delete_files)
    check_replaced_deletes(removed_delete_files, added_delete_files)
    properties = _check_common((), added_data_files, commit_id, snapshot_properties)
    if table.metadata.format_version < 2 and added_delete_files:
        raise ConfigurationError(
            f"cannot add delete files to {table_name(table)}: v1 tables have no delete files"
        )
    return _commit_files(
        table,
        branch=branch,
        commit_id=commit_id,
        removed_delete_files=removed_delete_files,
        snapshot_properties=properties,
        change=lambda: FilesChange(
            operation=Operation.OVERWRITE if added_data_files else Operation.DELETE,
            base_snapshot_id=base_snapshot_id,
            removed_data_files=[],
            removed_delete_files=list(removed_delete_files),
            added=[to_record_layout(data_file) for data_file in added_data_files],
            commit_id=commit_id,
            branch=branch,
            explicit_sequence_number=False,
            dangling_deletes=DanglingDeletes.NONE,
            validate=RowDeltaValidation(
                conflict_detection_filter,
                serializable=level is IsolationLevel.SERIALIZABLE,
                referenced_data_files=tuple(referenced_data_files),
            ),
            added_deletes=[SequencedDelete(to_record_layout(d), None) for d in added_delete_files],
            # The new DVs replace the removed deletes, which still apply to their (live) data files.
            rewrites_deletes=True,
        ),
        what=(
            f"{len(added_data_files)} data files and {len(added_delete_files)} position deletes added, "
            f"{len(removed_delete_files)} replaced, {level.value} isolation"
        ),
    )


def _overwrite_operation(deleted: Sequence[DataFile], added: Sequence[DataFile]) -> Operation:
    """Java's ``BaseOverwriteFiles.operation()``."""
    if deleted and not added:
        return Operation.DELETE
    if added and not deleted:
        return Operation.APPEND
    return Operation.OVERWRITE


def _commit_files(
    table: Table,
    *,
    branch: str,
    commit_id: str,
    removed_delete_files: Sequence[DataFile],
    snapshot_properties: dict[str, str],
    change: Callable[[], FilesChange],
    what: str,
) -> CommitOutcome:
    """Commit ``change``, idempotently by ``commit_id``, mapping PyIceberg's errors."""
    name = table_name(table)
    try:
        with catalog_errors(name):
            table.refresh()
    except NoSuchTableError as err:
        raise TableNotFoundError(f"table {name} does not exist") from err
    _check_table(table.metadata, branch, name, removed_delete_files)

    found = find_commit(table.metadata, branch, commit_id)
    if found is not None:
        log.info(
            "Commit %s is already in %s as snapshot %s; nothing to do", commit_id, name, found.snapshot_id
        )
        return _outcome(table.metadata, found, commit_id, already_committed=True)

    files = change()
    check_added_dvs_arguments(table.metadata.format_version, files.added_files, name)
    staged = stage_files(table, files, snapshot_properties)
    try:
        snapshot_id = staged.commit()
    except AlreadyCommittedError as err:
        log.info("Commit %s landed in %s meanwhile as snapshot %s", commit_id, name, err.snapshot.snapshot_id)
        return _outcome(table.metadata, err.snapshot, commit_id, already_committed=True)
    except Exception as err:
        if (mapped := commit_failure(err, commit_id, name)) is None:
            raise
        raise mapped from err

    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:  # pragma: no cover - the catalog returned metadata without our snapshot
        raise CommitStateUnknownError(f"snapshot {snapshot_id} is missing after commit {commit_id}")
    log.info(
        "Committed %s to %s as %s snapshot %s: %s",
        commit_id,
        name,
        files.operation.value,
        snapshot.snapshot_id,
        what,
    )
    return _outcome(table.metadata, snapshot, commit_id, already_committed=False)


def _check_common(
    removed: Sequence[DataFile],
    added: Sequence[DataFile],
    commit_id: str,
    snapshot_properties: Mapping[str, str] | None,
    removed_label: str = "removed",
) -> dict[str, str]:
    """The checks every commit makes; return the summary properties to write."""
    if not commit_id:
        raise ConfigurationError("commit_id must be a non-empty string")
    for label, files in ((removed_label, removed), ("added", added)):
        if bad := [f.file_path for f in files if f.content != DataFileContent.DATA]:
            raise ConfigurationError(f"{label} data files must have content DATA: {', '.join(bad)}")
    added_paths = [f.file_path for f in added]
    if len(set(added_paths)) != len(added_paths):
        raise ConfigurationError("added_data_files lists a path more than once")
    if overlap := set(added_paths) & {f.file_path for f in removed}:
        raise ConfigurationError(
            f"files cannot be both {removed_label} and added: {', '.join(sorted(overlap))}"
        )
    properties = dict(snapshot_properties or {})
    if reserved := {"operation", COMMIT_ID_PROPERTY} & properties.keys():
        raise ConfigurationError(f"snapshot_properties cannot set {', '.join(sorted(reserved))}")
    properties[COMMIT_ID_PROPERTY] = commit_id
    return properties


def _check_arguments(
    rewritten: Sequence[DataFile],
    added: Sequence[DataFile],
    removed_deletes: Sequence[DataFile],
    commit_id: str,
    snapshot_properties: Mapping[str, str] | None,
) -> dict[str, str]:
    """Check what Java's BaseRewriteFiles checks up front; return the summary properties to write."""
    if not commit_id:
        raise ConfigurationError("commit_id must be a non-empty string")
    if not rewritten and not removed_deletes:
        raise ConfigurationError("Files to delete cannot be empty")
    if added and not rewritten:
        raise ConfigurationError(
            "Data files to add must be empty because there's no data file to be rewritten"
        )
    if bad := [f.file_path for f in removed_deletes if f.content == DataFileContent.DATA]:
        raise ConfigurationError(f"removed delete files must be delete files: {', '.join(bad)}")
    return _check_common(rewritten, added, commit_id, snapshot_properties, removed_label="rewritten")


def _check_overwrite_arguments(
    deleted: Sequence[DataFile],
    added: Sequence[DataFile],
    removed_deletes: Sequence[DataFile],
    commit_id: str,
    snapshot_properties: Mapping[str, str] | None,
) -> dict[str, str]:
    if not deleted and not added:
        raise ConfigurationError("an overwrite must remove or add at least one data file")
    if removed_deletes and not deleted:
        raise ConfigurationError("an overwrite can remove delete files only along with data files")
    if bad := [f.file_path for f in removed_deletes if f.content == DataFileContent.DATA]:
        raise ConfigurationError(f"removed delete files must be delete files: {', '.join(bad)}")
    return _check_common(deleted, added, commit_id, snapshot_properties)


def _check_table(
    metadata: TableMetadata, branch: str, name: str, removed_deletes: Sequence[DataFile]
) -> None:
    check_writable_format(metadata, name)
    if metadata.format_version == 1 and removed_deletes:
        raise ConfigurationError(f"cannot remove delete files from {name}: v1 tables have no delete files")
    ref = metadata.refs.get(branch)
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise ConfigurationError(f"{branch} is a tag of {name}, not a branch")


def _outcome(
    metadata: TableMetadata, snapshot: Snapshot, commit_id: str, *, already_committed: bool
) -> CommitOutcome:
    summary = snapshot.summary
    return CommitOutcome(
        snapshot_id=snapshot.snapshot_id,
        sequence_number=snapshot.sequence_number if metadata.format_version >= 2 else None,
        commit_id=commit_id,
        already_committed=already_committed,
        summary={"operation": summary.operation.value, **summary.additional_properties} if summary else {},
    )
