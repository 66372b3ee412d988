"""Reading data files with their delete files applied: the live rows of a group, streamed.

Which delete files apply to a data file is decided by the scan (:mod:`scan`, spec "Scan Planning"); this
module streams each data file and turns its deletes into the rows to keep:

- the positions its deletion vector (:mod:`.vectors`) or position delete files (:mod:`.positions`)
  delete are dropped by their running position while the data file streams
  (:func:`read.iter_data_file_batches` reads in file order);
- equality deletes whose keys the bucket transform hashes and whose delete rows fit
  :data:`HELD_SHARE` of the memory limit are held in memory (:class:`~.keysets.DeleteKeys`) and
  matched while the data file streams, on its own key columns: one read of each data file
  (:func:`_held_kinds`); over that share, when only their key hashes fit it, they are mapped from disk
  in key-hash order (:mod:`.mapped`) and matched the same way;
- the positions other equality deletes match come first from the narrow, bounded join of
  :mod:`.matches` (key columns only, spilling) and are dropped by running position too.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import operator
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.equality import equality_kinds, key_column, key_fields_of
from airflow_provider_iceberg_exec.engine.deletes.keysets import (
    HASH_BYTES,
    DeleteKeys,
    HashSet,
    hashable,
    key_hashes,
)
from airflow_provider_iceberg_exec.engine.deletes.mapped import (
    MappedDeleteKeys,
    map_delete_keys,
    mapped_bitmap_bytes,
    mapped_bytes,
    remove_mapped,
)
from airflow_provider_iceberg_exec.engine.deletes.matches import (
    MatchStats,
    delete_key_batches,
    equality_matches,
    partition_id,
)
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.io.lineage import RowLineage
from airflow_provider_iceberg_exec.engine.io.read import (
    ProjectionCache,
    iter_data_file_batches,
    read_ahead,
    read_batch_rows,
    read_files_ahead,
    read_files_joined,
)
from airflow_provider_iceberg_exec.engine.io.session import release_memory
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Tracker

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.name_mapping import NameMapping

__all__ = ["HELD_SHARE", "MAPPED_SHARE", "DeleteStats", "iter_live_group_batches"]

#: the held equality deletes of one stream take at most this share of the memory limit (a compaction
#: group with equality deletes is one stream: one lane, see ``ops/compaction/rewrite.py`` ``_lanes``;
#: measured on bench/mor.py's 5M-row table at 256 MiB, two lanes saved 0.5 s of 9 and cost 160 MiB)
HELD_SHARE = 1 / 4
#: the hashes of equality deletes mapped from disk (:mod:`.mapped`, when their rows are over
#: :data:`HELD_SHARE`) take at most this share of the memory limit, with the kinds held before them
MAPPED_SHARE = 1 / 4


@dataclass
class DeleteStats:
    """Rows seen and removed while applying deletes to a group of data files."""

    rows_read: int = 0
    position_deleted: int = 0
    equality_deleted: int = 0

    @property
    def rows_deleted(self) -> int:
        """Rows removed by position deletes, deletion vectors and equality deletes."""
        return self.position_deleted + self.equality_deleted


def iter_live_group_batches(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    *,
    limits: ResourceLimits,
    spill_dir: str,
    stats: DeleteStats,
    progress: Tracker = NOT_TRACKED,
    row_lineage: bool = False,
    equality_deletes: bool | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the live rows of ``files`` in the table schema, in file order: every applying delete applied.

    Each data file streams once, its deleted positions dropped by running position: those of its
    deletion vector or position delete files, and, where equality deletes apply, the rows they match:
    matched on the rows' own key columns as they stream when the deletes are held in memory
    (:func:`_held_kinds`), otherwise found first by the narrow join of :mod:`.matches` (key columns
    only, spilling to ``spill_dir``) and taken one data file at a time, in file order.

    :param files: the data files with the delete files that apply to each (from the scan or the task).
    :param stats: filled in while the stream is consumed.
    :param progress: advanced by each data file once it is read (on the thread that reads).
    :param row_lineage: the rows also carry ``_row_id`` and ``_last_updated_sequence_number`` (the last
        two columns), materialised from each file's ``first_row_id``, positions before deletes and data
        sequence number (:mod:`~.io.lineage`): what a v3 rewrite writes.
    :param equality_deletes: whether an equality delete applies to any of ``files``, when the caller
        knows (``None``: found by a pass over them, which decodes a task's every file once more).
    :raises DataFileReadError: when a data or delete file is missing or malformed.
    :raises ConfigurationError: for an equality delete on a field found in no schema, or a nested field.
    """
    from pyiceberg.manifest import DataFileContent

    equality = (
        any(d.data_file.content == DataFileContent.EQUALITY_DELETES for f in files for d in f.delete_files)
        if equality_deletes is None
        else equality_deletes
    )
    partitions: dict[tuple[int, str], int] = {}
    held: list[_HeldKind] = []
    try:
        joined = _held_kinds(io, metadata, files, partitions, limits, spill_dir, held) if equality else []
        yield from _stream(
            io, metadata, files, partitions, held, joined, limits, spill_dir, stats, progress, row_lineage
        )
    finally:
        for kind in held:
            kind.close()


