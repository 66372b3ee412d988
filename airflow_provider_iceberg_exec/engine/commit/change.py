"""What one ``replace`` or ``overwrite`` commit removes and adds: the plain description its rules read.

:class:`FilesChange` is built once per commit by :mod:`.snapshots` and read, on every attempt, by the
planning (:mod:`.attempt`), the validation from the base snapshot (:mod:`.conflicts`), the dangling-delete
rules (:mod:`.dangling`) and the snapshot producer (:mod:`.pyiceberg_producer`). Nothing here touches
PyIceberg's commit internals.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Operation, Snapshot
    from pyiceberg.typedef import Record

__all__ = [
    "DanglingDeletes",
    "FileIdentity",
    "FilesChange",
    "History",
    "SequencedDelete",
    "Validation",
    "file_identity",
    "partition_key",
    "some",
    "spec_id_of",
]


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
class History:
    """What an attempt validates against: the base snapshot and what the branch committed after it.

    :param io: the table's FileIO, to read the manifests of ``window``.
    :param metadata: the branch head's metadata.
    :param base: the base snapshot (``None`` when the branch had none at planning).
    :param window: the snapshots committed after the base, newest first (the head first).
    """

    io: FileIO
    metadata: TableMetadata
    base: Snapshot | None
    window: list[Snapshot]


@dataclass(frozen=True)
class SequencedDelete:
    """A delete file to add with an explicit data sequence number: Java's ``RewriteFiles.addFile(file, seq)``.

    A rewritten delete file keeps the sequence number of the deletes it replaces (the largest of them),
    so that it applies to exactly the data files they applied to. ``None`` inherits the new snapshot's
    (a row delta's new deletes: Java's ``RowDelta.addDeletes``).
    """

    delete_file: DataFile
    data_sequence_number: int | None


#: The checks of one operation, after the base is known to be an ancestor and the files to remove live:
#: ``validate(change, history, removed_data_files)`` raises ``ValidationException`` on a conflict.
Validation = Callable[["FilesChange", History, list["DataFile"]], None]


@dataclass(frozen=True)
class FilesChange:
    """The files one commit removes and adds, and how it is validated from its base snapshot.

    :param operation: the snapshot operation written.
    :param base_snapshot_id: the snapshot the work was planned on; ``None`` for the branch's whole history.
    :param removed_data_files: data files to remove; each must still be live.
    :param removed_delete_files: delete files given to remove; each must still be live.
    :param added: the files to add, in the v3 record layout (:func:`~.meta.manifests.to_record_layout`).
    :param commit_id: the caller's idempotency key.
    :param branch: the branch committed to.
    :param explicit_sequence_number: give the added files the base snapshot's data sequence number.
    :param dangling_deletes: which other delete files to remove (see :class:`DanglingDeletes`).
    :param validate: the operation's conflict checks (see :data:`Validation`).
    :param added_deletes: delete files to add, each with its explicit data sequence number.
    :param rewrites_deletes: the commit replaces ``removed_delete_files`` by the equivalent
        ``added_deletes`` (fewer positions only where they name no live row), so the removed ones are not
        checked for still applying to live data files: the operation's validation guards what they
        covered.
    """

    operation: Operation
    base_snapshot_id: int | None
    removed_data_files: list[DataFile]
    removed_delete_files: list[DataFile]
    added: list[DataFile]
    commit_id: str
    branch: str
    explicit_sequence_number: bool
    dangling_deletes: DanglingDeletes
    validate: Validation
    added_deletes: Sequence[SequencedDelete] = ()
    rewrites_deletes: bool = False

    @property
    def added_files(self) -> list[DataFile]:
        """Every file the commit adds, data files first."""
        return [*self.added, *(d.delete_file for d in self.added_deletes)]


#: What names one content file in a table: ``(file_path, content_offset, content_size_in_bytes)``; the last
#: two are ``None`` except for a deletion vector, many of which share one Puffin path (Java's
#: ``DeleteFileSet``).
FileIdentity = tuple[str, int | None, int | None]


def file_identity(data_file: DataFile) -> FileIdentity:
    """The identity a commit removes ``data_file`` by: a DV by its blob, never by its Puffin path alone."""
    return (
        data_file.file_path,
        v3_field(data_file, "content_offset"),
        v3_field(data_file, "content_size_in_bytes"),
    )


def spec_id_of(data_file: DataFile, default: int) -> int:
    """The partition spec id of ``data_file``, or ``default`` when it has none (PyIceberg's writers)."""
    try:
        return data_file.spec_id
    except AttributeError:  # PyIceberg's writers do not set it
        return default


def partition_key(data_file: DataFile, default_spec_id: int) -> tuple[int, Record]:
    """The (spec id, partition) a delete file's partition scope is matched by."""
    return spec_id_of(data_file, default_spec_id), data_file.partition


def some(paths: Sequence[str], shown: int = 3) -> str:
    """At most ``shown`` paths and how many more, for a one-line message.

    >>> some(["a", "b", "c", "d", "e"])
    'a, b, c and 2 more'
    """
    more = len(paths) - shown
    return ", ".join(paths[:shown]) + (f" and {more} more" if more > 0 else "")
