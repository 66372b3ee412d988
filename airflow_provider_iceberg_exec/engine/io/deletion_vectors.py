"""The ``deletion-vector-v1`` blob (format v3): row positions as a framed portable 64-bit roaring bitmap.

Layout (Puffin spec, "deletion-vector-v1"; Java's ``BitmapPositionDeleteIndex``):

- 4 bytes big-endian: ``L`` = 4 + the bitmap's bytes;
- the magic ``D1 D3 39 64``;
- the bitmap: 8 bytes little-endian, the number of 32-bit bitmaps; then for each key (the high 32 bits
  of a position) in ascending order, the key as 4 bytes little-endian and the 32-bit roaring bitmap of
  the low 32 bits in the standard portable format;
- 4 bytes big-endian: the CRC-32 of the magic and the bitmap.

The blob is ``L + 8`` bytes long. What is written is what Java 1.10 writes, byte for byte: each 32-bit
bitmap is run-optimised before it is serialised, and the key array is **dense**, from 0 to the largest
key, with an empty bitmap for each key that has no position (Java's ``RoaringPositionBitmap`` keeps an
array indexed by key). Only for positions of 2^42 and more (:data:`DENSE_KEY_LIMIT`), which no real
data file has, are the keys sparse (Java would allocate a bitmap for every key below the largest).
Java and PyIceberg read dense and sparse key arrays alike; this reader does too.
Positions are >= 0 and at most Java's ``RoaringPositionBitmap.MAX_POSITION`` (key ``2^31 - 2``).
"""

from __future__ import annotations

import array
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.typedef import Record
    from pyroaring import BitMap64

    Positions = npt.NDArray[np.integer[Any]] | BitMap64

__all__ = [
    "DENSE_KEY_LIMIT",
    "DV_BLOB_TYPE",
    "DV_MAGIC",
    "MAX_POSITION",
    "ROW_POSITION_FIELD_ID",
    "DataFileDeletes",
    "decode_deletion_vector",
    "encode_deletion_vector",
    "read_deletion_vector_blob",
    "sorted_positions",
    "write_deletion_vectors",
]

DV_BLOB_TYPE = "deletion-vector-v1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
#: the largest key Java's ``RoaringPositionBitmap`` reads (its key array length must fit an int)
MAX_KEY = (1 << 31) - 2
#: Java's ``RoaringPositionBitmap.MAX_POSITION``: ``toPosition(Integer.MAX_VALUE - 1, Integer.MIN_VALUE)``
MAX_POSITION = (MAX_KEY << 32) | (1 << 31)
#: keys written densely (every key from 0, as Java): positions below 2^42, i.e. every real data file.
#: Above it Java would allocate one bitmap per key up to the largest (2^31 of them at worst); this
#: writer then writes the present keys only, which Java and PyIceberg read as well.
DENSE_KEY_LIMIT = 1024
_LOW_MASK = 0xFFFFFFFF


def sorted_positions(positions: Positions) -> npt.NDArray[np.int64]:
    """``positions`` (an integer array in any order, repeats allowed, or a pyroaring ``BitMap64``) as a
    sorted array of unique int64 positions.

    :raises ConfigurationError: for a position below 0 or above :data:`MAX_POSITION`, or a non-integer
        array.

    >>> import numpy as np
    >>> sorted_positions(np.array([7, 3, 7])).tolist()
    [3, 7]
    """
    import numpy as np
    from pyroaring import BitMap64

    if isinstance(positions, BitMap64):
        values = np.frombuffer(positions.to_array(), dtype=np.uint64)
        if len(values) and int(values[-1]) > MAX_POSITION:
            raise ConfigurationError(f"deletion vector position {int(values[-1])} is above {MAX_POSITION}")
        return values.astype(np.int64)
    values = np.asarray(positions)
    if values.dtype.kind not in "iu":
        raise ConfigurationError(f"deletion vector positions must be integers, got dtype {values.dtype}")
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    if low < 0 or high > MAX_POSITION:
        bad = low if low < 0 else high
        raise ConfigurationError(f"deletion vector position {bad} is outside 0..{MAX_POSITION}")
    return np.unique(values.astype(np.int64))


