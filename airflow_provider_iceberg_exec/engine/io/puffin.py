"""Writing Puffin files (``PFA1``): blobs, then a footer that says where each blob is and what it holds.

Layout (Puffin spec; Java's ``PuffinWriter``): ``Magic Blob1 ... BlobN Footer`` with
``Footer = Magic FooterPayload FooterPayloadSize Flags Magic``; the payload is the UTF-8 JSON
``{"blobs": [...], "properties": {...}}``, its size a 4-byte little-endian int, the four flag bytes 0
(the footer is never compressed: PyIceberg cannot read a compressed one). The blobs are written as given,
uncompressed (a deletion vector must not be compressed). The file is streamed through the table's
FileIO, so it works on object storage as on a local disk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.io import OutputStream

__all__ = ["PUFFIN_MAGIC", "BlobMetadata", "PuffinWriter", "created_by"]

PUFFIN_MAGIC = b"PFA1"
_FLAGS_UNCOMPRESSED = b"\x00\x00\x00\x00"


def created_by() -> str:
    """The ``created-by`` file property of the Puffin files this product writes."""
    from airflow_provider_iceberg_exec import __version__

    return f"airflow-provider-iceberg-exec {__version__}"


@dataclass(frozen=True)
class BlobMetadata:
    """A blob's footer entry (Java's ``BlobMetadata``); ``offset``/``length`` locate it in the file."""

    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    offset: int
    length: int
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The footer JSON of the blob, keys in Java's ``FileMetadataParser`` order."""
        doc: dict[str, Any] = {
            "type": self.type,
            "fields": list(self.fields),
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "offset": self.offset,
            "length": self.length,
        }
        if self.properties:
            doc["properties"] = dict(self.properties)
        return doc


class PuffinWriter:
    """Write one Puffin file to an open output stream: :meth:`add` each blob, then :meth:`finish`.

    :param stream: a new, empty output stream (``io.new_output(path).create()``); closed by ``finish``.
    :param properties: the file properties (``created-by`` is added when absent).
    """

    def __init__(self, stream: OutputStream, properties: Mapping[str, str] | None = None) -> None:
        self._stream = stream
        self._properties = {"created-by": created_by(), **(properties or {})}
        self._blobs: list[BlobMetadata] = []
        self._position = 0
        self._finished = False
        self._write(PUFFIN_MAGIC)

    def _write(self, data: bytes) -> None:
        self._stream.write(data)
        self._position += len(data)

    def add(
        self,
        blob_type: str,
        data: bytes,
        *,
        fields: Sequence[int],
        snapshot_id: int = -1,
        sequence_number: int = -1,
        properties: Mapping[str, str] | None = None,
    ) -> BlobMetadata:
        """Append one uncompressed blob; return its footer entry (with its offset and length).

        :raises ConfigurationError: after :meth:`finish`, or for an empty blob type.
        """
        if self._finished:
            raise ConfigurationError("the Puffin file is already finished")
        if not blob_type:
            raise ConfigurationError("a Puffin blob needs a type")
        blob = BlobMetadata(
            type=blob_type,
            fields=tuple(fields),
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            offset=self._position,
            length=len(data),
            properties=dict(properties or {}),
        )
        self._write(data)
        self._blobs.append(blob)
        return blob

    def finish(self) -> int:
        """Write the footer, close the stream and return the file's size in bytes."""
        if self._finished:
            raise ConfigurationError("the Puffin file is already finished")
        payload = json.dumps(
            {"blobs": [b.to_json() for b in self._blobs], "properties": self._properties},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        self._write(PUFFIN_MAGIC + payload + struct.pack("<i", len(payload)) + _FLAGS_UNCOMPRESSED)
        self._write(PUFFIN_MAGIC)
        self._finished = True
        self._stream.close()
        return self._position

    @property
    def blobs(self) -> list[BlobMetadata]:
        """The blobs added so far."""
        return list(self._blobs)
