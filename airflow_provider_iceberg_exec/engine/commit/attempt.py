"""One commit attempt: read the branch head, validate from the base, and decide the manifests to write.

PyIceberg's retry loop calls the snapshot producer once per attempt, against refreshed metadata;
:func:`prepare_attempt` is what it does then:

1. a snapshot that already carries the commit id ends the commit
   (:class:`~.idempotency.AlreadyCommittedError`);
2. the base must be an ancestor of the head, every file to remove must still be live in the head (by its
   identity: a DV by path, content offset and size), the operation's checks must pass
   (:mod:`.conflicts`), with the delete files to remove decided at the head (:mod:`.dangling`), and
   added DVs must keep one DV per data file (:mod:`.dvs`);
3. every added file must still exist (a commit that retried for long may have outlived a short orphan
   age, and must never make a file live that is gone).

The pass over the head's manifests that finds the files to remove (2.) also writes, as Java's
``ManifestFilterManager``, the filtered copy of every manifest that holds one: a manifest is read once
(on tables of many small files, reading the head's manifests was a third of a commit). As Java's
producers, an attempt that then fails validation has written manifests: the producer deletes them
(PyIceberg's cleanup of a failed attempt). :meth:`Attempt.write_manifests` writes one manifest per spec
of the added files and returns every manifest of the new snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice

from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Or, Reference
from pyiceberg.expressions.visitors import manifest_evaluator
from pyiceberg.io import FileIO
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
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.change import (
    FileIdentity,
    FilesChange,
    History,
    SequencedDelete,
    file_identity,
    some,
    spec_id_of,
)
from airflow_provider_iceberg_exec.engine.commit.conflicts import validation_history
from airflow_provider_iceberg_exec.engine.commit.dangling import delete_files_to_remove
from airflow_provider_iceberg_exec.engine.commit.dvs import added_dvs, validate_added_dvs, validate_dv_targets
from airflow_provider_iceberg_exec.engine.commit.idempotency import AlreadyCommittedError, find_commit
from airflow_provider_iceberg_exec.engine.commit.summary import SummaryCounts
from airflow_provider_iceberg_exec.engine.meta.manifests import (
    StoredDataFile,
    drop_metrics,
    entry_copier,
    iter_manifest_entries,
    iter_stored_entries,
)
from airflow_provider_iceberg_exec.engine.meta.row_ids import read_manifest_list

__all__ = ["Attempt", "ManifestRewrite", "prepare_attempt"]

#: Opens a manifest writer for (content, spec id) of the snapshot being produced.
OpenWriter = Callable[[ManifestContent, int], ManifestWriter]


@dataclass(frozen=True)
class ManifestRewrite:
    """A head manifest holding files to remove, and its filtered copy: the files removed DELETED, its other
    live entries EXISTING.

    Its entries are not kept: they stream from the head manifest into the copy, and an attempt holds one
    entry at a time however many files it removes.
    """

    manifest: ManifestFile
    #: the identities to remove (of the manifest's content)
    removed_ids: Collection[FileIdentity]
    #: the filtered copy written
    written: ManifestFile


@dataclass
class Attempt:
    """What one commit attempt validated against the branch head and will write."""

    metadata: TableMetadata  # the branch head's metadata, read once: each Transaction read copies it
    base: Snapshot | None
    carried: list[ManifestFile]
    rewrites: list[ManifestRewrite]
    #: the summary counts of the live files this attempt removes, data and delete files, as the head's
    #: manifests list them (counted as they stream: no removed file is kept)
    removed_counts: SummaryCounts

    def removed_entries(self, io: FileIO) -> Iterator[ManifestEntry]:
        """The live entries this attempt removes, read again from their manifests, metrics included."""
        for rewrite in self.rewrites:
            for entry in iter_manifest_entries(io, rewrite.manifest, discard_deleted=True):
                if file_identity(entry.data_file) in rewrite.removed_ids:
                    yield entry

    def write_manifests(
        self, io: FileIO, change: FilesChange, snapshot_id: int, open_writer: OpenWriter
    ) -> list[ManifestFile]:
        """Write the added manifests; return every manifest of the new snapshot (the filtered copies were
        written by :func:`prepare_attempt`)."""
        metadata = self.metadata
        explicit_seq = (
            self.base.sequence_number
            if change.explicit_sequence_number and self.base is not None and metadata.format_version >= 2
            else None
        )
        manifests: list[ManifestFile] = []

        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for data_file in change.added:
            by_spec[spec_id_of(data_file, metadata.default_spec_id)].append(data_file)
        for spec_id, files in by_spec.items():
            with open_writer(ManifestContent.DATA, spec_id) as writer:
                for data_file in files:
                    # An explicit data sequence number is written as is; None is inherited on read.
                    # The file sequence number is always inherited: it records this commit.
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=snapshot_id,
                            sequence_number=explicit_seq,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())

        manifests.extend(self._write_added_deletes(change, snapshot_id, open_writer))

        manifests.extend(rewrite.written for rewrite in self.rewrites)

        # Manifests without live files (only old DELETED entries) are dropped, as Java's producers do.
        manifests.extend(m for m in self.carried if m.has_added_files() or m.has_existing_files())
        return manifests

    def _write_added_deletes(
        self, change: FilesChange, snapshot_id: int, open_writer: OpenWriter
    ) -> list[ManifestFile]:
        """One delete manifest per spec of the added delete files, each entry with its sequence number."""
        by_spec: dict[int, list[SequencedDelete]] = defaultdict(list)
        for added in change.added_deletes:
            by_spec[spec_id_of(added.delete_file, self.metadata.default_spec_id)].append(added)
        manifests = []
        for spec_id, deletes in by_spec.items():
            with open_writer(ManifestContent.DELETES, spec_id) as writer:
                for added in deletes:
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=snapshot_id,
                            sequence_number=added.data_sequence_number,
                            file_sequence_number=None,
                            data_file=added.delete_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return manifests


def prepare_attempt(
    change: FilesChange,
    io: FileIO,
    metadata: TableMetadata,
    head_snapshot_id: int | None,
    snapshot_id: int,
    open_writer: OpenWriter,
) -> Attempt:
    """Check and plan one attempt against ``metadata``, whose branch head is ``head_snapshot_id``, writing
    the filtered copies of the head's manifests that hold a file to remove.

    :param snapshot_id: the snapshot being produced (of the DELETED entries written).
    :param open_writer: opens the writer of a manifest of that snapshot.

    :raises AlreadyCommittedError: when a snapshot carries the commit id.
    :raises ValidationException: when validation from the base fails, or an added file is gone.
    """
    # Our own earlier attempt cannot show up here: Transaction stops retrying as soon as it finds
    # the producer's (stable) snapshot id, before calling it again.
    if (found := find_commit(metadata, change.branch, change.commit_id)) is not None:
        raise AlreadyCommittedError(found)
    attempt = _plan_attempt(change, io, metadata, head_snapshot_id, _Filter(snapshot_id, open_writer))
    # On every attempt: a commit that retried for long may have outlived a short orphan age, and
    # must never make a file live that is gone.
    if gone := [f.file_path for f in change.added_files if not io.new_input(f.file_path).exists()]:
        raise ValidationException(
            f"output files no longer exist (removed as orphans while the commit retried?): "
            f"{some(gone)}; plan and rewrite again"
        )
    return attempt


def _plan_attempt(
    change: FilesChange, io: FileIO, metadata: TableMetadata, head_snapshot_id: int | None, filter_: _Filter
) -> Attempt:
    head = metadata.snapshot_by_id(head_snapshot_id) if head_snapshot_id is not None else None
    if head is None:
        if (
            change.base_snapshot_id is None
            and not change.removed_data_files
            and not change.removed_delete_files
        ):
            # Adding to a branch that had and still has no snapshot: nothing to validate.
            return Attempt(metadata, None, [], [], SummaryCounts(metadata))
        raise ValidationException(
            f"Cannot determine history between starting snapshot {change.base_snapshot_id} and the last "
            f"known ancestor None: branch {change.branch} has no snapshot"
        )
    base, window = validation_history(metadata, head, change.base_snapshot_id)
    removed_deletes = delete_files_to_remove(io, metadata, head, base, change)

    # By identity: a DV by (path, offset, size), never by its Puffin path, which other DVs share.
    removed_data = {file_identity(f): f for f in change.removed_data_files}
    removed_delete_ids = {file_identity(f) for f in removed_deletes}
    attempt = Attempt(metadata, base, [], [], SummaryCounts(metadata))
    manifests = read_manifest_list(io, head) if metadata.format_version >= 3 else head.manifests(io)
    split = _split_manifests(
        attempt,
        io,
        filter_,
        manifests,
        removed_data,
        removed_delete_ids,
        {
            ManifestContent.DATA: _manifest_filter(metadata, change.removed_data_files),
            ManifestContent.DELETES: _manifest_filter(metadata, removed_deletes),
        },
    )
    if split.missing:
        raise ValidationException(
            f"Missing required files to delete: {some(sorted(m[0] for m in split.missing))}"
        )

    history = History(io=io, metadata=metadata, base=base, window=window)
    if dvs := added_dvs(change.added_deletes):
        # v3: one DV per data file, at or above its data file's sequence number (Java readers fail else).
        validate_added_dvs(history, dvs)
        dv_files = [d.delete_file for d in dvs.values()]
        validate_dv_targets(io, manifests, _manifest_filter(metadata, dv_files), dvs, removed_delete_ids)
    if window:
        change.validate(change, history, split.removed_data_files)
    return attempt


@dataclass
class _Split:
    """What the pass over the head's manifests found of the files to remove."""

    #: identities of files to remove that no live entry of the head lists
    missing: set[FileIdentity]
    #: the data files removed, for the operation's checks: the change's own, or the head's entry (without
    #: metrics) where they differ in spec or partition, which the checks read
    removed_data_files: list[DataFile]


