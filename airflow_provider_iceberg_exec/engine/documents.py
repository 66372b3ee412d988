"""Complete validation of the documents that cross a process boundary, when they are read.

A plan, a task, a result or a scan result reaches the next step through XCom, a file or a person, so it
is checked in full before anything acts on it: its schema and version, every required key and its type,
and its self-consistency (a result's added files account for its record counts). A bad document is a
:class:`~.errors.DataFileCodecError` whose one line names the document and the key; nothing has been
committed or deleted at that point.

What a document claims about the table and the storage (files exist with the size and the record count
it says, the base snapshot exists, the deletes it applied are the ones that apply) is verified against
the table by :mod:`.verification` at commit time; this module is pure.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import (
    COMPACTION_PLAN,
    CONVERT_PLAN,
    CONVERT_TASK,
    CONVERT_TASK_RESULT,
    COW_PLAN,
    COW_RESULT,
    COW_TASK,
    ORPHAN_SCAN_RESULT,
    POSITION_DELETE_PLAN,
    POSITION_DELETE_RESULT,
    POSITION_DELETE_TASK,
    REWRITE_RESULT,
    REWRITE_TASK,
    check_envelope,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = [
    "applied_delete",
    "applied_deletes_of",
    "check_base_snapshot",
    "check_compaction_plan",
    "check_convert_plan",
    "check_convert_task",
    "check_convert_task_result",
    "check_cow_plan",
    "check_cow_result",
    "check_cow_task",
    "check_orphan_scan_result",
    "check_position_delete_plan",
    "check_position_delete_result",
    "check_position_delete_task",
    "check_rewrite_result",
    "check_rewrite_task",
    "content_file_entries",
]

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_KIND_NAMES = {int: "an integer", str: "a string", list: "a list", dict: "an object", bool: "true or false"}


class _Doc:
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
        """A list of content-file JSON objects, each with a path, a size and a record count, none twice."""
        values: list[Any] = self.get(key, list, required=required) or []
        seen: set[str] = set()
        for pos, item in enumerate(values):
            path = self.file(f"{key}[{pos}]", item, content)
            if path in seen:
                raise self.error(key, f"lists {path} more than once")
            seen.add(path)
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


def _check_task_entries(reader: _Doc, key: str) -> None:
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


def check_rewrite_task(doc: Any) -> Mapping[str, Any]:
    """Validate a compaction task (``iceberg-exec/rewrite-task@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.

    >>> check_rewrite_task({"schema": "iceberg-exec/rewrite-task@1", "table": "ns.t"})
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.DataFileCodecError: invalid iceberg-exec/rewrite-task@1 document: key 'group_id': is missing
    """  # noqa: E501
    reader = _Doc(doc, REWRITE_TASK)
    reader.table()
    group = reader.text("group_id")
    reader.where = f"{REWRITE_TASK} document (group {group})"
    if not _SAFE_NAME.fullmatch(group) or ".." in group:
        # It prefixes the output's file names: a "/" or ".." would write outside the table.
        raise reader.error("group_id", f"{group!r} must be letters, digits, '.', '_' or '-' only")
    reader.text("branch", required=False)
    reader.get("base_snapshot_id", int)
    reader.get("output_spec_id", int)
    reader.count("commit_batch", required=False)
    reader.get("options", dict, required=False)
    reader.get("strategy", str, required=False)
    reader.get("sort_order", str, required=False, nullable=True)
    reader.get("needs_repartition", bool, required=False)
    _check_task_entries(reader, "data_files")
    if not reader.doc["data_files"]:
        raise reader.error("data_files", "is empty; a task rewrites at least one file")
    return check_envelope(doc, REWRITE_TASK)


def check_compaction_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a compaction plan and every task in it; return it.

    :raises DataFileCodecError: naming the plan's or a task's first bad key.
    """
    reader = _Doc(doc, COMPACTION_PLAN)
    table = reader.table()
    base = reader.get("base_snapshot_id", int)
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_rewrite_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
        if task["table"] != table or task["base_snapshot_id"] != base:
            raise reader.error(f"tasks[{pos}]", "belongs to another table or base snapshot than the plan")
    return reader.doc


def check_rewrite_result(doc: Any) -> Mapping[str, Any]:
    """Validate a compaction result (``iceberg-exec/rewrite-result@1``) completely; return it.

    Beyond the keys and their types, its counts must account for its files: the rewritten files hold
    ``rewritten_records`` rows, the added ones ``added_records``, and the difference is the rows the
    rewrite deleted (``position_deleted_records`` + ``equality_deleted_records``). Every added file is
    named after the group (its writer's prefix), and no file is both rewritten and added.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, REWRITE_RESULT)
    reader.table()
    group = reader.text("group_id")
    reader.where = f"{REWRITE_RESULT} document (group {group})"
    reader.text("branch")
    reader.get("base_snapshot_id", int)
    reader.count("commit_batch")
    reader.get("options", dict)
    rewritten = reader.files("rewritten_data_files")
    added = reader.files("added_data_files")
    if not rewritten:
        raise reader.error("rewritten_data_files", "is empty; a rewrite removes at least one file")
    _check_applied_deletes(reader, rewritten)
    counts = {key: reader.count(key) for key in _RESULT_COUNTS}
    for measured in ("peak_rss_bytes", "spilled_bytes"):
        reader.count(measured, required=False)
    _check_sums(reader, rewritten, "rewritten_records", counts["rewritten_records"], "record-count")
    _check_sums(reader, added, "added_records", counts["added_records"], "record-count")
    _check_sums(
        reader, rewritten, "rewritten_bytes_count", counts["rewritten_bytes_count"], "file-size-in-bytes"
    )
    _check_sums(reader, added, "added_bytes_count", counts["added_bytes_count"], "file-size-in-bytes")
    deleted = counts["position_deleted_records"] + counts["equality_deleted_records"]
    if counts["deleted_records"] != deleted:
        raise reader.error(
            "deleted_records",
            f"{counts['deleted_records']} is not position_deleted_records + equality_deleted_records "
            f"= {deleted}",
        )
    if counts["rewritten_records"] - deleted != counts["added_records"]:
        raise reader.error(
            "added_records",
            f"{counts['added_records']} rows added, but {counts['rewritten_records']} rewritten minus "
            f"{deleted} deleted is {counts['rewritten_records'] - deleted}",
        )
    _check_outputs(reader, added, rewritten, f"{group}-")
    return reader.doc


_RESULT_COUNTS = (
    "rewritten_records",
    "added_records",
    "deleted_records",
    "position_deleted_records",
    "equality_deleted_records",
    "rewritten_bytes_count",
    "added_bytes_count",
)


def _check_sums(reader: _Doc, files: Sequence[Mapping[str, Any]], key: str, claimed: int, field: str) -> None:
    total = sum(int(f[field]) for f in files)
    if total != claimed:
        raise reader.error(key, f"says {claimed}, but its files' {field!r} add up to {total}")


def _check_outputs(
    reader: _Doc, added: Sequence[Mapping[str, Any]], removed: Sequence[Mapping[str, Any]], prefix: str
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


def _check_applied_deletes(reader: _Doc, removed: Sequence[Mapping[str, Any]]) -> None:
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
        if (
            not valid
            or not isinstance(deletes, Mapping)
            or not all(map(_is_applied_delete, deletes.values()))
        ):
            raise reader.error(
                f"applied_deletes[{path!r}]",
                "expected {'data-sequence-number': int, 'delete-files': {path: [sequence number, content, "
                "equality ids]}}",
            )


def _is_applied_delete(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], int)
        and not isinstance(value[0], bool)
        and value[1] in ("position-deletes", "equality-deletes")
        and isinstance(value[2], list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value[2])
    )


def check_cow_task(doc: Any) -> Mapping[str, Any]:
    """Validate a copy-on-write task (``iceberg-exec/cow-task@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, COW_TASK)
    reader.table()
    reader.where = f"{COW_TASK} document (task {reader.get('task_id', int)})"
    operation = _check_cow_common(reader)
    reader.get("schema_id", int)
    reader.get("output_spec_id", int)
    _check_task_entries(reader, "data_files")
    sources: list[Any] = reader.get("source_files", list, required=False) or []
    if sources and operation != "overwrite":
        raise reader.error("source_files", f"only an overwrite loads files, not a {operation}")
    for pos, source in enumerate(sources):
        valid = isinstance(source, Mapping) and isinstance(source.get("path"), str)
        if not valid or not all(
            isinstance(source.get(k), int) and not isinstance(source.get(k), bool)
            for k in ("size-in-bytes", "record-count")
        ):
            raise reader.error(f"source_files[{pos}]", "expected {'path', 'size-in-bytes', 'record-count'}")
    return check_envelope(doc, COW_TASK)


def check_cow_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a copy-on-write plan and every task in it; return it."""
    reader = _Doc(doc, COW_PLAN)
    reader.table()
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_cow_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
    return reader.doc


def _check_cow_common(reader: _Doc) -> str:
    """The keys every copy-on-write document carries; returns the operation."""
    operation = reader.text("operation")
    if operation not in ("delete", "update", "overwrite"):
        raise reader.error(
            "operation", f"unknown operation {operation!r}; expected delete, update or overwrite"
        )
    reader.text("where")
    reader.text("branch")
    reader.get("base_snapshot_id", int, nullable=True)
    reader.text("isolation_level")
    if reader.get("set", dict, required=False, nullable=True) and operation != "update":
        raise reader.error("set", f"only an update sets columns, not a {operation}")
    return operation


def check_cow_result(doc: Any) -> Mapping[str, Any]:
    """Validate a copy-on-write result (``iceberg-exec/cow-result@1``) completely; return it.

    Its counts must account for its files: the rows the added files hold are the rows copied, updated and
    inserted, and each removed file's rows are copied, updated, deleted by the predicate or by a delete
    file. Added files are named after the task.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, COW_RESULT)
    reader.table()
    task = reader.get("task_id", int)
    reader.where = f"{COW_RESULT} document (task {task})"
    operation = _check_cow_common(reader)
    removed = reader.files("removed_data_files")
    added = reader.files("added_data_files")
    _check_applied_deletes(reader, removed)
    for measured in ("peak_rss_bytes", "spilled_bytes"):
        reader.count(measured, required=False)
    counts = {key: reader.count(key) for key in _COW_COUNTS}
    for key, allowed in (("inserted_rows", "overwrite"), ("updated_rows", "update")):
        if counts[key] and operation != allowed:
            raise reader.error(key, f"{counts[key]} rows, but only an {allowed} has them, not a {operation}")
    _check_sums(
        reader,
        added,
        "written_rows",
        counts["rewritten_rows"] + counts["updated_rows"] + counts["inserted_rows"],
        "record-count",
    )
    removed_rows = sum(int(f["record-count"]) for f in removed)
    accounted = (
        counts["rewritten_rows"]
        + counts["updated_rows"]
        + counts["deleted_rows"]
        + counts["delete_file_rows"]
    )
    if removed_rows != accounted:
        raise reader.error(
            "removed_data_files",
            f"hold {removed_rows} rows, but copied + updated + deleted + removed by delete files is "
            f"{accounted}",
        )
    _check_outputs(reader, added, removed, f"cow-{task}-")
    return reader.doc


