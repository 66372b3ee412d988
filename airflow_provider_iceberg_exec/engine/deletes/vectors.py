"""Deletion vectors (format v3): Puffin ``deletion-vector-v1`` blobs holding portable roaring bitmaps.

A DV is read blob by blob at ``content_offset``/``content_size_in_bytes`` (length, magic, CRC-32 and
cardinality == ``record_count`` checked, as Java's reader does; :mod:`~.io.deletion_vectors` holds the
format). Where a DV applies to a data file, position delete files do not (spec 6.2;
:func:`.positions.deleted_positions` applies that rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import (
    decode_deletion_vector,
    read_deletion_vector_blob,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile

__all__ = ["content_size", "decode_deletion_vector", "is_deletion_vector", "read_deletion_vector"]


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
    :raises DataFileReadError: when the entry lacks the blob location, the blob is malformed, or its
        cardinality is not the entry's ``record_count``.
    """
    offset = v3_field(dv, "content_offset")
    size = v3_field(dv, "content_size_in_bytes")
    if offset is None or size is None:
        raise DataFileReadError(
            f"deletion vector {dv.file_path} has no content_offset/content_size_in_bytes in its manifest"
        )
    return read_deletion_vector_blob(io, dv.file_path, int(offset), int(size), record_count=dv.record_count)


def content_size(content_file: DataFile) -> int:
    """The bytes a content file counts for in sizes and summaries: a DV its blob
    (``content_size_in_bytes``; its ``file_size_in_bytes`` is the whole shared Puffin file), any other
    file its size (Java's ``SnapshotSummary`` and ``RewritePositionDeletesGroup`` count so)."""
    if is_deletion_vector(content_file):
        size = v3_field(content_file, "content_size_in_bytes")
        if size is not None:
            return int(size)
    return int(content_file.file_size_in_bytes)
