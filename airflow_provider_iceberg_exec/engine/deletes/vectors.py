"""Deletion vectors (format v3): Puffin ``deletion-vector-v1`` blobs holding portable roaring bitmaps.

A DV is read blob by blob at ``content_offset``/``content_size_in_bytes`` (length, magic and CRC-32
checked) and decoded from the portable 64-bit roaring format with pyroaring. Where a DV applies to a data
file, position delete files do not (spec 6.2; :func:`.positions.deleted_positions` applies that rule).
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile

__all__ = ["decode_deletion_vector", "is_deletion_vector", "read_deletion_vector"]

_DV_MAGIC = b"\xd1\xd3\x39\x64"


def is_deletion_vector(delete_file: DataFile) -> bool:
    """Whether ``delete_file`` is a deletion vector (a position delete stored in a Puffin file)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    return (
        delete_file.content == DataFileContent.POSITION_DELETES
        and delete_file.file_format == FileFormat.PUFFIN
    )


def read_deletion_vector(io: FileIO, dv: DataFile) -> npt.NDArray[np.int64]:
    """Read one ``deletion-vector-v1`` blob and return the deleted positions, sorted.

    :param io: the table's FileIO.
    :param dv: the DV's manifest entry, with ``content_offset`` and ``content_size_in_bytes``.
    :returns: the positions as a sorted int64 array.
    :raises DataFileReadError: when the entry lacks the blob location or the blob is malformed.
    """
    offset = v3_field(dv, "content_offset")
    size = v3_field(dv, "content_size_in_bytes")
    if offset is None or size is None:
        raise DataFileReadError(
            f"deletion vector {dv.file_path} has no content_offset/content_size_in_bytes in its manifest"
        )
    try:
        with io.new_input(dv.file_path).open() as stream:
            stream.seek(int(offset))
            blob = stream.read(int(size))
    except (FileNotFoundError, OSError) as err:
        raise DataFileReadError(f"deletion vector file {dv.file_path} cannot be read: {err}") from err
    return decode_deletion_vector(blob, what=f"{dv.file_path}@{offset}")


def decode_deletion_vector(blob: bytes, what: str = "blob") -> npt.NDArray[np.int64]:
    """Decode a ``deletion-vector-v1`` blob: length, magic, portable 64-bit roaring bitmap, CRC-32.

    >>> decode_deletion_vector(bytes.fromhex(
    ...     "00000026d1d339640100000000000000000000003a300000010000000000020010000000030005000700000bc16c"
    ... )).tolist()
    [3, 5, 7]
    """
    if len(blob) < 12:
        raise DataFileReadError(f"deletion vector {what} is too short ({len(blob)} bytes)")
    (length,) = struct.unpack(">I", blob[:4])
    if length != len(blob) - 8:
        raise DataFileReadError(
            f"deletion vector {what}: length {length} does not match blob size {len(blob)}"
        )
    body = blob[4 : 4 + length]
    if body[:4] != _DV_MAGIC:
        raise DataFileReadError(f"deletion vector {what}: bad magic {body[:4].hex()}")
    (crc,) = struct.unpack(">I", blob[4 + length : 8 + length])
    if zlib.crc32(body) & 0xFFFFFFFF != crc:
        raise DataFileReadError(f"deletion vector {what}: CRC-32 mismatch")
    return _decode_roaring64(bytes(body[4:]), what)


def _decode_roaring64(data: bytes, what: str) -> npt.NDArray[np.int64]:
    """The positions of a portable 64-bit roaring bitmap (the spec's layout, CRoaring's portable format)."""
    import numpy as np
    from pyroaring import BitMap64

    try:
        bitmap = BitMap64.deserialize(data)
    except (ValueError, OverflowError, IndexError) as err:  # IndexError: no bitmap bytes at all
        raise DataFileReadError(f"deletion vector {what}: truncated or malformed bitmap ({err})") from err
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64).astype(np.int64)