def _stream(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    partitions: dict[tuple[int, str], int],
    held: Sequence[_HeldKind],
    joined: Sequence[ScannedDelete],
    limits: ResourceLimits,
    spill_dir: str,
    stats: DeleteStats,
    progress: Tracker,
    row_lineage: bool,
) -> Iterator[pa.RecordBatch]:
    """:func:`iter_live_group_batches` once the held kinds of equality deletes are known."""
    import numpy as np

    schema = metadata.schema()
    specs = metadata.specs()
    name_mapping = metadata.name_mapping()
    matches = _Matches(
        equality_matches(io, metadata, files, joined, limits=limits, spill_dir=spill_dir)
        if joined
        else iter(())
    )
    # Partition ids before any thread reads: the ids are handed out in the order they are first seen.
    parts = [partition_id(partitions, scanned.data_file) for scanned in files] if held else []
    cache = ProjectionCache()

    read = _FileReader(
        io, schema, specs, name_mapping, metadata.format_version, limits, cache, held, parts, row_lineage
    )

    no_positions = np.empty(0, dtype=np.int64)
    # Small files are read whole on worker threads ahead of this one (their held equality deletes
    # matched there too); each still comes in file order. ``files`` is passed over once (a task's files
    # are decoded each time they are asked for, :class:`.TaskFiles`): each file the reader takes is queued
    # here, and its stream comes back in the same order.
    taken: collections.deque[ScannedFile] = collections.deque()

    def jobs() -> Iterator[tuple[int, ScannedFile]]:
        for job in enumerate(files):
            taken.append(job[1])
            yield job

    def read_plain(plain: list[ScannedFile]) -> list[Read]:
        joined = read_files_joined(
            io,
            [scanned.data_file for scanned in plain],
            table_schema=schema,
            specs=specs,
            name_mapping=name_mapping,
            format_version=metadata.format_version,
            batch_size=limits.batch_size,
            cache=cache,
        )
        return [(batch, None) for batch in joined]

    # Without deletes to apply (nor lineage to materialise), a file's rows pass as they are read: the small
    # files a worker reads in one run are joined there (the work a batch here and downstream outweighs a
    # tiny file's).
    no_deletes = not (held or joined or row_lineage)

    def size_of(job: tuple[int, ScannedFile]) -> int:
        return job[1].data_file.file_size_in_bytes

    def positions_of(scanned: ScannedFile) -> npt.NDArray[np.int64]:
        return deleted_positions(io, scanned) if scanned.delete_files else no_positions

    def files_read(
        read_one: Callable[[tuple[int, ScannedFile]], Iterator[Read]],
        read_run: Callable[[list[tuple[int, ScannedFile]]], Iterator[list[Read]]] | None,
    ) -> Generator[tuple[_FileStart, Read | None], None, None]:
        return _with_starts(
            read_files_ahead(jobs(), read_one, size_of, read_run=read_run), taken, positions_of
        )

    if held:
        # A streamed file is decoded (and its position deletes read) on a thread of its own, ahead of
        # this one, which matches its rows: hashing and searching the keys was most of one thread's time
        # beside the decoding, while the writer's thread waited (bench/mor.py at 200M rows). The workers
        # ahead read small files and match them, as before.
        items = read_ahead(
            files_read(functools.partial(read, match=False), lambda run: (list(read(job)) for job in run)),
            _DECODED_AHEAD,
        )
    else:
        items = files_read(read, (lambda run: _read_run(run, read, read_plain)) if no_deletes else None)
    with contextlib.closing(items):
        for start, group in itertools.groupby(items, key=operator.itemgetter(0)):
            batches = (_matched(batch) for _, batch in group if batch is not None)
            yield from _drop_positions(batches, start.positions, matches.of(start.ordinal), stats)
            progress.advance(files=1, bytes_done=start.scanned.data_file.file_size_in_bytes)


