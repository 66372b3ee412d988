"""The conversion's documents (engine/documents.py check_convert_*): a valid one passes whole; each way
of breaking it is a one-line DataFileCodecError naming the key."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_iceberg_exec.engine import documents
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

DATA = {
    "file-path": "file:///w/t/data/a.parquet",
    "content": "data",
    "record-count": 10,
    "file-size-in-bytes": 99,
}
EQ = {"file-path": "file:///w/t/data/eq.parquet", "content": "equality-deletes", "record-count": 1,
      "file-size-in-bytes": 9, "equality-ids": [1]}  # fmt: skip
POS = {"file-path": "file:///w/t/data/p.parquet", "content": "position-deletes", "record-count": 2,
       "file-size-in-bytes": 9}  # fmt: skip


def _task() -> dict[str, Any]:
    return {
        "schema": "iceberg-exec/convert-task@1",
        "table": "ns.t",
        "branch": "main",
        "base_snapshot_id": 7,
        "task_id": "convert-00000",
        "options": {"delete-granularity": "file"},
        "equality_delete_files": [EQ["file-path"]],
        "data_files": [
            {
                "data-file": DATA,
                "data-sequence-number": 1,
                "delete-files": [{"content-file": EQ, "data-sequence-number": 2}],
            }
        ],
    }


def _result() -> dict[str, Any]:
    return {
        "schema": "iceberg-exec/convert-task-result@1",
        "table": "ns.t",
        "branch": "main",
        "base_snapshot_id": 7,
        "task_id": "convert-00000",
        "equality_delete_files": [EQ["file-path"]],
        "data_files": [DATA["file-path"]],
        "merged_position_delete_files": [],
        "added_delete_files": [POS],
        "dangling_equality_delete_files": [],
        "matched_rows": 2,
        "data_rows_read": 10,
        "delete_rows_read": 1,
        "peak_rss_bytes": 1,
        "spilled_bytes": 0,
        "elapsed_seconds": 0.5,
    }


def test_valid_documents_pass() -> None:
    assert documents.check_convert_task(_task())["task_id"] == "convert-00000"
    assert documents.check_convert_task_result(_result())["matched_rows"] == 2
    plan = {"schema": "iceberg-exec/convert-plan@1", "table": "ns.t", "branch": "main", "base_snapshot_id": 7,
            "options": {}, "equality_delete_files_count": 1, "tasks": [_task()]}  # fmt: skip
    assert documents.check_convert_plan(plan)["tasks"]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.__setitem__(key, value)


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.pop(key)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (_drop("task_id"), "'task_id': is missing"),
        (_set("task_id", "../x"), "'task_id'"),
        (_set("equality_delete_files", []), "'equality_delete_files': is empty"),
        (_set("equality_delete_files", [EQ["file-path"]] * 2), "more than once"),
        (_set("data_files", []), "'data_files': is empty"),
        (_set("base_snapshot_id", "7"), "'base_snapshot_id'"),
        (_set("table", "t"), "'table'"),
    ],
)
def test_every_rejection_of_a_task_is_one_line(mutate, fragment) -> None:
    doc = copy.deepcopy(_task())
    mutate(doc)
    with pytest.raises(DataFileCodecError, match=None) as raised:
        documents.check_convert_task(doc)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (_set("added_delete_files", [DATA]), "expected 'position-deletes'"),
        (_set("matched_rows", 3), "fewer than the 3 matched rows"),
        (_set("matched_rows", -1), "must be >= 0"),
        (_set("elapsed_seconds", "1"), "'elapsed_seconds'"),
        (_drop("merged_position_delete_files"), "'merged_position_delete_files': is missing"),
        (_set("schema", "iceberg-exec/convert-task-result@2"), "got schema"),
    ],
)
def test_every_rejection_of_a_result_is_one_line(mutate, fragment) -> None:
    doc = copy.deepcopy(_result())
    mutate(doc)
    with pytest.raises(DataFileCodecError) as raised:
        documents.check_convert_task_result(doc)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)
