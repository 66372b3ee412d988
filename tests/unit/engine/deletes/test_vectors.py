"""Deletion vectors: the ``deletion-vector-v1`` frame (length, magic, CRC-32) around a portable roaring
bitmap, decoded from bytes or read from a Puffin file at the manifest entry's offset and size."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from airflow_provider_iceberg_exec.engine.deletes.vectors import (
    content_size,
    decode_deletion_vector,
    is_deletion_vector,
    read_deletion_vector,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileReadError

MAGIC = b"\xd1\xd3\x39\x64"


def _frame(payload: bytes, *, magic: bytes = MAGIC) -> bytes:
    """A ``deletion-vector-v1`` blob: big-endian length of magic+payload, magic, payload, big-endian CRC."""
    body = magic + payload
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def _blob(positions: list[int]) -> bytes:
    bitmap = BitMap64(positions)
    bitmap.run_optimize()
    return _frame(bitmap.serialize())


def _dv_entry(
    path: str,
    *,
    offset: int | None,
    size: int | None,
    content: DataFileContent = DataFileContent.POSITION_DELETES,
    file_format: FileFormat = FileFormat.PUFFIN,
    record_count: int = 3,
) -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path=path,
        file_format=file_format,
        partition=Record(),
        record_count=record_count,
        file_size_in_bytes=100,
        referenced_data_file="file:///t/data/a.parquet",
        content_offset=offset,
        content_size_in_bytes=size,
    )


# -- decode_deletion_vector ---------------------------------------------------------------------------------


def test_decodes_positions_across_high_keys_sorted_as_int64() -> None:
    positions = [(3 << 32) + 9, 0, 7, (1 << 32) + 2, 5]

    decoded = decode_deletion_vector(_blob(positions))

    assert decoded.dtype == np.int64
    assert decoded.tolist() == [0, 5, 7, (1 << 32) + 2, (3 << 32) + 9]


def test_decodes_a_run_container() -> None:
    assert decode_deletion_vector(_blob(list(range(100, 5100)))).tolist() == list(range(100, 5100))


def test_decodes_an_empty_bitmap() -> None:
    decoded = decode_deletion_vector(_blob([]))

    assert decoded.dtype == np.int64
    assert decoded.tolist() == []


def test_the_length_prefix_covers_magic_and_bitmap_only() -> None:
    """The doctest's bytes: length 0x26 = 38 = 4 (magic) + 34 (bitmap), the CRC outside it."""
    blob = _blob([3, 5, 7])

    assert struct.unpack(">I", blob[:4])[0] == len(blob) - 8
    assert decode_deletion_vector(blob).tolist() == [3, 5, 7]


@pytest.mark.parametrize("size", [0, 4, 11])
def test_a_blob_shorter_than_12_bytes_is_refused(size: int) -> None:
    with pytest.raises(DataFileReadError, match=rf"too short \({size} bytes\)"):
        decode_deletion_vector(b"\x00" * size, what="dv.puffin@4")


@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_a_length_prefix_that_does_not_match_the_blob_is_refused(delta: int) -> None:
    blob = bytearray(_blob([1, 2, 3]))
    length = struct.unpack(">I", blob[:4])[0]
    blob[:4] = struct.pack(">I", length + delta)

    with pytest.raises(
        DataFileReadError, match=f"length {length + delta} does not match blob size {len(blob)}"
    ):
        decode_deletion_vector(bytes(blob))


def test_a_blob_cut_short_is_refused_by_its_length() -> None:
    blob = _blob([1, 2, 3])

    with pytest.raises(DataFileReadError, match="does not match blob size"):
        decode_deletion_vector(blob[:-1])


def test_bad_magic_is_refused_even_with_a_matching_crc() -> None:
    blob = _frame(BitMap64([1]).serialize(), magic=b"\x00\x01\x02\x03")

    with pytest.raises(DataFileReadError, match="x: bad magic 00010203"):
        decode_deletion_vector(blob, what="x")


@pytest.mark.parametrize("where", ["bitmap", "crc"])
def test_a_crc_mismatch_is_refused(where: str) -> None:
    blob = bytearray(_blob([1, 2, 3]))
    blob[-6 if where == "bitmap" else -1] ^= 0x01

    with pytest.raises(DataFileReadError, match="CRC-32 mismatch"):
        decode_deletion_vector(bytes(blob))


def test_a_truncated_bitmap_inside_a_valid_frame_is_refused() -> None:
    payload = BitMap64([1, 2, 70000]).serialize()

    with pytest.raises(DataFileReadError, match="truncated or malformed bitmap"):
        decode_deletion_vector(_frame(payload[:-1]), what="dv")