@dataclass(frozen=True)
class _FileReader:
    """Reads one data file of a stream: ``reader((ordinal, scanned))``."""

    io: FileIO
    schema: Schema
    specs: Mapping[int, PartitionSpec]
    name_mapping: NameMapping | None
    format_version: int
    limits: ResourceLimits
    cache: ProjectionCache
    held: Sequence[_HeldKind]
    #: the partition id of each file of the stream, by ordinal (when deletes are held)
    parts: Sequence[int]
    row_lineage: bool

    def __call__(self, job: tuple[int, ScannedFile], *, match: bool = True) -> Iterator[Read]:
        """A data file's batches, each with the mask of its rows the held deletes delete, or, unless
        ``match``, with what to match them with (:class:`_ToMatch`)."""
        ordinal, scanned = job
        data_file = scanned.data_file
        batches = iter_data_file_batches(
            self.io,
            data_file,
            table_schema=self.schema,
            spec=self.specs[data_file.spec_id],
            name_mapping=self.name_mapping,
            format_version=self.format_version,
            batch_size=read_batch_rows(data_file, self.limits.batch_size),
            cache=self.cache,
            lineage=RowLineage(first_row_id(data_file), scanned.data_sequence_number)
            if self.row_lineage
            else None,
        )
        kinds = [kind for kind in self.held if kind.applies_to(scanned)]
        if not kinds:
            return ((batch, None) for batch in batches)
        pending = _ToMatch(kinds, scanned.data_sequence_number, self.parts[ordinal])
        if match:
            return ((batch, pending.match(batch)) for batch in batches)
        return ((batch, pending) for batch in batches)


def _with_starts(
    streams: Generator[Iterator[Read], None, None],
    taken: collections.deque[ScannedFile],
    positions_of: Callable[[ScannedFile], npt.NDArray[np.int64]],
) -> Generator[tuple[_FileStart, Read | None], None, None]:
    """Each file's batches of ``streams``, each file first with none: every item with its file's start.

    :param taken: the files ``streams`` is of, queued as they were taken, in the same order."""
    try:
        for ordinal, batches in enumerate(streams):
            scanned = taken.popleft()
            start = _FileStart(ordinal, scanned, positions_of(scanned))
            yield start, None
            for batch in batches:
                yield start, batch
    finally:
        streams.close()


#: A data file's batch with the mask of its rows held equality deletes match (``None``: none apply),
#: or, decoded ahead of its matching, what to match it with.
Read = tuple["pa.RecordBatch", "npt.NDArray[np.bool_] | _ToMatch | None"]

#: items (a file's start or a batch) the decoding thread may be ahead of the matching one. One: on
#: bench/mor.py's 200M-row table three were no faster (305 s against 304) and held 40 MiB more.
_DECODED_AHEAD = 1


@dataclass(frozen=True, eq=False)
class _FileStart:
    """A data file of the stream, told from the next one by identity (its batches are grouped by it)."""

    ordinal: int
    scanned: ScannedFile
    #: its rows its position deletes and deletion vector delete
    positions: npt.NDArray[np.int64]


