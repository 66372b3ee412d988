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

from airflow_provider_iceberg_exec.engine.documents.compaction import (
    check_compaction_plan,
    check_rewrite_result,
    check_rewrite_task,
)
from airflow_provider_iceberg_exec.engine.documents.cow import (
    check_cow_plan,
    check_cow_result,
    check_cow_task,
    check_orphan_scan_result,
)
from airflow_provider_iceberg_exec.engine.documents.deletes import (
    check_convert_plan,
    check_convert_task,
    check_convert_task_result,
    check_position_delete_plan,
    check_position_delete_result,
    check_position_delete_task,
)
from airflow_provider_iceberg_exec.engine.documents.reader import (
    applied_delete,
    applied_deletes_of,
    check_base_snapshot,
    content_file_entries,
)

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