def _portable_roaring64(positions: npt.NDArray[np.int64]) -> bytes:
    """Sorted unique positions as portable 64-bit roaring, with Java's dense key array (sparse past
    :data:`DENSE_KEY_LIMIT` keys)."""
    import numpy as np
    from pyroaring import BitMap

    high = (positions >> 32).astype(np.int64)
    present = np.unique(high)
    last = int(present[-1]) if len(present) else -1
    keys = range(last + 1) if last < DENSE_KEY_LIMIT else (int(k) for k in present)
    # where each key's positions start and end in the sorted array
    parts = [struct.pack("<Q", last + 1 if last < DENSE_KEY_LIMIT else len(present))]
    low = (positions & _LOW_MASK).astype(np.uint32)
    for key in keys:
        start, end = np.searchsorted(high, [key, key + 1])
        # BitMap from an array of values: containers by cardinality (no range shortcut), as Java's set()
        bitmap = BitMap(array.array("I", low[start:end].tobytes()))
        bitmap.run_optimize()
        parts.append(struct.pack("<I", key))
        parts.append(bitmap.serialize())
    return b"".join(parts)


def encode_deletion_vector(positions: Positions) -> bytes:
    """The ``deletion-vector-v1`` blob of ``positions``, exactly as Java 1.10 writes it.

    :param positions: row positions: an integer array (any order, repeats allowed) or a ``BitMap64``.
    :raises ConfigurationError: for a position below 0 or above :data:`MAX_POSITION`.

    >>> import numpy as np
    >>> encode_deletion_vector(np.array([3, 5, 7])).hex()
    '00000026d1d339640100000000000000000000003a300000010000000000020010000000030005000700000bc16c'
    """
    body = DV_MAGIC + _portable_roaring64(sorted_positions(positions))
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def decode_deletion_vector(
    blob: bytes, what: str = "blob", *, record_count: int | None = None
) -> npt.NDArray[np.int64]:
    """Decode a ``deletion-vector-v1`` blob, checking what Java's reader checks.

    :param blob: the blob, ``content_size_in_bytes`` bytes from ``content_offset``.
    :param what: names the blob in errors (e.g. ``path@offset``).
    :param record_count: the manifest entry's ``record_count``; the bitmap's cardinality must equal it.
    :returns: the positions, sorted, as int64.
    :raises DataFileReadError: for a wrong length prefix, magic, CRC-32 or cardinality, or a malformed
        bitmap.

    >>> decode_deletion_vector(bytes.fromhex(
    ...     "00000026d1d339640100000000000000000000003a300000010000000000020010000000030005000700000bc16c"
    ... ), record_count=3).tolist()
    [3, 5, 7]
    """
    if len(blob) < 12:
        raise DataFileReadError(f"deletion vector {what} is too short ({len(blob)} bytes)")
    (length,) = struct.unpack(">I", blob[:4])
    if length != len(blob) - 8:
        raise DataFileReadError(
            f"deletion vector {what}: length {length} does not match blob size {len(blob)} (prefix + 8)"
        )
    body = blob[4 : 4 + length]
    if body[:4] != DV_MAGIC:
        raise DataFileReadError(f"deletion vector {what}: bad magic {bytes(body[:4]).hex()}")
    (crc,) = struct.unpack(">I", blob[4 + length : 8 + length])
    if zlib.crc32(body) & 0xFFFFFFFF != crc:
        raise DataFileReadError(f"deletion vector {what}: CRC-32 mismatch")
    positions = _decode_roaring64(bytes(body[4:]), what)
    if record_count is not None and len(positions) != record_count:
        raise DataFileReadError(
            f"deletion vector {what}: {len(positions)} positions but its record_count is {record_count}"
        )
    return positions


def _decode_roaring64(data: bytes, what: str) -> npt.NDArray[np.int64]:
    """The positions of a portable 64-bit roaring bitmap (dense or sparse keys)."""
    import numpy as np
    from pyroaring import BitMap64

    try:
        bitmap = BitMap64.deserialize(data)
    except (ValueError, OverflowError, IndexError) as err:  # IndexError: no bitmap bytes at all
        raise DataFileReadError(f"deletion vector {what}: truncated or malformed bitmap ({err})") from err
    positions = np.frombuffer(bitmap.to_array(), dtype=np.uint64)
    if len(positions) and int(positions[-1]) >> 32 > MAX_KEY:
        raise DataFileReadError(f"deletion vector {what}: key {int(positions[-1]) >> 32} is above {MAX_KEY}")
    return positions.astype(np.int64)


