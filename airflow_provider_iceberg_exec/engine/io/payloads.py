"""Large JSON payloads out of band: write them under the table's staging location, pass a reference.

A task spec or result that lists thousands of DataFiles is too large for a metadata-database row (an
Airflow XCom). :func:`offload_payload` writes such a document as JSON to
``<table location>/metadata/iceberg-exec-staging/<name>.json`` through the table's FileIO and returns a
small reference document instead; :func:`resolve_payload` turns a reference back into the document and
passes any other document through unchanged, so consumers call it on every payload they receive.

The reference document (``table``, ``branch``, ``group_id``, ``commit_batch`` and ``base_snapshot_id`` are
copied from the document when it has them, so that a consumer can load the table before resolving):

>>> import tempfile
>>> from pyiceberg.io.pyarrow import PyArrowFileIO
>>> result = {"schema": "iceberg-exec/rewrite-result@1", "table": "ns.t", "group_id": 3,
...           "added_data_files": [{"file-path": f"f{i}.parquet"} for i in range(5000)]}
>>> with tempfile.TemporaryDirectory() as location:
...     ref = offload_payload(PyArrowFileIO(), f"file://{location}", result, name="rewrite-3")
...     assert resolve_payload(PyArrowFileIO(), ref) == result
>>> ref["uri"].endswith("/metadata/iceberg-exec-staging/rewrite-3.json")
True
>>> {k: v for k, v in ref.items() if k not in ("uri", "size_bytes")}  # doctest: +NORMALIZE_WHITESPACE
{'schema': 'iceberg-exec/payload-ref@1', 'inner_schema': 'iceberg-exec/rewrite-result@1',
 'file_count': 5000, 'table': 'ns.t', 'group_id': 3}

This module is pure engine code: it takes a PyIceberg ``FileIO`` (any object with ``new_output``,
``new_input`` and ``delete``), never a catalog or an Airflow object. Staged payloads are discarded by
:func:`~airflow_provider_iceberg_exec.engine.commit.cleanup.discard_payloads`, the safe delete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

__all__ = [
    "DEFAULT_FILE_THRESHOLD",
    "PAYLOAD_REF_SCHEMA",
    "STAGING_DIR",
    "count_files",
    "is_payload_ref",
    "offload_payload",
    "resolve_payload",
    "staging_uri",
]

#: schema id of a reference document
PAYLOAD_REF_SCHEMA = "iceberg-exec/payload-ref@1"
#: payloads listing more files than this are offloaded (``[iceberg_exec] payload_file_threshold``)
DEFAULT_FILE_THRESHOLD = 1000
#: directory under the table location where staged payloads go
STAGING_DIR = "metadata/iceberg-exec-staging"

#: keys whose list values hold one DataFile JSON entry per item, in every engine envelope
_FILE_LIST_KEYS = (
    "data_files",
    "rewritten_data_files",
    "rewritten_delete_files",
    "live_data_files",
    "added_data_files",
    "added_delete_files",
    "removed_data_files",
    "delete_files",
)
#: small keys copied into a reference, so that a consumer can find the table before resolving it
_CARRIED_KEYS = ("table", "branch", "group_id", "commit_batch", "base_snapshot_id")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def count_files(doc: Any) -> int:
    """Count the file entries a payload lists, in any envelope, nested task lists included.

    :param doc: a JSON document (a task spec, a result, a plan, or a list of them).
    :returns: the number of items in every file list (``data_files``, ``added_data_files`` ...).

    >>> count_files({"schema": "iceberg-exec/rewrite-result@1", "rewritten_data_files": [{}, {}],
    ...              "added_data_files": [{}]})
    3
    >>> count_files([{"data_files": [{}]}, {"data_files": [{}, {}]}])
    3
    >>> count_files({"schema": PAYLOAD_REF_SCHEMA, "uri": "x", "file_count": 7})
    0
    """
    if isinstance(doc, Mapping):
        if doc.get("schema") == PAYLOAD_REF_SCHEMA:
            return 0
        total = 0
        for key, value in doc.items():
            if key in _FILE_LIST_KEYS and isinstance(value, Sequence) and not isinstance(value, str):
                total += len(value)
            elif isinstance(value, (Mapping, list)):
                total += count_files(value)
        return total
    if isinstance(doc, list):
        return sum(count_files(item) for item in doc)
    return 0


def is_payload_ref(doc: Any) -> bool:
    """Whether ``doc`` is a reference document written by :func:`offload_payload`.

    >>> is_payload_ref({"schema": "iceberg-exec/payload-ref@1", "uri": "file:///t/x.json"})
    True
    >>> is_payload_ref({"schema": "iceberg-exec/rewrite-task@1"})
    False
    """
    return isinstance(doc, Mapping) and doc.get("schema") == PAYLOAD_REF_SCHEMA


def staging_uri(table_location: str, name: str) -> str:
    """The URI of the staged payload ``name`` of the table at ``table_location``.

    :param table_location: the table's location (``table.location()``).
    :param name: a name unique to the producing task; characters other than ``[A-Za-z0-9._-]`` become
        ``_``.
    :raises ConfigurationError: when the location or name is empty.

    >>> staging_uri("s3://b/wh/ns/t/", "dag/run:1+00/rewrite")
    's3://b/wh/ns/t/metadata/iceberg-exec-staging/dag_run_1_00_rewrite.json'
    """
    safe = _UNSAFE_NAME.sub("_", name).strip("._")
    if not table_location or not safe:
        raise ConfigurationError(f"cannot stage a payload at location {table_location!r} named {name!r}")
    return f"{table_location.rstrip('/')}/{STAGING_DIR}/{safe}.json"


def offload_payload(
    io: FileIO,
    table_location: str,
    doc: Mapping[str, Any],
    *,
    name: str,
    threshold: int = DEFAULT_FILE_THRESHOLD,
) -> dict[str, Any]:
    """Return ``doc`` itself when it lists at most ``threshold`` files, else stage it and return a reference.

    Writing is idempotent per ``name``: a retry of the producing task overwrites its staged file.

    :param io: the table's FileIO (``table.io``).
    :param table_location: the table's location (``table.location()``).
    :param doc: a JSON document with a ``schema`` key.
    :param name: a name unique to the producing task (see :func:`staging_uri`).
    :param threshold: the largest file count carried inline; negative values are refused.
    :raises ConfigurationError: for a negative threshold or an empty name.
    :raises DataFileCodecError: when ``doc`` has no ``schema`` or is not JSON-serializable.
    """
    if threshold < 0:
        raise ConfigurationError(f"payload file threshold must be >= 0, got {threshold}")
    inner_schema = doc.get("schema")
    if not isinstance(inner_schema, str):
        raise DataFileCodecError("a payload to offload needs a 'schema' string")
    file_count = count_files(doc)
    if file_count <= threshold:
        return dict(doc)
    uri = staging_uri(table_location, name)
    try:
        # A dry run first: a document that is not strict JSON is refused before anything is written.
        size = _write_json(doc, _DISCARD)
    except (TypeError, ValueError) as err:
        raise DataFileCodecError(f"payload {inner_schema!r} is not JSON-serializable: {err}") from err
    with io.new_output(uri).create(overwrite=True) as stream:
        _write_json(doc, stream)
    ref: dict[str, Any] = {
        "schema": PAYLOAD_REF_SCHEMA,
        "uri": uri,
        "inner_schema": inner_schema,
        "file_count": file_count,
        "size_bytes": size,
    }
    for key in _CARRIED_KEYS:
        if key in doc:
            ref[key] = doc[key]
    return ref


class _Discard:
    """A stream that keeps nothing (the dry run of :func:`_write_json`)."""

    def write(self, data: bytes) -> int:
        return len(data)


_DISCARD = _Discard()
#: bytes gathered before each write of a streamed payload
_WRITE_CHUNK_BYTES = 1 << 20


def _write_json(doc: Any, stream: Any) -> int:
    """Write ``json.dumps(doc, separators=(",", ":"), allow_nan=False)`` to ``stream``, byte for byte, without
    building that text: objects and long lists are walked, every other value (a file entry, a short list)
    is encoded whole by ``json.dumps`` (C-speed). A task of 500,000 files is hundreds of MB of text, which
    was built as one string and again as bytes beside the document. Returns the bytes written.

    >>> import io
    >>> files = [{"file-path": f"f{i}", "n": [i, 1.5], "m": {1: "é"}} for i in range(20)]
    >>> doc = {"schema": "s", "tasks": [{"data_files": files, "x": None}]}
    >>> out = io.BytesIO()
    >>> _write_json(doc, out) == len(out.getvalue())
    True
    >>> out.getvalue() == json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    True
    """
    pending: list[bytes] = []
    pending_bytes = written = 0

    def emit(text: str) -> None:
        nonlocal pending_bytes, written
        data = text.encode("utf-8")
        pending.append(data)
        pending_bytes += len(data)
        written += len(data)
        if pending_bytes >= _WRITE_CHUNK_BYTES:
            stream.write(b"".join(pending))
            pending.clear()
            pending_bytes = 0

    def walk(value: Any) -> None:
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            emit("{")
            for number, (key, item) in enumerate(value.items()):
                emit(("," if number else "") + json.dumps(key) + ":")
                walk(item)
            emit("}")
        elif isinstance(value, list) and len(value) > 16:
            emit("[")
            for number, item in enumerate(value):
                if number:
                    emit(",")
                walk(item)
            emit("]")
        else:
            emit(json.dumps(value, separators=(",", ":"), allow_nan=False))

    walk(doc)
    if pending:
        stream.write(b"".join(pending))
    return written


def resolve_payload(io: FileIO, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Return the document a reference points to, or ``doc`` itself when it is not a reference.

    :param io: a FileIO that can read the staged file (the table's ``table.io``).
    :param doc: a payload as received from the producing task.
    :raises DataFileCodecError: when the staged file is missing, not JSON, or of another schema.
    """
    if not is_payload_ref(doc):
        return dict(doc)
    uri = doc.get("uri")
    inner_schema = doc.get("inner_schema")
    if not isinstance(uri, str) or not uri:
        raise DataFileCodecError("payload reference without a 'uri'")
    try:
        with io.new_input(uri).open() as stream:
            data = stream.read()
    except (FileNotFoundError, OSError) as err:
        raise DataFileCodecError(f"staged payload {uri} cannot be read: {err}") from err
    try:
        inner = json.loads(data)
    except ValueError as err:
        raise DataFileCodecError(f"staged payload {uri} is not JSON: {err}") from err
    if not isinstance(inner, dict) or inner.get("schema") != inner_schema:
        found = inner.get("schema") if isinstance(inner, dict) else type(inner).__name__
        raise DataFileCodecError(f"staged payload {uri} has schema {found!r}, expected {inner_schema!r}")
    return inner
