"""The delete-file documents: equality -> position conversion and position-delete compaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import (
    CONVERT_PLAN,
    CONVERT_TASK,
    CONVERT_TASK_RESULT,
    POSITION_DELETE_PLAN,
    POSITION_DELETE_RESULT,
    POSITION_DELETE_TASK,
)
from airflow_provider_iceberg_exec.engine.documents.reader import (
    SAFE_NAME,
    DocReader,
    check_outputs,
    check_paths,
    check_sums,
    check_task_entries,
    is_count,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError


def _check_convert_common(reader: DocReader) -> str:
    reader.table()
    task_id = reader.text("task_id")
    reader.where = f"{reader.where} (task {task_id})"
    if not SAFE_NAME.fullmatch(task_id) or ".." in task_id:
        # It prefixes the output's file names: a "/" or ".." would write outside the table.
        raise reader.error("task_id", f"{task_id!r} must be letters, digits, '.', '_' or '-' only")
    reader.text("branch")
    reader.get("base_snapshot_id", int)
    check_paths(reader, "equality_delete_files", non_empty=True)
    return task_id


def check_convert_task(doc: Any) -> Mapping[str, Any]:
    """Validate an equality -> position conversion task (``iceberg-exec/convert-task@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, CONVERT_TASK)
    _check_convert_common(reader)
    reader.get("options", dict)
    if "dangling_equality_delete_files" in reader.doc:
        check_paths(reader, "dangling_equality_delete_files")
    check_task_entries(reader, "data_files")
    if not reader.doc["data_files"]:
        raise reader.error("data_files", "is empty; a task examines at least one data file")
    return reader.doc


def check_convert_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a conversion plan and every task in it; return it.

    :raises DataFileCodecError: naming the plan's or a task's first bad key.
    """
    reader = DocReader(doc, CONVERT_PLAN)
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
        check_paths(reader, "dangling_equality_delete_files")
    return reader.doc


def check_convert_task_result(doc: Any) -> Mapping[str, Any]:
    """Validate a conversion task's result (``iceberg-exec/convert-task-result@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, CONVERT_TASK_RESULT)
    _check_convert_common(reader)
    check_paths(reader, "data_files")
    check_paths(reader, "merged_position_delete_files")
    check_paths(reader, "dangling_equality_delete_files")
    added = reader.files("added_delete_files", content="position-deletes")
    if "rewritten_delete_files" in reader.doc:  # v3: the old DVs and file-scoped files the DVs replace
        reader.files("rewritten_delete_files", content="position-deletes")
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


def _check_group_id(reader: DocReader) -> str:
    """The group id: it prefixes the output's file names, so a "/" or ".." would write outside the table."""
    group = reader.text("group_id")
    reader.where = f"{reader.where} (group {group})"
    if not SAFE_NAME.fullmatch(group) or ".." in group:
        raise reader.error("group_id", f"{group!r} must be letters, digits, '.', '_' or '-' only")
    return group


def _check_sequenced_deletes(reader: DocReader, key: str) -> list[Mapping[str, Any]]:
    """``[{"content-file": position delete file, "data-sequence-number": int}]``, non-empty, none twice."""
    entries: list[Any] = reader.get(key, list)
    if not entries:
        raise reader.error(key, "is empty; a group rewrites at least one delete file")
    seen: set[tuple[str, Any]] = set()
    for pos, entry in enumerate(entries):
        where = f"{key}[{pos}]"
        if not isinstance(entry, Mapping):
            raise reader.error(where, "expected an object with a 'content-file' object")
        path = reader.file(f"{where}['content-file']", entry.get("content-file"), "position-deletes")
        if not is_count(entry.get("data-sequence-number")):
            raise reader.error(where, "'data-sequence-number' is missing or not a count")
        identity = (path, entry["content-file"].get("content-offset"))  # DVs share their Puffin's path
        if identity in seen:
            raise reader.error(key, f"lists {path} more than once")
        seen.add(identity)
    return entries


def _blob_sizes(files: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The files with a DV's ``file-size-in-bytes`` read as its blob's size: what it counts for in byte
    totals (Java's ``RewritePositionDeletesGroup``), since DVs of one Puffin each name the whole file."""
    return [
        {**f, "file-size-in-bytes": f["content-size-in-bytes"]}
        if isinstance(f.get("content-size-in-bytes"), int)
        else dict(f)
        for f in files
    ]


def check_position_delete_task(doc: Any) -> Mapping[str, Any]:
    """Validate a position-delete rewrite task (``iceberg-exec/position-delete-task@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, POSITION_DELETE_TASK)
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
        if not valid or not is_count(entry.get("data-sequence-number")):
            raise reader.error(f"live_data_files[{pos}]", "expected {'file-path', 'data-sequence-number'}")
    if len({e["file-path"] for e in live}) != len(live):
        raise reader.error("live_data_files", "lists a data file more than once")
    return reader.doc


def check_position_delete_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a position-delete rewrite plan and every task in it; return it."""
    reader = DocReader(doc, POSITION_DELETE_PLAN)
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
    reader = DocReader(doc, POSITION_DELETE_RESULT)
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
    check_sums(reader, rewritten, "rewritten_records", counts["rewritten_records"], "record-count")
    check_sums(reader, added, "added_records", counts["added_records"], "record-count")
    check_sums(
        reader,
        _blob_sizes(rewritten),
        "rewritten_bytes_count",
        counts["rewritten_bytes_count"],
        "file-size-in-bytes",
    )
    check_sums(
        reader, _blob_sizes(added), "added_bytes_count", counts["added_bytes_count"], "file-size-in-bytes"
    )
    dropped = counts["dangling_records"] + counts["duplicate_records"]
    if counts["rewritten_records"] - dropped != counts["added_records"]:
        raise reader.error(
            "added_records",
            f"{counts['added_records']} positions added, but {counts['rewritten_records']} read minus "
            f"{dropped} dropped is {counts['rewritten_records'] - dropped}",
        )
    check_outputs(reader, added, rewritten, f"{group}-")
    return reader.doc


_POSITION_DELETE_COUNTS = (
    "rewritten_records",
    "added_records",
    "dangling_records",
    "duplicate_records",
    "rewritten_bytes_count",
    "added_bytes_count",
)
