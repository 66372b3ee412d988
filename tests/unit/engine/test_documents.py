"""engine/documents.py: a valid document passes whole; each way of breaking it is a one-line
DataFileCodecError that names the document and the key, raised before anything acts on it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_iceberg_exec.engine import documents
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

Mutation = Callable[[dict[str, Any]], object]


def _file(path: str, rows: int, size: int, content: str = "data") -> dict[str, Any]:
    return {"file-path": path, "content": content, "record-count": rows, "file-size-in-bytes": size}


DELETE = _file("file:///w/t/data/d.parquet", 1, 10, "position-deletes")


def _rewrite_task() -> dict[str, Any]:
    return {
        "schema": "iceberg-exec/rewrite-task@1",
        "table": "ns.t",
        "group_id": "3",
        "branch": "main",
        "base_snapshot_id": 1,
        "output_spec_id": 0,
        "commit_batch": 0,
        "options": {},
        "data_files": [
            {
                "data-file": _file("file:///w/t/data/a.parquet", 10, 1000),
                "data-sequence-number": 1,
                "delete-files": [{"content-file": DELETE, "data-sequence-number": 2}],
            }
        ],
    }


def _rewrite_result() -> dict[str, Any]:
    """Group 3 rewrote a (10 rows, one of them deleted) and b (5 rows) into one 14-row file."""
    a, b = _file("file:///w/t/data/a.parquet", 10, 1000), _file("file:///w/t/data/b.parquet", 5, 500)
    return {
        "schema": "iceberg-exec/rewrite-result@1",
        "table": "ns.t",
        "group_id": "3",
        "branch": "main",
        "base_snapshot_id": 1,
        "commit_batch": 0,
        "options": {},
        "rewritten_data_files": [a, b],
        "added_data_files": [_file("file:///w/t/data/3-out.parquet", 14, 700)],
        "applied_deletes": {
            a["file-path"]: {
                "data-sequence-number": 1,
                "delete-files": {DELETE["file-path"]: [2, "position-deletes", []]},
            },
            b["file-path"]: {"data-sequence-number": 1, "delete-files": {}},
        },
        "rewritten_records": 15,
        "added_records": 14,
        "deleted_records": 1,
        "position_deleted_records": 1,
        "equality_deleted_records": 0,
        "rewritten_bytes_count": 1500,
        "added_bytes_count": 700,
    }


def _cow_task() -> dict[str, Any]:
    task = _rewrite_task()
    for key in ("group_id", "commit_batch", "options"):
        del task[key]
    task.update(
        {
            "schema": "iceberg-exec/cow-task@1",
            "task_id": 0,
            "operation": "delete",
            "where": "id = 1",
            "isolation_level": "serializable",
            "schema_id": 0,
        }
    )
    return task


def _cow_result() -> dict[str, Any]:
    """Task 0 deleted 2 of a's 10 rows and copied the other 8 into one file."""
    a = _file("file:///w/t/data/a.parquet", 10, 1000)
    return {
        "schema": "iceberg-exec/cow-result@1",
        "table": "ns.t",
        "task_id": 0,
        "operation": "delete",
        "where": "id < 3",
        "branch": "main",
        "base_snapshot_id": 1,
        "isolation_level": "serializable",
        "removed_data_files": [a],
        "added_data_files": [_file("file:///w/t/data/cow-0-out.parquet", 8, 800)],
        "applied_deletes": {a["file-path"]: {"data-sequence-number": 1, "delete-files": {}}},
        "deleted_rows": 2,
        "updated_rows": 0,
        "inserted_rows": 0,
        "rewritten_rows": 8,
        "delete_file_rows": 0,
    }


def _orphan_scan_result() -> dict[str, Any]:
    return {
        "schema": "iceberg-exec/orphan-scan-result@1",
        "table": "ns.t",
        "orphan_list_uri": "file:///w/t/metadata/iceberg-exec-staging/orphans.json",
        "older_than_ms": 1,
        "locations": ["file:///w/t"],
        "equal_schemes": {"s3a": "s3"},
    }