@dataclass(frozen=True)
class _ToMatch:
    """The held kinds of equality deletes that apply to a data file, with its sequence number and
    partition id: the mask of one of its batches."""

    kinds: Sequence[_HeldKind]
    sequence_number: int
    partition: int

    def match(self, batch: pa.RecordBatch) -> npt.NDArray[np.bool_] | None:
        return _held_mask(batch, self.kinds, self.sequence_number, self.partition)


def _matched(read: Read) -> tuple[pa.RecordBatch, npt.NDArray[np.bool_] | None]:
    """A batch with the mask of its rows held equality deletes delete, matched now if not yet."""
    batch, mask = read
    return (batch, mask.match(batch)) if isinstance(mask, _ToMatch) else (batch, mask)


def _read_run(
    run: list[tuple[int, ScannedFile]],
    read: Callable[[tuple[int, ScannedFile]], Iterator[Read]],
    read_plain: Callable[[list[ScannedFile]], list[Read]],
) -> Iterator[list[Read]]:
    """Each file's batches, for a run of files read on one worker: consecutive files with no delete
    files are read by ``read_plain`` at once, their rows given to the first of them and none to the rest.

    When that read fails, its files are read again one by one: the files before the failing one come
    first and its error in its own turn, as when each file is read alone.
    """
    start = 0
    while start < len(run):
        end = start
        while end < len(run) and not run[end][1].delete_files:
            end += 1
        if end == start:
            end += 1
        else:
            try:
                joined = read_plain([scanned for _, scanned in run[start:end]])
            except Exception:  # raised again below, by the file that fails, in its turn
                pass
            else:
                yield joined
                yield from ([] for _ in range(start + 1, end))
                start = end
                continue
        for job in run[start:end]:
            yield list(read(job))
        start = end


class _Matches:
    """The equality matches of a group, taken data file by data file (they come in ordinal order)."""

    def __init__(self, chunks: Iterator[tuple[int, npt.NDArray[np.int64]]]) -> None:
        self._chunks = chunks
        self._next: tuple[int, npt.NDArray[np.int64]] | None = next(chunks, None)

    def of(self, ordinal: int) -> npt.NDArray[np.int64]:
        """The sorted positions equality deletes match in data file ``ordinal`` (none position-deleted)."""
        import numpy as np

        parts = []
        while self._next is not None and self._next[0] == ordinal:
            parts.append(self._next[1])
            self._next = next(self._chunks, None)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _drop_positions(
    batches: Iterator[tuple[pa.RecordBatch, npt.NDArray[np.bool_] | None]],
    positions: npt.NDArray[np.int64],
    matched: npt.NDArray[np.int64],
    stats: DeleteStats,
) -> Iterator[pa.RecordBatch]:
    """Drop the rows at ``positions`` (position deletes) and ``matched`` (equality deletes of the join;
    both sorted, disjoint), and those a batch's mask marks (held equality deletes, which may also be
    position-deleted) from a data file's batches, read in file order."""
    import numpy as np
    import pyarrow as pa

    start = 0
    for batch, held in batches:
        first, n = start, batch.num_rows
        start += n
        stats.rows_read += n
        lo, hi = np.searchsorted(positions, [first, start]) if len(positions) else (0, 0)
        mlo, mhi = np.searchsorted(matched, [first, start]) if len(matched) else (0, 0)
        if lo == hi and mlo == mhi and (held is None or not held.any()):
            yield batch  # the common case: nothing to drop
            continue
        keep = np.ones(n, dtype=bool)
        keep[positions[lo:hi] - first] = False
        keep[matched[mlo:mhi] - first] = False
        stats.position_deleted += int(hi - lo)
        stats.equality_deleted += int(mhi - mlo)
        if held is not None:
            stats.equality_deleted += int(np.count_nonzero(held & keep))
            keep &= ~held
        kept = batch.filter(pa.array(keep))
        if kept.num_rows:
            yield kept


