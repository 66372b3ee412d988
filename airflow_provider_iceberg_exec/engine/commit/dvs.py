"""The deletion-vector rules of a format-version 3 commit, checked on every attempt at the branch head.

Java 1.10 readers fail on two DVs for one data file ("Can't index multiple DVs") and on a DV whose data
sequence number is below its data file's, and release 1.10 does not merge duplicate DVs itself
(row-level-and-v3.md trap 6), so a commit that adds DVs proves, before anything is committed (a failed
attempt's manifests are deleted):

- :func:`check_added_dvs_arguments` (up front, one-line ``ConfigurationError``): DVs only on v3 and
  position delete files only below it (Java's "Must use DVs for position deletes in V3"), every DV with
  ``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes``, at most one added DV per
  data file;
- :func:`validate_added_dvs` (Java's ``MergingSnapshotProducer.validateAddedDVs``): no snapshot after the
  base of operation ``overwrite``, ``delete`` or ``replace`` added a DV for a data file this commit adds
  one for ("Found concurrently added DV for ...");
- :func:`validate_dv_targets`: at the head, every data file an added DV names is live, its data sequence
  number is not above the DV's, and no other live DV for it survives the commit (each such DV must be
  among the removed ones, by its ``(path, offset, size)`` identity).

Each raises PyIceberg's ``ValidationException``: the commit fails, nothing is written, the work is
planned again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus

from airflow_provider_iceberg_exec.engine.commit.change import FileIdentity, History, file_identity, some
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, referenced_data_file

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table.snapshots import Operation

    from airflow_provider_iceberg_exec.engine.commit.change import SequencedDelete

__all__ = [
    "added_dvs",
    "check_added_dvs_arguments",
    "check_replaced_deletes",
    "validate_added_dvs",
    "validate_dv_targets",
]

# Position-delete column ``file_path`` (spec, "Position Delete Files").
_DELETE_FILE_PATH_FIELD_ID = 2147483546

#: Java's VALIDATE_ADDED_DVS_OPERATIONS
_ADDS_DVS_OPERATIONS = frozenset({"overwrite", "delete", "replace"})


def check_added_dvs_arguments(format_version: int, added: Iterable[DataFile], name: str) -> None:
    """Refuse delete files a table of ``format_version`` cannot take, and two DVs for one data file.

    :raises ConfigurationError: in one line; nothing is written.
    """
    referenced: dict[str, str] = {}
    for delete_file in added:
        if delete_file.content != DataFileContent.POSITION_DELETES:
            continue
        dv = is_deletion_vector(delete_file)
        if format_version >= 3 and not dv:
            raise ConfigurationError(
                f"cannot add position delete files to {name}: format version {format_version} tables "
                "take deletion vectors only; table left unchanged"
            )
        if format_version < 3 and dv:
            raise ConfigurationError(
                f"cannot add deletion vector {delete_file.file_path} to {name}: format version "
                f"{format_version} tables take position delete files only; table left unchanged"
            )
        if not dv:
            continue
        _, offset, size = file_identity(delete_file)
        target = referenced_data_file(delete_file)
        if target is None or offset is None or size is None:
            raise ConfigurationError(
                f"deletion vector {delete_file.file_path} lacks referenced_data_file, content_offset or "
                "content_size_in_bytes; table left unchanged"
            )
        if target in referenced:
            raise ConfigurationError(
                f"two deletion vectors for data file {target} ({referenced[target]} and "
                f"{delete_file.file_path}@{offset}): a data file takes one DV; table left unchanged"
            )
        referenced[target] = f"{delete_file.file_path}@{offset}"


def check_replaced_deletes(removed: Iterable[DataFile], added: Iterable[DataFile]) -> None:
    """Each delete file a row delta removes must be file-scoped and replaced by an added DV for its data
    file (a DV folds it in); removing any other would bring its deleted rows back.

    :raises ConfigurationError: in one line; nothing is written.
    """
    targets = {referenced_data_file(f) for f in added if is_deletion_vector(f)}
    for delete_file in removed:
        target = referenced_data_file(delete_file)
        if target is None and delete_file.content == DataFileContent.POSITION_DELETES:
            lower = (delete_file.lower_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
            upper = (delete_file.upper_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
            target = lower.decode("utf-8", errors="replace") if lower is not None and lower == upper else None
        if delete_file.content != DataFileContent.POSITION_DELETES or target not in targets:
            raise ConfigurationError(
                f"removed delete file {delete_file.file_path} is not a file-scoped position delete replaced "
                "by an added deletion vector; table left unchanged"
            )


def added_dvs(added: Sequence[SequencedDelete]) -> dict[str, SequencedDelete]:
    """The added DVs by the data file each names."""
    found: dict[str, SequencedDelete] = {}
    for sequenced in added:
        delete_file = sequenced.delete_file
        if is_deletion_vector(delete_file) and (target := referenced_data_file(delete_file)) is not None:
            found[target] = sequenced
    return found


def validate_added_dvs(history: History, targets: Iterable[str]) -> None:
    """Java's ``validateAddedDVs``: no DV for one of ``targets`` was added after the base by an
    ``overwrite``, ``delete`` or ``replace`` snapshot (another writer's DV, which ours would not hold)."""
    wanted = set(targets)
    if not wanted:
        return
    window_ids = {snapshot.snapshot_id for snapshot in history.window}
    for snapshot in history.window:
        operation: Operation | None = snapshot.summary.operation if snapshot.summary else None
        if operation is None or operation.value not in _ADDS_DVS_OPERATIONS:
            continue
        for manifest in snapshot.manifests(history.io):
            if manifest.content != ManifestContent.DELETES or manifest.added_snapshot_id not in window_ids:
                continue
            for entry in read_manifest_entries(history.io, manifest, discard_deleted=True):
                delete_file = entry.data_file
                target = referenced_data_file(delete_file)
                if (
                    entry.status == ManifestEntryStatus.ADDED
                    and entry.snapshot_id == snapshot.snapshot_id
                    and target in wanted
                    and is_deletion_vector(delete_file)
                ):
                    raise ValidationException(
                        f"Found concurrently added DV for {target}: {delete_file.file_path} "
                        f"(snapshot {snapshot.snapshot_id})"
                    )


def validate_dv_targets(
    io: FileIO,
    manifests: Sequence[ManifestFile],
    may_hold: Callable[[ManifestFile], bool],
    dvs: dict[str, SequencedDelete],
    removed: set[FileIdentity],
) -> None:
    """At the head (``manifests``): each data file an added DV names is live with a data sequence number
    not above the DV's, and keeps no other live DV after the commit (trap 6: one DV per data file).

    ``may_hold`` prunes manifests by the added DVs' partitions (a DV's partition is its data file's).
    An added DV without an explicit sequence number gets the new snapshot's, above every live file's.
    """
    live: dict[str, int] = {}
    for manifest in manifests:
        if not (manifest.has_added_files() or manifest.has_existing_files()) or not may_hold(manifest):
            continue
        for entry in read_manifest_entries(io, manifest, discard_deleted=True):
            delete_file = entry.data_file
            if manifest.content == ManifestContent.DATA:
                if delete_file.file_path in dvs:
                    live[delete_file.file_path] = entry.sequence_number or 0
                continue
            target = referenced_data_file(delete_file)
            if (
                target in dvs
                and is_deletion_vector(delete_file)
                and file_identity(delete_file) not in removed
            ):
                raise ValidationException(
                    f"Cannot commit a second DV for {target}: live DV {delete_file.file_path}@"
                    f"{file_identity(delete_file)[1]} is not removed by this commit; plan again"
                )
    if missing := sorted(set(dvs) - live.keys()):
        raise ValidationException(f"Cannot commit, missing data files: {some(missing)}")
    for target, sequenced in dvs.items():
        number = sequenced.data_sequence_number
        if number is not None and number < live[target]:
            raise ValidationException(
                f"DV data sequence number ({number}) must be greater than or equal to data file sequence "
                f"number ({live[target]}) of {target}"
            )
