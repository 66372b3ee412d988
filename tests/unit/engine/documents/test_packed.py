"""engine/documents/packed.py: packed task entries give back every entry as it was packed, the documents'
checks read them as a list, and they hold a fraction of the dicts' memory (issue 16, 500,000 files)."""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_iceberg_exec.engine import documents
from airflow_provider_iceberg_exec.engine.documents.packed import (
    PackedDataFiles,
    PackedEntries,
    data_files_of,
)
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError


def _entry(number: int, partition: list[Any], *, deletes: int = 0, sequence: int = 1) -> dict[str, Any]:
    return {
        "data-file": {
            "spec-id": 0,
            "content": "data",
            "file-path": f"file:///w/t/data/{number:06d}-0-00000000-0000-0000-0000-000000000000.parquet",
            "file-format": "parquet",
            "partition": partition,
            "file-size-in-bytes": 4000 + number,
            "record-count": 20 + number % 7,
            "split-offsets": [4],
        },
        "data-sequence-number": sequence,
        "delete-files": [
            {
                "content-file": {
                    "spec-id": 0,
                    "content": "position-deletes",
                    "file-path": f"file:///w/t/data/d-{number}-{d}.parquet",
                    "file-format": "parquet",
                    "partition": partition,
                    "file-size-in-bytes": 900,
                    "record-count": 3,
                },
                "data-sequence-number": sequence + 1,
            }
            for d in range(deletes)
        ],
    }