@dataclass(frozen=True)
class _HeldKind:
    """One kind of equality deletes matched as the data files stream: the key columns' names in the rows
    read, the delete rows (in memory, or mapped from ``directory``), their key hashes (which rule out most
    rows for a bitmap lookup, not a search) and the delete files' paths."""

    columns: tuple[str, ...]
    keys: DeleteKeys | MappedDeleteKeys
    hashes: HashSet
    paths: frozenset[str]
    directory: str | None = None

    def applies_to(self, scanned: ScannedFile) -> bool:
        return any(d.data_file.file_path in self.paths for d in scanned.delete_files)

    def close(self) -> None:
        if isinstance(self.keys, MappedDeleteKeys):
            self.keys.close()
        if self.directory is not None:
            remove_mapped(self.directory)


def _held_kinds(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    spill_dir: str,
    held: list[_HeldKind],
) -> list[ScannedDelete]:
    """Append to ``held`` the kinds of equality deletes of ``files`` matched while the data files stream
    (the caller closes them); return the delete files left to the join of :mod:`.matches`.

    A kind is held when the bucket transform hashes its keys (:func:`~.keysets.hashable`) and every key
    field is a top-level column of the current schema (so the rows read carry it): in memory when its
    delete rows, with the kinds held before it, take at most :data:`HELD_SHARE` of the memory limit,
    otherwise mapped from disk (:mod:`.mapped`) when their hashes fit that share. Then no data file's key
    columns are read twice (measured on bench/mor.py's 5M-row table, that second read was about 70 % of
    the separate key pass's CPU; the hashing the rest).
    """
    from pyiceberg.schema import Schema

    schema = metadata.schema()
    top = {f.field_id: f.name for f in schema.fields}
    unpartitioned = {sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()}
    budget = int(limits.memory_limit_bytes * HELD_SHARE)
    mapped_budget = int(limits.memory_limit_bytes * MAPPED_SHARE)
    joined: list[ScannedDelete] = []
    for number, ((ids, is_global), kind) in enumerate(sorted(equality_kinds(files, unpartitioned).items())):
        key_fields = key_fields_of(metadata, ids)
        keys = None
        if hashable(key_fields) and all(i in top for i in ids):
            directory = os.path.join(spill_dir, f"eq-held-{number}")
            try:
                keys, size = _hold(
                    io,
                    metadata,
                    kind,
                    Schema(*key_fields),
                    ids,
                    is_global,
                    partitions,
                    limits,
                    (budget, mapped_budget),
                    directory,
                )
            except BaseException:
                remove_mapped(directory)
                raise
            budget -= size
            mapped_budget -= size
        if keys is None:
            joined.extend(kind)
        else:
            paths = frozenset(d.data_file.file_path for d in kind)
            mapped = isinstance(keys[0], MappedDeleteKeys)
            held.append(
                _HeldKind(tuple(top[i] for i in ids), keys[0], keys[1], paths, directory if mapped else None)
            )
    return joined


def _hold(
    io: FileIO,
    metadata: TableMetadata,
    kind: Sequence[ScannedDelete],
    key_schema: Any,
    ids: Sequence[int],
    is_global: bool,
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    budgets: tuple[int, int],
    directory: str,
) -> tuple[tuple[DeleteKeys | MappedDeleteKeys, HashSet] | None, int]:
    """The delete rows of one kind as :class:`~.keysets.DeleteKeys` with the set of their key hashes,
    and their bytes; past the first of ``budgets`` (bytes), as :class:`~.mapped.MappedDeleteKeys` under
    ``directory`` when their hashes fit the second; ``None`` otherwise."""
    import numpy as np
    import pyarrow as pa

    names = [key_column(i) for i in ids]
    batches: list[pa.RecordBatch] = []
    budget, mapped_budget = budgets
    size = HashSet.BITMAP_BYTES  # the hash set's bitmap, whatever the rows
    stats = MatchStats()
    read = (
        batch
        for delete in kind
        for batch in delete_key_batches(io, metadata, delete, key_schema, partitions, limits, stats)
    )
    for batch in read:
        size += batch.nbytes + batch.num_rows * HASH_BYTES  # the rows and their sorted hashes
        batches.append(batch)
        if size > budget:
            return _map(batches, read, kind, names, is_global, limits, mapped_budget, directory)
    if not batches:
        return None, 0
    rows = pa.Table.from_batches(batches).combine_chunks()
    del batches
    keys = [rows.column(n).combine_chunks() for n in names]
    hashes = key_hashes(keys)
    held = DeleteKeys(
        keys,
        hashes,
        rows.column(rows.num_columns - 2).to_numpy().astype(np.int64),  # sequence number
        rows.column(rows.num_columns - 1).to_numpy().astype(np.int32),  # partition id
        is_global=is_global,
    )
    return (held, HashSet(hashes)), size


