"""Typed, one-line-error access to a document, and the checks several documents share."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import (
    check_envelope,
)
from airflow_provider_iceberg_exec.engine.documents.packed import is_packed
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


_KIND_NAMES = {int: "an integer", str: "a string", list: "a list", dict: "an object", bool: "true or false"}


class DocReader:
    """Typed access to one document; every problem is a one-line DataFileCodecError naming the key."""

    def __init__(self, doc: Any, schema: str, label: str = "") -> None:
        self.doc = check_envelope(doc, schema)
        self.where = f"{schema} document{f' ({label})' if label else ''}"

    def error(self, key: str, problem: str) -> DataFileCodecError:
        return DataFileCodecError(f"invalid {self.where}: key {key!r}: {problem}")

    def get(self, key: str, kind: type, *, required: bool = True, nullable: bool = False) -> Any:
        if key not in self.doc:
            if required:
                raise self.error(key, "is missing")
            return None
        value = self.doc[key]
        if value is None:
            if nullable or not required:
                return None
            raise self.error(key, f"is null; expected {_KIND_NAMES[kind]}")
        if kind is list and is_packed(value):
            return value  # a task's entries packed by the one-call compaction, read as a list
        # bool is an int in Python, but never a count or an id in these documents.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(key, f"expected {_KIND_NAMES[kind]}, got {type(value).__name__}")
        return value

    def count(self, key: str, *, required: bool = True) -> int:
        value: int | None = self.get(key, int, required=required)
        if value is not None and value < 0:
            raise self.error(key, f"must be >= 0, got {value}")
        return value or 0

    def text(self, key: str, *, required: bool = True) -> str:
        value: str | None = self.get(key, str, required=required)
        if required and not (value or "").strip():
            raise self.error(key, "must not be empty")
        return value or ""

    def table(self) -> str:
        name = self.text("table")
        if "." not in name.strip(".") or name != name.strip():
            raise self.error("table", f"expected 'namespace.table', got {name!r}")
        return name

    def files(self, key: str, *, required: bool = True, content: str | None = "data") -> list[dict[str, Any]]:
        """A list of content-file JSON objects, each with a path, a size and a record count, none twice
        (deletion vectors of one Puffin file share its path: one is told from another by its offset)."""
        values: list[Any] = self.get(key, list, required=required) or []
        seen: set[tuple[str, Any]] = set()
        for pos, item in enumerate(values):
            path = self.file(f"{key}[{pos}]", item, content)
            identity = (path, item.get("content-offset"))
            if identity in seen:
                raise self.error(key, f"lists {path} more than once")
            seen.add(identity)
        return values

    def file(self, where: str, item: Any, content: str | None) -> str:
        """Check one content-file object's path, size, record count and content; return its path."""
        if not isinstance(item, Mapping):
            raise self.error(where, f"expected a content-file object, got {type(item).__name__}")
        path = item.get("file-path")
        if not isinstance(path, str) or not path.strip():
            raise self.error(where, "'file-path' is missing or not a string")
        for field in ("record-count", "file-size-in-bytes"):
            number = item.get(field)
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                raise self.error(where, f"{field!r} of {path} is missing or not a count")
        if content is not None and item.get("content") != content:
            raise self.error(where, f"{path} has content {item.get('content')!r}, expected {content!r}")
        return path


