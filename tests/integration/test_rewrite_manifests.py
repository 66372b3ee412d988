"""Manifest rewrite (Spark's ``rewrite_manifests``) against a real SQLite catalog and real files: fewer
manifests, the same live files with the same snapshot ids and sequence numbers, the same rows (read by
PyIceberg's scan), and bad input refused with the table unchanged."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.commit.idempotency import COMMIT_ID_PROPERTY
from airflow_provider_iceberg_exec.engine.errors import CommitConflictError, ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests
from tests.helpers import commit_position_deletes, data_files, live_checksum
from tests.integration.maintenance_support import create_table, rows

pytestmark = pytest.mark.integration

CATEGORIES = ("a", "b", "c", "d")


def _append_many(table: Table, count: int, *, categories: tuple[str | None, ...] = CATEGORIES) -> None:
    for i in range(count):
        category = categories[i % len(categories)]
        batch = rows(i * 10, 10, category) if category is not None else _null_rows(i * 10)
        table.append(batch)


def _null_rows(start: int) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + 10)), "category": pa.nulls(10, pa.string())},
        schema=pa.schema([pa.field("id", pa.int64()), pa.field("category", pa.string())]),
    )


def _manifests(table: Table, content: ManifestContent | None = None) -> list[Any]:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [m for m in snapshot.manifests(table.io) if content is None or m.content == content]


def _live_entries(table: Table) -> dict[str, tuple[Any, ...]]:
    """Every live file of the head with what a rewrite must keep, read by PyIceberg's own manifest reader."""
    found: dict[str, tuple[Any, ...]] = {}
    for manifest in _manifests(table):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            assert f.file_path not in found, f"{f.file_path} is live twice"
            found[f.file_path] = (
                int(f.content),
                entry.snapshot_id,
                entry.sequence_number,
                entry.file_sequence_number,
                repr(f.partition),
                manifest.partition_spec_id,
                f.record_count,
            )
    return found


def _metadata_files(table: Table) -> set[str]:
    root = os.path.join(table.location().removeprefix("file://"), "metadata")
    return {os.path.join(root, n) for n in os.listdir(root) if n.endswith(".avro")}


def _unreferenced(table: Table) -> set[str]:
    table.refresh()
    referenced: set[str] = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(snapshot.manifest_list.removeprefix("file://"))
        referenced.update(m.manifest_path.removeprefix("file://") for m in snapshot.manifests(table.io))
    return _metadata_files(table) - referenced


def _partitioned(catalog: SqlCatalog, name: str = "ns.t", **props: str) -> Table:
    return create_table(catalog, name, partition_name="category", **props)


# -- the rewrite ----------------------------------------------------------------------------------------


def test_many_small_manifests_become_one_with_the_same_files_and_rows(catalog: SqlCatalog) -> None:
    table = _partitioned(catalog)
    _append_many(table, 12)
    before_entries, before_rows = _live_entries(table), live_checksum(table)
    head = table.metadata.current_snapshot_id
    assert len(_manifests(table)) == 12

    result = rewrite_manifests(table, commit_id="rm-1")

    assert result["rewritten_manifests_count"] == 12
    assert result["added_manifests_count"] == 1
    assert result["kept_manifests_count"] == 0
    assert result["rewritten_entries_count"] == 12
    assert result["already_committed"] is False
    manifests = _manifests(table)
    assert len(manifests) == 1
    assert os.path.basename(manifests[0].manifest_path).startswith("optimized-m-")
    assert manifests[0].existing_files_count == 12
    assert manifests[0].added_files_count == 0
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.parent_snapshot_id == head
    assert result["snapshot_ids"] == [snapshot.snapshot_id]
    summary = snapshot.summary
    assert summary is not None
    assert summary.operation.value == "replace"
    props = summary.additional_properties
    assert {k: props[k] for k in ("manifests-created", "manifests-kept", "manifests-replaced")} == {
        "manifests-created": "1",
        "manifests-kept": "0",
        "manifests-replaced": "12",
    }
    assert props["entries-processed"] == "12"
    assert props["total-data-files"] == "12"
    assert props["total-records"] == "120"
    assert props[COMMIT_ID_PROPERTY] == "rm-1"
    # every entry is EXISTING in the new manifest
    entries = manifests[0].fetch_manifest_entry(table.io, discard_deleted=False)
    assert {e.status for e in entries} == {ManifestEntryStatus.EXISTING}
    json.dumps(result)


