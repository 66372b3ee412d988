"""The files of an orphan scan: the orphan list (one path per line) and the result document beside it.

The scan streams the orphans into the list through the table's FileIO and writes its result document
(``iceberg-exec/orphan-scan-result@1``) beside it with the suffix ``.json``; the delete step reads the
result back and streams the list, never holding all the paths in memory.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.contracts import ORPHAN_SCAN_RESULT, check_envelope
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR, staging_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO

__all__ = [
    "SAMPLE_SIZE",
    "OrphanListWriter",
    "default_list_uri",
    "read_lines",
    "read_orphan_scan_result",
    "resolve_orphan_scan_result",
    "result_uri",
    "staged_list_uri",
    "write_text",
]

#: paths a result document lists as a sample (orphans, kept or failed files)
SAMPLE_SIZE = 20


def read_orphan_scan_result(io: FileIO, uri: str) -> dict[str, Any]:
    """Read a scan result document from its JSON file, or from its orphan list (the ``.json`` beside it).

    :raises ConfigurationError: when neither can be read.
    :raises DataFileCodecError: when the document is not a scan result.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> from airflow_provider_iceberg_exec.engine.ops.orphans import scan_orphan_files
    >>> scanned = scan_orphan_files(table)
    >>> read_orphan_scan_result(table.io, scanned["result_uri"]) == scanned
    True
    >>> catalog.engine.dispose(); workdir.cleanup()
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


def resolve_orphan_scan_result(scan_result: object, file_io: Callable[[str], FileIO]) -> Mapping[str, Any]:
    """The scan result a delete step is handed: the document itself, or the URI of its JSON or of its
    orphan list, read through ``file_io(uri)``.

    Only the envelope is checked here; :func:`~.delete.delete_orphan_files` validates the whole document.

    :raises DataFileCodecError: when it is neither a document nor a URI, or the file is not a scan result.
    :raises ConfigurationError: when the file cannot be read.

    >>> resolve_orphan_scan_result([1, 2], file_io=print)
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.DataFileCodecError: scan_result must be a scan result or its URI, got list
    """  # noqa: E501
    if isinstance(scan_result, str):
        uri = scan_result.strip()
        return read_orphan_scan_result(file_io(uri), uri)
    if not isinstance(scan_result, Mapping):
        raise DataFileCodecError(
            f"scan_result must be a scan result or its URI, got {type(scan_result).__name__}"
        )
    return scan_result


def staged_list_uri(table_location: str, name: str) -> str:
    """Where the scan named ``name`` writes its orphan list: under the table's staging directory, named
    after the task that runs it, so that a retry overwrites it.

    >>> staged_list_uri("s3://b/wh/ns/t", "dag__run__orphan_scan__orphans")
    's3://b/wh/ns/t/metadata/iceberg-exec-staging/dag__run__orphan_scan__orphans.txt'
    """
    return staging_uri(table_location, name).removesuffix(".json") + ".txt"


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