_COW_COUNTS = ("deleted_rows", "updated_rows", "inserted_rows", "rewritten_rows", "delete_file_rows")


def check_orphan_scan_result(doc: Any) -> Mapping[str, Any]:
    """Validate an orphan scan result (``iceberg-exec/orphan-scan-result@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing or mistyped.
    """
    reader = _Doc(doc, ORPHAN_SCAN_RESULT)
    reader.table()
    reader.text("orphan_list_uri")
    reader.count("older_than_ms")
    reader.get("table_uuid", str, required=False)
    locations: list[Any] = reader.get("locations", list)
    if not locations or not all(isinstance(loc, str) and loc.strip() for loc in locations):
        raise reader.error("locations", "expected a non-empty list of locations")
    for key in ("equal_schemes", "equal_authorities"):
        mapping = reader.get(key, dict, required=False) or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
            raise reader.error(key, "expected an object of strings")
    return reader.doc


def _check_paths(reader: _Doc, key: str, *, non_empty: bool = False) -> list[str]:
    values: list[Any] = reader.get(key, list)
    if non_empty and not values:
        raise reader.error(key, "is empty")
    if bad := [v for v in values if not isinstance(v, str) or not v.strip()]:
        raise reader.error(key, f"expected file paths, got {bad[0]!r}")
    if len(set(values)) != len(values):
        raise reader.error(key, "lists a path more than once")
    return values


