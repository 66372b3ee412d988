"""The ``deletion-vector-v1`` blob: encoded as Java 1.10 encodes it (dense keys, run-optimised
containers, big-endian length and CRC), decoded with Java's checks, and read back by PyIceberg's reader;
one Puffin file holds one blob per data file, and its DV entries point at the blobs."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from pyiceberg.typedef import Record
from pyroaring import BitMap, BitMap64

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import (
    DENSE_KEY_LIMIT,
    DV_MAGIC,
    MAX_POSITION,
    ROW_POSITION_FIELD_ID,
    DataFileDeletes,
    decode_deletion_vector,
    encode_deletion_vector,
    read_deletion_vector_blob,
    sorted_positions,
    write_deletion_vectors,
)
from airflow_provider_iceberg_exec.engine.io.puffin import PuffinWriter
from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field

KEY = 1 << 32


def _bitmap_section(blob: bytes) -> bytes:
    (length,) = struct.unpack(">I", blob[:4])
    return blob[8 : 4 + length]


def _keys(blob: bytes) -> list[int]:
    """The keys of the portable 64-bit bitmap inside a blob, walking it as a reader does."""
    data = _bitmap_section(blob)
    (count,) = struct.unpack("<Q", data[:8])
    data, keys = data[8:], []
    for _ in range(count):
        keys.append(struct.unpack("<I", data[:4])[0])
        bitmap = BitMap.deserialize(data[4:])
        data = data[4 + len(bitmap.serialize()) :]
    assert data == b""
    return keys


# -- encoding -------------------------------------------------------------------------------------------


def test_frame_is_big_endian_length_magic_bitmap_big_endian_crc() -> None:
    blob = encode_deletion_vector(np.array([3, 5, 7]))

    (length,) = struct.unpack(">I", blob[:4])
    assert length == len(blob) - 8
    assert blob[4:8] == DV_MAGIC
    assert struct.unpack(">I", blob[-4:])[0] == zlib.crc32(blob[4:-4])


def test_keys_are_dense_from_zero_to_the_largest_with_empty_bitmaps_between() -> None:
    """Java's RoaringPositionBitmap serialises its whole key array, empty bitmaps included."""
    blob = encode_deletion_vector(np.array([3 * KEY + 1, 5]))

    assert _keys(blob) == [0, 1, 2, 3]
    data = _bitmap_section(blob)
    empty = BitMap().serialize()
    assert data.count(struct.pack("<I", 1) + empty) == 1
    assert data.count(struct.pack("<I", 2) + empty) == 1


def test_a_vector_without_low_positions_still_starts_at_key_zero() -> None:
    assert _keys(encode_deletion_vector(np.array([2 * KEY]))) == [0, 1, 2]


def test_no_position_is_a_zero_count_bitmap() -> None:
    blob = encode_deletion_vector(np.array([], dtype=np.int64))

    assert _bitmap_section(blob) == struct.pack("<Q", 0)
    assert decode_deletion_vector(blob, record_count=0).tolist() == []


def test_runs_are_run_length_encoded_like_java() -> None:
    """A run of 10,000 rows is one run container (flag bit set), not a 8 KiB bitmap container."""
    blob = encode_deletion_vector(np.arange(100, 10_100))

    assert len(blob) < 40
    bitmap = _bitmap_section(blob)[12:]
    (cookie,) = struct.unpack("<H", bitmap[:2])
    assert cookie == 12347  # SERIAL_COOKIE: the bitmap has run containers


def test_two_positions_stay_an_array_container() -> None:
    """Java sets positions one by one, so a short run is an array container unless a run is smaller."""
    bitmap = _bitmap_section(encode_deletion_vector(np.array([4, 5])))[12:]

    assert struct.unpack("<I", bitmap[:4])[0] == 12346  # SERIAL_COOKIE_NO_RUNCONTAINER


def test_accepts_a_bitmap64_and_unsorted_repeated_arrays() -> None:
    positions = [KEY + 2, 9, 9, 0]

    from_array = encode_deletion_vector(np.array(positions))
    from_bitmap = encode_deletion_vector(BitMap64(positions))

    assert from_array == from_bitmap
    assert decode_deletion_vector(from_array).tolist() == [0, 9, KEY + 2]


@pytest.mark.parametrize("bad", [-1, MAX_POSITION + 1])
def test_refuses_positions_java_cannot_hold(bad: int) -> None:
    with pytest.raises(ConfigurationError, match="outside"):
        encode_deletion_vector(np.array([0, bad]))


