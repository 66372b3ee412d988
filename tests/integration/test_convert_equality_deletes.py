"""Equality deletes converted to position deletes, on a real SQLite catalog with real Parquet files.

The expected live rows come from a model of the rows written and the keys deleted (spec 6.2: a delete
applies to data files with a strictly older sequence number, of its partition unless global, NULL
matching NULL); after the conversion the table holds no equality delete and PyIceberg's own scan, a
reader other than the code under test, must read exactly those rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.ops.convert import (
    commit_conversion,
    convert_equality_deletes,
    convert_task,
    plan_conversion,
)
from tests.helpers import commit_delete_files, commit_position_deletes, live_checksum, row_digest
from tests.integration.maintenance_support import (
    ARROW_SCHEMA,
    create_table,
    limits,
    rows,
    write_equality_deletes,
    write_position_deletes,
)

_MASK = (1 << 64) - 1


def _checksum(live: Sequence[dict[str, Any]]) -> tuple[int, int]:
    total = 0
    for row in live:
        total = (total + row_digest(row)) & _MASK
    return len(live), total


def _delete_files(table: Table) -> dict[str, list[Any]]:
    table.refresh()
    out: dict[str, list[Any]] = {"position": [], "equality": []}
    for entry in table.inspect.delete_files().to_pylist():
        out["position" if entry["content"] == 1 else "equality"].append(entry)
    return out


def _append_with_deletes(table: Table, data: pa.Table, delete_files: Sequence[DataFile]) -> None:
    files = list(_dataframe_to_data_files(table.metadata, data, table.io))
    commit_delete_files(table, delete_files, data_files=files)


def test_converts_partitioned_deletes_older_and_newer_than_data(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog, partition_name="category")
    table.append(rows(0, 100, "a"))
    table.append(rows(100, 100, "b"))
    # Deletes ids 0-9 in "a" and 100-104 in "b" (seq 3) ...
    commit_delete_files(
        table,
        [
            write_equality_deletes(table, range(10), "a"),
            write_equality_deletes(table, range(100, 105), "b"),
        ],
    )
    # ... then newer copies of ids 0-2 land in "a" (seq 4): the older delete must not reach them.
    table.append(rows(0, 3, "a"))
    expected = _checksum(
        [r for r in rows(0, 100, "a").to_pylist() if r["id"] >= 10]
        + [r for r in rows(100, 100, "b").to_pylist() if r["id"] >= 105]
        + rows(0, 3, "a").to_pylist()
    )

    result = convert_equality_deletes(table, limits=limits(tmp_path), commit_id="convert-1")

    assert result["converted_equality_delete_files_count"] == 2
    assert result["added_position_delete_files_count"] == 2  # one per data file with matches
    assert result["matched_rows_count"] == 15
    deletes = _delete_files(table)
    assert deletes["equality"] == []
    assert sorted(d["record_count"] for d in deletes["position"]) == [5, 10]
    assert live_checksum(table) == expected
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation == Operation.REPLACE
    assert snapshot.summary["removed-equality-deletes"] == "15"
    # Java's rule: each new file keeps the sequence number of the delete it replaces (3), not the commit's.
    entries = table.inspect.entries().to_pylist()
    added = [e for e in entries if e["status"] == 1 and e["data_file"]["content"] == 1]
    assert {e["sequence_number"] for e in added} == {3}
    # A retry with the same commit id reports the landed commit.
    again = convert_equality_deletes(table, limits=limits(tmp_path), commit_id="convert-1")
    assert again["already_committed"]
    assert again["snapshot_ids"] == result["snapshot_ids"]


def test_global_delete_in_partitioned_table_and_null_keys(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog, partition_name="category")
    with_null = pa.table({"id": [None, 1, 2, 3], "category": ["a"] * 4}, schema=ARROW_SCHEMA)
    table.append(with_null)
    table.append(pa.table({"id": [None, 1, 5], "category": ["b"] * 3}, schema=ARROW_SCHEMA))
    # A global equality delete (unpartitioned spec): it reaches both partitions; NULL matches NULL.
    table.update_spec().remove_field("category").commit()
    global_delete = write_equality_deletes(table, [None, 1], "a")  # type: ignore[list-item]
    assert table.metadata.default_spec_id != 0
    assert global_delete.spec_id == table.metadata.default_spec_id
    commit_delete_files(table, [global_delete])
    expected = _checksum([{"id": 2, "category": "a"}, {"id": 3, "category": "a"}, {"id": 5, "category": "b"}])

    result = convert_equality_deletes(table, limits=limits(tmp_path))

    assert result["converted_equality_delete_files_count"] == 1
    assert result["added_position_delete_files_count"] == 2
    assert result["matched_rows_count"] == 4
    assert _delete_files(table)["equality"] == []
    assert live_checksum(table) == expected


def test_equal_sequence_numbers_do_not_delete(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 10, "a"))
    # The data file and the delete share one snapshot: the delete reaches only the older file.
    _append_with_deletes(table, rows(0, 10, "a"), [write_equality_deletes(table, [1, 2], "a")])
    older = [r for r in rows(0, 10, "a").to_pylist() if r["id"] not in (1, 2)]
    expected = _checksum(older + rows(0, 10, "a").to_pylist())

    result = convert_equality_deletes(table, limits=limits(tmp_path))

    assert result["matched_rows_count"] == 2
    assert _delete_files(table)["equality"] == []
    assert live_checksum(table) == expected


def test_dropped_key_column_still_applies(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 20, "a"))
    commit_delete_files(table, [write_equality_deletes(table, [3, 4, 5], "a")])
    # Drop the delete's key column: the delete still applies (spec), by field id.
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.delete_column("id")
    table.refresh()

    result = convert_equality_deletes(table, limits=limits(tmp_path))

    assert result["matched_rows_count"] == 3
    assert _delete_files(table)["equality"] == []
    assert table.scan().to_arrow().num_rows == 17


def test_merges_file_scoped_position_deletes(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 50, "a"))
    data_path = table.inspect.files().to_pylist()[0]["file_path"]
    # A file-scoped position delete (referenced_data_file set) is folded into the new file and removed;
    # a partition-scoped one (no bounds, no reference) is left as it is.
    commit_position_deletes(table, data_path, [10, 11])
    commit_delete_files(table, [write_position_deletes(table, data_path, [20], "a")])
    commit_delete_files(table, [write_equality_deletes(table, [0, 1, 10], "a")])
    expected = _checksum([r for r in rows(0, 50, "a").to_pylist() if r["id"] not in (0, 1, 10, 11, 20)])

    result = convert_equality_deletes(table, limits=limits(tmp_path))

    assert result["removed_position_delete_files_count"] == 1
    assert result["matched_rows_count"] == 2  # row 10 was already deleted by position
    assert live_checksum(table) == expected
    positions = sorted(d["record_count"] for d in _delete_files(table)["position"])
    assert positions == [1, 4]  # the partition-scoped one, and 0, 1, 10, 11 in one file


def test_concurrent_compaction_of_a_matched_file_conflicts(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 10, "a"))
    commit_delete_files(table, [write_equality_deletes(table, [1], "a")])
    plan = plan_conversion(table)
    results = [convert_task(table, task, limits(tmp_path)) for task in plan["tasks"]]
    # Meanwhile the matched data file is removed (say by a compaction that rewrote it).
    table.append(rows(100, 1, "a"))
    victim = results[0]["data_files"][0]
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        for f in table.current_snapshot().manifests(table.io):  # type: ignore[union-attr]
            for entry in f.fetch_manifest_entry(table.io):
                if entry.data_file.file_path == victim:
                    overwrite.delete_data_file(entry.data_file)
    table.refresh()
    state = _delete_files(table)

    with pytest.raises(CommitValidationError, match="missing data files"):
        commit_conversion(table, results, commit_id="c")

    assert _delete_files(table) == state


def test_bad_input(catalog: Catalog, tmp_path) -> None:
    v1 = catalog.create_table("ns.v1", schema=ARROW_SCHEMA, properties={"format-version": "1"})
    with pytest.raises(ConfigurationError, match="format-version 1"):
        convert_equality_deletes(v1, limits=limits(tmp_path))
    table = create_table(catalog)
    table.append(rows(0, 3, "a"))
    with pytest.raises(ConfigurationError, match="unknown option"):
        convert_equality_deletes(table, options={"rewrite-all": "true"}, limits=limits(tmp_path))
    snapshot = table.current_snapshot()
    nothing = convert_equality_deletes(table, limits=limits(tmp_path))
    assert nothing["snapshot_ids"] == []
    assert table.current_snapshot() == snapshot


def test_where_selects_deletes_by_partition_and_dangling_deletes_go(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog, partition_name="category")
    table.append(rows(0, 10, "a"))
    table.append(rows(10, 10, "b"))
    commit_delete_files(
        table, [write_equality_deletes(table, [1], "a"), write_equality_deletes(table, [11], "b")]
    )
    # A delete in a partition without data applies to nothing: it is removed without a task.
    commit_delete_files(table, [write_equality_deletes(table, [99], "c")])

    only_c = convert_equality_deletes(table, where="category = 'c'", limits=limits(tmp_path))
    assert only_c["converted_equality_delete_files_count"] == 1
    assert only_c["added_position_delete_files_count"] == 0
    assert len(_delete_files(table)["equality"]) == 2

    only_a = convert_equality_deletes(table, where="category = 'a'", limits=limits(tmp_path))
    assert only_a["converted_equality_delete_files_count"] == 1
    assert [d["partition"] for d in _delete_files(table)["equality"]] == [{"category": "b"}]
    assert [d["partition"] for d in _delete_files(table)["position"]] == [{"category": "a"}]


def test_partition_granularity_writes_one_file_per_partition(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    for start in range(0, 40, 10):
        table.append(rows(start, 10, "a"))
    commit_delete_files(table, [write_equality_deletes(table, [1, 12, 23, 34], "a")])
    expected = _checksum([r for r in rows(0, 40, "a").to_pylist() if r["id"] not in (1, 12, 23, 34)])

    result = convert_equality_deletes(
        table, options={"delete-granularity": "partition"}, limits=limits(tmp_path)
    )

    assert result["added_position_delete_files_count"] == 1
    assert live_checksum(table) == expected
    (only,) = _delete_files(table)["position"]
    assert only["record_count"] == 4


def test_commit_trusts_no_result_about_what_is_safe(catalog: Catalog, tmp_path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 10, "a"))
    table.append(rows(10, 10, "a"))
    commit_delete_files(table, [write_equality_deletes(table, [1, 11], "a")])
    (task,) = plan_conversion(table)["tasks"]
    state = _delete_files(table)

    # A task that examined only one of the two data files the delete applies to: the delete must stay.
    partial = dict(task, data_files=task["data_files"][:1])
    (result,) = [convert_task(table, partial, limits(tmp_path))]
    kept = commit_conversion(table, [result], commit_id="partial")
    assert kept["converted_equality_delete_files_count"] == 0
    assert kept["snapshot_ids"] == []
    assert _delete_files(table) == state
    for added in result["added_delete_files"]:  # never committed: removed
        assert not table.io.new_input(added["file-path"]).exists()

    # A result that claims a data file it did not examine, or a merged delete it did not fold in.
    full = convert_task(table, task, limits(tmp_path))
    lying = dict(full, data_files=full["data_files"][:1])
    with pytest.raises(DataFileCodecError, match="no task examined"):
        commit_conversion(table, [lying], commit_id="lying")
    stray = dict(full, merged_position_delete_files=[state["equality"][0]["file_path"]])
    with pytest.raises(DataFileCodecError, match="not a file-scoped delete"):
        commit_conversion(table, [stray], commit_id="stray")
    assert _delete_files(table) == state

    done = commit_conversion(table, [full], commit_id="full")
    assert done["converted_equality_delete_files_count"] == 1


def test_keys_larger_than_memory_spill_and_match_exactly(catalog: Catalog, tmp_path) -> None:
    """300k delete keys of ~200 bytes (about 60 MB) under a 32 MiB limit: the narrow join spills (and is
    split into hash buckets) yet matches exactly the rows the model deletes."""
    from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
    from tests.integration.test_deletes import _commit_deletes, _create, _equality_deletes

    table = _create(catalog)
    n = 300_000
    pad = "x" * 190
    names = [f"{pad}{i:09d}" for i in range(n)]
    table.append(pa.table({"id": pa.array(range(n), pa.int64()), "category": ["a"] * n, "name": names}))
    deleted = [f"{pad}{i:09d}" for i in range(0, n, 2)] + [f"{pad}missing{i}" for i in range(n // 2)]
    _commit_deletes(table, [_equality_deletes(table, {"name": (3, pa.string(), deleted)}, spec_id=0)])
    tight = ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(tmp_path / "spill"))

    (task,) = plan_conversion(table)["tasks"]
    result = convert_task(table, task, tight)
    assert result["spilled_bytes"] > 0, result
    assert result["matched_rows"] == n // 2
    assert result["data_rows_read"] == n
    done = commit_conversion(table, [result], commit_id="big")

    assert done["converted_equality_delete_files_count"] == 1
    assert sorted(table.refresh().scan().to_arrow().column("id").to_pylist()) == list(range(1, n, 2))
