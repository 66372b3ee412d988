"""Commit rewritten files as one snapshot: Java's ``RewriteFiles`` and ``OverwriteFiles`` on PyIceberg 0.12.

Two commits, whose snapshot producers share one base class, :class:`_FilesProducer`, and differ only in
their operation and their validation:

- :func:`commit_rewrite` (compaction) commits ``replace``, as Java's ``RewriteFiles``;
- :func:`commit_overwrite` (copy-on-write delete, update and overwrite by predicate) commits ``overwrite``
  (``delete`` when it only removes files, ``append`` when it only adds), as Java's ``OverwriteFiles`` does
  for Spark's copy-on-write writes, with the table's isolation level (see :func:`commit_overwrite`).

Java's compaction commits with
``table.newRewrite().validateFromSnapshot(start).dataSequenceNumber(startSeq)...commit()``. PyIceberg 0.12
has no ``replace`` producer, cannot give added files an explicit data sequence number and cannot write
delete manifests, so the commits bring their own snapshot producer:

- It subclasses PyIceberg's private ``_SnapshotProducer``, reusing its manifest-list writing, snapshot
  and ref updates, and its bookkeeping of written manifests. It replaces the manifest planning
  (``_manifests``), the summary (``_summary``; PyIceberg's ``update_snapshot_summaries`` refuses
  ``replace``) and the validation (``_commit`` validates from ``base_snapshot_id`` on every attempt).
- Retries are PyIceberg's: ``Transaction.commit_transaction`` retries ``CommitFailedException`` with the
  table's ``commit.retry.*`` properties (exponential backoff), refreshes the table and calls the
  producer's ``_commit`` again, which re-runs the idempotency check and the validation. On
  ``CommitFailedException`` and ``ValidationException`` it deletes the manifests we wrote; after an
  unknown outcome it deletes nothing.
- Manifests are written by :mod:`airflow_provider_iceberg_exec.engine.meta.manifests`, which also writes
  delete manifests.

Validation follows Java's ``MergingSnapshotProducer``: the base snapshot must be an ancestor of the branch
head; every file to remove must still be live; no delete file committed after the base (data sequence
number above the base's) may apply to a removed data file, where a ``replace`` with
``use_starting_sequence_number`` counts only position deletes, because its added files keep the base's
sequence number and newer equality deletes still apply to them. A commit that removes delete files
(given, or dangling ones it finds, see :class:`DanglingDeletes`; both producers share this) checks on
every attempt, against the head it commits on, that none of them applies to a live data file afterwards.
An ``overwrite`` under serializable isolation also fails when a data file that may hold rows matching its
conflict-detection filter was appended since the base (``BaseOverwriteFiles.validate``).
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ValidationException,
)
from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Or, Reference
from pyiceberg.expressions.visitors import manifest_evaluator
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import ManifestGroupPlanner, Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import (
    ADDED_DATA_FILES,
    ADDED_DELETE_FILES,
    ADDED_EQUALITY_DELETES,
    ADDED_FILE_SIZE,
    ADDED_POSITION_DELETES,
    ADDED_RECORDS,
    CHANGED_PARTITION_COUNT_PROP,
    DELETED_DATA_FILES,
    DELETED_RECORDS,
    REMOVED_DELETE_FILES,
    REMOVED_EQUALITY_DELETES,
    REMOVED_FILE_SIZE,
    REMOVED_POSITION_DELETES,
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_EQUALITY_DELETES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    ancestors_of,
)
from pyiceberg.table.update import UpdatesAndRequirements
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT, Record

from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CommitValidationError,
    ConfigurationError,
    IcebergExecError,
    TableNotFoundError,
    first_line,
)
from airflow_provider_iceberg_exec.engine.io.catalog import catalog_errors
from airflow_provider_iceberg_exec.engine.meta.manifests import (
    new_manifest_writer,
    read_manifest_entries,
    referenced_data_file,
    to_record_layout,
)
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, scan_snapshot

__all__ = [
    "COMMIT_ID_PROPERTY",
    "CommitOutcome",
    "DanglingDeletes",
    "IsolationLevel",
    "commit_overwrite",
    "commit_rewrite",
    "find_commit",
    "landed_snapshots",
    "snapshot_summary_properties",
]

log = logging.getLogger(__name__)

#: Snapshot summary key carrying the caller's commit id; it makes a retried commit idempotent.
COMMIT_ID_PROPERTY = "iceberg-exec.commit-id"

# Position-delete columns (spec, "Position Delete Files").
_DELETE_FILE_PATH_FIELD_ID = 2147483546

# Snapshots whose added data files an overwrite under serializable isolation checks (Java's
# VALIDATE_ADDED_FILES_OPERATIONS): a replace adds no rows.
_ADDS_DATA_OPERATIONS = frozenset({Operation.APPEND, Operation.OVERWRITE})

# (total, added, removed) summary keys, in Java's SnapshotProducer.summary() order.
_TOTALS = (
    (TOTAL_RECORDS, ADDED_RECORDS, DELETED_RECORDS),
    (TOTAL_FILE_SIZE, ADDED_FILE_SIZE, REMOVED_FILE_SIZE),
    (TOTAL_DATA_FILES, ADDED_DATA_FILES, DELETED_DATA_FILES),
    (TOTAL_DELETE_FILES, ADDED_DELETE_FILES, REMOVED_DELETE_FILES),
    (TOTAL_POSITION_DELETES, ADDED_POSITION_DELETES, REMOVED_POSITION_DELETES),
    (TOTAL_EQUALITY_DELETES, ADDED_EQUALITY_DELETES, REMOVED_EQUALITY_DELETES),
)


class DanglingDeletes(str, enum.Enum):
    """Which delete files a ``replace`` or ``overwrite`` commit removes besides the ones it is given.

    Computed on every commit attempt against the branch head the snapshot is committed on, so that a
    concurrent commit (say another compaction adding files with an old data sequence number) is seen.
    A delete file "applies" by the spec's scan-planning rules, erring on the side of applying; the
    live data files after the commit are the head's minus the removed (rewritten) ones plus the added
    ones.

    - ``NONE``: only the given ``removed_delete_files``.
    - ``REWRITTEN``: also every delete file, with a data sequence number not above the base snapshot's,
      that applies to a removed (rewritten) data file and to no live data file after the commit: the
      deletes the rewrite applied and left dangling (the DVs and position deletes of the removed files
      among them).
    - ``ALL``: also every live delete file that applies to no live data file after the commit (Spark's
      ``remove-dangling-deletes``), whatever made it dangling.
    """

    NONE = "none"
    REWRITTEN = "rewritten"
    ALL = "all"


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
    :raises ConfigurationError: for bad arguments, or a format-version 3 table.
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
        producer=lambda transaction: _RewriteFiles(
            transaction,
            base_snapshot_id=base_snapshot_id,
            rewritten_data_files=rewritten_data_files,
            added_data_files=added_data_files,
            removed_delete_files=removed_delete_files,
            commit_id=commit_id,
            use_starting_sequence_number=use_starting_sequence_number,
            branch=branch,
            snapshot_properties=properties,
            dangling_deletes=dangling,
        ),
        what=(
            f"{len(rewritten_data_files)} data files rewritten, {len(added_data_files)} added, "
            f"{len(removed_delete_files)} deletes removed (dangling deletes: {dangling.value})"
        ),
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
    :raises ConfigurationError: for bad arguments, or a format-version 3 table.
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
        producer=lambda transaction: _OverwriteFiles(
            transaction,
            base_snapshot_id=base_snapshot_id,
            deleted_data_files=deleted_data_files,
            added_data_files=added_data_files,
            removed_delete_files=removed_delete_files,
            conflict_detection_filter=conflict_detection_filter,
            isolation_level=level,
            commit_id=commit_id,
            branch=branch,
            snapshot_properties=properties,
            dangling_deletes=dangling,
        ),
        what=(
            f"{len(deleted_data_files)} data files removed, {len(added_data_files)} added, "
            f"{len(removed_delete_files)} deletes removed (dangling deletes: {dangling.value}), "
            f"{level.value} isolation"
        ),
    )


def _commit_files(
    table: Table,
    *,
    branch: str,
    commit_id: str,
    removed_delete_files: Sequence[DataFile],
    producer: Callable[[Transaction], _FilesProducer],
    what: str,
) -> CommitOutcome:
    """Commit what ``producer`` stages, idempotently by ``commit_id``, mapping PyIceberg's errors."""
    name = ".".join(table.name())
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

    transaction = table.transaction()
    staged = producer(transaction)
    try:
        try:
            staged.commit()  # first attempt: validate, write manifests, stage the snapshot
        except BaseException:
            # Nothing has reached the catalog yet, so whatever this attempt wrote is unreferenced.
            staged._clean_all_uncommitted()
            raise
        transaction.commit_transaction()  # catalog commit, with PyIceberg's retry loop
    except _AlreadyCommittedError as err:
        log.info("Commit %s landed in %s meanwhile as snapshot %s", commit_id, name, err.snapshot.snapshot_id)
        return _outcome(table.metadata, err.snapshot, commit_id, already_committed=True)
    except ValidationException as err:
        raise CommitValidationError(_one_line(err)) from err
    except CommitFailedException as err:
        raise CommitConflictError(
            f"commit {commit_id} to {name} kept conflicting with concurrent commits until the retries "
            f"ran out: {_one_line(err)}"
        ) from err
    except CommitStateUnknownException as err:
        raise CommitStateUnknownError(
            f"the catalog did not confirm commit {commit_id} to {name}; check for a snapshot with "
            f"{COMMIT_ID_PROPERTY}={commit_id} before retrying: {_one_line(err)}"
        ) from err
    except Exception as err:
        if (mapped := _database_failure(err, commit_id, name)) is None:
            raise
        raise mapped from err

    snapshot = table.metadata.snapshot_by_id(staged.snapshot_id)
    if snapshot is None:  # pragma: no cover - the catalog returned metadata without our snapshot
        raise CommitStateUnknownError(f"snapshot {staged.snapshot_id} is missing after commit {commit_id}")
    log.info(
        "Committed %s to %s as %s snapshot %s: %s",
        commit_id,
        name,
        staged.operation.value,
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
    if metadata.format_version >= 3:
        raise ConfigurationError(
            f"cannot commit to {name}: format version {metadata.format_version}: PyIceberg 0.12 cannot write "
            "v3 metadata; table left unchanged"
        )
    if metadata.format_version == 1 and removed_deletes:
        raise ConfigurationError(f"cannot remove delete files from {name}: v1 tables have no delete files")
    ref = metadata.refs.get(branch)
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise ConfigurationError(f"{branch} is a tag of {name}, not a branch")


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


def _some(paths: Sequence[str], shown: int = 3) -> str:
    """At most ``shown`` paths and how many more, for a one-line message.

    >>> _some(["a", "b", "c", "d", "e"])
    'a, b, c and 2 more'
    """
    more = len(paths) - shown
    return ", ".join(paths[:shown]) + (f" and {more} more" if more > 0 else "")


def _database_failure(err: Exception, commit_id: str, name: str) -> IcebergExecError | None:
    """A SQL catalog's driver error during the pointer swap, as the engine error it means, or ``None``.

    A locked database (SQLite) refused the swap: nothing was committed, retry later. A connection lost
    or invalidated may have lost the reply to a swap that landed: the state is unknown, as Java's
    ``JdbcTableOperations`` reports it; the next run reconciles by commit id.
    """
    if not type(err).__module__.startswith("sqlalchemy"):
        return None
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    from airflow_provider_iceberg_exec.engine.io.catalog import is_locked

    if is_locked(err):
        return CommitConflictError(
            f"the catalog database of {name} is locked by another writer (database is locked); nothing was "
            "committed, retry later"
        )
    if isinstance(err, (OperationalError, InterfaceError)) or (
        isinstance(err, DBAPIError) and err.connection_invalidated
    ):
        first = first_line(getattr(err, "orig", None) or err)
        return CommitStateUnknownError(
            f"the catalog's database connection was lost during commit {commit_id} to {name} ({first}); "
            f"check for a snapshot with {COMMIT_ID_PROPERTY}={commit_id} before retrying"
        )
    return None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


class _AlreadyCommittedError(ValidationException):
    """A snapshot with our commit id appeared during a retry.

    A ValidationException, so that PyIceberg's retry loop stops and deletes the manifests we wrote.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(f"commit already landed as snapshot {snapshot.snapshot_id}")
        self.snapshot = snapshot


@dataclass
class _ManifestRewrite:
    """A head manifest holding files to remove: its other live entries stay as EXISTING."""

    manifest: ManifestFile
    kept: list[ManifestEntry] = field(default_factory=list)
    removed: list[ManifestEntry] = field(default_factory=list)


@dataclass
class _Attempt:
    """What one commit attempt validated against the branch head and will write."""

    metadata: TableMetadata  # the branch head's metadata, read once: each Transaction read copies it
    base: Snapshot | None
    carried: list[ManifestFile]
    rewrites: list[_ManifestRewrite]

    @property
    def removed_entries(self) -> Iterable[ManifestEntry]:
        return itertools.chain.from_iterable(rewrite.removed for rewrite in self.rewrites)


def _spec_id(data_file: DataFile, default: int) -> int:
    try:
        return data_file.spec_id
    except AttributeError:  # PyIceberg's writers do not set it
        return default


def _partition_key(data_file: DataFile, default_spec_id: int) -> tuple[int, Record]:
    return _spec_id(data_file, default_spec_id), data_file.partition


class _FilesProducer(_SnapshotProducer["_FilesProducer"]):
    """A snapshot producer that removes and adds files, validated from a base snapshot on every attempt.

    The shared part of Java's ``BaseRewriteFiles`` and ``BaseOverwriteFiles`` on PyIceberg's private
    ``_SnapshotProducer``; subclasses choose the operation and add their checks in :meth:`_validate`.

    Isolated here because it relies on PyIceberg 0.12 internals: the ``_commit`` / ``_manifests`` /
    ``_summary`` hooks, ``new_manifest_output`` (which records written manifests for cleanup),
    ``_parent_snapshot_id`` (the branch head, refreshed by ``_refresh_for_retry`` before each retry) and
    ``_starting_snapshot_id`` (read by ``Transaction`` to resolve a window we do not use).
    """

    def __init__(
        self,
        transaction: Transaction,
        *,
        operation: Operation,
        base_snapshot_id: int | None,
        removed_data_files: Sequence[DataFile],
        added_data_files: Sequence[DataFile],
        removed_delete_files: Sequence[DataFile],
        commit_id: str,
        branch: str,
        snapshot_properties: dict[str, str],
        explicit_sequence_number: bool,
        dangling_deletes: DanglingDeletes = DanglingDeletes.NONE,
    ) -> None:
        super().__init__(
            operation=operation,
            transaction=transaction,
            io=transaction._table.io,
            snapshot_properties=snapshot_properties,
            branch=branch,
        )
        # Validation is ours, from base_snapshot_id, in _commit. None keeps Transaction's CommitWindow
        # lookup from failing on its own terms (it would look up the head this producer started from).
        self._starting_snapshot_id = None
        self._base_snapshot_id = base_snapshot_id
        self._commit_id = commit_id
        self._explicit_sequence_number = explicit_sequence_number
        self._dangling_deletes = dangling_deletes
        self._removed_data_files = list(removed_data_files)
        self._removed_delete_files = list(removed_delete_files)
        self._added = [to_record_layout(data_file) for data_file in added_data_files]
        self._attempt: _Attempt | None = None

    @property
    def operation(self) -> Operation:
        """The snapshot operation this producer writes."""
        return self._operation

    # -- hooks of _SnapshotProducer -------------------------------------------------------------------

    def _validate_concurrency(self) -> None:
        """Do nothing: :meth:`_commit` validates from the base snapshot on every attempt."""

    def _commit(self) -> UpdatesAndRequirements:
        metadata = self._transaction.table_metadata
        # Our own earlier attempt cannot show up here: Transaction stops retrying as soon as it finds
        # this producer's (stable) snapshot id, before calling _commit again.
        if (found := find_commit(metadata, self._target_branch or "main", self._commit_id)) is not None:
            raise _AlreadyCommittedError(found)
        # Read and validate before writing anything, so that a failed validation leaves no file behind.
        self._attempt = self._plan_attempt(metadata)
        # On every attempt: a commit that retried for long may have outlived a short orphan age, and
        # must never make a file live that is gone.
        if gone := [f.file_path for f in self._added if not self._io.new_input(f.file_path).exists()]:
            raise ValidationException(
                f"output files no longer exist (removed as orphans while the commit retried?): "
                f"{_some(gone)}; plan and rewrite again"
            )
        return super()._commit()

    def _deleted_entries(self) -> list[ManifestEntry]:
        return list(self._current_attempt().removed_entries)

    def _existing_manifests(self) -> list[ManifestFile]:
        return list(self._current_attempt().carried)

    def _manifests(self) -> list[ManifestFile]:
        attempt = self._current_attempt()
        metadata = attempt.metadata
        explicit_seq = (
            attempt.base.sequence_number
            if self._explicit_sequence_number and attempt.base is not None and metadata.format_version >= 2
            else None
        )
        manifests: list[ManifestFile] = []

        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for data_file in self._added:
            by_spec[_spec_id(data_file, metadata.default_spec_id)].append(data_file)
        for spec_id, files in by_spec.items():
            with self._new_writer(ManifestContent.DATA, spec_id) as writer:
                for data_file in files:
                    # An explicit data sequence number is written as is; None is inherited on read.
                    # The file sequence number is always inherited: it records this commit.
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=explicit_seq,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())

        for rewrite in attempt.rewrites:
            # Like Java's ManifestFilterManager: one filtered manifest per affected manifest, with
            # both sequence numbers explicit on EXISTING and DELETED entries (spec requirement).
            with self._new_writer(rewrite.manifest.content, rewrite.manifest.partition_spec_id) as writer:
                for entry in rewrite.kept:
                    writer.add_entry(_copy_entry(entry, ManifestEntryStatus.EXISTING, entry.snapshot_id))
                for entry in rewrite.removed:
                    writer.add_entry(_copy_entry(entry, ManifestEntryStatus.DELETED, self._snapshot_id))
            manifests.append(writer.to_manifest_file())

        # Manifests without live files (only old DELETED entries) are dropped, as Java's producers do.
        manifests.extend(m for m in attempt.carried if m.has_added_files() or m.has_existing_files())
        return manifests

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        attempt = self._current_attempt()
        metadata = attempt.metadata
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        properties = snapshot_summary_properties(
            metadata,
            added=self._added,
            removed=[entry.data_file for entry in attempt.removed_entries],
            previous=parent.summary.additional_properties if parent is not None and parent.summary else None,
            snapshot_properties=snapshot_properties,
        )
        return Summary(operation=self._operation, **properties)

    # -- planning and validation ------------------------------------------------------------------------

    def _validate(
        self,
        metadata: TableMetadata,
        base: Snapshot | None,
        window: list[Snapshot],
        removed_data_files: list[DataFile],
    ) -> None:
        """Checks of the subclass, after the base is known to be an ancestor and the files to remove live.

        :param base: the base snapshot (``None`` when the branch had none at planning).
        :param window: the snapshots committed after the base, newest first (the head first).
        :param removed_data_files: the live entries' data files about to be removed.
        :raises ValidationException: on a conflict.
        """
        raise NotImplementedError

    def _current_attempt(self) -> _Attempt:
        if self._attempt is None:  # pragma: no cover - _commit always plans first
            raise RuntimeError("no commit attempt planned")
        return self._attempt

    def _new_writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        metadata = self._current_attempt().metadata
        return new_manifest_writer(
            format_version=metadata.format_version,
            content=content,
            spec=metadata.specs()[spec_id],
            schema=metadata.schema(),
            output_file=self.new_manifest_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )

    def _plan_attempt(self, metadata: TableMetadata) -> _Attempt:
        head = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        if head is None:
            if (
                self._base_snapshot_id is None
                and not self._removed_data_files
                and not self._removed_delete_files
            ):
                # Adding to a branch that had and still has no snapshot: nothing to validate.
                return _Attempt(metadata=metadata, base=None, carried=[], rewrites=[])
            raise ValidationException(
                f"Cannot determine history between starting snapshot {self._base_snapshot_id} and the last "
                f"known ancestor None: branch {self._target_branch} has no snapshot"
            )
        base, window = self._validation_history(metadata, head)
        removed_deletes = self._delete_files_to_remove(metadata, head, base)

        removed_paths = {f.file_path for f in self._removed_data_files}
        removed_delete_paths = {f.file_path for f in removed_deletes}
        may_hold = {
            ManifestContent.DATA: _manifest_filter(metadata, self._removed_data_files),
            ManifestContent.DELETES: _manifest_filter(metadata, removed_deletes),
        }
        paths_by_content = {
            ManifestContent.DATA: removed_paths,
            ManifestContent.DELETES: removed_delete_paths,
        }

        carried: list[ManifestFile] = []
        rewrites: list[_ManifestRewrite] = []
        for manifest in head.manifests(self._io):
            paths = paths_by_content[manifest.content]
            if not paths or not may_hold[manifest.content](manifest):
                carried.append(manifest)
                continue
            rewrite = _ManifestRewrite(manifest)
            for entry in read_manifest_entries(self._io, manifest, discard_deleted=True):
                (rewrite.removed if entry.data_file.file_path in paths else rewrite.kept).append(entry)
            if rewrite.removed:
                rewrites.append(rewrite)
            else:
                carried.append(manifest)

        attempt = _Attempt(metadata=metadata, base=base, carried=carried, rewrites=rewrites)
        found = {entry.data_file.file_path for entry in attempt.removed_entries}
        if missing := (removed_paths | removed_delete_paths) - found:
            raise ValidationException(f"Missing required files to delete: {_some(sorted(missing))}")

        removed = [
            e.data_file for e in attempt.removed_entries if e.data_file.content == DataFileContent.DATA
        ]
        if window:
            self._validate(metadata, base, window, removed)
        return attempt

    def _delete_files_to_remove(
        self, metadata: TableMetadata, head: Snapshot, base: Snapshot | None
    ) -> list[DataFile]:
        """The given delete files plus the dangling ones, all checked against the live files at ``head``.

        Shared by ``replace`` and ``overwrite``, decided on every attempt. The live data files after this
        commit are the head's, minus the removed (rewritten) ones, plus the added ones: with the base's
        sequence number (a ``replace`` with ``use_starting_sequence_number``), which a newer equality
        delete of their partition reaches; or with the new snapshot's, above every existing delete's, so
        that no existing delete applies to them (position deletes and DVs name other paths; an equality
        delete needs a strictly higher data sequence number). Every delete file removed must apply to
        none of them; a given one that does fails the commit (the caller's plan no longer holds), a
        dangling candidate that does is simply kept.

        :raises ValidationException: when a given delete file still applies to a live data file.
        """
        given = list(self._removed_delete_files)
        if metadata.format_version < 2 or not (given or self._may_find_dangling(head)):
            return given
        files = scan_snapshot(self._io, metadata, head)
        rewritten = {data_file.file_path for data_file in self._removed_data_files}
        applies_after: dict[str, str] = {}  # delete path -> a live data file it applies to afterwards
        applied_to_rewritten: set[str] = set()
        for scanned in files.data_files:
            path = scanned.data_file.file_path
            for delete in scanned.delete_files:
                if path in rewritten:
                    applied_to_rewritten.add(delete.data_file.file_path)
                else:
                    applies_after.setdefault(delete.data_file.file_path, path)
        added_sequence_number = (
            base.sequence_number if self._explicit_sequence_number and base is not None else None
        )
        if added_sequence_number is not None:
            for delete in files.delete_files:
                target = _added_file_reached(
                    delete, self._added, added_sequence_number, metadata, applies_after
                )
                if target is not None:
                    applies_after[delete.data_file.file_path] = target

        for delete_file in given:
            if (target := applies_after.get(delete_file.file_path)) is not None:
                raise ValidationException(
                    f"Cannot remove delete file {delete_file.file_path}: it still applies to live data "
                    f"file {target}"
                )
        chosen = {delete_file.file_path: delete_file for delete_file in given}
        base_sequence_number = base.sequence_number if base is not None else None
        for delete in files.delete_files:
            path = delete.data_file.file_path
            if path in chosen or path in applies_after:
                continue
            if self._dangling_deletes is DanglingDeletes.ALL or (
                self._dangling_deletes is DanglingDeletes.REWRITTEN
                and path in applied_to_rewritten
                and base_sequence_number is not None
                and delete.data_sequence_number <= base_sequence_number
            ):
                chosen[path] = delete.data_file
        if len(chosen) > len(given):
            log.info(
                "Removing %d dangling delete file(s) at head %s (%s)",
                len(chosen) - len(given),
                head.snapshot_id,
                self._dangling_deletes.value,
            )
        return [chosen[path] for path in sorted(chosen)]

    def _may_find_dangling(self, head: Snapshot) -> bool:
        """Whether a dangling delete may qualify, from the head's manifest list alone.

        Not with ``none``, nor with ``rewritten`` when no data file is removed, nor when ``head`` has no
        live delete file: then the attempt does not read every manifest of the head.
        """
        if self._dangling_deletes is DanglingDeletes.NONE or (
            self._dangling_deletes is DanglingDeletes.REWRITTEN and not self._removed_data_files
        ):
            return False
        return any(
            manifest.content == ManifestContent.DELETES
            and (manifest.has_added_files() or manifest.has_existing_files())
            for manifest in head.manifests(self._io)
        )

    def _validation_history(
        self, metadata: TableMetadata, head: Snapshot
    ) -> tuple[Snapshot | None, list[Snapshot]]:
        """Return the base snapshot and the snapshots after it up to the head (newest first).

        A ``None`` base means the whole history of the head.

        :raises ValidationException: when the base is not an ancestor of the head, as Java's
            ``MergingSnapshotProducer.validationHistory``.
        """
        window: list[Snapshot] = []
        last_known: int | None = None
        for snapshot in ancestors_of(head, metadata):
            if snapshot.snapshot_id == self._base_snapshot_id:
                return snapshot, window
            window.append(snapshot)
            last_known = snapshot.snapshot_id
        if self._base_snapshot_id is None:
            return None, window
        raise ValidationException(
            f"Cannot determine history between starting snapshot {self._base_snapshot_id} and the last "
            f"known ancestor {last_known}"
        )

    def _validate_no_new_deletes(
        self,
        metadata: TableMetadata,
        base: Snapshot | None,
        window: list[Snapshot],
        replaced: list[DataFile],
        *,
        ignore_equality_deletes: bool,
    ) -> None:
        """Fail when a delete file committed after the base may apply to a replaced data file.

        Only delete files with a data sequence number above the base's count (Java's
        ``DeleteFileIndex...afterSequenceNumber``); a delete written with an older sequence number (a
        rewritten position delete, say) was already applied by the rewrite.
        """
        if metadata.format_version < 2 or not replaced:
            return
        specs = metadata.specs()
        by_path = {data_file.file_path: data_file for data_file in replaced}
        by_partition: dict[tuple[int, Record], list[DataFile]] = defaultdict(list)
        for data_file in replaced:
            by_partition[_partition_key(data_file, metadata.default_spec_id)].append(data_file)

        base_sequence_number = (base.sequence_number if base is not None else None) or 0
        for delete_file in self._new_delete_files(base_sequence_number, window):
            if delete_file.content == DataFileContent.POSITION_DELETES:
                target = _position_delete_target(delete_file, by_path, by_partition)
            elif ignore_equality_deletes:
                continue  # still applies to the added files, which keep the base's sequence number
            elif specs[delete_file.spec_id].is_unpartitioned():
                target = replaced[0].file_path  # a global equality delete applies to every data file
            else:
                same_partition = by_partition.get((delete_file.spec_id, delete_file.partition))
                target = same_partition[0].file_path if same_partition else None
            if target is None:
                continue
            if ignore_equality_deletes:
                message = f"Cannot commit, found new position delete for replaced data file: {target}"
            else:
                message = f"Cannot commit, found new delete for replaced data file: {target}"
            raise ValidationException(message)

    def _new_delete_files(self, base_sequence_number: int, window: list[Snapshot]) -> Iterator[DataFile]:
        """Yield the delete files added by the snapshots of ``window`` after the base's sequence number."""
        window_ids = {snapshot.snapshot_id for snapshot in window}
        for snapshot in window:
            for manifest in snapshot.manifests(self._io):
                if (
                    manifest.content != ManifestContent.DELETES
                    or manifest.added_snapshot_id != snapshot.snapshot_id
                ):
                    continue
                for entry in read_manifest_entries(self._io, manifest, discard_deleted=True):
                    if (
                        entry.status == ManifestEntryStatus.ADDED
                        and entry.snapshot_id in window_ids
                        and (entry.sequence_number or 0) > base_sequence_number
                    ):
                        yield entry.data_file


class _RewriteFiles(_FilesProducer):
    """A ``replace`` snapshot producer: Java's BaseRewriteFiles."""

    def __init__(
        self,
        transaction: Transaction,
        *,
        base_snapshot_id: int,
        rewritten_data_files: Sequence[DataFile],
        added_data_files: Sequence[DataFile],
        removed_delete_files: Sequence[DataFile],
        commit_id: str,
        use_starting_sequence_number: bool,
        branch: str,
        snapshot_properties: dict[str, str],
        dangling_deletes: DanglingDeletes = DanglingDeletes.NONE,
    ) -> None:
        super().__init__(
            transaction,
            operation=Operation.REPLACE,
            base_snapshot_id=base_snapshot_id,
            removed_data_files=rewritten_data_files,
            added_data_files=added_data_files,
            removed_delete_files=removed_delete_files,
            commit_id=commit_id,
            branch=branch,
            snapshot_properties=snapshot_properties,
            explicit_sequence_number=use_starting_sequence_number,
            dangling_deletes=dangling_deletes,
        )

    def _validate(
        self,
        metadata: TableMetadata,
        base: Snapshot | None,
        window: list[Snapshot],
        removed_data_files: list[DataFile],
    ) -> None:
        # With the base's sequence number, an equality delete committed meanwhile still applies to the
        # output, so Java ignores it here. That holds only while the output stays in the partitions of
        # its inputs: output written with another spec would escape the delete's partition and bring
        # its rows back (Java does not check this), so then any new equality delete is a conflict.
        default_spec_id = metadata.default_spec_id
        same_spec = {_spec_id(f, default_spec_id) for f in self._added} <= {
            _spec_id(f, default_spec_id) for f in removed_data_files
        } and len({_spec_id(f, default_spec_id) for f in removed_data_files}) <= 1
        self._validate_no_new_deletes(
            metadata,
            base,
            window,
            removed_data_files,
            ignore_equality_deletes=self._explicit_sequence_number and same_spec,
        )


class _OverwriteFiles(_FilesProducer):
    """An ``overwrite`` (or ``delete``, ``append``) producer: Java's BaseOverwriteFiles, as Spark's CoW."""

    def __init__(
        self,
        transaction: Transaction,
        *,
        base_snapshot_id: int | None,
        deleted_data_files: Sequence[DataFile],
        added_data_files: Sequence[DataFile],
        conflict_detection_filter: BooleanExpression,
        isolation_level: IsolationLevel,
        commit_id: str,
        branch: str,
        snapshot_properties: dict[str, str],
        removed_delete_files: Sequence[DataFile] = (),
        dangling_deletes: DanglingDeletes = DanglingDeletes.NONE,
    ) -> None:
        if deleted_data_files and not added_data_files:
            operation = Operation.DELETE
        elif added_data_files and not deleted_data_files:
            operation = Operation.APPEND
        else:
            operation = Operation.OVERWRITE
        super().__init__(
            transaction,
            operation=operation,
            base_snapshot_id=base_snapshot_id,
            removed_data_files=deleted_data_files,
            added_data_files=added_data_files,
            removed_delete_files=removed_delete_files,
            commit_id=commit_id,
            branch=branch,
            snapshot_properties=snapshot_properties,
            explicit_sequence_number=False,
            dangling_deletes=dangling_deletes,
        )
        self._conflict_detection_filter = conflict_detection_filter
        self._isolation_level = isolation_level

    def _validate(
        self,
        metadata: TableMetadata,
        base: Snapshot | None,
        window: list[Snapshot],
        removed_data_files: list[DataFile],
    ) -> None:
        if self._isolation_level is IsolationLevel.SERIALIZABLE:
            self._validate_no_conflicting_data(metadata, window)
        # The added files get a new sequence number: any delete committed meanwhile for a removed file,
        # equality deletes included, would not apply to the copies of its rows.
        self._validate_no_new_deletes(
            metadata, base, window, removed_data_files, ignore_equality_deletes=False
        )

    def _validate_no_conflicting_data(self, metadata: TableMetadata, window: list[Snapshot]) -> None:
        """Java's ``validateAddedDataFiles``: no file appended since the base may match the filter.

        Files added by ``append`` and ``overwrite`` snapshots of the window count (not ``replace``: a
        compaction adds no rows), pruned by partition projection and column metrics of the filter.
        """
        window_ids = {snapshot.snapshot_id for snapshot in window}
        manifests = [
            manifest
            for snapshot in window
            if snapshot.summary is not None and snapshot.summary.operation in _ADDS_DATA_OPERATIONS
            for manifest in snapshot.manifests(self._io)
            if manifest.content == ManifestContent.DATA and manifest.added_snapshot_id == snapshot.snapshot_id
        ]
        if not manifests:
            return
        try:
            planner = ManifestGroupPlanner(metadata, self._io, self._conflict_detection_filter)
            conflicts = sorted(
                entry.data_file.file_path
                for entry in itertools.chain.from_iterable(planner.plan_manifest_entries(manifests))
                if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id in window_ids
            )
        except ValueError as err:  # the filter no longer binds: a column it names was dropped
            raise ValidationException(
                f"Cannot validate conflicting data: filter {self._conflict_detection_filter} does not fit "
                f"the current schema: {err}"
            ) from err
        if conflicts:
            raise ValidationException(
                "Found conflicting files that can contain records matching "
                f"{self._conflict_detection_filter}: {', '.join(conflicts)}"
            )


def _added_file_reached(
    delete: ScannedDelete,
    added: Sequence[DataFile],
    added_sequence_number: int,
    metadata: TableMetadata,
    applies_after: Mapping[str, str],
) -> str | None:
    """Return the path of an added data file an existing delete file applies to, if any.

    Only equality deletes can: every position delete and DV names its rows by the path of a data file,
    and the added files did not exist when it was written. An equality delete applies to an added file
    with a lower data sequence number (the base's) when it is global or of the same spec and partition;
    partitions that cannot be told apart by value (other Python types) count as the same.
    """
    delete_file = delete.data_file
    if (
        delete_file.content != DataFileContent.EQUALITY_DELETES
        or delete_file.file_path in applies_after
        or delete.data_sequence_number <= added_sequence_number
    ):
        return None
    specs = metadata.specs()
    spec = specs.get(delete_file.spec_id)
    for data_file in added:
        if spec is None or spec.is_unpartitioned():
            return data_file.file_path
        if _spec_id(data_file, metadata.default_spec_id) == delete_file.spec_id and _may_be_same_partition(
            data_file.partition, delete_file.partition
        ):
            return data_file.file_path
    return None


def _may_be_same_partition(left: Record, right: Record) -> bool:
    if len(left) != len(right):
        return True
    for pos in range(len(left)):
        a, b = left[pos], right[pos]
        if type(a) is type(b) and a != b and a == a:  # a != a for NaN: count NaN as a match
            return False
    return True


def _position_delete_target(
    delete_file: DataFile,
    by_path: Mapping[str, DataFile],
    by_partition: Mapping[tuple[int, Record], list[DataFile]],
) -> str | None:
    """Return the path of a replaced data file ``delete_file`` may apply to, if any.

    As Java's DeleteFileIndex: a file-scoped delete (``referenced_data_file``, or equal ``file_path``
    bounds; DVs always) is matched by path; any other one applies within its spec and partition, to
    files inside its ``file_path`` bounds when it has them.
    """
    lower = (delete_file.lower_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
    referenced = referenced_data_file(delete_file)
    if referenced is None and lower is not None and lower == upper:
        referenced = lower.decode("utf-8", errors="replace")
    if referenced is not None:
        return referenced if referenced in by_path else None
    for data_file in by_partition.get((delete_file.spec_id, delete_file.partition), []):
        path = data_file.file_path.encode("utf-8")
        # Bounds may be truncated; a truncated lower bound is a prefix, so still <= the path.
        if (lower is None or lower <= path) and (upper is None or path <= upper):
            return data_file.file_path
    return None


def _copy_entry(entry: ManifestEntry, status: ManifestEntryStatus, snapshot_id: int | None) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=status,
        snapshot_id=snapshot_id,
        sequence_number=entry.sequence_number,
        file_sequence_number=entry.file_sequence_number,
        data_file=entry.data_file,
    )


def _manifest_filter(metadata: TableMetadata, files: Sequence[DataFile]) -> Callable[[ManifestFile], bool]:
    """Return a test "may this manifest list one of ``files``?", pruning by spec and partition summaries.

    Answers ``True`` whenever it cannot tell (unknown spec id, a partition value it cannot bind).
    """
    partitions: dict[int, set[Record]] = defaultdict(set)
    for data_file in files:
        try:
            partitions[data_file.spec_id].add(data_file.partition)
        except AttributeError:
            return lambda manifest: True
    specs = metadata.specs()
    evaluators: dict[int, Callable[[ManifestFile], bool]] = {}

    def may_hold(manifest: ManifestFile) -> bool:
        spec_id = manifest.partition_spec_id
        if spec_id not in partitions:
            return False
        spec = specs[spec_id]
        if spec.is_unpartitioned():
            return True
        if spec_id not in evaluators:
            evaluators[spec_id] = _partition_evaluator(spec, metadata, partitions[spec_id])
        try:
            return evaluators[spec_id](manifest)
        except (TypeError, ValueError):
            return True

    return may_hold


def _partition_evaluator(
    spec: PartitionSpec, metadata: TableMetadata, partitions: set[Record]
) -> Callable[[ManifestFile], bool]:
    schema = metadata.schema()
    try:
        names = [field.name for field in spec.partition_type(schema).fields]
        clauses: list[BooleanExpression] = []
        for partition in partitions:
            terms: list[BooleanExpression] = [
                IsNull(term=Reference(name))
                if partition[pos] is None
                else EqualTo(term=Reference(name), value=partition[pos])
                for pos, name in enumerate(names)
            ]
            clauses.append(terms[0] if len(terms) == 1 else And(*terms))
        predicate = clauses[0] if len(clauses) == 1 else Or(*clauses)
        return manifest_evaluator(spec, schema, predicate)
    except (TypeError, ValueError):
        # Pruning is an optimisation: read the manifest rather than fail on an unusual partition type.
        return lambda manifest: True


def snapshot_summary_properties(
    metadata: TableMetadata,
    *,
    added: Iterable[DataFile],
    removed: Iterable[DataFile],
    previous: Mapping[str, str] | None,
    snapshot_properties: Mapping[str, str] = EMPTY_DICT,
) -> dict[str, str]:
    """The summary properties (all but ``operation``) of a snapshot that adds and removes files, as Java's.

    ``added-*`` / ``deleted-*`` / ``removed-*`` counts and sizes by content, per-partition summaries up to
    ``write.summary.partition-limit``, ``changed-partition-count`` (the unpartitioned "partition" counts,
    as in Java) and the ``total-*`` counts carried from the parent's summary.

    :param metadata: the table metadata the snapshot is committed on (schema and specs).
    :param added: files added (a file without ``spec_id`` is in the default spec).
    :param removed: files removed (data or delete files).
    :param previous: the parent snapshot's summary properties; ``None`` when there is no parent.
    :param snapshot_properties: extra properties, written last.
    """
    schema = metadata.schema()
    specs = metadata.specs()
    limit = int(
        metadata.properties.get(
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT,
        )
    )
    collector = SnapshotSummaryCollector(partition_summary_limit=limit)
    changed_partitions: set[str] = set()
    for data_file in added:
        spec = specs[_spec_id(data_file, metadata.default_spec_id)]
        collector.add_file(data_file, schema=schema, partition_spec=spec)
        changed_partitions.add(spec.partition_to_path(data_file.partition, schema))
    for data_file in removed:
        spec = specs[_spec_id(data_file, metadata.default_spec_id)]
        collector.remove_file(data_file, schema=schema, partition_spec=spec)
        changed_partitions.add(spec.partition_to_path(data_file.partition, schema))

    properties = collector.build()
    # Java counts the unpartitioned "partition" too (key ""), PyIceberg's collector does not.
    properties[CHANGED_PARTITION_COUNT_PROP] = str(len(changed_partitions))
    properties.update(snapshot_properties)
    _add_totals(properties, previous)
    return properties


def _add_totals(properties: dict[str, str], previous: Mapping[str, str] | None) -> None:
    """Carry the ``total-*`` counts from the parent, as Java's SnapshotProducer and PyIceberg do."""
    if previous is None:
        previous = {total: "0" for total, _, _ in _TOTALS}
    for total, added, removed in _TOTALS:
        previous_total = previous.get(total)
        if previous_total is None:
            continue  # Java skips a total the parent did not have
        try:
            value = int(previous_total) + int(properties.get(added, "0")) - int(properties.get(removed, "0"))
        except ValueError:
            continue
        if value >= 0:
            properties[total] = str(value)
