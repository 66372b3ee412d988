"""Exact, null-safe matching of equality delete keys in memory, without DataFusion.

Equality deletes name keys; a data row is deleted when a delete row has the same key (null equal to
null), a higher sequence number and, unless the delete is global, the same partition (spec 6.2). The
keys of both sides are hashed alike (:func:`key_hashes`): strings and binaries from their bytes, in
NumPy; other types by the Iceberg bucket transform (PyIceberg's Rust core, murmur3 of each value's
spec-defined bytes, so an ``int`` and a ``long`` of one value hash alike); combined over the key columns.
A set of delete rows (:class:`DeleteKeys`), sorted by that hash, is probed by a batch of data
rows: a row whose hash no delete row has is not deleted; the others are compared to the delete rows of
their hash, every key column exactly and null-safely. So a hash collision costs a comparison, never a
wrong delete.

Only the key types the bucket transform takes are hashed (:func:`hashable`): whole numbers, decimals,
dates, times, timestamps, strings, UUIDs, fixed and binary. Float, double and boolean keys go the way of
:mod:`.matches`' spilling join, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.types import NestedField

__all__ = [
    "HASH_BYTES",
    "DeleteKeys",
    "HashSet",
    "KeySet",
    "bucket_of",
    "equal_null_safe",
    "hashable",
    "in_sorted",
    "key_hashes",
    "searched",
    "searched_bounds",
]

#: bytes one key's hash costs in memory
HASH_BYTES = 4
#: the bucket transform's largest bucket count: hashes 0 .. 2**31 - 2
_MODULUS = 2**31 - 1
#: a NULL value's word in :func:`key_hashes`, before the columns' words are combined and mixed
_NULL_HASH = 0xFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15


def hashable(key_fields: Sequence[NestedField]) -> bool:
    """Whether every key field has a type the bucket transform hashes (no float, double or boolean)."""
    from pyiceberg import types as t

    types = (
        t.BinaryType,
        t.DateType,
        t.DecimalType,
        t.FixedType,
        t.IntegerType,
        t.LongType,
        t.StringType,
        t.TimestampNanoType,
        t.TimestampType,
        t.TimestamptzNanoType,
        t.TimestamptzType,
        t.TimeType,
        t.UUIDType,
    )
    return bool(key_fields) and all(isinstance(f.field_type, types) for f in key_fields)


def storage_of(array: pa.Array) -> pa.Array:
    """The storage of an extension array (a UUID is 16 fixed bytes), the array itself otherwise."""
    import pyarrow as pa

    return array.storage if isinstance(array.type, pa.BaseExtensionType) else array


def key_hashes(columns: Sequence[pa.Array]) -> npt.NDArray[np.uint32]:
    """One 32-bit hash per row of the key ``columns`` (equal keys, nulls included, hash alike), over all
    32 bits: a bitmap or range keyed by a hash's top bits uses all of them.

    >>> import pyarrow as pa
    >>> a = key_hashes([pa.array(["x", None, "x"]), pa.array([1, 2, 1])])
    >>> bool(a[0] == a[2]), bool(a[0] == a[1])
    (True, False)
    """
    import numpy as np

    if not len(columns[0]):
        return np.empty(0, dtype=np.uint32)
    combined: npt.NDArray[np.uint64] | None = None
    for column in columns:
        word = _column_hashes(column)
        combined = word if combined is None else (combined * np.uint64(_GOLDEN)) ^ word
    assert combined is not None
    mixed = (combined ^ (combined >> np.uint64(31))) * np.uint64(_GOLDEN)
    result: npt.NDArray[np.uint32] = (mixed >> np.uint64(32)).astype(np.uint32)
    return result


def _column_hashes(column: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit word per value of ``column``, alike for equal values (NULL: :data:`_NULL_HASH`).

    Strings and binaries (UUIDs and fixed too) are hashed from their bytes (:func:`_bytes_hashes`), the
    other types by the bucket transform, which hashes equal values of different widths alike (an int as a
    long). The bucket transform holds the GIL and hashes about 430 MB of strings a second: at 200M data
    rows it was most of the matching thread's time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg_core.transform import bucket

    storage = storage_of(column)
    kind = storage.type
    if pa.types.is_dictionary(kind):  # hashed as its values, so as the same values not encoded
        storage = storage_of(storage.dictionary_decode())
        kind = storage.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        storage = storage.cast(pa.large_binary())
        kind = storage.type
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        return _bytes_hashes(storage)
    hashed = pc.fill_null(bucket(storage, _MODULUS), -1)
    # -1 (NULL) becomes 2**32 - 1, above every hash the transform gives
    word: npt.NDArray[np.uint64] = hashed.to_numpy(zero_copy_only=False).astype(np.int64).astype(np.uint64)
    word &= np.uint64(_NULL_HASH)
    return word


#: the low ``n`` bytes of a little-endian word, for ``n`` from 0 to 8
_BYTE_MASKS = tuple((1 << (8 * n)) - 1 for n in range(9))


def _bytes_hashes(array: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each value's bytes (a string, binary or fixed-width binary array; NULL:
    :data:`_NULL_HASH`), whatever the array's offsets' width, slice or neighbours.

    Eight bytes at a time, for every value at once, in NumPy (which lets other threads run): a round
    mixes each value's next word (:func:`_words`) into its hash, and leaves the hash of a value already
    done as it is."""
    import numpy as np
    import pyarrow as pa

    n = len(array)
    buffers = array.buffers()
    if pa.types.is_fixed_size_binary(array.type):
        width = array.type.byte_width
        starts = (np.arange(n, dtype=np.int64) + array.offset) * width
        lengths = np.full(n, width, dtype=np.int64)
        data_buffer = buffers[1]
    else:
        offset_type = (
            np.int64
            if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
            else np.int32
        )
        offsets = np.frombuffer(buffers[1], dtype=offset_type)[array.offset : array.offset + n + 1].astype(
            np.int64
        )
        starts, lengths = offsets[:-1], np.diff(offsets)
        data_buffer = buffers[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    # Three arrays of a word a value, whatever the values' length: each round mixes into them in place.
    hashes = lengths.astype(np.uint64)
    hashes *= np.uint64(_GOLDEN)
    mixed, shifted = np.empty_like(hashes), np.empty_like(hashes)
    for done, word in _words(data, starts, lengths):
        np.bitwise_xor(hashes, word, out=mixed)
        mixed *= np.uint64(_GOLDEN)
        np.right_shift(mixed, np.uint64(29), out=shifted)
        mixed ^= shifted
        if done is None:
            hashes, mixed = mixed, hashes
        else:
            np.copyto(hashes, mixed, where=lengths > done)
    np.right_shift(hashes, np.uint64(32), out=shifted)
    hashes ^= shifted
    if array.null_count:
        hashes[~array.is_valid().to_numpy(zero_copy_only=False)] = np.uint64(_NULL_HASH)
    return hashes


def _words(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> Iterator[tuple[int | None, npt.NDArray[np.uint64]]]:
    """The values' little-endian words, a word of each value at a time, its bytes past the value's end
    zero: each with the byte it starts at, or ``None`` when every value has bytes in it.

    Values of one length (8 bytes or more) lie one after another: each word of theirs is a view of the
    data, every length bytes, and their last, partial word the one that ends with them, shifted. Other
    values' words are read eight bytes from any byte of a padded copy of the data (an unaligned gather,
    slower)."""
    import numpy as np

    n = len(starts)
    shortest, longest = (int(lengths.min()), int(lengths.max())) if n else (0, 0)
    if n and shortest == longest >= 8:
        first = int(starts[0])

        def every_value(at: int) -> npt.NDArray[np.uint64]:  # the word ``at`` bytes into each value
            return np.ndarray((n,), dtype="<u8", buffer=data, offset=first + at, strides=(longest,))

        for done in range(0, longest - 7, 8):
            yield None, every_value(done)
        if longest % 8:
            yield None, every_value(longest - 8) >> np.uint64(8 * (8 - longest % 8))
        return
    padded = np.zeros(len(data) + 8, dtype=np.uint8)  # so that the last value's last word reads whole
    padded[: len(data)] = data
    words = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    masks = np.array(_BYTE_MASKS, dtype=np.uint64)
    last = len(words) - 1
    for done in range(0, longest, 8):
        if done + 8 <= shortest:  # a whole word of every value
            yield None, words[starts + done]
        else:  # some values end within this word, or before it: their bytes only (none once done)
            word = words[np.minimum(starts + done, last)] & masks[np.clip(lengths - done, 0, 8)]
            yield (None if done < shortest else done), word


def bucket_of(hashes: npt.NDArray[np.uint32], buckets: int) -> npt.NDArray[np.int64]:
    """The bucket (0 .. ``buckets`` - 1) of each hash: other bits than those a sorted search uses."""
    import numpy as np

    mixed = (hashes.astype(np.uint64) * np.uint64(_GOLDEN)) >> np.uint64(33)
    return (mixed % np.uint64(buckets)).astype(np.int64)


def in_sorted(values: npt.NDArray[Any], sorted_unique: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Which ``values`` are among ``sorted_unique``."""
    import numpy as np

    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(searched(sorted_unique, values), len(sorted_unique) - 1)
    found: npt.NDArray[np.bool_] = sorted_unique[at] == values
    return found


def searched(
    ordered: npt.NDArray[Any], values: npt.NDArray[Any], side: Literal["left", "right"] = "left"
) -> npt.NDArray[np.intp]:
    """``np.searchsorted(ordered, values, side)``, the values searched in their own order: searched as they
    come, each search misses the CPU's caches once ``ordered`` outgrows them (10M hashes: 860 ns a value
    against 110 sorted first, the sort included; 1M: 180 against 95; 100K: 95 against 70).

    >>> import numpy as np
    >>> searched(np.array([10, 20, 30]), np.array([25, 5, 30])).tolist()
    [2, 0, 2]
    >>> searched(np.array([10, 20, 30]), np.array([25, 5, 30]), "right").tolist()
    [2, 0, 3]
    """
    import numpy as np

    order = np.argsort(values)
    found = np.empty(len(values), dtype=np.intp)
    found[order] = np.searchsorted(ordered, values[order], side=side)
    return found


def searched_bounds(
    ordered: npt.NDArray[Any], values: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Where each of ``values`` starts in ``ordered`` and how many times it is there (as :func:`searched`,
    one sort of the values for both searches)."""
    import numpy as np

    order = np.argsort(values)
    ordered_values = values[order]
    low = np.empty(len(values), dtype=np.intp)
    count = np.empty(len(values), dtype=np.intp)
    low[order] = np.searchsorted(ordered, ordered_values, side="left")
    count[order] = np.searchsorted(ordered, ordered_values, side="right")
    count -= low
    return low, count


class HashSet:
    """A set of key hashes: which hashes of a batch are in it.

    A bitmap of the hashes' top bits (4 MiB: 25 bits, unless told otherwise) answers first; only the
    hashes it lets through are looked up in the sorted hashes (a search per row cost more than reading
    and hashing the keys).

    :param bitmap_bytes: the bitmap's size, a power of two from 1 byte to 512 MiB (2**32 bits).
    """

    #: bytes of the bitmap by default, whatever the number of hashes
    BITMAP_BYTES = 1 << 22
    _BUILD_CHUNK = 1 << 18

    def __init__(
        self, hashes: npt.NDArray[np.uint32], *, presorted: bool = False, bitmap_bytes: int = BITMAP_BYTES
    ) -> None:
        import numpy as np

        bits = (bitmap_bytes * 8).bit_length() - 1
        if bitmap_bytes < 1 or 1 << bits != bitmap_bytes * 8 or bits > 32:
            raise ValueError(f"a hash set's bitmap is a power of two bytes up to 512 MiB, not {bitmap_bytes}")
        self._shift = 32 - bits  # the slot of a hash: its top ``bits`` bits
        #: ``presorted``: ``hashes`` are in ascending order already (repeats allowed) and kept as they are
        self._sorted = hashes if presorted else np.unique(hashes)
        self._bits = np.zeros(bitmap_bytes, dtype=np.uint8)
        for start in range(0, len(self._sorted), self._BUILD_CHUNK):  # temporaries of 8 bytes a hash
            slots = (self._sorted[start : start + self._BUILD_CHUNK] >> np.uint32(self._shift)).astype(
                np.int64
            )
            np.bitwise_or.at(self._bits, slots >> 3, (1 << (slots & 7)).astype(np.uint8))
            self._read(start, min(len(self._sorted), start + self._BUILD_CHUNK))

    def __len__(self) -> int:
        return len(self._sorted)

    @property
    def sorted(self) -> npt.NDArray[np.uint32]:
        """The hashes in ascending order."""
        return self._sorted

    def contains(self, hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
        """Which of ``hashes`` are in the set."""
        import numpy as np

        slots = (hashes >> np.uint32(self._shift)).astype(np.int64)
        found: npt.NDArray[np.bool_] = ((self._bits[slots >> 3] >> (slots & 7).astype(np.uint8)) & 1).astype(
            bool
        )
        maybe = np.flatnonzero(found)
        if len(maybe):
            found[maybe] = self._among(hashes[maybe])
        return found

    def _read(self, start: int, stop: int) -> None:
        """Called once the sorted hashes ``start`` to ``stop`` are read into the bitmap."""

    def bounds(self, hashes: npt.NDArray[np.uint32]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Where each of ``hashes`` starts in :attr:`sorted` and how many times it is there."""
        return searched_bounds(self._sorted, hashes)

    def _among(self, hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
        """Which of ``hashes`` (those the bitmap lets through) are in the set."""
        return in_sorted(hashes, self._sorted)


def _slots(hashes: npt.NDArray[np.uint32], partitions: npt.NDArray[np.int32]) -> npt.NDArray[np.uint64]:
    """One 64-bit word of hash and partition id per row (partition ids are small and not negative)."""
    import numpy as np

    words: npt.NDArray[np.uint64] = (hashes.astype(np.uint64) << np.uint64(32)) | partitions.astype(np.uint64)
    return words


def equal_null_safe(left: pa.Array, right: pa.Array) -> npt.NDArray[np.bool_]:
    """Null-safe equality of two arrays of one type, row by row (NULL equals NULL)."""
    import pyarrow.compute as pc

    left, right = storage_of(left), storage_of(right)
    equal = pc.fill_null(pc.equal(left, right), False)
    if left.null_count or right.null_count:
        equal = pc.or_(equal, pc.and_(pc.is_null(left), pc.is_null(right)))
    result: npt.NDArray[np.bool_] = equal.to_numpy(zero_copy_only=False)
    return result


class KeySet:
    """Rows of keys held in memory, sorted by key hash and a partition id: every exact pair with a batch of
    probe rows. Keys are compared column by column, null-safely (NULL equals NULL), never by hash alone;
    a caller whose rule is SQL's ``=`` leaves rows with a NULL key out of both sides.

    :param keys: the rows' key columns (one array per key field, all of one length).
    :param hashes: :func:`key_hashes` of ``keys``.
    :param partitions: each row's partition id; ``None``: the pairs ignore partitions.
    """

    #: most candidate pairs (probe row, row of the same hash) compared at once; a probe batch whose
    #: keys repeat more than that in the set is matched in halves
    MAX_CANDIDATES = 1 << 21

    def __init__(
        self,
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        partitions: npt.NDArray[np.int32] | None = None,
    ) -> None:
        import numpy as np
        import pyarrow as pa

        self._partitioned = partitions is not None
        parts = partitions if partitions is not None else np.zeros(len(hashes), dtype=np.int32)
        order = np.lexsort((parts, hashes))
        #: the rows as given, in the set's order
        self.order = order
        self._slots = _slots(hashes[order], parts[order])
        if np.array_equal(order, np.arange(len(order))):
            self._keys = list(keys)
        else:
            indices = pa.array(order)
            self._keys = [column.take(indices) for column in keys]

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def slots(self) -> npt.NDArray[np.uint64]:
        """Each row's hash (high 32 bits) and partition id (low 32 bits), in the set's order."""
        return self._slots

    @property
    def keys(self) -> list[pa.Array]:
        """The key columns, in the set's order."""
        return self._keys

    def pairs(
        self,
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        partitions: npt.NDArray[np.int32] | None = None,
        where: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.bool_]] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Every ``(probe row, row of the set)`` whose keys are equal (and partitions, when the set has
        them), in probe row order; ``where(probe rows, set rows)`` first rules out candidates cheaply.
        Set rows are numbered as given to the constructor."""
        import numpy as np
        import pyarrow as pa

        empty = np.empty(0, dtype=np.int64)
        if not len(self._slots) or not len(hashes):
            return empty, empty
        parts = (
            partitions if self._partitioned and partitions is not None else np.zeros(len(hashes), np.int32)
        )
        slots = _slots(hashes, parts)
        low, count = searched_bounds(self._slots, slots)
        total = int(count.sum())
        if total > self.MAX_CANDIDATES and len(hashes) > 1:
            half = len(hashes) // 2
            ends = (slice(0, half), slice(half, None))
            first, second = (
                self.pairs(
                    [k[end] for k in keys],
                    hashes[end],
                    None if partitions is None else partitions[end],
                    None if where is None else _shifted(where, end.start),
                )
                for end in ends
            )
            return np.concatenate([first[0], second[0] + half]), np.concatenate([first[1], second[1]])
        rows = np.flatnonzero(count)
        if not len(rows):
            return empty, empty
        counts = count[rows]
        at = low[rows]
        if total > len(rows):  # a hash shared by several rows of the set: one candidate each
            rows = np.repeat(rows, counts)
            at = np.repeat(at, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        found = self.order[at]
        if where is not None:
            possible = where(rows, found)
            rows, at, found = rows[possible], at[possible], found[possible]
        if not len(rows):
            return empty, empty
        equal = np.ones(len(rows), dtype=bool)
        probe_rows, set_rows = pa.array(rows), pa.array(at)
        for probe, held in zip(keys, self._keys, strict=True):
            equal &= equal_null_safe(probe.take(probe_rows), held.take(set_rows))
        return rows[equal].astype(np.int64), found[equal].astype(np.int64)


def _shifted(
    where: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.bool_]], offset: int
) -> Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.bool_]]:
    """``where`` for a slice of the probe batch that starts at ``offset``."""
    return lambda rows, held: where(rows + offset, held)


class DeleteKeys:
    """Delete rows held in memory as a :class:`KeySet`: which data rows they delete.

    Rows with the same key and partition are kept once, with their highest sequence number (a data row
    is deleted by any of them exactly when it is by the highest).

    :param keys: the delete rows' key columns (one array per key field, all of one length).
    :param hashes: :func:`key_hashes` of ``keys``.
    :param sequence_numbers: each delete row's data sequence number.
    :param partitions: each delete row's partition id (ignored when ``is_global``).
    :param is_global: the deletes apply whatever the data row's partition.
    """

    def __init__(
        self,
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        sequence_numbers: npt.NDArray[np.int64],
        partitions: npt.NDArray[np.int32],
        *,
        is_global: bool,
    ) -> None:
        import numpy as np
        import pyarrow as pa

        self._global = is_global
        parts = np.zeros(len(hashes), dtype=np.int32) if is_global else partitions
        order = np.lexsort((parts, hashes))
        hashes, parts, seqs = hashes[order], parts[order], sequence_numbers[order]
        indices = pa.array(order)
        columns = [column.take(indices) for column in keys]
        repeat = np.zeros(len(hashes), dtype=bool)
        if len(hashes) > 1:
            same = np.flatnonzero((hashes[1:] == hashes[:-1]) & (parts[1:] == parts[:-1])) + 1
            if len(same):
                here, before = pa.array(same), pa.array(same - 1)
                equal = np.ones(len(same), dtype=bool)
                for column in columns:
                    equal &= equal_null_safe(column.take(here), column.take(before))
                repeat[same[equal]] = True
        if repeat.any():
            firsts = np.flatnonzero(~repeat)
            seqs = np.maximum.reduceat(seqs, firsts)
            hashes, parts = hashes[firsts], parts[firsts]
            kept = pa.array(firsts)
            columns = [column.take(kept) for column in columns]
        # Already in the set's order: the set keeps the columns as they are.
        self._set = KeySet(columns, hashes, None if is_global else parts)
        self._seqs = seqs

    def __len__(self) -> int:
        return len(self._set)

    def sorted_rows(
        self,
    ) -> tuple[list[pa.Array], npt.NDArray[np.uint32], npt.NDArray[np.int32], npt.NDArray[np.int64]]:
        """The rows kept, sorted by key hash and partition id: key columns, hashes, partition ids (zeros
        when global) and highest sequence numbers."""
        import numpy as np

        slots = self._set.slots
        hashes: npt.NDArray[np.uint32] = (slots >> np.uint64(32)).astype(np.uint32)
        parts: npt.NDArray[np.int32] = (slots & np.uint64(0xFFFFFFFF)).astype(np.int32)
        return self._set.keys, hashes, parts, self._seqs

    def deleted(
        self,
        keys: Sequence[pa.Array],
        hashes: npt.NDArray[np.uint32],
        sequence_numbers: npt.NDArray[np.int64],
        partitions: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.bool_]:
        """Which of these data rows (key columns, :func:`key_hashes`, sequence numbers, partition ids) a
        delete row deletes: same key null-safely, higher sequence number, same partition unless global.
        """
        import numpy as np

        seqs = self._seqs

        def newer(rows: npt.NDArray[np.int64], held: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            newer_delete: npt.NDArray[np.bool_] = seqs[held] > sequence_numbers[rows]
            return newer_delete

        rows, _ = self._set.pairs(keys, hashes, None if self._global else partitions, where=newer)
        deleted = np.zeros(len(hashes), dtype=bool)
        deleted[rows] = True
        return deleted