def _check_convert_common(reader: _Doc) -> str:
    reader.table()
    task_id = reader.text("task_id")
    reader.where = f"{reader.where} (task {task_id})"
    if not _SAFE_NAME.fullmatch(task_id) or ".." in task_id:
        # It prefixes the output's file names: a "/" or ".." would write outside the table.
        raise reader.error("task_id", f"{task_id!r} must be letters, digits, '.', '_' or '-' only")
    reader.text("branch")
    reader.get("base_snapshot_id", int)
    _check_paths(reader, "equality_delete_files", non_empty=True)
    return task_id


def check_convert_task(doc: Any) -> Mapping[str, Any]:
    """Validate an equality -> position conversion task (``iceberg-exec/convert-task@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, CONVERT_TASK)
    _check_convert_common(reader)
    reader.get("options", dict)
    if "dangling_equality_delete_files" in reader.doc:
        _check_paths(reader, "dangling_equality_delete_files")
    _check_task_entries(reader, "data_files")
    if not reader.doc["data_files"]:
        raise reader.error("data_files", "is empty; a task examines at least one data file")
    return reader.doc


def check_convert_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a conversion plan and every task in it; return it.

    :raises DataFileCodecError: naming the plan's or a task's first bad key.
    """
    reader = _Doc(doc, CONVERT_PLAN)
    table = reader.table()
    base = reader.get("base_snapshot_id", int, nullable=True)
    reader.count("equality_delete_files_count")
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_convert_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
        if task["table"] != table or task["base_snapshot_id"] != base:
            raise reader.error(f"tasks[{pos}]", "belongs to another table or base snapshot than the plan")
    if "dangling_equality_delete_files" in reader.doc:
        _check_paths(reader, "dangling_equality_delete_files")
    return reader.doc


