"""Validation from the planned (base) snapshot: Java's ``MergingSnapshotProducer`` conflict checks.

Run on every commit attempt, against the branch head the snapshot is committed on:

- :func:`validation_history`: the base snapshot must be an ancestor of the head;
- :func:`validate_no_new_deletes`: no delete file committed after the base (data sequence number above
  the base's) may apply to a removed data file (``validateNoNewDeletesForDataFiles``);
- :func:`validate_rewrite` (``replace``, Java's ``BaseRewriteFiles.validate``) counts only position
  deletes when the output keeps the base's sequence number and stays in the partitions of its inputs,
  because newer equality deletes still apply to it;
- :class:`DeleteRewriteValidation` (a ``replace`` of delete files by delete files): the data files the new
  deletes name must still be live and must have no new delete (``validateDataFilesExist``,
  ``validateNoConflictingDeleteFiles``), as Flink's equality-delete conversion commits;
- :class:`OverwriteValidation` (``overwrite``, Java's ``BaseOverwriteFiles.validate``): under
  serializable isolation also no data file appended since the base may hold rows matching the conflict
  filter (``validateAddedDataFiles``).

Every check raises PyIceberg's ``ValidationException``, which stops PyIceberg's retry loop.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.table import ManifestGroupPlanner
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot, ancestors_of
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.change import FilesChange, History, partition_key, spec_id_of
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, referenced_data_file

__all__ = [
    "DeleteRewriteValidation",
    "OverwriteValidation",
    "RowDeltaValidation",
    "validate_no_new_deletes",
    "validate_rewrite",
    "validation_history",
]

# Position-delete columns (spec, "Position Delete Files").
_DELETE_FILE_PATH_FIELD_ID = 2147483546

# Snapshots whose added data files an overwrite under serializable isolation checks (Java's
# VALIDATE_ADDED_FILES_OPERATIONS): a replace adds no rows.
_ADDS_DATA_OPERATIONS = frozenset({Operation.APPEND, Operation.OVERWRITE})


def validation_history(
    metadata: TableMetadata, head: Snapshot, base_snapshot_id: int | None
) -> tuple[Snapshot | None, list[Snapshot]]:
    """Return the base snapshot and the snapshots after it up to the head (newest first).

    A ``None`` base means the whole history of the head.

    :raises ValidationException: when the base is not an ancestor of the head, as Java's
        ``MergingSnapshotProducer.validationHistory``.
    """
    window: list[Snapshot] = []
    last_known: int | None = None
    for snapshot in ancestors_of(head, metadata):
        if snapshot.snapshot_id == base_snapshot_id:
            return snapshot, window
        window.append(snapshot)
        last_known = snapshot.snapshot_id
    if base_snapshot_id is None:
        return None, window
    raise ValidationException(
        f"Cannot determine history between starting snapshot {base_snapshot_id} and the last "
        f"known ancestor {last_known}"
    )


def validate_rewrite(change: FilesChange, history: History, removed_data_files: list[DataFile]) -> None:
    """The checks of a ``replace``: Java's ``BaseRewriteFiles.validate``.

    With the base's sequence number, an equality delete committed meanwhile still applies to the output,
    so Java ignores it here. That holds only while the output stays in the partitions of its inputs:
    output written with another spec would escape the delete's partition and bring its rows back (Java
    does not check this), so then any new equality delete is a conflict.
    """
    default_spec_id = history.metadata.default_spec_id
    same_spec = {spec_id_of(f, default_spec_id) for f in change.added} <= {
        spec_id_of(f, default_spec_id) for f in removed_data_files
    } and len({spec_id_of(f, default_spec_id) for f in removed_data_files}) <= 1
    validate_no_new_deletes(
        history,
        removed_data_files,
        ignore_equality_deletes=change.explicit_sequence_number and same_spec,
    )


@dataclass(frozen=True)
class DeleteRewriteValidation:
    """The checks of a delete-file rewrite: the data files its new deletes cover are unchanged since the base.

    :param required_data_files: the data files the replaced deletes were resolved against (an equality
        delete converted to positions of these files). Empty for a rewrite that only regroups positions.
    """

    required_data_files: tuple[DataFile, ...]

    def __call__(self, change: FilesChange, history: History, removed_data_files: list[DataFile]) -> None:
        """Validate one attempt; see :data:`~.change.Validation`."""
        if not self.required_data_files:
            return
        validate_data_files_exist(history, self.required_data_files)
        # A delete committed meanwhile for one of them may come from a writer that read the rows the
        # converted deletes removed: plan again on the new state.
        validate_no_new_deletes(history, list(self.required_data_files), ignore_equality_deletes=False)


def validate_data_files_exist(history: History, required: Sequence[DataFile]) -> None:
    """Fail when a snapshot after the base removed one of ``required``: Java's ``validateDataFilesExist``.

    A compaction that rewrote such a file with the base's sequence number may have produced output the
    removed equality deletes still had to reach.
    """
    paths = {data_file.file_path for data_file in required}
    window_ids = {snapshot.snapshot_id for snapshot in history.window}
    for snapshot in history.window:
        for manifest in snapshot.manifests(history.io):
            if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id not in window_ids:
                continue
            if manifest.deleted_files_count == 0:  # None (v1 without counts): read it
                continue
            for entry in read_manifest_entries(history.io, manifest, discard_deleted=False):
                if entry.status == ManifestEntryStatus.DELETED and entry.data_file.file_path in paths:
                    raise ValidationException(
                        f"Cannot commit, missing data files: {entry.data_file.file_path} was removed by "
                        f"snapshot {entry.snapshot_id}"
                    )


@dataclass(frozen=True)
class OverwriteValidation:
    """The checks of an ``overwrite`` (or ``delete``, ``append``): Java's ``BaseOverwriteFiles.validate``.

    :param conflict_detection_filter: the user's predicate (unbound or bound to the table schema).
    :param serializable: whether the isolation level is ``serializable`` (else ``snapshot``).
    """

    conflict_detection_filter: BooleanExpression
    serializable: bool

    def __call__(self, change: FilesChange, history: History, removed_data_files: list[DataFile]) -> None:
        """Validate one attempt; see :data:`~.change.Validation`."""
        if self.serializable:
            self._validate_no_conflicting_data(history)
        # The added files get a new sequence number: any delete committed meanwhile for a removed file,
        # equality deletes included, would not apply to the copies of its rows.
        validate_no_new_deletes(history, removed_data_files, ignore_equality_deletes=False)

    def _validate_no_conflicting_data(self, history: History) -> None:
        """Java's ``validateAddedDataFiles``: no file appended since the base may match the filter.

        Files added by ``append`` and ``overwrite`` snapshots of the window count (not ``replace``: a
        compaction adds no rows), pruned by partition projection and column metrics of the filter.
        """
        window, io = history.window, history.io
        window_ids = {snapshot.snapshot_id for snapshot in window}
        manifests = [
            manifest
            for snapshot in window
            if snapshot.summary is not None and snapshot.summary.operation in _ADDS_DATA_OPERATIONS
            for manifest in snapshot.manifests(io)
            if manifest.content == ManifestContent.DATA and manifest.added_snapshot_id == snapshot.snapshot_id
        ]
        if not manifests:
            return
        try:
            planner = ManifestGroupPlanner(history.metadata, io, self.conflict_detection_filter)
            conflicts = sorted(
                entry.data_file.file_path
                for entry in itertools.chain.from_iterable(planner.plan_manifest_entries(manifests))
                if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id in window_ids
            )
        except ValueError as err:  # the filter no longer binds: a column it names was dropped
            raise ValidationException(
                f"Cannot validate conflicting data: filter {self.conflict_detection_filter} does not fit "
                f"the current schema: {err}"
            ) from err
        if conflicts:
            raise ValidationException(
                "Found conflicting files that can contain records matching "
                f"{self.conflict_detection_filter}: {', '.join(conflicts)}"
            )


@dataclass(frozen=True)
class RowDeltaValidation:
    """The checks of a row delta (merge-on-read): Java's ``BaseRowDelta.validate`` as Spark's MERGE and
    UPDATE set it up (``SparkPositionDeltaWrite``).

    - ``validateDataFilesExist`` with ``validateDeletedFiles``: the data files the new position deletes
      name are still live (not rewritten or removed by any commit since the base);
    - ``validateNoConflictingDeleteFiles``: no delete committed since the base applies to them (a
      concurrent delete of a row this delta updates would be undone by the updated copy);
    - under serializable isolation ``validateNoConflictingDataFiles``: no data file appended since the
      base may hold rows matching the conflict filter.

    :param referenced_data_files: the data files the added position deletes name.
    """

    conflict_detection_filter: BooleanExpression
    serializable: bool
    referenced_data_files: tuple[DataFile, ...]

    def __call__(self, change: FilesChange, history: History, removed_data_files: list[DataFile]) -> None:
        """Validate one attempt; see :data:`~.change.Validation`."""
        if self.serializable:
            OverwriteValidation(self.conflict_detection_filter, serializable=True)(change, history, [])
        if self.referenced_data_files:
            validate_data_files_exist(history, self.referenced_data_files)
            validate_no_new_deletes(history, list(self.referenced_data_files), ignore_equality_deletes=False)


def validate_no_new_deletes(
    history: History, replaced: list[DataFile], *, ignore_equality_deletes: bool
) -> None:
    """Fail when a delete file committed after the base may apply to a replaced data file.

    Only delete files with a data sequence number above the base's count (Java's
    ``DeleteFileIndex...afterSequenceNumber``); a delete written with an older sequence number (a
    rewritten position delete, say) was already applied by the rewrite.
    """
    metadata, base = history.metadata, history.base
    if metadata.format_version < 2 or not replaced:
        return
    specs = metadata.specs()
    by_path = {data_file.file_path: data_file for data_file in replaced}
    by_partition: dict[tuple[int, Record], list[DataFile]] = defaultdict(list)
    for data_file in replaced:
        by_partition[partition_key(data_file, metadata.default_spec_id)].append(data_file)

    base_sequence_number = (base.sequence_number if base is not None else None) or 0
    for delete_file in _new_delete_files(history.io, base_sequence_number, history.window):
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


def _new_delete_files(io: FileIO, base_sequence_number: int, window: list[Snapshot]) -> Iterator[DataFile]:
    """Yield the delete files added by the snapshots of ``window`` after the base's sequence number."""
    window_ids = {snapshot.snapshot_id for snapshot in window}
    for snapshot in window:
        for manifest in snapshot.manifests(io):
            if (
                manifest.content != ManifestContent.DELETES
                or manifest.added_snapshot_id != snapshot.snapshot_id
            ):
                continue
            for entry in read_manifest_entries(io, manifest, discard_deleted=True):
                if (
                    entry.status == ManifestEntryStatus.ADDED
                    and entry.snapshot_id in window_ids
                    and (entry.sequence_number or 0) > base_sequence_number
                ):
                    yield entry.data_file


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
