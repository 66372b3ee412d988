"""The compaction documents: rewrite tasks, plans and results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_iceberg_exec.engine.contracts import (
    COMPACTION_PLAN,
    REWRITE_RESULT,
    REWRITE_TASK,
    check_envelope,
)
from airflow_provider_iceberg_exec.engine.documents.reader import (
    SAFE_NAME,
    DocReader,
    check_applied_deletes,
    check_outputs,
    check_sums,
    check_task_entries,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError


def check_rewrite_task(doc: Any) -> Mapping[str, Any]:
    """Validate a compaction task (``iceberg-exec/rewrite-task@1``) completely; return it.

    :raises DataFileCodecError: naming the first key that is missing, mistyped or inconsistent.

    >>> check_rewrite_task({"schema": "iceberg-exec/rewrite-task@1", "table": "ns.t"})
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.DataFileCodecError: invalid iceberg-exec/rewrite-task@1 document: key 'group_id': is missing
    """  # noqa: E501
    reader = DocReader(doc, REWRITE_TASK)
    reader.table()
    group = reader.text("group_id")
    reader.where = f"{REWRITE_TASK} document (group {group})"
    if not SAFE_NAME.fullmatch(group) or ".." in group:
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
    check_task_entries(reader, "data_files")
    if not reader.doc["data_files"]:
        raise reader.error("data_files", "is empty; a task rewrites at least one file")
    return check_envelope(doc, REWRITE_TASK)


def check_compaction_plan(doc: Any) -> Mapping[str, Any]:
    """Validate a compaction plan and every task in it; return it.

    :raises DataFileCodecError: naming the plan's or a task's first bad key.
    """
    reader = DocReader(doc, COMPACTION_PLAN)
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
    reader = DocReader(doc, REWRITE_RESULT)
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
    check_applied_deletes(reader, rewritten)
    counts = {key: reader.count(key) for key in _RESULT_COUNTS}
    for measured in ("peak_rss_bytes", "spilled_bytes"):
        reader.count(measured, required=False)
    check_sums(reader, rewritten, "rewritten_records", counts["rewritten_records"], "record-count")
    check_sums(reader, added, "added_records", counts["added_records"], "record-count")
    check_sums(
        reader, rewritten, "rewritten_bytes_count", counts["rewritten_bytes_count"], "file-size-in-bytes"
    )
    check_sums(reader, added, "added_bytes_count", counts["added_bytes_count"], "file-size-in-bytes")
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
    check_outputs(reader, added, rewritten, f"{group}-")
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