def _refused(check: Callable[[Any], object], doc: Any, *fragments: str) -> str:
    with pytest.raises(DataFileCodecError) as err:
        check(doc)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    return message


def _mutated(doc: dict[str, Any], mutate: Mutation) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    ("check", "build"),
    [
        (documents.check_rewrite_task, _rewrite_task),
        (documents.check_rewrite_result, _rewrite_result),
        (documents.check_cow_task, _cow_task),
        (documents.check_cow_result, _cow_result),
        (documents.check_orphan_scan_result, _orphan_scan_result),
    ],
)
def test_a_valid_document_passes_and_is_returned(check, build) -> None:
    doc = build()
    assert check(doc) == build()


def test_a_valid_plan_passes_with_its_tasks() -> None:
    plan = {"schema": "iceberg-exec/compaction-plan@1", "table": "ns.t", "base_snapshot_id": 1}
    assert documents.check_compaction_plan({**plan, "tasks": [_rewrite_task()]})["tasks"]
    assert documents.check_cow_plan(
        {"schema": "iceberg-exec/cow-plan@1", "table": "ns.t", "tasks": [_cow_task()]}
    )


def _set(key: str, value: Any) -> Mutation:
    return lambda d: d.__setitem__(key, value)


def _drop(key: str) -> Mutation:
    return lambda d: d.pop(key)


def _entry(**changes: Any) -> Mutation:
    return lambda d: d["data_files"][0].update(changes)


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (_set("schema", "iceberg-exec/rewrite-task@2"), ["got schema 'iceberg-exec/rewrite-task@2'"]),
        (_drop("group_id"), ["key 'group_id': is missing"]),
        (_set("group_id", " "), ["key 'group_id': must not be empty"]),
        (_set("group_id", "../x"), ["key 'group_id'", "letters, digits"]),
        (_set("group_id", "a/b"), ["key 'group_id'", "letters, digits"]),
        (_set("table", "events"), ["key 'table'", "expected 'namespace.table'"]),
        (_set("table", " ns.t"), ["key 'table'", "expected 'namespace.table'"]),
        (_set("base_snapshot_id", "1"), ["key 'base_snapshot_id': expected an integer, got str"]),
        (_set("base_snapshot_id", True), ["key 'base_snapshot_id': expected an integer, got bool"]),
        (_set("base_snapshot_id", None), ["key 'base_snapshot_id': is null; expected an integer"]),
        (_set("commit_batch", -1), ["key 'commit_batch': must be >= 0, got -1"]),
        (_set("options", []), ["key 'options': expected an object, got list"]),
        (_set("needs_repartition", "yes"), ["key 'needs_repartition': expected true or false"]),
        (_set("data_files", []), ["key 'data_files': is empty"]),
        (_set("data_files", ["a.parquet"]), ["key 'data_files[0]': expected an object"]),
        (_entry(**{"data-sequence-number": None}), ["'data-sequence-number' is missing or not an integer"]),
        (_entry(**{"delete-files": {}}), ["'delete-files' must be a list"]),
        (_entry(**{"delete-files": ["d"]}), ["key \"data_files[0]['delete-files'][0]\": expected an object"]),
        (_entry(**{"data-file": {"file-path": ""}}), ["'file-path' is missing or not a string"]),
        (
            _entry(**{"data-file": {**_file("file:///a", 1, 1), "record-count": -1}}),
            ["'record-count' of file:///a is missing or not a count"],
        ),
        (
            _entry(**{"data-file": _file("file:///a", 1, 1, "position-deletes")}),
            ["file:///a has content 'position-deletes', expected 'data'"],
        ),
        (
            lambda d: d["data_files"].append(copy.deepcopy(d["data_files"][0])),
            ["key 'data_files': lists file:///w/t/data/a.parquet more than once"],
        ),
    ],
)
def test_every_rejection_of_a_rewrite_task_is_one_line_naming_the_key(mutate, fragments) -> None:
    message = _refused(documents.check_rewrite_task, _mutated(_rewrite_task(), mutate), *fragments)
    if "schema" not in message:
        assert message.startswith("invalid iceberg-exec/rewrite-task@1 document")


