"""The Puffin writer: magic, blobs at their offsets, an uncompressed footer PyIceberg reads."""

from __future__ import annotations

import io
import json
import struct

import pytest
from pyiceberg.table.puffin import PuffinFile

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.puffin import PuffinWriter


class _Buffer(io.BytesIO):
    closed_by_writer = False

    def close(self) -> None:
        self.closed_by_writer = True


def test_layout_is_magic_blobs_footer_with_size_and_zero_flags() -> None:
    buffer = _Buffer()
    writer = PuffinWriter(buffer, {"k": "v"})
    first = writer.add("t1", b"abc", fields=[1])
    second = writer.add("t2", b"defgh", fields=[2, 3], snapshot_id=7, sequence_number=8)
    size = writer.finish()

    raw = buffer.getvalue()
    assert size == len(raw)
    assert buffer.closed_by_writer
    assert (first.offset, first.length, second.offset, second.length) == (4, 3, 7, 5)
    assert raw[4:7] == b"abc"
    assert raw[7:12] == b"defgh"
    (payload_size,) = struct.unpack("<i", raw[-12:-8])
    assert raw[12:16] == b"PFA1"
    payload = json.loads(raw[16 : 16 + payload_size])
    assert payload["properties"]["k"] == "v"
    assert "created-by" in payload["properties"]
    assert payload["blobs"][1] == {
        "type": "t2",
        "fields": [2, 3],
        "snapshot-id": 7,
        "sequence-number": 8,
        "offset": 7,
        "length": 5,
    }
    footer = PuffinFile(raw).footer
    assert [b.type for b in footer.blobs] == ["t1", "t2"]
    assert PuffinFile(raw).get_blob_payload(footer.blobs[1]) == b"defgh"


def test_an_empty_file_has_a_footer_without_blobs() -> None:
    buffer = _Buffer()
    PuffinWriter(buffer).finish()

    assert PuffinFile(buffer.getvalue()).footer.blobs == []


def test_nothing_can_be_added_after_finish() -> None:
    writer = PuffinWriter(_Buffer())
    writer.finish()

    with pytest.raises(ConfigurationError, match="already finished"):
        writer.add("t", b"x", fields=[1])
    with pytest.raises(ConfigurationError, match="already finished"):
        writer.finish()


def test_a_blob_needs_a_type() -> None:
    with pytest.raises(ConfigurationError, match="needs a type"):
        PuffinWriter(_Buffer()).add("", b"x", fields=[1])