def test_the_largest_java_position_is_accepted() -> None:
    assert decode_deletion_vector(encode_deletion_vector(np.array([MAX_POSITION]))).tolist() == [MAX_POSITION]


def test_refuses_non_integer_positions() -> None:
    with pytest.raises(ConfigurationError, match="integers"):
        sorted_positions(np.array([1.5]))


# -- decoding checks ---------------------------------------------------------------------------------


def _corrupt(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0xFF]) + blob[at + 1 :]


def test_decode_refuses_a_wrong_length_prefix() -> None:
    with pytest.raises(DataFileReadError, match="does not match blob size"):
        decode_deletion_vector(_corrupt(encode_deletion_vector(np.array([1])), 3))


def test_decode_refuses_a_bad_magic() -> None:
    with pytest.raises(DataFileReadError, match="bad magic"):
        decode_deletion_vector(_corrupt(encode_deletion_vector(np.array([1])), 4))


def test_decode_refuses_a_crc_mismatch() -> None:
    blob = encode_deletion_vector(np.array([1, 2, 3]))
    with pytest.raises(DataFileReadError, match="CRC-32"):
        decode_deletion_vector(_corrupt(blob, len(blob) - 6))


def test_decode_refuses_a_cardinality_that_is_not_the_record_count() -> None:
    with pytest.raises(DataFileReadError, match="record_count is 2"):
        decode_deletion_vector(encode_deletion_vector(np.array([1, 2, 3])), "x", record_count=2)


def test_decode_reads_sparse_keys_as_written_by_croaring() -> None:
    bitmap = BitMap64([5, 7 * KEY])
    body = DV_MAGIC + bitmap.serialize()
    blob = struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))

    assert decode_deletion_vector(blob).tolist() == [5, 7 * KEY]


# -- round trips -------------------------------------------------------------------------------------

_positions = st.one_of(
    st.lists(st.integers(0, MAX_POSITION), max_size=50),
    st.lists(st.integers(0, 3 * KEY + 10), max_size=200),
    # runs, possibly crossing a key boundary
    st.tuples(st.integers(0, 4 * KEY), st.integers(1, 5000)).map(lambda t: list(range(t[0], t[0] + t[1]))),
    # dense enough for bitmap containers, in one key or several
    st.tuples(st.integers(0, 3), st.integers(4097, 9000)).map(
        lambda t: [t[0] * KEY + 2 * i for i in range(t[1])]
    ),
)