@pytest.mark.parametrize("open_writers", [32, 1])
def test_a_small_target_splits_into_ranges_of_distinct_partitions(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, open_writers: int
) -> None:
    """Range clustering: each output manifest holds whole partitions, none shared with another; the
    same with one writer open at a time (one pass per output range)."""
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite as manifest_rewrite

    monkeypatch.setattr(manifest_rewrite, "_MAX_OPEN_WRITERS", open_writers)
    table = _partitioned(catalog)
    categories = (*tuple(f"c{i:02d}" for i in range(8)), None)
    _append_many(table, 27, categories=categories)
    before_entries, before_rows = _live_entries(table), live_checksum(table)
    total = sum(m.manifest_length for m in _manifests(table))
    target = total // 3 + 1  # three outputs

    result = rewrite_manifests(table, target_size_bytes=target, commit_id="rm-ranges")

    manifests = _manifests(table)
    assert result["added_manifests_count"] == len(manifests)
    assert 2 <= len(manifests) <= 4
    partitions_of: dict[str, set[str]] = defaultdict(set)
    for manifest in manifests:
        for entry in manifest.fetch_manifest_entry(table.io):
            partitions_of[manifest.manifest_path].add(repr(entry.data_file.partition))
    seen: set[str] = set()
    for partitions in partitions_of.values():
        assert not partitions & seen
        seen |= partitions
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