def test_a_frame_with_no_bitmap_bytes_is_refused_as_malformed() -> None:
    """A 12-byte blob (magic, no bitmap bytes) passes the frame checks; pyroaring raises IndexError on it."""
    with pytest.raises(DataFileReadError, match="malformed"):
        decode_deletion_vector(_frame(b""))


# -- read_deletion_vector -----------------------------------------------------------------------------------


def _puffin(tmp_path: Path, blobs: list[bytes]) -> tuple[str, list[tuple[int, int]]]:
    """A file laid out like a Puffin file (header magic, blobs, a footer); the (offset, size) of each blob."""
    content = bytearray(b"PFA1")
    where = []
    for blob in blobs:
        where.append((len(content), len(blob)))
        content += blob
    content += b"PFA1" + b"\x00" * 12
    path = tmp_path / "dv.puffin"
    path.write_bytes(bytes(content))
    return str(path), where


def test_reads_each_blob_at_its_offset_and_size(tmp_path: Path) -> None:
    path, where = _puffin(tmp_path, [_blob([4, 8]), _blob([1, (2 << 32) + 1])])
    io = PyArrowFileIO()

    first = read_deletion_vector(io, _dv_entry(path, offset=where[0][0], size=where[0][1], record_count=2))
    second = read_deletion_vector(io, _dv_entry(path, offset=where[1][0], size=where[1][1], record_count=2))

    assert first.tolist() == [4, 8]
    assert second.tolist() == [1, (2 << 32) + 1]


def test_a_wrong_offset_is_reported_with_the_file_and_offset(tmp_path: Path) -> None:
    path, where = _puffin(tmp_path, [_blob([4, 8])])
    offset, size = where[0]

    with pytest.raises(DataFileReadError, match=re.escape(f"deletion vector {path}@{offset + 1}:")):
        read_deletion_vector(PyArrowFileIO(), _dv_entry(path, offset=offset + 1, size=size))


def test_a_cardinality_other_than_the_record_count_is_refused(tmp_path: Path) -> None:
    """Java's reader fails on it: a DV whose entry disagrees with its bitmap is corrupt."""
    path, where = _puffin(tmp_path, [_blob([4, 8])])
    entry = _dv_entry(path, offset=where[0][0], size=where[0][1], record_count=3)

    with pytest.raises(DataFileReadError, match="2 positions but its record_count is 3"):
        read_deletion_vector(PyArrowFileIO(), entry)


@pytest.mark.parametrize(("offset", "size"), [(None, 20), (4, None), (None, None)])
def test_an_entry_without_blob_location_is_refused(offset: int | None, size: int | None) -> None:
    entry = _dv_entry("file:///nowhere/dv.puffin", offset=offset, size=size)

    with pytest.raises(DataFileReadError, match="has no content_offset/content_size_in_bytes"):
        read_deletion_vector(PyArrowFileIO(), entry)


def test_a_missing_puffin_file_is_a_read_error(tmp_path: Path) -> None:
    entry = _dv_entry(str(tmp_path / "gone.puffin"), offset=4, size=20)

    with pytest.raises(DataFileReadError, match=r"gone\.puffin cannot be read"):
        read_deletion_vector(PyArrowFileIO(), entry)


# -- is_deletion_vector -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "file_format", "expected"),
    [
        (DataFileContent.POSITION_DELETES, FileFormat.PUFFIN, True),
        (DataFileContent.POSITION_DELETES, FileFormat.PARQUET, False),
        (DataFileContent.EQUALITY_DELETES, FileFormat.PUFFIN, False),
        (DataFileContent.DATA, FileFormat.PUFFIN, False),
    ],
)
def test_only_puffin_position_deletes_are_deletion_vectors(
    content: DataFileContent, file_format: FileFormat, expected: bool
) -> None:
    entry = _dv_entry("file:///t/d", offset=4, size=20, content=content, file_format=file_format)

    assert is_deletion_vector(entry) is expected


# -- content_size -------------------------------------------------------------------------------------------


def test_a_dv_counts_its_blob_and_other_files_their_size() -> None:
    """A DV's file_size_in_bytes is its whole (shared) Puffin file: sizes count its blob, as Java's."""
    dv = _dv_entry("file:///t/dv.puffin", offset=4, size=42)
    parquet = _dv_entry("file:///t/d.parquet", offset=None, size=None, file_format=FileFormat.PARQUET)

    assert content_size(dv) == 42
    assert content_size(parquet) == 100
