"""The copy-on-write documents (tasks, plans, results) and the orphan scan result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import (
    COW_PLAN,
    COW_RESULT,
    COW_TASK,
    ORPHAN_SCAN_RESULT,
    check_envelope,
)
from airflow_provider_iceberg_exec.engine.documents.reader import (
    DocReader,
    check_applied_deletes,
    check_outputs,
    check_sums,
    check_task_entries,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError


def check_cow_task(doc: Any) -> Mapping[str, Any]:
    """Validate a copy-on-write task (``iceberg-exec/cow-task@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.
    """
    reader = DocReader(doc, COW_TASK)
    reader.table()
    reader.where = f"{COW_TASK} document (task {reader.get('task_id', int)})"
    operation = _check_cow_common(reader)
    reader.get("schema_id", int)
    reader.get("output_spec_id", int)
    check_task_entries(reader, "data_files")
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
    reader = DocReader(doc, COW_PLAN)
    reader.table()
    tasks: list[Any] = reader.get("tasks", list)
    for pos, task in enumerate(tasks):
        try:
            check_cow_task(task)
        except DataFileCodecError as err:
            raise reader.error(f"tasks[{pos}]", str(err)) from None
    return reader.doc


def _check_cow_common(reader: DocReader) -> str:
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
    reader = DocReader(doc, COW_RESULT)
    reader.table()
    task = reader.get("task_id", int)
    reader.where = f"{COW_RESULT} document (task {task})"
    operation = _check_cow_common(reader)
    removed = reader.files("removed_data_files")
    added = reader.files("added_data_files")
    check_applied_deletes(reader, removed)
    for measured in ("peak_rss_bytes", "spilled_bytes"):
        reader.count(measured, required=False)
    counts = {key: reader.count(key) for key in _COW_COUNTS}
    for key, allowed in (("inserted_rows", "overwrite"), ("updated_rows", "update")):
        if counts[key] and operation != allowed:
            raise reader.error(key, f"{counts[key]} rows, but only an {allowed} has them, not a {operation}")
    check_sums(
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
    check_outputs(reader, added, removed, f"cow-{task}-")
    return reader.doc


_COW_COUNTS = ("deleted_rows", "updated_rows", "inserted_rows", "rewritten_rows", "delete_file_rows")


def check_orphan_scan_result(doc: Any) -> Mapping[str, Any]:
    """Validate an orphan scan result (``iceberg-exec/orphan-scan-result@1``); return it.

    :raises DataFileCodecError: naming the first key that is missing or mistyped.
    """
    reader = DocReader(doc, ORPHAN_SCAN_RESULT)
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