def applied_deletes_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What a result reports for one rewritten or removed task entry: its data sequence number and the
    delete files applied to it, each as ``[data sequence number, content, equality ids]``: all the
    commit checks against the base snapshot (a relabelled or re-sequenced delete applies differently).

    >>> delete = {"file-path": "d.parquet", "content": "equality-deletes", "equality-ids": [2, 1]}
    >>> applied_deletes_of({"data-file": {}, "data-sequence-number": 3, "delete-files": [
    ...     {"content-file": delete, "data-sequence-number": 5}]})
    {'data-sequence-number': 3, 'delete-files': {'d.parquet': [5, 'equality-deletes', [1, 2]]}}
    """
    return {
        "data-sequence-number": int(entry.get("data-sequence-number") or 0),
        "delete-files": {
            str(d["content-file"]["file-path"]): applied_delete(
                int(d.get("data-sequence-number") or 0),
                str(d["content-file"].get("content")),
                d["content-file"].get("equality-ids"),
            )
            for d in entry.get("delete-files") or []
        },
    }


def applied_delete(sequence_number: int, content: str, equality_ids: Sequence[int] | None) -> list[Any]:
    """How one applied delete file is reported and compared: ``[sequence number, content, sorted ids]``.

    >>> applied_delete(4, "position-deletes", None)
    [4, 'position-deletes', []]
    """
    return [sequence_number, content, sorted(int(i) for i in equality_ids or [])]


def check_base_snapshot(metadata: Any, snapshot_id: int) -> None:
    """Refuse a task planned on a snapshot the table does not have (another table's, or expired).

    :raises DataFileCodecError: naming the snapshot.
    """
    if metadata.snapshot_by_id(snapshot_id) is None:
        raise DataFileCodecError(
            f"the task's base snapshot {snapshot_id} is not a snapshot of the table (planned on another "
            "table, or expired since): plan again"
        )


def content_file_entries(doc: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The content files of a task's ``data_files`` (``{"data-file": ..., "delete-files": [...]}``).

    >>> content_file_entries({"data_files": [{"data-file": {"file-path": "a"}}]}, "data_files")
    [{'file-path': 'a'}]
    """
    return [dict(entry["data-file"]) for entry in doc.get(key) or []]


def check_task_entries(reader: DocReader, key: str) -> None:
    """A task's ``data_files``: each a data file with its sequence number and the deletes to apply."""
    entries: list[Any] = reader.get(key, list)
    seen: set[str] = set()
    for pos, entry in enumerate(entries):
        where = f"{key}[{pos}]"
        if not isinstance(entry, Mapping):
            raise reader.error(where, "expected an object with a 'data-file' object")
        path = reader.file(f"{where}['data-file']", entry.get("data-file"), "data")
        sequence = entry.get("data-sequence-number")
        if not isinstance(sequence, int) or isinstance(sequence, bool):
            raise reader.error(where, "'data-sequence-number' is missing or not an integer")
        deletes = entry.get("delete-files", [])
        if not isinstance(deletes, list):
            raise reader.error(where, "'delete-files' must be a list")
        for number, delete in enumerate(deletes):
            if not isinstance(delete, Mapping):
                raise reader.error(f"{where}['delete-files'][{number}]", "expected an object")
            reader.file(f"{where}['delete-files'][{number}]", delete.get("content-file"), None)
        if path in seen:
            raise reader.error(key, f"lists {path} more than once")
        seen.add(path)


def check_paths(reader: DocReader, key: str, *, non_empty: bool = False) -> list[str]:
    values: list[Any] = reader.get(key, list)
    if non_empty and not values:
        raise reader.error(key, "is empty")
    if bad := [v for v in values if not isinstance(v, str) or not v.strip()]:
        raise reader.error(key, f"expected file paths, got {bad[0]!r}")
    if len(set(values)) != len(values):
        raise reader.error(key, "lists a path more than once")
    return values


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_sums(
    reader: DocReader, files: Sequence[Mapping[str, Any]], key: str, claimed: int, field: str
) -> None:
    total = sum(int(f[field]) for f in files)
    if total != claimed:
        raise reader.error(key, f"says {claimed}, but its files' {field!r} add up to {total}")


def check_outputs(
    reader: DocReader, added: Sequence[Mapping[str, Any]], removed: Sequence[Mapping[str, Any]], prefix: str
) -> None:
    """Every added file is named by the writing task's prefix, and none is also a removed one."""
    for pos, item in enumerate(added):
        name = posixpath.basename(str(item["file-path"]))
        if not name.startswith(prefix):
            raise reader.error(
                f"added_data_files[{pos}]",
                f"{item['file-path']} was not written by this task (prefix {prefix!r})",
            )
    overlap = {f["file-path"] for f in added} & {f["file-path"] for f in removed}
    if overlap:
        raise reader.error("added_data_files", f"{sorted(overlap)[0]} is also removed")


def check_applied_deletes(reader: DocReader, removed: Sequence[Mapping[str, Any]]) -> None:
    """``applied_deletes``: for every removed data file, its data sequence number and the deletes applied."""
    applied: dict[str, Any] = reader.get("applied_deletes", dict)
    paths = {str(f["file-path"]) for f in removed}
    if set(applied) != paths:
        missing = sorted(paths - set(applied)) or sorted(set(applied) - paths)
        raise reader.error("applied_deletes", f"does not cover exactly the removed files: {missing[0]}")
    for path, entry in applied.items():
        sequence = entry.get("data-sequence-number") if isinstance(entry, Mapping) else None
        deletes = entry.get("delete-files") if isinstance(entry, Mapping) else None
        valid = isinstance(sequence, int) and not isinstance(sequence, bool) and isinstance(deletes, Mapping)
        if not valid or not isinstance(deletes, Mapping) or not all(map(is_applied_delete, deletes.values())):
            raise reader.error(
                f"applied_deletes[{path!r}]",
                "expected {'data-sequence-number': int, 'delete-files': {path: [sequence number, content, "
                "equality ids]}}",
            )


def is_applied_delete(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], int)
        and not isinstance(value[0], bool)
        and value[1] in ("position-deletes", "equality-deletes")
        and isinstance(value[2], list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value[2])
    )
