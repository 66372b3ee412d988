"""Equality delete rows too large to hold, kept on disk in key-hash order.

:class:`~.keysets.DeleteKeys` holds every delete row in memory (about the keys' Arrow size); when that
is more than the memory limit allows, the key join of :mod:`.matches` used to match the data files'
key columns before the rows streamed, reading each data file's key columns twice. Here only the delete
rows' sorted 32-bit key hashes (4 bytes a row) and a bitmap of them stay in memory, or, when even the
hashes are too many, the bitmap and a fence every 1,024 hashes (:class:`MappedHashSet`, the hashes
memory-mapped); the rows themselves (keys, sequence number, partition id), deduplicated as
:class:`~.keysets.DeleteKeys` does, are written once in hash order to a local Arrow IPC file and a file
of fixed-size records. A data row whose hash no delete row has is not deleted (most rows: a bitmap
lookup); the few others are compared, every key column exactly and null-safely, with the rows of their
hash, read from the files where they lie, so the data files are still read once, as they stream.

The rows are sorted without holding them: they are split by hash range into staged buckets that each
fit a bucket budget, then each bucket is sorted and appended, range after range. A lookup in hashes on
disk reads them a region at a time into a buffer of its thread's, so the process's resident memory does
not grow with the files (the kernel's page cache keeps them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import mmap
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.deletes.keysets import (
    HASH_BYTES,
    DeleteKeys,
    HashSet,
    equal_null_safe,
    key_hashes,
    storage_of,
)
from airflow_provider_iceberg_exec.engine.io.staging import StagedArrow

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = [
    "MappedDeleteKeys",
    "MappedHashSet",
    "map_delete_keys",
    "mapped_bitmap_bytes",
    "mapped_bytes",
    "remove_mapped",
    "sorted_hash_set",
]

#: most hash ranges the delete rows are split into (each an open stager with a buffered batch)
_MAX_RANGES = 256
_MIN_STAGED_BATCH_BYTES = 16384
#: a mapped row's sequence number and partition id, side by side
_ROW_DTYPE = [("seq", "<i8"), ("part", "<i4")]
#: the rows of a chunk of the keys file: oldest and newest sequence numbers, lowest and highest partition ids
_SUMMARY_DTYPE = [("oldest", "<i8"), ("newest", "<i8"), ("low", "<i4"), ("high", "<i4")]
_HASH = "__iceberg_exec_mapped_hash"
_SHORT_READ = "a mapped delete file is shorter than its layout: was it changed while in use?"


#: sorted hashes a fence of :class:`MappedHashSet` stands for (a page of them)
_FENCE_VALUES = 1024
#: sorted hashes a lookup of :class:`MappedHashSet` reads and searches at once (2 MiB); a whole number of
#: fences, so that a region's last fence span ends at the next region's first fence
_REGION_VALUES = 1 << 19


#: most bits of a mapped hash set's bitmap for each hash: a data row's hash passes a bitmap with this many
#: bits a delete row's hash with a chance of about 1 - e**(-1 / _BITS_PER_HASH) (6 %), then searched
_BITS_PER_HASH = 16


def mapped_bytes(rows: int, *, hashes_held: bool = True, bitmap_bytes: int = HashSet.BITMAP_BYTES) -> int:
    """Memory :class:`MappedDeleteKeys` holds for ``rows`` delete rows: their hashes and the bitmap, or,
    with the hashes mapped too, the bitmap, a fence every :data:`_FENCE_VALUES` hashes and the region of
    them a lookup holds."""
    if hashes_held:
        return rows * HASH_BYTES + bitmap_bytes
    fences = -(-rows // _FENCE_VALUES) * HASH_BYTES
    return bitmap_bytes + fences + _REGION_VALUES * HASH_BYTES


def mapped_bitmap_bytes(rows: int, budget: int) -> int:
    """The bitmap of ``rows`` mapped hashes: the default one doubled while it stays within ``budget`` with
    the rest of :func:`mapped_bytes`, and under :data:`_BITS_PER_HASH` bits a hash. Each doubling halves
    about the data rows searched in the mapped hashes: at 10M delete rows, 26 % of the data rows pass
    4 MiB, 14 % pass 8 MiB (the search of those rows was most of the probe's time).

    >>> mapped_bitmap_bytes(10_000_000, 16 << 20) >> 20, mapped_bitmap_bytes(10_000_000, 8 << 20) >> 20
    (8, 4)
    >>> mapped_bitmap_bytes(1_000_000, 64 << 20) >> 20
    4
    """
    size = HashSet.BITMAP_BYTES
    while (
        size * 2 * 8 <= rows * _BITS_PER_HASH
        and size < 1 << 29
        and mapped_bytes(rows, hashes_held=False, bitmap_bytes=size * 2) <= budget
    ):
        size *= 2
    return size


class MappedHashSet(HashSet):
    """A :class:`~.keysets.HashSet` whose sorted hashes (repeats allowed) are on disk: in memory only its
    bitmap and a fence every :data:`_FENCE_VALUES` hashes. A lookup searches its hashes in ascending
    order, those of one region of :data:`_REGION_VALUES` sorted hashes at a time, read from the file into a
    buffer of the thread's, so the set holds a region for each thread looking up whatever its size: 10M
    delete rows' hashes are 40 MB, more than a 64 MiB limit's share for them.

    :param mapped: the file mapped (the bitmap is built through it, its pages dropped as it goes).
    :param drop: drops a span (start, end) of ``mapped``'s pages from the process.
    :param fd: the file open for reading: lookups read it (the caller closes it).
    """

    def __init__(
        self,
        mapped: mmap.mmap,
        drop: Callable[[tuple[int, int]], None],
        fd: int,
        *,
        bitmap_bytes: int = HashSet.BITMAP_BYTES,
    ) -> None:
        import numpy as np

        ordered = np.frombuffer(mapped, dtype=np.uint32)
        self._drop = drop
        self._fd = fd
        self._buffers = threading.local()
        super().__init__(ordered, presorted=True, bitmap_bytes=bitmap_bytes)
        self._fences = ordered[::_FENCE_VALUES].copy()
        drop((0, len(mapped)))

    def _read(self, start: int, stop: int) -> None:
        # the bitmap is built a chunk of hashes at a time (1 MiB): each chunk's pages go once it is read
        self._drop((start * HASH_BYTES // mmap.PAGESIZE * mmap.PAGESIZE, stop * HASH_BYTES))

    def bounds(self, hashes: npt.NDArray[np.uint32]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        import numpy as np

        # The rows a lookup finds are the ones whose bounds are asked next: this thread's last lookup kept
        # where its hashes start and end, so their regions are not read again.
        last = getattr(self._buffers, "found", None)
        if last is not None and len(last[0]):
            known, starts, stops = last
            at = np.minimum(np.searchsorted(known, hashes), len(known) - 1)
            if (known[at] == hashes).all():
                return starts[at], stops[at] - starts[at]
        low, high, _found = self._searched(hashes)
        return low, high - low

    def _among(self, hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
        import numpy as np

        starts, stops, found = self._searched(hashes)
        order = np.argsort(hashes[found])
        self._buffers.found = (hashes[found][order], starts[found][order], stops[found][order])
        return found

    def _searched(
        self, hashes: npt.NDArray[np.uint32]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Where each of ``hashes`` starts in :attr:`sorted`, where it ends, and whether it is there: a
        region of the sorted hashes at a time, each hash searched within its region alone.

        The fences bound where a hash starts: after the fence span before the first fence not below it, and
        at most at that fence, so within one region or at its end, where the next region's first hash (a
        fence) is. Only a hash whose repeats run on into the next region is searched past its region, in
        the one fence span its end lies in. The regions are read, not mapped: a mapping's pages were
        faulted in again after every drop, and each drop stopped both cores (at 200M data rows, the search
        through the mapping took 54 s of the matching thread and its drops 10 s)."""
        import numpy as np

        count, size = len(hashes), len(self._sorted)
        starts, stops, found = np.zeros(count, np.intp), np.zeros(count, np.intp), np.zeros(count, bool)
        if not size or not count:
            return starts, stops, found
        order = np.argsort(hashes)
        ordered = hashes[order]
        span = np.searchsorted(self._fences, ordered, side="left")
        region = np.maximum(span - 1, 0) * _FENCE_VALUES // _REGION_VALUES
        for first, last in _runs(region):
            low = int(region[first]) * _REGION_VALUES
            high = min(size, low + _REGION_VALUES)
            values, wanted, rows = self._region(low, high), ordered[first:last], order[first:last]
            at = np.searchsorted(values, wanted, side="left")
            starts[rows] = low + at
            here = values[np.minimum(at, high - low - 1)] == wanted
            # past every value of the region: the next region's first hash, if any, is the one
            on = (
                (wanted == self._fences[high // _FENCE_VALUES])
                if high < size
                else np.zeros(len(wanted), bool)
            )
            found[rows] = here | ((at == high - low) & on)
            end = np.searchsorted(values, wanted, side="right")
            stops[rows] = low + end
            for past in np.flatnonzero((end == high - low) & on):
                stops[rows[past]] = self._end_of(wanted[past])
        return starts, stops, found

    def _region(self, low: int, high: int) -> npt.NDArray[np.uint32]:
        """The sorted hashes ``low`` to ``high`` (at most a region), read into this thread's buffer."""
        import numpy as np

        buffer = getattr(self._buffers, "region", None)
        if buffer is None:
            buffer = self._buffers.region = np.empty(_REGION_VALUES, dtype=np.uint32)
        values = buffer[: high - low]
        _read_into(self._fd, values, low * HASH_BYTES)
        return values

    def _end_of(self, value: np.uint32) -> int:
        """Where the run of ``value``, a fence, ends in :attr:`sorted`: within the fence span before the
        first fence above it."""
        import numpy as np

        low = (int(np.searchsorted(self._fences, value, side="right")) - 1) * _FENCE_VALUES
        values = np.empty(min(len(self._sorted), low + _FENCE_VALUES) - low, dtype=np.uint32)
        _read_into(self._fd, values, low * HASH_BYTES)
        return low + int(np.searchsorted(values, value, side="right"))


def _read_into(fd: int, values: npt.NDArray[Any], offset: int) -> None:
    """Fill ``values`` with the bytes of ``fd`` from ``offset``; a short read (a file cut while in use)
    raises. Where the system has no ``preadv`` (macOS), through ``pread``'s bytes."""
    view = memoryview(values).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        if hasattr(os, "preadv"):
            read = os.preadv(fd, [view[done:]], offset + done)
        else:
            chunk = os.pread(fd, len(view) - done, offset + done)
            read = len(chunk)
            view[done : done + read] = chunk
        if not read:
            raise ValueError(_SHORT_READ)
        done += read


class MappedDeleteKeys:
    """Delete rows on disk in key-hash order: which data rows they delete.

    The same answers as :class:`~.keysets.DeleteKeys` (same key null-safely, higher sequence number, same
    partition unless global), with only the rows' hashes in memory. The keys file is mapped for its
    Arrow metadata; a candidate's values are read from the files (:func:`_gather`). Built by
    :func:`map_delete_keys`; :meth:`close` closes and unmaps the files (the caller removes the directory).

    :param keys_path: the Arrow IPC file of the key columns, one record batch per hash range.
    :param rows_path: each row's sequence number and partition id (:data:`_ROW_DTYPE`), in the same order.
    :param hashes: each row's key hash, in the same (ascending) order, or the file of them (4 bytes each,
        native order), then read from it (:class:`MappedHashSet`).
    :param is_global: the deletes apply whatever the data row's partition.
    :param bitmap_bytes: the size of the hash set's bitmap (:func:`mapped_bitmap_bytes`).
    """

    #: most candidate pairs (probe row, mapped row of the same hash) compared at once
    MAX_CANDIDATES = 1 << 20

    def __init__(
        self,
        keys_path: str,
        rows_path: str,
        hashes: npt.NDArray[np.uint32] | str,
        *,
        is_global: bool,
        bitmap_bytes: int = HashSet.BITMAP_BYTES,
    ) -> None:
        import numpy as np
        import pyarrow as pa

        self._global = is_global
        self._maps: list[mmap.mmap] = []
        self._fds: list[int] = []
        self._lock = threading.Lock()
        try:
            #: the hashes in ascending order, with repeats: their positions are the mapped rows'
            self.hashes: HashSet
            if isinstance(hashes, str):
                mapped = self._map(hashes)
                self._fds.append(os.open(hashes, os.O_RDONLY))
                self.hashes = MappedHashSet(
                    mapped, functools.partial(self._drop, mapped), self._fds[-1], bitmap_bytes=bitmap_bytes
                )
            else:
                self.hashes = HashSet(hashes, presorted=True, bitmap_bytes=bitmap_bytes)
            #: bytes of memory the hashes take (:func:`mapped_bytes`)
            self.held_bytes = mapped_bytes(
                len(self.hashes), hashes_held=not isinstance(hashes, str), bitmap_bytes=bitmap_bytes
            )
            keys = self._map(keys_path)
            self._keys_map = keys
            view = pa.py_buffer(keys)
            reader = pa.ipc.open_file(view)
            # The chunks' buffers point into the mapping: only their metadata is read through it. A
            # candidate's values are read from the file where each layout says they are (:func:`_gather`).
            self._chunks = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            self._spans = [_span(chunk, view.address, len(keys)) for chunk in self._chunks]
            layouts = [
                [_Layout.of(c, view.address, len(keys)) for c in chunk.columns] for chunk in self._chunks
            ]
            self._starts = np.cumsum([0, *(c.num_rows for c in self._chunks)]).astype(np.int64)
            # A probe reads no page of the mapping (a type without a layout drops its chunk's), and the
            # hashes are read: the metadata's pages, read once here, are all that is dropped.
            self._drop(keys, (0, len(keys)))
            self._rows_count = os.path.getsize(rows_path) // np.dtype(_ROW_DTYPE).itemsize
            if not (self._rows_count == len(self.hashes) == self._starts[-1]):
                raise ValueError("mapped delete rows, their hashes and their keys differ in length")
            self._fds[:0] = [os.open(keys_path, os.O_RDONLY), os.open(rows_path, os.O_RDONLY)]
            self._chunk_rows = self._summaries()
            self._layouts = [
                [_of_one_length(self._fds[0], layout, chunk.num_rows) for layout in chunk_layouts]
                for chunk_layouts, chunk in zip(layouts, self._chunks, strict=True)
            ]
        except BaseException:  # the files opened so far are not left open
            self.close()
            raise

    def _summaries(self) -> npt.NDArray[Any]:
        """For each chunk, its rows' oldest and newest sequence numbers and lowest and highest partition
        ids: where they decide a candidate, its own row is not read (equality deletes newer than every
        data file they apply to, the common case, need no read a candidate)."""
        import numpy as np

        summaries = np.zeros(len(self._chunks), dtype=_SUMMARY_DTYPE)
        size = np.dtype(_ROW_DTYPE).itemsize
        for number in range(len(self._chunks)):
            start, stop = int(self._starts[number]), int(self._starts[number + 1])
            if stop > start:
                records = np.empty(stop - start, dtype=np.dtype(_ROW_DTYPE))
                _read_into(self._fds[1], records, start * size)
                seqs, parts = records["seq"], records["part"]
                summaries[number] = (seqs.min(), seqs.max(), parts.min(), parts.max())
        return summaries

    def _map(self, path: str) -> mmap.mmap:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._maps.append(mapped)
        return mapped

    def __len__(self) -> int:
        return self._rows_count

    def deleted(
        self,
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        sequence_numbers: npt.NDArray[np.int64],
        partitions: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.bool_]:
        """Which of these data rows (key columns, :func:`~.keysets.key_hashes`, sequence numbers, partition
        ids) a delete row deletes: same key null-safely, higher sequence number, same partition unless
        global."""
        import numpy as np

        deleted = np.zeros(len(hashes), dtype=bool)
        self._mark(deleted, keys, hashes, sequence_numbers, partitions, 0)
        return deleted

    def _mark(
        self,
        deleted: npt.NDArray[np.bool_],
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        sequence_numbers: npt.NDArray[np.int64],
        partitions: npt.NDArray[np.int32],
        offset: int,
    ) -> None:
        """Set ``deleted[offset + row]`` for the rows of this slice of the probe that a delete row deletes."""
        import numpy as np
        import pyarrow as pa

        low, count = self.hashes.bounds(hashes)
        total = int(count.sum())
        if total > self.MAX_CANDIDATES and len(hashes) > 1:  # keys repeated in many partitions: halves
            half = len(hashes) // 2
            for part in (slice(0, half), slice(half, None)):
                self._mark(
                    deleted,
                    [k[part] for k in keys],
                    hashes[part],
                    sequence_numbers[part],
                    partitions[part],
                    offset + (part.start or 0),
                )
            return
        rows = np.flatnonzero(count)
        if not len(rows):
            return
        counts, at = count[rows], low[rows]
        if total > len(rows):  # a hash several mapped rows have: one candidate each
            rows = np.repeat(rows, counts)
            at = np.repeat(at, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        order = np.argsort(at, kind="stable")
        rows, at = rows[order], at[order]
        chunk = np.searchsorted(self._starts, at, side="right") - 1
        possible = self._possible(at, chunk, sequence_numbers[rows], partitions[rows])
        rows, at, chunk = rows[possible], at[possible], chunk[possible]
        if not len(rows):
            return
        # The candidates' keys are read chunk by chunk of the file (a take across chunks would concatenate
        # them), then compared at once: a probe of 10M delete rows visits about 150 chunks.
        taken: list[list[pa.Array]] = [[] for _ in keys]
        for start, end in _runs(chunk):
            number = int(chunk[start])
            local = at[start:end] - self._starts[number]
            for column_taken, column, layout in zip(
                taken, self._chunks[number].columns, self._layouts[number], strict=True
            ):
                column_taken.append(self._values(number, column, layout, local))
        probe_rows = pa.array(rows)
        equal = np.ones(len(rows), dtype=bool)
        for probe, column_taken in zip(keys, taken, strict=True):
            equal &= equal_null_safe(probe.take(probe_rows), pa.concat_arrays(column_taken))
        deleted[offset + rows[equal]] = True

    def _values(
        self, number: int, column: pa.Array, layout: _Layout | None, rows: npt.NDArray[np.int64]
    ) -> pa.Array:
        """The values of ``column`` (of chunk ``number``) at ``rows``: read from the file where its layout
        says, or, for a type without one, taken from the mapping and the chunk's pages dropped (the kernel
        maps up to a folio around each page a take faults in: dropped a chunk at a time, the mapping holds
        about one chunk, but each drop stops both cores)."""
        import pyarrow as pa

        if layout is not None:
            return _gather(self._fds[0], layout, rows)
        taken = column.take(pa.array(rows))
        self._drop(self._keys_map, self._spans[number])
        return taken

    def _possible(
        self,
        at: npt.NDArray[np.intp],
        chunk: npt.NDArray[np.intp],
        sequence_numbers: npt.NDArray[np.int64],
        partitions: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.bool_]:
        """Which mapped rows ``at`` (of chunks ``chunk``) are newer than the data rows they are candidates
        for and, unless global, of their partition: by their chunk's summary where it decides, else by
        the rows' own fields."""
        summary = self._chunk_rows[chunk]
        yes = summary["oldest"] > sequence_numbers
        no = summary["newest"] <= sequence_numbers
        if not self._global:
            yes &= (summary["low"] == partitions) & (summary["high"] == partitions)
            no |= (partitions < summary["low"]) | (partitions > summary["high"])
        unsure = ~(yes | no)
        if unsure.any():
            seqs, parts = self._row_fields(at[unsure])
            possible = seqs > sequence_numbers[unsure]
            if not self._global:
                possible &= parts == partitions[unsure]
            yes[unsure] = possible
        return yes

    def _row_fields(self, at: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """The sequence numbers and partition ids of the mapped rows ``at``, read from the rows
        file one record each (reading them through a mapping held up to a folio around each, and dropping
        those pages stopped both cores each time)."""
        import numpy as np

        dtype = np.dtype(_ROW_DTYPE)
        size, fd = dtype.itemsize, self._fds[1]
        records = np.frombuffer(_read_all(fd, [(int(r) * size, size) for r in at.tolist()]), dtype=dtype)
        return records["seq"].astype(np.int64), records["part"].astype(np.int32)

    def _drop(self, mapped: mmap.mmap, span: tuple[int, int]) -> None:
        """Drop the pages of ``span`` (start, end) of ``mapped`` from the process."""
        with self._lock:
            if not mapped.closed and span[1] > span[0]:
                mapped.madvise(mmap.MADV_DONTNEED, span[0], span[1] - span[0])

    def close(self) -> None:
        """Close and unmap the files (views still alive elsewhere keep a mapping until they go)."""
        self._chunks = []
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for mapped in self._maps:
            with contextlib.suppress(BufferError):  # an array still views it: unmapped when that goes
                mapped.close()


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where one column of one chunk of the keys file lies in the file: its values' storage type, the file
    offsets of its validity bitmap (``None``: no nulls), of its value offsets (``None``: fixed width,
    ``width`` bytes a value; else ``width`` is the bytes of an offset) and of its values; for binary-like
    values all of one length, where the first starts in the values and that length."""

    type: pa.DataType
    validity: int | None
    offsets: int | None
    data: int
    width: int
    one_length: tuple[int, int] | None = None

    @classmethod
    def of(cls, column: pa.Array, base: int, size: int) -> _Layout | None:
        """The layout of ``column``, its buffers in a mapping of ``size`` bytes at ``base``; ``None`` for a
        type without one (neither binary-like nor of a fixed whole number of bytes), a sliced array, or
        a buffer outside the mapping."""
        import pyarrow as pa

        storage = storage_of(column)
        kind = storage.type
        buffers = storage.buffers()
        if storage.offset or not buffers or buffers[-1] is None:
            return None
        if any(b is not None and b.size and not base <= b.address <= base + size - b.size for b in buffers):
            return None
        validity = buffers[0].address - base if buffers[0] is not None and storage.null_count else None
        if pa.types.is_binary(kind) or pa.types.is_string(kind):
            return cls(kind, validity, buffers[1].address - base, buffers[2].address - base, 4)
        if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
            return cls(kind, validity, buffers[1].address - base, buffers[2].address - base, 8)
        fixed = (
            pa.types.is_integer(kind)
            or pa.types.is_temporal(kind)
            or pa.types.is_decimal(kind)
            or pa.types.is_fixed_size_binary(kind)
        )
        if not fixed or len(buffers) != 2 or kind.bit_width % 8:
            return None
        return cls(kind, validity, None, buffers[1].address - base, kind.bit_width // 8)


def _of_one_length(fd: int, layout: _Layout | None, rows: int) -> _Layout | None:
    """``layout`` with where its values start and their length when it places binary-like values, none
    null, all of one length (keys such as UUIDs and fixed-width codes): then a candidate's value is read
    at once, not its offsets first. The offsets are read from the file, a chunk's at once."""
    import numpy as np

    if layout is None or layout.offsets is None or layout.validity is not None or not rows:
        return layout
    offsets = np.empty(rows + 1, dtype=np.int32 if layout.width == 4 else np.int64)
    _read_into(fd, offsets, layout.offsets)
    lengths = np.diff(offsets)
    if not (lengths == lengths[0]).all():
        return layout
    return dataclasses.replace(layout, one_length=(int(offsets[0]), int(lengths[0])))


def _gather(fd: int, layout: _Layout, rows: npt.NDArray[np.int64]) -> pa.Array:
    """The values at ``rows`` (ascending) of the column ``layout`` places in the file ``fd``, read one value
    (and for binary-like values, one pair of offsets) at a time."""
    import numpy as np
    import pyarrow as pa

    n = len(rows)
    at = rows.tolist()
    validity, null_count = None, 0
    if layout.validity is not None:
        start = layout.validity
        bits = np.frombuffer(_read_all(fd, [(start + r // 8, 1) for r in at]), dtype=np.uint8)
        valid = ((bits >> (rows & 7).astype(np.uint8)) & 1).astype(bool)
        validity, null_count = pa.py_buffer(np.packbits(valid, bitorder="little")), n - int(valid.sum())
    width = layout.width
    if layout.offsets is None:
        values = _read_all(fd, [(layout.data + r * width, width) for r in at])
        return pa.Array.from_buffers(layout.type, n, [validity, pa.py_buffer(values)], null_count)
    dtype = np.int32 if width == 4 else np.int64
    if layout.one_length is not None:  # no offsets to read: each value is where its row says
        first, length = layout.one_length
        data = _read_all(fd, [(layout.data + first + r * length, length) for r in at])
        offsets = np.arange(n + 1, dtype=dtype) * length
        return pa.Array.from_buffers(
            layout.type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
        )
    pairs = np.frombuffer(
        _read_all(fd, [(layout.offsets + r * width, 2 * width) for r in at]), dtype=dtype
    ).astype(np.int64)
    starts, lengths = pairs[0::2], pairs[1::2] - pairs[0::2]
    data = _read_all(
        fd, [(layout.data + s, ln) for s, ln in zip(starts.tolist(), lengths.tolist(), strict=True)]
    )
    offsets = np.zeros(n + 1, dtype=dtype)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        layout.type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
    )


def _read_all(fd: int, spans: list[tuple[int, int]]) -> bytes:
    """The bytes of ``spans`` (file offset, length) of ``fd``, one after another; a short read (a file
    cut while mapped) raises."""
    pread = os.pread
    read = b"".join([pread(fd, length, offset) for offset, length in spans if length])
    if len(read) != sum(length for _, length in spans):
        raise ValueError(_SHORT_READ)
    return read


def map_delete_keys(
    batches: Iterable[pa.RecordBatch],
    names: Sequence[str],
    *,
    rows: int,
    row_bytes: float,
    is_global: bool,
    directory: str,
    bucket_bytes: int,
    seq_column: str,
    part_column: str,
    hold_hashes: bool = True,
    bitmap_bytes: int = HashSet.BITMAP_BYTES,
) -> MappedDeleteKeys | None:
    """Write the delete rows of ``batches`` (key columns ``names``, a sequence number and a partition id
    column) to ``directory`` in key-hash order, deduplicated, and map them; ``None`` when there are none.
    Their sorted key hashes are held in memory, or, without ``hold_hashes``, written and mapped too.

    :param rows: about how many rows ``batches`` hold (the delete files' record counts).
    :param row_bytes: about the Arrow bytes of a row: with ``rows``, how many hash ranges to split into.
    :param bucket_bytes: about the most bytes of one hash range, held in memory while it is sorted.
    :param bitmap_bytes: the size of the hash set's bitmap (:func:`mapped_bitmap_bytes`).
    """
    import numpy as np
    import pyarrow as pa

    os.makedirs(directory, exist_ok=True)
    ranges = max(1, min(_MAX_RANGES, -(-int(rows * row_bytes * 1.25) // max(1, bucket_bytes))))
    batch_bytes = max(_MIN_STAGED_BATCH_BYTES, bucket_bytes // 4 // ranges)
    stagers = [
        StagedArrow(os.path.join(directory, f"range-{r:03d}.arrows"), batch_bytes) for r in range(ranges)
    ]
    keys_path = os.path.join(directory, "keys.arrow")
    rows_path = os.path.join(directory, "rows.bin")
    hashes_path = os.path.join(directory, "hashes.bin")
    hashes: list[npt.NDArray[np.uint32]] = []
    try:
        for batch in batches:
            hashed = key_hashes([batch.column(n) for n in names])
            batch = pa.RecordBatch.from_arrays(
                [
                    *(batch.column(n) for n in names),
                    batch.column(seq_column),
                    batch.column(part_column),
                    pa.array(hashed, type=pa.uint32()),
                ],
                names=[*names, seq_column, part_column, _HASH],
            )
            which = _range_of(hashed, ranges)
            order = np.argsort(which, kind="stable")
            values, starts = np.unique(which[order], return_index=True)
            for value, start, end in zip(values, starts, [*starts[1:], len(order)], strict=True):
                # a copy, not a slice: a stager keeps what it is given until its batch fills
                stagers[int(value)].write(batch.take(pa.array(order[start:end])))
        written = [stager.close() for stager in stagers]
        if not any(written):
            return None
        schema: pa.Schema | None = None
        writer = None
        with (
            open(rows_path, "wb") as rows_out,
            contextlib.nullcontext() if hold_hashes else open(hashes_path, "wb") as hashes_out,
        ):
            for stager, has_rows in zip(stagers, written, strict=True):
                if not has_rows:
                    continue
                sorted_keys, sorted_hashes, parts, seqs = _sorted_range(
                    stager.batches(), names, seq_column, part_column, is_global=is_global
                )
                stager.remove()
                chunk = pa.RecordBatch.from_arrays(list(sorted_keys), names=list(names))
                if writer is None:
                    schema = chunk.schema
                    writer = pa.ipc.new_file(keys_path, schema)
                writer.write_batch(chunk)
                record = np.empty(len(seqs), dtype=np.dtype(_ROW_DTYPE))
                record["seq"], record["part"] = seqs, parts
                record.tofile(rows_out)
                if hold_hashes:
                    hashes.append(sorted_hashes)
                else:
                    assert hashes_out is not None
                    sorted_hashes.astype(np.uint32).tofile(hashes_out)
                del chunk, sorted_keys
        assert writer is not None
        writer.close()
    finally:
        for stager in stagers:
            stager.remove()
    held = np.concatenate(hashes) if hold_hashes else hashes_path
    return MappedDeleteKeys(keys_path, rows_path, held, is_global=is_global, bitmap_bytes=bitmap_bytes)


@contextlib.contextmanager
def sorted_hash_set(unsorted: str, *, bitmap_bytes: int, sort_bytes: int) -> Iterator[HashSet]:
    """The key hashes written to ``unsorted`` (native ``uint32``, in any order, repeats allowed) as a
    :class:`MappedHashSet`: sorted on disk beside it, a range of hash values at a time (each about
    ``sort_bytes`` in memory), then mapped. Every file, ``unsorted`` included, is removed on exit.

    A range holds its chunks' distinct hashes only, so keys repeated across many delete rows do not
    make one range larger than the others.
    """
    import numpy as np

    count = os.path.getsize(unsorted) // HASH_BYTES
    ranges = max(1, min(_MAX_RANGES, -(-count * HASH_BYTES // max(1, sort_bytes))))
    chunk = max(1, sort_bytes // HASH_BYTES)
    parts = [f"{unsorted}.range-{r:03d}" for r in range(ranges)]
    ordered = f"{unsorted}.sorted"
    mapped: mmap.mmap | None = None
    lock = threading.Lock()

    def drop(span: tuple[int, int]) -> None:
        with lock:
            if mapped is not None and not mapped.closed and span[1] > span[0]:
                mapped.madvise(mmap.MADV_DONTNEED, span[0], span[1] - span[0])

    try:
        for start in range(0, count, chunk):
            values = np.unique(np.fromfile(unsorted, dtype=np.uint32, count=chunk, offset=start * HASH_BYTES))
            cuts = np.searchsorted(_range_of(values, ranges), np.arange(1, ranges))
            for part, piece in zip(parts, np.split(values, cuts), strict=True):
                if len(piece):
                    with open(part, "ab") as out:
                        piece.tofile(out)
        os.remove(unsorted)
        with open(ordered, "wb") as out:
            for part in parts:
                if os.path.exists(part):
                    np.unique(np.fromfile(part, dtype=np.uint32)).tofile(out)
                    os.remove(part)
        if not os.path.getsize(ordered):  # nothing to map
            yield HashSet(np.empty(0, dtype=np.uint32))
            return
        with open(ordered, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            hashes = MappedHashSet(mapped, drop, f.fileno(), bitmap_bytes=bitmap_bytes)
            try:
                yield hashes
            finally:
                del hashes
                with lock, contextlib.suppress(BufferError):  # a view still alive: unmapped when it goes
                    mapped.close()
    finally:
        for path in (unsorted, ordered, *parts):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def _runs(values: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Where each run of equal consecutive ``values`` starts and stops.

    >>> import numpy as np
    >>> list(_runs(np.array([4, 4, 7, 9, 9, 9]))), list(_runs(np.array([], dtype=np.int64)))
    ([(0, 2), (2, 3), (3, 6)], [])
    """
    import numpy as np

    if not len(values):
        return
    cuts = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), len(values)]
    yield from itertools.pairwise(cuts)


def _span(chunk: pa.RecordBatch, base: int, size: int) -> tuple[int, int]:
    """The pages of a mapping of ``size`` bytes at ``base`` that ``chunk``'s buffers lie in: start, end."""
    starts, ends = [], []
    for column in chunk.columns:
        for buffer in column.buffers():
            if buffer is not None and buffer.size:
                starts.append(buffer.address - base)
                ends.append(buffer.address - base + buffer.size)
    if not starts:
        return 0, 0
    page = mmap.PAGESIZE
    return min(starts) // page * page, min(size, -(-max(ends) // page) * page)


def _range_of(hashes: npt.NDArray[np.uint32], ranges: int) -> npt.NDArray[np.int64]:
    """The hash range (0 .. ``ranges`` - 1) of each hash: ranges in ascending hash order."""
    import numpy as np

    return ((hashes.astype(np.uint64) * np.uint64(ranges)) >> np.uint64(32)).astype(np.int64)


def _sorted_range(
    batches: Iterator[pa.RecordBatch],
    names: Sequence[str],
    seq_column: str,
    part_column: str,
    *,
    is_global: bool,
) -> tuple[list[pa.Array], npt.NDArray[np.uint32], npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """The staged delete rows of one hash range, deduplicated and sorted by hash and partition id."""
    import numpy as np
    import pyarrow as pa

    table = pa.Table.from_batches(list(batches)).combine_chunks()
    held = DeleteKeys(
        [table.column(n).combine_chunks() for n in names],
        table.column(_HASH).to_numpy().astype(np.uint32),
        table.column(seq_column).to_numpy().astype(np.int64),
        table.column(part_column).to_numpy().astype(np.int32),
        is_global=is_global,
    )
    del table
    return held.sorted_rows()


def remove_mapped(directory: str) -> None:
    """Remove what :func:`map_delete_keys` wrote under ``directory``."""
    shutil.rmtree(directory, ignore_errors=True)