class _Buffer(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after the writer closes the stream
        pass


def _pyiceberg_read(blob: bytes) -> list[int]:
    """The positions PyIceberg's own reader finds in the blob (inside a one-blob Puffin file)."""
    buffer = _Buffer()
    writer = PuffinWriter(buffer)
    writer.add(
        "deletion-vector-v1", blob, fields=[ROW_POSITION_FIELD_ID], properties={"referenced-data-file": "a"}
    )
    writer.finish()
    (dv,) = deletion_vectors_from_puffin_file(PuffinFile(buffer.getvalue()))
    return list(dv.to_vector().to_pylist())


@settings(max_examples=150, deadline=None)
@given(_positions)
def test_round_trips_through_our_reader_and_pyiceberg(positions: list[int]) -> None:
    blob = encode_deletion_vector(np.array(positions, dtype=np.int64))
    expected = sorted(set(positions))

    assert decode_deletion_vector(blob, record_count=len(expected)).tolist() == expected
    assert BitMap64.deserialize(_bitmap_section(blob)).to_array().tolist() == expected
    # PyIceberg 0.12's to_vector fails on a vector with no position below 2^32 (its first chunk is an
    # untyped empty list) and fills every key below the largest: compare where it can read.
    if expected and expected[0] < KEY and expected[-1] >> 32 < 64:
        assert _pyiceberg_read(blob) == expected
    # the same bytes again, whatever form the positions came in
    assert encode_deletion_vector(BitMap64(positions)) == blob


def test_keys_past_the_dense_limit_are_written_sparse() -> None:
    blob = encode_deletion_vector(np.array([1, DENSE_KEY_LIMIT * KEY + 3]))

    assert _keys(blob) == [0, DENSE_KEY_LIMIT]
    assert decode_deletion_vector(blob).tolist() == [1, DENSE_KEY_LIMIT * KEY + 3]


def test_keys_up_to_the_dense_limit_are_dense() -> None:
    assert _keys(encode_deletion_vector(np.array([(DENSE_KEY_LIMIT - 1) * KEY]))) == list(
        range(DENSE_KEY_LIMIT)
    )


# -- Puffin files of DVs -------------------------------------------------------------------------------


def _deletes(path: str, positions: list[int], *, spec_id: int = 0, partition: Record | None = None):
    return DataFileDeletes(path, spec_id, partition or Record(), np.array(positions, dtype=np.int64))


def test_one_puffin_file_holds_one_blob_per_data_file_readable_by_pyiceberg(tmp_path: Path) -> None:
    file_io = PyArrowFileIO()
    path = f"file://{tmp_path}/dv.puffin"
    wanted = {"s3://b/d/a.parquet": [1, 2, 3, KEY + 9], "s3://b/d/b.parquet": list(range(50, 9000))}

    entries = write_deletion_vectors(file_io, path, [_deletes(p, v) for p, v in wanted.items()])

    raw = (tmp_path / "dv.puffin").read_bytes()
    puffin = PuffinFile(raw)
    vectors = {
        dv.referenced_data_file: dv.to_vector().to_pylist()
        for dv in deletion_vectors_from_puffin_file(puffin)
    }
    assert vectors == wanted
    for entry, (data_path, positions) in zip(entries, wanted.items(), strict=True):
        assert entry.file_path == path
        assert entry.file_size_in_bytes == len(raw)
        assert entry.record_count == len(positions)
        decoded = read_deletion_vector_blob(
            file_io,
            path,
            v3_field(entry, "content_offset"),
            v3_field(entry, "content_size_in_bytes"),
            record_count=entry.record_count,
        )
        assert decoded.tolist() == positions
        assert v3_field(entry, "referenced_data_file") == data_path


def test_footer_is_what_java_writes_for_dvs(tmp_path: Path) -> None:
    path = f"file://{tmp_path}/dv.puffin"
    write_deletion_vectors(PyArrowFileIO(), path, [_deletes("s3://b/d/a.parquet", [4, 8])])

    raw = (tmp_path / "dv.puffin").read_bytes()
    assert raw[:4] == b"PFA1"
    assert raw[-4:] == b"PFA1"
    assert raw[-8:-4] == b"\x00\x00\x00\x00"
    (blob,) = PuffinFile(raw).footer.blobs
    assert blob.type == "deletion-vector-v1"
    assert blob.fields == [ROW_POSITION_FIELD_ID] == [2147483645]
    assert (blob.snapshot_id, blob.sequence_number) == (-1, -1)
    assert blob.offset == 4
    assert blob.compression_codec is None
    assert blob.properties == {"referenced-data-file": "s3://b/d/a.parquet", "cardinality": "2"}
    assert PuffinFile(raw).footer.properties["created-by"].startswith("airflow-provider-iceberg-exec ")


def test_dv_entry_carries_the_data_files_spec_and_partition_and_no_metrics(tmp_path: Path) -> None:
    path = f"file://{tmp_path}/dv.puffin"
    (entry,) = write_deletion_vectors(
        PyArrowFileIO(), path, [_deletes("s3://b/d/a.parquet", [4], spec_id=3, partition=Record(7))]
    )

    assert entry.content == DataFileContent.POSITION_DELETES
    assert entry.file_format == FileFormat.PUFFIN
    assert entry.spec_id == 3
    assert entry.partition == Record(7)
    assert entry.lower_bounds is None
    assert entry.upper_bounds is None
    assert entry.value_counts is None


def test_refuses_two_vectors_for_one_data_file_and_writes_nothing(tmp_path: Path) -> None:
    deletes = [_deletes("s3://b/a.parquet", [1]), _deletes("s3://b/a.parquet", [2])]

    with pytest.raises(ConfigurationError, match="two deletion vectors"):
        write_deletion_vectors(PyArrowFileIO(), f"file://{tmp_path}/dv.puffin", deletes)
    assert list(tmp_path.iterdir()) == []


def test_refuses_an_empty_vector(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="empty deletion vector"):
        write_deletion_vectors(PyArrowFileIO(), f"file://{tmp_path}/dv.puffin", [_deletes("s3://b/a", [])])


def test_reading_a_blob_past_the_end_of_the_file_fails_clearly(tmp_path: Path) -> None:
    path = f"file://{tmp_path}/dv.puffin"
    (entry,) = write_deletion_vectors(PyArrowFileIO(), path, [_deletes("s3://b/a.parquet", [1])])

    with pytest.raises(DataFileReadError, match="file ends after"):
        read_deletion_vector_blob(PyArrowFileIO(), path, entry.file_size_in_bytes - 10, 40)