def check_convert_task_result(doc: Any) -> Mapping[str, Any]:
    """Validate a conversion task's result (``iceberg-exec/convert-task-result@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, CONVERT_TASK_RESULT)
    _check_convert_common(reader)
    _check_paths(reader, "data_files")
    _check_paths(reader, "merged_position_delete_files")
    _check_paths(reader, "dangling_equality_delete_files")
    added = reader.files("added_delete_files", content="position-deletes")
    matched = reader.count("matched_rows")
    for key in ("data_rows_read", "delete_rows_read", "peak_rss_bytes", "spilled_bytes"):
        reader.count(key)
    elapsed = reader.doc.get("elapsed_seconds")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or elapsed < 0:
        raise reader.error("elapsed_seconds", f"expected seconds, got {elapsed!r}")
    written = sum(int(f["record-count"]) for f in added)
    if written < matched:
        raise reader.error(
            "added_delete_files", f"hold {written} positions, fewer than the {matched} matched rows"
        )
    return reader.doc


def _check_group_id(reader: _Doc) -> str:
    """The group id: it prefixes the output's file names, so a "/" or ".." would write outside the table."""
    group = reader.text("group_id")
    reader.where = f"{reader.where} (group {group})"
    if not _SAFE_NAME.fullmatch(group) or ".." in group:
        raise reader.error("group_id", f"{group!r} must be letters, digits, '.', '_' or '-' only")
    return group


