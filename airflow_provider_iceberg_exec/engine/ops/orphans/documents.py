"""The files of an orphan scan: the orphan list (one path per line) and the result document beside it.

The scan streams the orphans into the list through the table's FileIO and writes its result document
(``iceberg-exec/orphan-scan-result@1``) beside it with the suffix ``.json``; the delete step reads the
result back and streams the list, never holding all the paths in memory.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.contracts import ORPHAN_SCAN_RESULT, check_envelope
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO

__all__ = [
    "SAMPLE_SIZE",
    "OrphanListWriter",
    "default_list_uri",
    "read_lines",
    "read_orphan_scan_result",
    "result_uri",
    "write_text",
]

#: paths a result document lists as a sample (orphans, kept or failed files)
SAMPLE_SIZE = 20


def read_orphan_scan_result(io: FileIO, uri: str) -> dict[str, Any]:
    """Read a scan result document from its JSON file, or from its orphan list (the ``.json`` beside it).

    :raises ConfigurationError: when neither can be read.
    :raises DataFileCodecError: when the document is not a scan result.

    >>> # read_orphan_scan_result(table.io, "s3://b/t/metadata/iceberg-exec-staging/orphans-1.txt")
    """
    target = uri if uri.endswith(".json") else result_uri(uri)
    try:
        with io.new_input(target).open() as stream:
            data = stream.read()
    except (FileNotFoundError, OSError) as err:
        raise ConfigurationError(
            f"cannot read the scan result {target}: {err}; pass the result JSON of orphan-scan"
        ) from err
    try:
        doc = json.loads(data)
    except ValueError as err:
        raise DataFileCodecError(f"{target} is not JSON: {err}") from err
    return dict(check_envelope(doc, ORPHAN_SCAN_RESULT))


class OrphanListWriter:
    """Write orphan paths, one per line, through the table's FileIO; count them, their bytes and a sample."""

    def __init__(self, io: FileIO, uri: str) -> None:
        self.io = io
        self.uri = uri
        self.count = 0
        self.bytes = 0
        self.sample: list[str] = []
        self._stream: Any = None

    def __enter__(self) -> OrphanListWriter:
        self._stream = self.io.new_output(self.uri).create(overwrite=True)
        return self

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        for arrow in batches:
            uris = arrow.column(0).to_pylist()
            self._stream.write(("\n".join(uris) + "\n").encode("utf-8"))
            self.count += len(uris)
            self.bytes += sum(arrow.column(1).to_pylist())
            if len(self.sample) < SAMPLE_SIZE:
                self.sample.extend(uris[: SAMPLE_SIZE - len(self.sample)])

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()
        if exc_type is not None:  # a partial list must not be mistaken for a result
            with contextlib.suppress(OSError):
                self.io.delete(self.uri)


def default_list_uri(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/{STAGING_DIR}/orphans-{uuid.uuid4().hex}.txt"


def result_uri(list_uri: str) -> str:
    """The result document's location beside an orphan list.

    >>> result_uri("s3://b/t/metadata/iceberg-exec-staging/orphans-1.txt")
    's3://b/t/metadata/iceberg-exec-staging/orphans-1.json'
    >>> result_uri("/tmp/orphans")
    '/tmp/orphans.json'
    """
    return (list_uri[: -len(".txt")] if list_uri.endswith(".txt") else list_uri) + ".json"


def write_text(io: FileIO, uri: str, text: str) -> None:
    with io.new_output(uri).create(overwrite=True) as stream:
        stream.write(text.encode("utf-8"))


def read_lines(io: FileIO, uri: str, chunk_bytes: int = 1 << 20) -> Iterator[str]:
    """Stream the non-empty lines of a text file."""
    try:
        stream = io.new_input(uri).open()
    except (FileNotFoundError, OSError) as err:
        raise ConfigurationError(f"cannot read the orphan list {uri}: {err}") from err
    with stream:
        rest = b""
        while True:
            chunk = stream.read(chunk_bytes)
            if not chunk:
                break
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.strip():
                    yield line.decode("utf-8").rstrip("\r")
        if rest.strip():
            yield rest.decode("utf-8").rstrip("\r")