def test_unpartitioned_table_is_cut_by_position(catalog: SqlCatalog) -> None:
    table = create_table(catalog)
    _append_many(table, 10)
    before_entries, before_rows = _live_entries(table), live_checksum(table)
    total = sum(m.manifest_length for m in _manifests(table))

    result = rewrite_manifests(table, target_size_bytes=total // 2 + 1)

    assert result["rewritten_manifests_count"] == 10
    assert result["added_manifests_count"] == 2
    assert sorted(m.existing_files_count for m in _manifests(table)) == [5, 5]
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


def test_delete_manifests_are_rewritten_too_and_the_deletes_still_apply(catalog: SqlCatalog) -> None:
    table = _partitioned(catalog)
    _append_many(table, 4)
    for data_file in data_files(table)[:3]:
        commit_position_deletes(table, data_file.file_path, [0, 1])
    assert len(_manifests(table, ManifestContent.DELETES)) == 3
    before_entries, before_rows = _live_entries(table), live_checksum(table)
    assert before_rows[0] == 40 - 6

    result = rewrite_manifests(table)

    assert result["rewritten_manifests_count"] == 4 + 3
    assert result["added_manifests_count"] == 2
    assert len(_manifests(table, ManifestContent.DATA)) == 1
    assert len(_manifests(table, ManifestContent.DELETES)) == 1
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


def test_sort_by_clusters_by_the_named_partition_fields(catalog: SqlCatalog) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "category", StringType(), required=False),
        NestedField(3, "region", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "category"),
        PartitionField(3, 1001, IdentityTransform(), "region"),
    )
    table = catalog.create_table("ns.two", schema=schema, partition_spec=spec)
    for i in range(16):
        table.append(
            pa.table(
                {"id": [i], "category": [f"c{i % 4}"], "region": [f"r{i % 2}"]},
                schema=pa.schema([("id", pa.int64()), ("category", pa.string()), ("region", pa.string())]),
            )
        )
    before_entries, before_rows = _live_entries(table), live_checksum(table)
    total = sum(m.manifest_length for m in _manifests(table))

    result = rewrite_manifests(table, sort_by=["region"], target_size_bytes=total // 2 + 1)

    assert result["sort_by"] == ["region"]
    regions = [
        {entry.data_file.partition[1] for entry in m.fetch_manifest_entry(table.io)}
        for m in _manifests(table)
    ]
    assert sorted(map(sorted, regions)) == [["r0"], ["r1"]]
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


def test_only_manifests_of_the_chosen_spec_are_rewritten(catalog: SqlCatalog) -> None:
    table = create_table(catalog)
    _append_many(table, 3)
    with table.update_spec() as update:
        update.add_identity("category")
    _append_many(table, 3)
    spec0 = [m.manifest_path for m in _manifests(table) if m.partition_spec_id == 0]
    before_entries, before_rows = _live_entries(table), live_checksum(table)

    result = rewrite_manifests(table)  # the current spec: 1

    assert (result["spec_id"], result["rewritten_manifests_count"], result["kept_manifests_count"]) == (
        1,
        3,
        3,
    )
    assert sorted(m.manifest_path for m in _manifests(table) if m.partition_spec_id == 0) == sorted(spec0)
    assert len([m for m in _manifests(table) if m.partition_spec_id == 1]) == 1

    result = rewrite_manifests(table, spec_id=0)

    assert (result["rewritten_manifests_count"], result["added_manifests_count"]) == (3, 1)
    assert len(_manifests(table)) == 2
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


def test_a_v1_table_is_rewritten_with_its_snapshot_ids(catalog: SqlCatalog) -> None:
    table = create_table(catalog, partition_name="category", **{"format-version": "1"})
    assert table.format_version == 1
    _append_many(table, 6)
    before_entries, before_rows = _live_entries(table), live_checksum(table)

    result = rewrite_manifests(table)

    assert (result["rewritten_manifests_count"], result["added_manifests_count"]) == (6, 1)
    assert _live_entries(table) == before_entries
    assert live_checksum(table) == before_rows


# -- nothing to do ------------------------------------------------------------------------------------


def test_a_single_manifest_is_nothing_to_do(catalog: SqlCatalog) -> None:
    table = _partitioned(catalog)
    _append_many(table, 1)
    location = table.metadata_location

    result = rewrite_manifests(table)

    assert result["rewritten_manifests_count"] == result["added_manifests_count"] == 0
    assert result["snapshot_ids"] == []
    table.refresh()
    assert table.metadata_location == location
    assert _unreferenced(table) == set()


@pytest.mark.parametrize("appends", [0, 3])
def test_no_manifest_of_the_spec_is_nothing_to_do(catalog: SqlCatalog, appends: int) -> None:
    table = create_table(catalog)
    _append_many(table, appends)
    with table.update_spec() as update:
        update.add_identity("category")
    location = table.metadata_location

    result = rewrite_manifests(table)

    assert result["snapshot_ids"] == []
    assert result["rewritten_manifests_count"] == 0
    table.refresh()
    assert table.metadata_location == location


# -- idempotency, concurrency, failures ---------------------------------------------------------------


def test_the_same_commit_id_is_reported_not_committed_again(catalog: SqlCatalog) -> None:
    table = _partitioned(catalog)
    _append_many(table, 5)
    first = rewrite_manifests(table, commit_id="rm-same")
    _append_many(table, 3)
    location = table.metadata_location

    again = rewrite_manifests(table, commit_id="rm-same")

    assert again["already_committed"] is True
    assert again["snapshot_ids"] == first["snapshot_ids"]
    assert (again["rewritten_manifests_count"], again["added_manifests_count"]) == (5, 1)
    table.refresh()
    assert table.metadata_location == location


def _race_once(monkeypatch: pytest.MonkeyPatch, catalog: SqlCatalog, action: Any) -> list[int]:
    """Make the next catalog commit first run ``action`` (a concurrent writer), then go ahead."""
    original = catalog.commit_table
    calls: list[int] = []

    def racing_commit_table(table: Table, requirements: Any, updates: Any) -> Any:
        if not calls:
            action()
        calls.append(1)
        return original(table, requirements, updates)

    monkeypatch.setattr(catalog, "commit_table", racing_commit_table)
    return calls


def test_a_concurrent_rewrite_that_removes_manifests_makes_the_retry_replan(
    catalog: SqlCatalog, catalog_uri: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt's manifests are gone from the head: the retry re-plans there, loses nothing."""
    table = _partitioned(catalog)
    _append_many(table, 6)
    other = SqlCatalog("test", **catalog_uri)

    def concurrent() -> None:
        theirs = other.load_table("ns.t")
        rewrite_manifests(theirs, commit_id="theirs")
        _append_many(theirs, 2)

    calls = _race_once(monkeypatch, catalog, concurrent)
    result = rewrite_manifests(table, commit_id="ours")

    assert len(calls) == 2
    # the retry saw the concurrent rewrite's manifest and the two appends'
    assert (result["rewritten_manifests_count"], result["added_manifests_count"]) == (3, 1)
    assert len(_manifests(table)) == 1
    assert len(_live_entries(table)) == 8
    assert live_checksum(table)[0] == 80
    assert _unreferenced(table) == set()
    other.engine.dispose()


def test_retries_running_out_leave_the_table_and_its_folder_unchanged(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _partitioned(catalog)
    _append_many(table, 4)
    location, files = table.metadata_location, _metadata_files(table)

    def always_moved(table: Table, requirements: Any, updates: Any) -> Any:
        raise CommitFailedException("branch main has changed")

    monkeypatch.setattr(catalog, "commit_table", always_moved)

    with pytest.raises(CommitConflictError, match="retries ran out"):
        rewrite_manifests(table, commit_id="rm-fail")

    table.refresh()
    assert table.metadata_location == location
    assert _metadata_files(table) == files


# -- bad input ----------------------------------------------------------------------------------------


@pytest.fixture
def catalog_uri(tmp_path: Any) -> dict[str, str]:
    return {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spec_id": 7}, r"unknown spec id 7 for ns\.t; its specs are \[0\]"),
        (
            {"sort_by": ["nope"]},
            r"sort_by names 'nope', not partition fields of spec 0 of ns\.t \(category\)",
        ),
        ({"sort_by": "category"}, "sort_by must be a list"),
        ({"sort_by": []}, "at least one partition field"),
        ({"target_size_bytes": 0}, "target_size_bytes must be a positive integer"),
        ({"commit_id": ""}, "commit_id must be a non-empty string"),
        ({"branch": "v1"}, r"v1 is a tag of ns\.t, not a branch"),
        ({"snapshot_properties": {COMMIT_ID_PROPERTY: "x"}}, "snapshot_properties cannot set"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    catalog: SqlCatalog, kwargs: dict[str, Any], message: str
) -> None:
    table = _partitioned(catalog)
    _append_many(table, 3)
    table.manage_snapshots().create_tag(table.metadata.current_snapshot_id, "v1").commit()
    location, files = table.metadata_location, _metadata_files(table)

    with pytest.raises(ConfigurationError, match=message) as info:
        rewrite_manifests(table, **kwargs)

    assert "\n" not in str(info.value)
    table.refresh()
    assert table.metadata_location == location
    assert _metadata_files(table) == files


def test_sort_by_on_an_unpartitioned_spec_is_refused(catalog: SqlCatalog) -> None:
    table = create_table(catalog)
    _append_many(table, 2)
    with pytest.raises(ConfigurationError, match="it is unpartitioned"):
        rewrite_manifests(table, sort_by=["category"])


def test_a_bad_target_size_property_is_refused(catalog: SqlCatalog) -> None:
    table = _partitioned(catalog, **{"commit.manifest.target-size-bytes": "big"})
    _append_many(table, 2)
    with pytest.raises(
        ConfigurationError, match=r"commit\.manifest\.target-size-bytes='big' is not an integer"
    ):
        rewrite_manifests(table)