def _check_sequenced_deletes(reader: _Doc, key: str) -> list[Mapping[str, Any]]:
    """``[{"content-file": position delete file, "data-sequence-number": int}]``, non-empty, none twice."""
    entries: list[Any] = reader.get(key, list)
    if not entries:
        raise reader.error(key, "is empty; a group rewrites at least one delete file")
    seen: set[str] = set()
    for pos, entry in enumerate(entries):
        where = f"{key}[{pos}]"
        if not isinstance(entry, Mapping):
            raise reader.error(where, "expected an object with a 'content-file' object")
        path = reader.file(f"{where}['content-file']", entry.get("content-file"), "position-deletes")
        if not _is_count(entry.get("data-sequence-number")):
            raise reader.error(where, "'data-sequence-number' is missing or not a count")
        if path in seen:
            raise reader.error(key, f"lists {path} more than once")
        seen.add(path)
    return entries


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_position_delete_task(doc: Any) -> Mapping[str, Any]:
    """Validate a position-delete rewrite task (``iceberg-exec/position-delete-task@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, POSITION_DELETE_TASK)
    reader.table()
    _check_group_id(reader)
    reader.text("branch")
    reader.get("base_snapshot_id", int)
    reader.count("commit_batch")
    reader.get("options", dict)
    reader.count("spec_id")
    reader.get("partition", list)
    reader.count("input_bytes")
    _check_sequenced_deletes(reader, "delete_files")
    live: list[Any] = reader.get("live_data_files", list)
    for pos, entry in enumerate(live):
        valid = isinstance(entry, Mapping) and isinstance(entry.get("file-path"), str)
        if not valid or not _is_count(entry.get("data-sequence-number")):
            raise reader.error(f"live_data_files[{pos}]", "expected {'file-path', 'data-sequence-number'}")
    if len({e["file-path"] for e in live}) != len(live):
        raise reader.error("live_data_files", "lists a data file more than once")
    return reader.doc


def check_position_delete_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a position-delete rewrite plan and every task in it; return it."""
    reader = _Doc(doc, POSITION_DELETE_PLAN)
    table = reader.table()
    base = reader.get("base_snapshot_id", int, nullable=True)
    reader.get("options", dict)
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_position_delete_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
        if task["table"] != table or task["base_snapshot_id"] != base:
            raise reader.error(f"tasks[{pos}]", "belongs to another table or base snapshot than the plan")
    return reader.doc


def check_position_delete_result(doc: Any) -> Mapping[str, Any]:
    """Validate a position-delete rewrite result (``iceberg-exec/position-delete-result@1``); return it.

    Its counts must account for its files: the inputs hold ``rewritten_records`` positions, the outputs
    ``added_records``, and the difference is the dangling and repeated positions dropped. The outputs are
    position delete files named after the group, and their sequence number is the largest input's.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = _Doc(doc, POSITION_DELETE_RESULT)
    reader.table()
    group = _check_group_id(reader)
    reader.text("branch")
    reader.get("base_snapshot_id", int)
    reader.count("commit_batch")
    reader.get("options", dict)
    inputs = _check_sequenced_deletes(reader, "rewritten_delete_files")
    rewritten = [dict(e["content-file"]) for e in inputs]
    added = reader.files("added_delete_files", content="position-deletes")
    sequence = reader.count("data_sequence_number")
    if sequence != max(int(e["data-sequence-number"]) for e in inputs):
        raise reader.error("data_sequence_number", f"{sequence} is not the largest of the inputs'")
    counts = {key: reader.count(key) for key in _POSITION_DELETE_COUNTS}
    for measured in ("peak_rss_bytes", "spilled_bytes"):
        reader.count(measured, required=False)
    _check_sums(reader, rewritten, "rewritten_records", counts["rewritten_records"], "record-count")
    _check_sums(reader, added, "added_records", counts["added_records"], "record-count")
    _check_sums(
        reader, rewritten, "rewritten_bytes_count", counts["rewritten_bytes_count"], "file-size-in-bytes"
    )
    _check_sums(reader, added, "added_bytes_count", counts["added_bytes_count"], "file-size-in-bytes")
    dropped = counts["dangling_records"] + counts["duplicate_records"]
    if counts["rewritten_records"] - dropped != counts["added_records"]:
        raise reader.error(
            "added_records",
            f"{counts['added_records']} positions added, but {counts['rewritten_records']} read minus "
            f"{dropped} dropped is {counts['rewritten_records'] - dropped}",
        )
    _check_outputs(reader, added, rewritten, f"{group}-")
    return reader.doc


_POSITION_DELETE_COUNTS = (
    "rewritten_records",
    "added_records",
    "dangling_records",
    "duplicate_records",
    "rewritten_bytes_count",
    "added_bytes_count",
)
