"""Which delete files a commit removes: the given ones, checked, and the dangling ones it may find.

Shared by ``replace`` and ``overwrite``, decided on every attempt against the branch head (see
:class:`~.change.DanglingDeletes`). The live data files after the commit are the head's, minus the
removed (rewritten) ones, plus the added ones: with the base's sequence number (a ``replace`` with
``use_starting_sequence_number``), which a newer equality delete of their partition reaches; or with the
new snapshot's, above every existing delete's, so that no existing delete applies to them (position
deletes and DVs name other paths; an equality delete needs a strictly higher data sequence number).
Every delete file removed must apply to none of them: a given one that does fails the commit (the
caller's plan no longer holds), a dangling candidate that does is simply kept.

Whatever the mode, every DV of a removed data file goes in the same commit, as Java's
``MergingSnapshotProducer`` does implicitly (reference section 2.4). A delete file is told apart by
:func:`~.change.file_identity`, never by its path alone: many DVs share one Puffin file.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent

from airflow_provider_iceberg_exec.engine.commit.change import (
    DanglingDeletes,
    FileIdentity,
    FilesChange,
    file_identity,
    spec_id_of,
)
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, SnapshotFiles, scan_snapshot

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.typedef import Record

__all__ = ["delete_files_to_remove"]

log = logging.getLogger(__name__)


def delete_files_to_remove(
    io: FileIO, metadata: TableMetadata, head: Snapshot, base: Snapshot | None, change: FilesChange
) -> list[DataFile]:
    """The given delete files plus the dangling ones, all checked against the live files at ``head``.

    :raises ValidationException: when a given delete file still applies to a live data file.
    """
    given = list(change.removed_delete_files)
    if change.rewrites_deletes:
        # A delete rewrite replaces the given deletes by equivalent ones: that they still apply is the
        # point; the operation's validation guards the data files they cover.
        return given
    if metadata.format_version < 2 or not (given or _may_find_dangling(io, metadata, head, change)):
        return given
    files = scan_snapshot(io, metadata, head)
    applies_after, applied_to_rewritten = _live_targets(files, metadata, base, change)
    for delete_file in given:
        if (target := applies_after.get(file_identity(delete_file))) is not None:
            raise ValidationException(
                f"Cannot remove delete file {delete_file.file_path}: it still applies to live data "
                f"file {target}"
            )
    chosen = {file_identity(delete_file): delete_file for delete_file in given}
    base_sequence_number = base.sequence_number if base is not None else None
    rewritten = {data_file.file_path for data_file in change.removed_data_files}
    mode = change.dangling_deletes
    for delete in files.delete_files:
        key = file_identity(delete.data_file)
        if key in chosen or key in applies_after:
            continue
        if (
            mode is DanglingDeletes.ALL
            or _is_dv_of(delete.data_file, rewritten)
            or (
                mode is DanglingDeletes.REWRITTEN
                and key in applied_to_rewritten
                and base_sequence_number is not None
                and delete.data_sequence_number <= base_sequence_number
            )
        ):
            chosen[key] = delete.data_file
    if len(chosen) > len(given):
        log.info(
            "Removing %d dangling delete file(s) at head %s (%s)",
            len(chosen) - len(given),
            head.snapshot_id,
            mode.value,
        )
    return [chosen[key] for key in sorted(chosen)]


def _is_dv_of(delete_file: DataFile, removed_paths: set[str]) -> bool:
    """Whether ``delete_file`` is the DV of a data file this commit removes (Java removes it implicitly)."""
    return is_deletion_vector(delete_file) and referenced_data_file(delete_file) in removed_paths


def _live_targets(
    files: SnapshotFiles, metadata: TableMetadata, base: Snapshot | None, change: FilesChange
) -> tuple[dict[FileIdentity, str], set[FileIdentity]]:
    """Which delete files apply to a live data file after the commit, and which to a rewritten one.

    :returns: delete identity -> a live data file it applies to afterwards (a kept or an added one); and
        the identities of the delete files that apply to a removed (rewritten) data file.
    """
    rewritten = {data_file.file_path for data_file in change.removed_data_files}
    applies_after: dict[FileIdentity, str] = {}
    applied_to_rewritten: set[FileIdentity] = set()
    for scanned in files.data_files:
        path = scanned.data_file.file_path
        for delete in scanned.delete_files:
            if path in rewritten:
                applied_to_rewritten.add(file_identity(delete.data_file))
            else:
                applies_after.setdefault(file_identity(delete.data_file), path)
    added_sequence_number = (
        base.sequence_number if change.explicit_sequence_number and base is not None else None
    )
    if added_sequence_number is not None:
        for delete in files.delete_files:
            target = _added_file_reached(delete, change.added, added_sequence_number, metadata, applies_after)
            if target is not None:
                applies_after[file_identity(delete.data_file)] = target
    return applies_after, applied_to_rewritten


def _may_find_dangling(io: FileIO, metadata: TableMetadata, head: Snapshot, change: FilesChange) -> bool:
    """Whether a dangling delete may qualify, from the head's manifest list alone.

    Not with ``none`` (unless a removed data file may have a DV, v3), nor with ``rewritten`` when no
    data file is removed, nor when ``head`` has no live delete file: then the attempt does not read
    every manifest of the head.
    """
    mode = change.dangling_deletes
    if mode is not DanglingDeletes.ALL and not change.removed_data_files:
        return False
    if mode is DanglingDeletes.NONE and metadata.format_version < 3:
        return False
    return any(
        manifest.content == ManifestContent.DELETES
        and (manifest.has_added_files() or manifest.has_existing_files())
        for manifest in head.manifests(io)
    )


def _added_file_reached(
    delete: ScannedDelete,
    added: Sequence[DataFile],
    added_sequence_number: int,
    metadata: TableMetadata,
    applies_after: Mapping[FileIdentity, str],
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
        or file_identity(delete_file) in applies_after
        or delete.data_sequence_number <= added_sequence_number
    ):
        return None
    specs = metadata.specs()
    spec = specs.get(delete_file.spec_id)
    for data_file in added:
        if spec is None or spec.is_unpartitioned():
            return data_file.file_path
        if spec_id_of(data_file, metadata.default_spec_id) == delete_file.spec_id and _may_be_same_partition(
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