@dataclass(frozen=True)
class _Filter:
    """How the filtered copies are written: the snapshot being produced and its manifest writers."""

    snapshot_id: int
    open_writer: OpenWriter


def _split_manifests(
    attempt: Attempt,
    io: FileIO,
    filter_: _Filter,
    manifests: Sequence[ManifestFile],
    removed_data: Mapping[FileIdentity, DataFile],
    removed_delete_ids: Collection[FileIdentity],
    may_hold: dict[ManifestContent, Callable[[ManifestFile], bool]],
) -> _Split:
    """Sort the head's manifests into those carried as they are and those that hold a file to remove,
    counting each removed file into :attr:`Attempt.removed_counts` and writing the filtered copy as the
    manifest streams.

    On v3 the list is read in the v3 layout: carried manifests keep their ``first_row_id``, and the
    entries of a rewritten one carry the id they inherit.
    """
    default_spec_id = attempt.metadata.default_spec_id
    ids_by_content: dict[ManifestContent, Collection[FileIdentity]] = {
        ManifestContent.DATA: removed_data.keys(),
        ManifestContent.DELETES: removed_delete_ids,
    }
    split = _Split(missing={*removed_data, *removed_delete_ids}, removed_data_files=[])
    for manifest in manifests:
        ids = ids_by_content[manifest.content]
        if not ids or not may_hold[manifest.content](manifest):
            attempt.carried.append(manifest)
            continue
        with _FilteredCopy(io, filter_, manifest) as copy:
            for entry, stored in iter_stored_entries(io, manifest, discard_deleted=True):
                identity = file_identity(entry.data_file)
                if identity not in ids:
                    copy.keep(entry, stored)
                    continue
                copy.remove(entry, stored)
                split.missing.discard(identity)
                data_file = entry.data_file
                attempt.removed_counts.remove(data_file)
                if data_file.content == DataFileContent.DATA:
                    own = removed_data.get(identity)
                    if own is None or not _same_place(own, data_file, default_spec_id):
                        own = drop_metrics(data_file)  # after the copy: it reads the entry's metrics
                    split.removed_data_files.append(own)
        if copy.written is not None:
            attempt.rewrites.append(ManifestRewrite(manifest, ids, copy.written))
        else:
            attempt.carried.append(manifest)
    return split