def _entries() -> list[dict[str, Any]]:
    # Values equal in Python but not in JSON (True and 1, 1.0 and 1) must not share a rest.
    partitions: list[list[Any]] = [[], [1], [True], [1.0], ["1"], [None], [1, "a"]]
    return [
        _entry(n, partitions[n % len(partitions)], deletes=n % 5 // 3, sequence=1 + n % 3) for n in range(70)
    ]


def _packed_task(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": "iceberg-exec/rewrite-task@1",
        "table": "ns.t",
        "group_id": "3",
        "base_snapshot_id": 1,
        "output_spec_id": 0,
        "data_files": PackedEntries.pack(entries),
    }


def test_every_entry_comes_back_as_it_was_packed_and_the_list_is_let_go() -> None:
    entries = _entries()
    expected = copy.deepcopy(entries)

    packed = PackedEntries.pack(entries)

    assert entries == []
    assert len(packed) == len(expected)
    # Equal as JSON too: ``==`` alone would take [True] for [1].
    assert json.dumps(list(packed), sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert [packed[i] for i in range(len(packed))] == expected
    assert list(packed[10:30]) == expected[10:30]
    assert list(packed[10:30][5:7]) == expected[15:17]
    assert list(data_files_of(packed)) == [e["data-file"] for e in expected]
    assert list(data_files_of(packed)[3:5]) == [e["data-file"] for e in expected[3:5]]
    # Files without deletes of one partition and sequence number share one rest; with deletes, each its own.
    plain = {
        (repr(e["data-file"]["partition"]), e["data-sequence-number"])
        for e in expected
        if not e["delete-files"]
    }
    assert packed.shapes == len(plain) + sum(1 for e in expected if e["delete-files"])


def test_entries_of_one_rest_share_its_lists_and_only_those_whose_json_is_the_same() -> None:
    packed = PackedEntries.pack([_entry(n, p) for n, p in enumerate([[1], [1], [True], [1.0], [1]])])
    partitions = [packed[i]["data-file"]["partition"] for i in range(len(packed))]

    assert partitions[0] is partitions[1] is partitions[4]
    assert [json.dumps(p) for p in partitions] == ["[1]", "[1]", "[true]", "[1.0]", "[1]"]
    assert packed[0]["delete-files"] is packed[4]["delete-files"]


def test_entries_handed_out_are_new_dicts() -> None:
    packed = PackedEntries.pack(_entries())
    first = packed[0]
    first["data-file"]["record-count"] = -1
    first["data-sequence-number"] = 99

    assert packed[0]["data-file"]["record-count"] == 20
    assert packed[0]["data-sequence-number"] == 1


def test_a_task_and_a_result_with_packed_files_pass_the_same_checks_as_with_lists() -> None:
    entries = _entries()
    task = _packed_task(copy.deepcopy(entries))
    documents.check_rewrite_task(task)

    result = {
        "schema": "iceberg-exec/rewrite-result@1",
        "table": "ns.t",
        "branch": "main",
        "group_id": "3",
        "commit_batch": 0,
        "base_snapshot_id": 1,
        "options": {},
        "rewritten_data_files": data_files_of(task["data_files"]),
        "added_data_files": [],
        "applied_deletes": {e["data-file"]["file-path"]: documents.applied_deletes_of(e) for e in entries},
        "rewritten_records": sum(e["data-file"]["record-count"] for e in entries),
        "added_records": 0,
        "deleted_records": 0,
        "position_deleted_records": 0,
        "equality_deleted_records": 0,
        "rewritten_bytes_count": sum(e["data-file"]["file-size-in-bytes"] for e in entries),
        "added_bytes_count": 0,
    }
    # The counts do not add up (no file added): the check reads the packed files as it reads a list.
    with pytest.raises(DataFileCodecError, match="added_records"):
        documents.check_rewrite_result(result)
    result["rewritten_data_files"] = PackedDataFiles(PackedEntries.pack([]))
    with pytest.raises(DataFileCodecError, match=r"rewritten_data_files.*is empty"):
        documents.check_rewrite_result(result)


def test_a_packed_task_repeating_a_file_is_refused_as_a_list_is() -> None:
    entries = _entries()[:3]
    entries.append(copy.deepcopy(entries[0]))
    task = _packed_task(entries)
    with pytest.raises(DataFileCodecError, match="more than once"):
        documents.check_rewrite_task(task)


def test_packed_entries_are_never_written_as_json() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps({"data_files": PackedEntries.pack(_entries())})


def test_packed_entries_of_small_files_hold_under_a_third_of_the_dicts_memory() -> None:
    """The plan's entries of a table of small files (one partition, no deletes): 10,000 of them."""

    def entries() -> list[dict[str, Any]]:
        shared: list[Any] = []
        made = [_entry(n, shared) for n in range(10_000)]
        for entry in made:  # the planner shares its common lists (plan._SharedLists)
            entry["delete-files"] = shared
            entry["data-file"]["split-offsets"] = made[0]["data-file"]["split-offsets"]
        return made

    packed, as_packed, as_dicts = _memory_packed(entries)

    assert len(packed) == 10_000
    assert as_packed < as_dicts / 3, (as_packed, as_dicts)


def _memory_packed(entries: Callable[[], list[dict[str, Any]]]) -> tuple[PackedEntries, int, int]:
    """The entries packed, the bytes they hold packed and as the dicts ``entries`` makes (tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        dicts = entries()
        as_dicts = tracemalloc.get_traced_memory()[0] - before
        packed = PackedEntries.pack(dicts)
        as_packed = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return packed, as_packed, as_dicts


def _equality_delete(number: int, *, record_count: Any = 50, sequence: Any = 3) -> dict[str, Any]:
    """An equality delete of the whole table: every data file's entry has it, each a dict of its own (as
    a plan read back from JSON has it)."""
    return {
        "content-file": {
            "spec-id": 0,
            "content": "equality-deletes",
            "file-path": f"file:///w/t/data/eq-{number}.parquet",
            "file-format": "parquet",
            "partition": [],
            "file-size-in-bytes": 700,
            "record-count": record_count,
            "lower-bounds": {"keys": [1], "values": ["a"]},
            "upper-bounds": {"keys": [1], "values": ["z"]},
            "equality-ids": [1],
        },
        "data-sequence-number": sequence,
    }


def _entries_with_equality_deletes(files: int) -> list[dict[str, Any]]:
    made = [_entry(n, [], deletes=1) for n in range(files)]  # a position delete of its own each
    for entry in made:
        entry["delete-files"].extend(_equality_delete(k) for k in range(4))
    return made


def test_entries_with_delete_files_come_back_as_packed_each_time_in_new_dicts() -> None:
    expected = _entries_with_equality_deletes(50)

    packed = PackedEntries.pack(copy.deepcopy(expected))

    assert list(packed) == expected
    assert json.dumps(list(packed), sort_keys=True) == json.dumps(expected, sort_keys=True)
    first = packed[0]
    first["delete-files"][1]["content-file"]["record-count"] = -1
    first["delete-files"].pop()
    assert packed[0] == expected[0]
    assert packed[1]["delete-files"][1] is not packed[2]["delete-files"][1]


def test_a_delete_file_comes_back_with_the_json_it_was_packed_with() -> None:
    # One path, told apart by JSON: another sequence number (as a string too), True for 1, 1.0 for 1.
    variants = [
        _equality_delete(0),
        _equality_delete(0, sequence=4),
        _equality_delete(0, sequence="3"),
        _equality_delete(0, record_count=True),
        _equality_delete(0, record_count=50.0),
        _equality_delete(0),
    ]
    expected = [_entry(n, []) for n in range(len(variants))]
    for entry, variant in zip(expected, variants, strict=True):
        entry["delete-files"].append(variant)

    packed = PackedEntries.pack(copy.deepcopy(expected))

    assert [json.dumps(e, sort_keys=True) for e in packed] == [
        json.dumps(e, sort_keys=True) for e in expected
    ]


def test_delete_files_that_are_not_json_values_are_kept_as_they_are() -> None:
    # Not a plan's own: the task's checks refuse them, and they must see them as they were.
    odd: list[Any] = [{"content-file": {"file-path": b"bytes"}}, {"a": {1, 2}}]
    entries = [_entry(0, []), _entry(1, []), _entry(2, [])]
    entries[0]["delete-files"] = odd
    entries[1]["delete-files"] = {"not": "a list"}
    entries[2]["delete-files"] = [_equality_delete(0), float("nan")]

    packed = PackedEntries.pack(list(entries))

    assert packed[0]["delete-files"] is odd
    assert packed[1]["delete-files"] == {"not": "a list"}
    assert packed[2]["delete-files"][0] == _equality_delete(0)
    assert json.dumps(packed[2]["delete-files"][1]) == "NaN"


def test_packed_entries_with_their_own_and_shared_delete_files_hold_under_a_fifth_of_the_dicts_memory() -> (
    None
):
    """bench/mor.py's table: each data file with a position delete of its own and the table's four
    equality deletes."""
    packed, as_packed, as_dicts = _memory_packed(lambda: _entries_with_equality_deletes(2_000))

    assert len(packed) == 2_000
    # Shared texts: 0.18 of the dicts; a text each: 0.42.
    assert as_packed < as_dicts / 4, (as_packed, as_dicts)


def test_packing_entries_that_differ_in_their_delete_files_holds_no_copy_of_their_texts() -> None:
    """bench/mor.py's table again: every entry is a rest of its own (its position delete), and the packer
    knew each by the ``repr`` of the whole rest, which repeated its five delete files' text."""
    dicts = _entries_with_equality_deletes(2_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        packed = PackedEntries.pack(dicts)
        held, peak = (size - before for size in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()

    assert packed.shapes == 2_000
    # Whole reprs: a peak of 4.6 times what the packed entries hold; known by parts: 1.2 times.
    assert peak < 2 * held, (peak, held)