def test_a_document_that_is_not_an_object_is_refused() -> None:
    _refused(documents.check_rewrite_task, ["not", "a", "document"], "(a JSON object), got list")


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (_drop("branch"), ["(group 3)", "key 'branch': is missing"]),
        (_set("rewritten_data_files", []), ["key 'rewritten_data_files': is empty"]),
        (
            _set("added_records", 13),
            ["key 'added_records': says 13, but its files' 'record-count' add up to 14"],
        ),
        (_set("rewritten_records", 16), ["key 'rewritten_records': says 16"]),
        (_set("rewritten_bytes_count", 1), ["key 'rewritten_bytes_count': says 1"]),
        (_set("added_bytes_count", 1), ["key 'added_bytes_count': says 1"]),
        (_set("deleted_records", 2), ["key 'deleted_records': 2 is not position_deleted_records"]),
        (
            lambda d: d.update(position_deleted_records=0, deleted_records=0),
            ["key 'added_records': 14 rows added, but 15 rewritten minus 0 deleted is 15"],
        ),
        (_set("position_deleted_records", -1), ["key 'position_deleted_records': must be >= 0"]),
        (
            lambda d: d["added_data_files"][0].update({"file-path": "file:///w/t/data/4-out.parquet"}),
            ["key 'added_data_files[0]'", "was not written by this task (prefix '3-')"],
        ),
        (
            lambda d: d["applied_deletes"].pop("file:///w/t/data/b.parquet"),
            ["key 'applied_deletes': does not cover exactly the removed files: file:///w/t/data/b.parquet"],
        ),
        (
            lambda d: d["applied_deletes"]["file:///w/t/data/b.parquet"].update({"delete-files": []}),
            ["key \"applied_deletes['file:///w/t/data/b.parquet']\": expected {'data-sequence-number'"],
        ),
        (
            lambda d: d["applied_deletes"]["file:///w/t/data/a.parquet"]["delete-files"].update(
                {"file:///w/t/data/d.parquet": [2, "deletes", []]}
            ),
            ["key \"applied_deletes['file:///w/t/data/a.parquet']\""],
        ),
    ],
)
def test_every_rejection_of_a_rewrite_result_is_one_line_naming_the_key(mutate, fragments) -> None:
    message = _refused(documents.check_rewrite_result, _mutated(_rewrite_result(), mutate), *fragments)
    assert message.startswith("invalid iceberg-exec/rewrite-result@1 document (group 3)")


def test_a_rewrite_result_that_adds_a_file_it_also_removes_is_refused() -> None:
    doc = _rewrite_result()
    old, new = "file:///w/t/data/a.parquet", "file:///w/t/data/3-old.parquet"
    doc["rewritten_data_files"][0]["file-path"] = new  # named by the group, as the prefix check wants
    doc["applied_deletes"][new] = doc["applied_deletes"].pop(old)
    doc["added_data_files"] = [copy.deepcopy(doc["rewritten_data_files"][0]), _file(f"{new}-2", 4, 200)]
    doc["added_bytes_count"] = 1200
    _refused(documents.check_rewrite_result, doc, f"key 'added_data_files': {new} is also removed")


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (_set("operation", "merge"), ["(task 0)", "unknown operation 'merge'"]),
        (_set("set", {"x": "1"}), ["key 'set': only an update sets columns, not a delete"]),
        (
            _set("source_files", [{"path": "s.parquet"}]),
            ["key 'source_files': only an overwrite loads files"],
        ),
        (_drop("schema_id"), ["key 'schema_id': is missing"]),
        (_set("task_id", "0"), ["key 'task_id': expected an integer, got str"]),
    ],
)
def test_every_rejection_of_a_cow_task_is_one_line_naming_the_key(mutate, fragments) -> None:
    _refused(documents.check_cow_task, _mutated(_cow_task(), mutate), *fragments)


