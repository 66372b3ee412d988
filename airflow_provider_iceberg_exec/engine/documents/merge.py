"""The MERGE documents: plan, task and task result, checked in full when they are read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import MERGE_PLAN, MERGE_TASK, MERGE_TASK_RESULT
from airflow_provider_iceberg_exec.engine.documents.reader import (
    SAFE_NAME,
    DocReader,
    check_applied_deletes,
    check_outputs,
    check_paths,
    check_task_entries,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = ["check_merge_plan", "check_merge_task", "check_merge_task_result"]

_MODES = ("copy-on-write", "merge-on-read")
_CLAUSE_KEYS = ("when_matched", "when_not_matched", "when_not_matched_by_source")


def _check_common(reader: DocReader) -> str:
    """The keys a plan, its tasks and their results share; return the task id (or '')."""
    reader.table()
    reader.text("branch")
    reader.get("base_snapshot_id", int, nullable=True)
    reader.get("schema_id", int)
    reader.text("plan_id")
    if reader.text("mode") not in _MODES:
        raise reader.error("mode", f"must be one of {', '.join(_MODES)}")
    if reader.text("isolation_level") not in ("serializable", "snapshot"):
        raise reader.error("isolation_level", "must be serializable or snapshot")
    on: list[Any] = reader.get("on", list)
    if not on or not all(isinstance(c, str) and c for c in on):
        raise reader.error("on", "expected a non-empty list of column names")
    clauses: dict[str, Any] = reader.get("clauses", dict)
    for key in _CLAUSE_KEYS:
        texts = clauses.get(key, [])
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise reader.error("clauses", f"{key!r} must be a list of clause texts")
    reader.text("conflict_filter")
    return ""


def _check_task_id(reader: DocReader) -> str:
    task_id = reader.text("task_id")
    if not SAFE_NAME.fullmatch(task_id) or ".." in task_id:
        # It prefixes the output's file names: a "/" or ".." would write outside the table.
        raise reader.error("task_id", f"{task_id!r} must be letters, digits, '.', '_' or '-' only")
    reader.where = f"{reader.where} (task {task_id})"
    if reader.count("tasks_count") < 1:
        raise reader.error("tasks_count", "must be >= 1")
    reader.get("inserts", bool)
    return task_id


def _check_source(reader: DocReader) -> None:
    source: dict[str, Any] = reader.get("source", dict)
    files = source.get("files") or []
    table = source.get("table")
    if bool(files) == bool(table):
        raise reader.error("source", "must name Parquet files or a source table, one of them")
    for pos, item in enumerate(files):
        if not isinstance(item, Mapping) or not isinstance(item.get("path"), str) or not item["path"]:
            raise reader.error("source", f"files[{pos}] needs a 'path'")
    if table is not None and not isinstance(table, str):
        raise reader.error("source", "'table' must be a table name")


def check_merge_task(doc: Any) -> Mapping[str, Any]:
    """Validate a MERGE task (``iceberg-exec/merge-task@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, MERGE_TASK)
    _check_task_id(reader)
    _check_common(reader)
    reader.get("output_spec_id", int)
    _check_source(reader)
    check_task_entries(reader, "data_files")
    if "key_files" in reader.doc:
        check_task_entries(reader, "key_files")
    return reader.doc


def check_merge_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a MERGE plan and every task in it; return it.

    :raises DataFileCodecError: naming the plan's or a task's first bad key.
    """
    reader = DocReader(doc, MERGE_PLAN)
    _check_common(reader)
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_merge_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
        if task["plan_id"] != reader.doc["plan_id"] or task["tasks_count"] != len(tasks):
            raise reader.error(f"tasks[{pos}]", "belongs to another plan")
    return reader.doc


def check_merge_task_result(doc: Any) -> Mapping[str, Any]:
    """Validate a MERGE task's result (``iceberg-exec/merge-task-result@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, MERGE_TASK_RESULT)
    task_id = _check_task_id(reader)
    _check_common(reader)
    removed = reader.files("removed_data_files")
    added = reader.files("added_data_files")
    deletes = reader.files("added_delete_files", content="position-deletes")
    # v3: the old DVs and file-scoped position files the new DVs replace
    reader.files("rewritten_delete_files", required=False, content="position-deletes")
    check_applied_deletes(reader, removed)
    check_outputs(reader, added, removed, f"merge-{task_id}-")
    changed = check_paths(reader, "changed_data_files")
    for key in (
        "num_target_rows_updated",
        "num_target_rows_deleted",
        "num_target_rows_inserted",
        "num_target_rows_copied",
        "num_target_rows_matched",
        "delete_file_rows",
        "read_bytes",
        "written_bytes",
    ):
        reader.count(key)
    copy_on_write = reader.doc["mode"] == "copy-on-write"
    if copy_on_write and deletes:
        raise reader.error("added_delete_files", "a copy-on-write merge adds no delete files")
    if not copy_on_write and removed:
        raise reader.error("removed_data_files", "a merge-on-read merge removes no data files")
    if copy_on_write and {str(f["file-path"]) for f in removed} != set(changed):
        raise reader.error("changed_data_files", "must be exactly the removed data files")
    rows = sum(int(f["record-count"]) for f in added)
    copied = reader.doc["num_target_rows_copied"] if copy_on_write else 0
    expected = copied + reader.doc["num_target_rows_updated"] + reader.doc["num_target_rows_inserted"]
    if rows != expected:
        raise reader.error(
            "added_data_files", f"hold {rows} rows, but copied + updated + inserted rows are {expected}"
        )
    if not copy_on_write:
        positions = sum(int(f["record-count"]) for f in deletes)
        changed_rows = reader.doc["num_target_rows_updated"] + reader.doc["num_target_rows_deleted"]
        # A DV also holds its data file's earlier deletes (the commit checks the new ones exactly).
        dvs = any("content-size-in-bytes" in f for f in deletes)
        if positions < changed_rows if dvs else positions != changed_rows:
            raise reader.error(
                "added_delete_files",
                f"delete {positions} rows, but updated + deleted rows are {changed_rows}",
            )
    return reader.doc