def _map(
    batches: list[pa.RecordBatch],
    rest: Iterator[pa.RecordBatch],
    kind: Sequence[ScannedDelete],
    names: Sequence[str],
    is_global: bool,
    limits: ResourceLimits,
    budget: int,
    directory: str,
) -> tuple[tuple[MappedDeleteKeys, HashSet] | None, int]:
    """The delete rows of one kind, the first of them read into ``batches``, the others still in ``rest``,
    mapped from ``directory`` (:mod:`.mapped`), their sorted hashes held in memory when they fit
    ``budget`` and mapped too when only the bitmap and the fences of them do; ``None`` otherwise."""
    seen = sum(b.num_rows for b in batches)
    rows = max(seen, sum(d.data_file.record_count for d in kind))
    hold_hashes = mapped_bytes(rows) <= budget
    if not hold_hashes and mapped_bytes(rows, hashes_held=False) > budget:
        return None, 0
    bitmap_bytes = HashSet.BITMAP_BYTES if hold_hashes else mapped_bitmap_bytes(rows, budget)
    row_bytes = sum(b.nbytes for b in batches) / max(1, seen)
    seq_column, part_column = batches[0].schema.names[-2:]

    def everything() -> Iterator[pa.RecordBatch]:
        while batches:  # handed on one by one, so that the first ones go once staged
            yield batches.pop(0)
        yield from rest

    mapped = map_delete_keys(
        everything(),
        names,
        rows=rows,
        row_bytes=row_bytes,
        is_global=is_global,
        directory=directory,
        bucket_bytes=_map_bucket_bytes(limits),
        seq_column=seq_column,
        part_column=part_column,
        hold_hashes=hold_hashes,
        bitmap_bytes=bitmap_bytes,
    )
    # Sorting the ranges peaked at a few times a range: hand that back before the data streams.
    release_memory()
    if mapped is None:
        return None, 0
    return (mapped, mapped.hashes), mapped.held_bytes


def _map_bucket_bytes(limits: ResourceLimits) -> int:
    """Bytes of delete rows sorted at once while mapping them (an eighth of the limit: the sort takes
    about three times that, before the data stream; fewer, larger ranges make fewer mapped chunks for
    each probe to visit)."""
    return max(1 << 20, limits.memory_limit_bytes // 8)


def _held_mask(
    batch: pa.RecordBatch, kinds: Sequence[_HeldKind], sequence_number: int, partition: int
) -> npt.NDArray[np.bool_] | None:
    """The mask of the rows of ``batch`` the held equality deletes delete (``None``: none)."""
    import numpy as np
    import pyarrow as pa

    deleted = None
    for kind in kinds:
        columns = [batch.column(name) for name in kind.columns]
        hashes = key_hashes(columns)
        maybe = np.flatnonzero(kind.hashes.contains(hashes))
        if not len(maybe):
            continue
        rows = pa.array(maybe)
        n = len(maybe)
        found = kind.keys.deleted(
            [column.take(rows) for column in columns],
            hashes[maybe],
            np.full(n, sequence_number, dtype=np.int64),
            np.full(n, partition, dtype=np.int32),
        )
        if deleted is None:
            deleted = np.zeros(batch.num_rows, dtype=bool)
        deleted[maybe[found]] = True
    return deleted