def test_an_overwrite_task_needs_well_formed_source_files() -> None:
    doc = _cow_task()
    doc.update(operation="overwrite", source_files=[{"path": "s.parquet", "size-in-bytes": 1}])
    _refused(
        documents.check_cow_task,
        doc,
        "key 'source_files[0]': expected {'path', 'size-in-bytes', 'record-count'}",
    )
    doc["source_files"][0]["record-count"] = 1
    assert documents.check_cow_task(doc) is doc


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (_set("deleted_rows", 3), ["key 'removed_data_files': hold 10 rows, but copied + updated + deleted"]),
        (_set("rewritten_rows", 7), ["key 'written_rows': says 7"]),
        (
            _set("inserted_rows", 1),
            ["key 'inserted_rows': 1 rows, but only an overwrite has them, not a delete"],
        ),
        (_set("updated_rows", 1), ["key 'updated_rows': 1 rows, but only an update has them, not a delete"]),
        (
            lambda d: d["added_data_files"][0].update({"file-path": "file:///w/t/data/cow-1-out.parquet"}),
            ["was not written by this task (prefix 'cow-0-')"],
        ),
    ],
)
def test_every_rejection_of_a_cow_result_is_one_line_naming_the_key(mutate, fragments) -> None:
    message = _refused(documents.check_cow_result, _mutated(_cow_result(), mutate), *fragments)
    assert message.startswith("invalid iceberg-exec/cow-result@1 document (task 0)")


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (_set("locations", []), ["key 'locations': expected a non-empty list of locations"]),
        (_set("locations", [" "]), ["key 'locations': expected a non-empty list of locations"]),
        (_set("equal_schemes", {"s3a": 1}), ["key 'equal_schemes': expected an object of strings"]),
        (_set("older_than_ms", -5), ["key 'older_than_ms': must be >= 0, got -5"]),
        (_drop("orphan_list_uri"), ["key 'orphan_list_uri': is missing"]),
    ],
)
def test_every_rejection_of_an_orphan_scan_result_is_one_line_naming_the_key(mutate, fragments) -> None:
    _refused(documents.check_orphan_scan_result, _mutated(_orphan_scan_result(), mutate), *fragments)


def test_a_plan_names_its_bad_task_and_refuses_a_task_of_another_base() -> None:
    plan = {"schema": "iceberg-exec/compaction-plan@1", "table": "ns.t", "base_snapshot_id": 1}
    broken = _mutated(_rewrite_task(), _drop("output_spec_id"))
    _refused(
        documents.check_compaction_plan, {**plan, "tasks": [broken]}, "key 'tasks[0]'", "'output_spec_id'"
    )
    other = _mutated(_rewrite_task(), _set("base_snapshot_id", 2))
    _refused(documents.check_compaction_plan, {**plan, "tasks": [other]}, "another table or base snapshot")
    cow_plan = {"schema": "iceberg-exec/cow-plan@1", "table": "ns.t"}
    bad_cow = _mutated(_cow_task(), _set("operation", "merge"))
    _refused(
        documents.check_cow_plan, {**cow_plan, "tasks": [bad_cow]}, "key 'tasks[0]'", "unknown operation"
    )


def test_a_base_snapshot_the_table_does_not_have_is_refused() -> None:
    class Metadata:
        def snapshot_by_id(self, snapshot_id: int) -> object | None:
            return object() if snapshot_id == 1 else None

    documents.check_base_snapshot(Metadata(), 1)
    with pytest.raises(DataFileCodecError, match="base snapshot 7 is not a snapshot of the table"):
        documents.check_base_snapshot(Metadata(), 7)