class _FilteredCopy:
    """The filtered copy of one head manifest, as Java's ``ManifestFilterManager`` writes it: its live
    entries in their order, those removed DELETED by the new snapshot, the others EXISTING, both sequence
    numbers explicit (spec requirement), each ``data_file`` unchanged (copied as stored where that is
    exact, see :func:`~.meta.manifests.entry_copier`).

    Opened at the first entry removed: a manifest that holds none is not written. The entries kept before
    that one are read again then (none in a manifest that only lists files removed).
    """

    def __init__(self, io: FileIO, filter_: _Filter, manifest: ManifestFile) -> None:
        self._io = io
        self._filter = filter_
        self._manifest = manifest
        self._kept_before = 0
        self._stack = ExitStack()
        self._add: Callable[[ManifestEntry, StoredDataFile | None], None] | None = None
        self._writer: ManifestWriter | None = None
        self.written: ManifestFile | None = None

    def __enter__(self) -> _FilteredCopy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.__exit__(*exc_info)  # type: ignore[arg-type]
        if exc_info[0] is None and self._writer is not None:
            self.written = self._writer.to_manifest_file()

    def keep(self, entry: ManifestEntry, stored: StoredDataFile | None) -> None:
        if self._add is None:
            self._kept_before += 1
        else:
            self._add(_copy_entry(entry, ManifestEntryStatus.EXISTING, entry.snapshot_id), stored)

    def remove(self, entry: ManifestEntry, stored: StoredDataFile | None) -> None:
        if self._add is None:
            self._open()
        assert self._add is not None
        self._add(_copy_entry(entry, ManifestEntryStatus.DELETED, self._filter.snapshot_id), stored)

    def _open(self) -> None:
        manifest = self._manifest
        writer = self._stack.enter_context(
            self._filter.open_writer(manifest.content, manifest.partition_spec_id)
        )
        self._writer, self._add = writer, entry_copier(writer)
        kept = islice(iter_stored_entries(self._io, manifest, discard_deleted=True), self._kept_before)
        for entry, stored in kept:
            self._add(_copy_entry(entry, ManifestEntryStatus.EXISTING, entry.snapshot_id), stored)


def _same_place(claimed: DataFile, live: DataFile, default_spec_id: int) -> bool:
    """Whether the change's file names the head entry's spec and partition (what the checks read)."""
    try:
        return spec_id_of(claimed, default_spec_id) == live.spec_id and claimed.partition == live.partition
    except AttributeError:
        return False


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