def read_deletion_vector_blob(
    io: FileIO, path: str, offset: int, size: int, *, record_count: int | None = None
) -> npt.NDArray[np.int64]:
    """Read and decode the blob at ``offset`` (``size`` bytes) of the Puffin file ``path``.

    Only the blob is read, never the whole Puffin file (which may hold the DVs of many data files).

    :raises DataFileReadError: when the file cannot be read, is shorter than ``offset + size``, or the
        blob is malformed (see :func:`decode_deletion_vector`).
    """
    what = f"{path}@{offset}"
    if offset < 0 or size < 12:
        raise DataFileReadError(f"deletion vector {what}: invalid content offset {offset} / size {size}")
    try:
        with io.new_input(path).open() as stream:
            stream.seek(offset)
            blob = stream.read(size)
    except (FileNotFoundError, OSError) as err:
        raise DataFileReadError(f"deletion vector file {path} cannot be read: {err}") from err
    if len(blob) != size:
        raise DataFileReadError(f"deletion vector {what}: file ends after {len(blob)} of {size} bytes")
    return decode_deletion_vector(blob, what, record_count=record_count)


# ---------------------------------------------------------------------------------------------------------
# Writing: one Puffin file, one blob per data file, and the DV manifest entries pointing into it
# ---------------------------------------------------------------------------------------------------------

#: ``_pos`` (``MetadataColumns.ROW_POSITION``), the field Java's DV blobs name in ``fields``
ROW_POSITION_FIELD_ID = 2147483645
_REFERENCED_DATA_FILE = "referenced-data-file"
_CARDINALITY = "cardinality"


@dataclass(frozen=True)
class DataFileDeletes:
    """The deleted positions of one data file, with the data file's spec id and partition (a DV is
    recorded in its data file's spec and partition, whatever the Puffin file's location)."""

    data_file_path: str
    spec_id: int
    partition: Record
    positions: npt.NDArray[np.int64]


def write_deletion_vectors(io: FileIO, path: str, deletes: Sequence[DataFileDeletes]) -> list[DataFile]:
    """Write one Puffin file at ``path`` with one ``deletion-vector-v1`` blob per data file, and return
    the DV entries (``POSITION_DELETES`` in ``PUFFIN``), in the order of ``deletes``.

    Each entry is what Java's ``BaseDVFileWriter`` records: ``record_count`` = the cardinality,
    ``file_size_in_bytes`` = the whole Puffin file, ``referenced_data_file``, ``content_offset`` and
    ``content_size_in_bytes`` of its blob, the data file's spec id and partition, no column metrics.
    On failure the partial file is removed.

    :raises ConfigurationError: when a data file appears twice, has no position, or a position is out
        of range (nothing is written).
    """
    seen: set[str] = set()
    encoded = []
    for item in deletes:
        if item.data_file_path in seen:
            raise ConfigurationError(f"two deletion vectors for {item.data_file_path} in one Puffin file")
        seen.add(item.data_file_path)
        positions = sorted_positions(item.positions)
        if not len(positions):
            raise ConfigurationError(f"empty deletion vector for {item.data_file_path}")
        encoded.append((item, len(positions), encode_deletion_vector(positions)))
    from airflow_provider_iceberg_exec.engine.io.puffin import PuffinWriter

    stream = io.new_output(path).create(overwrite=False)
    try:
        writer = PuffinWriter(stream)
        blobs = [
            writer.add(
                DV_BLOB_TYPE,
                blob,
                fields=[ROW_POSITION_FIELD_ID],
                properties={_REFERENCED_DATA_FILE: item.data_file_path, _CARDINALITY: str(cardinality)},
            )
            for item, cardinality, blob in encoded
        ]
        size = writer.finish()
    except BaseException:
        stream.close()
        io.delete(path)
        raise
    return [
        _dv_entry(path, size, item, cardinality, blob.offset, blob.length)
        for (item, cardinality, _), blob in zip(encoded, blobs, strict=True)
    ]


def _dv_entry(
    path: str, size: int, item: DataFileDeletes, cardinality: int, offset: int, length: int
) -> DataFile:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    entry = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=item.partition,
        record_count=cardinality,
        file_size_in_bytes=size,
        column_sizes=None,
        value_counts=None,
        null_value_counts=None,
        nan_value_counts=None,
        lower_bounds=None,
        upper_bounds=None,
        key_metadata=None,
        split_offsets=None,
        equality_ids=None,
        sort_order_id=None,
        referenced_data_file=item.data_file_path,
        content_offset=offset,
        content_size_in_bytes=length,
    )
    entry.spec_id = item.spec_id
    return entry
