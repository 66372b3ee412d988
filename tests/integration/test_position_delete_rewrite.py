"""Position-delete compaction (Spark's ``rewrite_position_delete_files``) on a real SQLite catalog.

Every test reads the live rows with PyIceberg's own scan (``live_checksum``), never with the code under
test, before and after; sequence numbers are read back from the committed manifests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    SequencedDelete,
    commit_delete_rewrite,
    commit_rewrite,
)
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import CommitValidationError, ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, referenced_data_file
from airflow_provider_iceberg_exec.engine.ops.position_deletes import (
    commit_position_delete_rewrite,
    execute_position_delete_task,
    plan_position_delete_rewrite,
    rewrite_position_deletes,
)
from tests.helpers import commit_position_delete_file, commit_position_deletes, data_files, live_checksum
from tests.integration.test_deletes import SCHEMA

pytestmark = pytest.mark.integration

MiB = 1 << 20
BY_CATEGORY = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    return catalog


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path / "spill"))


def _rows(ids: range, category: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "category": pa.array([category] * len(ids), pa.string()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
        }
    )


def _table(catalog: SqlCatalog, *, partitioned: bool, properties: dict[str, str] | None = None) -> Table:
    return catalog.create_table(
        "ns.t",
        schema=SCHEMA,
        partition_spec=BY_CATEGORY if partitioned else PartitionSpec(),
        properties={"format-version": "2", **(properties or {})},
    )


def _delete_entries(table: Table) -> list[Any]:
    """The live delete manifest entries of the current snapshot, with their sequence numbers."""
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        e
        for m in snapshot.manifests(table.io)
        if m.content == ManifestContent.DELETES
        for e in read_manifest_entries(table.io, m, discard_deleted=True)
    ]


def _many_small_deletes(table: Table, categories: tuple[str, ...]) -> dict[str, list[DataFile]]:
    """Two data files per category; three commits, each deleting one row of every data file."""
    for number, category in enumerate(categories):
        base = number * 100
        table.append(_rows(range(base, base + 20), category))
        table.append(_rows(range(base + 20, base + 40), category))
    inputs: dict[str, list[DataFile]] = {}
    files = sorted(data_files(table), key=lambda f: f.file_path)
    for row in (0, 5, 9):
        for data_file in files:
            delete = commit_position_deletes(table, data_file.file_path, [row])
            key = str(data_file.partition[0]) if len(data_file.partition) else ""
            inputs.setdefault(key, []).append(delete)
    return inputs


@pytest.mark.parametrize("partitioned", [False, True])
def test_small_position_deletes_become_one_file_per_data_file(
    catalog: SqlCatalog, tmp_path: Path, partitioned: bool
) -> None:
    table = _table(catalog, partitioned=partitioned)
    _many_small_deletes(table, ("a", "b"))
    before = live_checksum(table)
    inputs = _delete_entries(table)
    assert len(inputs) == 12
    max_seq = {
        referenced_data_file(e.data_file): max(
            x.sequence_number
            for x in inputs
            if (partitioned and x.data_file.partition == e.data_file.partition) or not partitioned
        )
        for e in inputs
    }

    result = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="posdel-1")

    assert live_checksum(table) == before == (80 - 12, before[1])
    outputs = _delete_entries(table)
    # Spark's default granularity (file): one delete file per data file, file-scoped.
    assert len(outputs) == 4
    assert {referenced_data_file(e.data_file) for e in outputs} == {f.file_path for f in data_files(table)}
    assert all(e.data_file.record_count == 3 for e in outputs)
    for entry in outputs:
        # The new file keeps the largest data sequence number of the group it replaces.
        assert entry.sequence_number == max_seq[referenced_data_file(entry.data_file)]
        assert entry.status == ManifestEntryStatus.ADDED
    assert result["rewritten_delete_files_count"] == 12
    assert result["added_delete_files_count"] == 4
    assert result["rewritten_bytes_count"] == sum(e.data_file.file_size_in_bytes for e in inputs)
    assert result["added_bytes_count"] == sum(e.data_file.file_size_in_bytes for e in outputs)
    assert len(result["snapshot_ids"]) == 1
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation.value == "replace"
    if partitioned:
        # A group never mixes partitions: every output holds positions of its partition only.
        for entry in outputs:
            target = referenced_data_file(entry.data_file)
            (data_file,) = [f for f in data_files(table) if f.file_path == target]
            assert entry.data_file.partition == data_file.partition


def test_partition_granularity_writes_one_file_per_partition(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=True, properties={"write.delete.granularity": "partition"})
    _many_small_deletes(table, ("a", "b"))
    before = live_checksum(table)

    rewrite_position_deletes(table, limits=_limits(tmp_path))

    assert live_checksum(table) == before
    outputs = _delete_entries(table)
    assert sorted(e.data_file.partition[0] for e in outputs) == ["a", "b"]
    assert all(referenced_data_file(e.data_file) is None for e in outputs)
    for entry in outputs:
        rows = pq.read_table(entry.data_file.file_path.removeprefix("file://")).to_pylist()
        assert rows == sorted(rows, key=lambda r: (r["file_path"], r["pos"]))
        assert len(rows) == entry.data_file.record_count == 6


def test_dangling_positions_are_dropped(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Positions of a data file another engine rewrote (and of a path never live) are not carried over."""
    table = _table(catalog, partitioned=False)
    table.append(_rows(range(10), "a"))
    table.append(_rows(range(10, 20), "a"))
    first, second = sorted(data_files(table), key=lambda f: f.file_path)
    for _ in range(5):
        commit_position_delete_file(
            table,
            {first.file_path: [0, 1], second.file_path: [2], f"{table.location()}/data/never.parquet": [0]},
        )
    # Another engine rewrites the first file with its deletes applied, and leaves the deletes behind.
    kept = pq.read_table(first.file_path.removeprefix("file://")).slice(2)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    commit_rewrite(
        table,
        base_snapshot_id=snapshot.snapshot_id,
        rewritten_data_files=[first],
        added_data_files=list(_dataframe_to_data_files(table_metadata=table.metadata, df=kept, io=table.io)),
        commit_id="elsewhere",
        use_starting_sequence_number=False,
    )
    before = live_checksum(table)

    result = rewrite_position_deletes(table, limits=_limits(tmp_path))

    assert live_checksum(table) == before == (17, before[1])
    (output,) = _delete_entries(table)
    rows = pq.read_table(output.data_file.file_path.removeprefix("file://")).to_pylist()
    # One position survives: five inputs listed it, the other 15 positions named dead files.
    assert rows == [{"file_path": second.file_path, "pos": 2}]
    assert referenced_data_file(output.data_file) == second.file_path
    assert result["dangling_records"] == 15
    assert result["rewritten_delete_files_count"] == 5


def test_a_retry_with_the_same_commit_id_commits_nothing_more(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False)
    _many_small_deletes(table, ("a",))
    first = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="same")
    head = table.current_snapshot()
    again = rewrite_position_deletes(table, limits=_limits(tmp_path), commit_id="same")
    table.refresh()
    assert table.current_snapshot() == head
    assert again["already_committed"]
    assert again["snapshot_ids"] == first["snapshot_ids"]
    assert again["rewritten_delete_files_count"] == first["rewritten_delete_files_count"] == 6


def test_results_committed_twice_land_once(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=True)
    _many_small_deletes(table, ("a", "b"))
    plan = plan_position_delete_rewrite(table)
    results = [execute_position_delete_task(table, t, _limits(tmp_path)) for t in plan["tasks"]]
    first = commit_position_delete_rewrite(table, results, commit_id="twice")
    again = commit_position_delete_rewrite(table, results, commit_id="twice")
    assert not first["already_committed"]
    assert again["already_committed"]
    assert again["snapshot_ids"] == first["snapshot_ids"]


def test_an_input_removed_meanwhile_fails_validation_and_leaves_the_table(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _table(catalog, partitioned=False)
    inputs = _many_small_deletes(table, ("a",))[""]
    plan = plan_position_delete_rewrite(table)
    (task,) = plan["tasks"]
    result = execute_position_delete_task(table, task, _limits(tmp_path))
    # A concurrent rewrite replaces one of the inputs by an equivalent file.
    victim = inputs[0]
    copy = commit_position_deletes(table, referenced_data_file(victim) or "", [0])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    commit_delete_rewrite(
        table,
        base_snapshot_id=snapshot.snapshot_id,
        removed_delete_files=[victim],
        added_delete_files=[SequencedDelete(copy, 1)],
        commit_id="concurrent",
    )
    head = table.current_snapshot()
    before = live_checksum(table)
    outputs = [f["file-path"] for f in result["added_delete_files"]]

    with pytest.raises(CommitValidationError):
        commit_position_delete_rewrite(table, [result], commit_id="late")

    table.refresh()
    assert table.current_snapshot() == head
    assert live_checksum(table) == before
    # Its outputs can never be committed: they are gone.
    assert not any(Path(p.removeprefix("file://")).exists() for p in outputs)


def test_where_selects_partitions(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=True)
    _many_small_deletes(table, ("a", "b"))
    before = live_checksum(table)
    result = rewrite_position_deletes(table, where="category = 'b'", limits=_limits(tmp_path))
    assert live_checksum(table) == before
    assert result["rewritten_delete_files_count"] == 6
    by_partition: dict[str, int] = {}
    for entry in _delete_entries(table):
        by_partition[entry.data_file.partition[0]] = by_partition.get(entry.data_file.partition[0], 0) + 1
    assert by_partition == {"a": 6, "b": 2}


def test_nothing_to_do(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False)
    empty = rewrite_position_deletes(table, limits=_limits(tmp_path))
    assert empty["snapshot_ids"] == []
    assert empty["rewritten_delete_files_count"] == 0
    table.append(_rows(range(10), "a"))
    head = table.current_snapshot()
    assert rewrite_position_deletes(table, limits=_limits(tmp_path))["snapshot_ids"] == []
    # Four small delete files are below min-input-files (5): nothing to rewrite by the options.
    for row in range(4):
        commit_position_deletes(table, data_files(table)[0].file_path, [row])
    head = table.current_snapshot()
    assert rewrite_position_deletes(table, limits=_limits(tmp_path))["snapshot_ids"] == []
    table.refresh()
    assert table.current_snapshot() == head
    result = rewrite_position_deletes(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path))
    assert result["rewritten_delete_files_count"] == 4
    assert result["added_delete_files_count"] == 1


def test_bad_input_is_one_line_and_changes_nothing(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(catalog, partitioned=False)
    _many_small_deletes(table, ("a",))
    head = table.current_snapshot()
    with pytest.raises(ConfigurationError, match="valid options: max-concurrent-file-group-rewrites"):
        rewrite_position_deletes(table, options={"delete-ratio-threshold": "0.1"})
    with pytest.raises(ConfigurationError, match="min-input-files"):
        rewrite_position_deletes(table, options={"min-input-files": "many"})
    with pytest.raises(ConfigurationError, match="cannot parse where"):
        rewrite_position_deletes(table, where="category =")
    table.refresh()
    assert table.current_snapshot() == head
    v1 = catalog.create_table("ns.v1", schema=SCHEMA, properties={"format-version": "1"})
    v1.append(_rows(range(3), "a"))
    with pytest.raises(ConfigurationError, match="format version 1") as err:
        rewrite_position_deletes(v1)
    assert "\n" not in str(err.value)


def test_many_positions_with_long_paths_sort_under_the_smallest_limit(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """200 delete files naming 40 data files by ~130-byte paths (26 MB of rows) under 32 MiB: the sort
    runs on data file ordinals, not on the paths (on the paths the merge ran out of its pool)."""
    from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES
    from tests.helpers import commit_delete_files
    from tests.integration.maintenance_support import (
        create_table,
        rows,
        write_position_deletes,
    )

    table = create_table(catalog, "ns.long_paths")
    for i in range(40):
        table.append(rows(i * 50_000, 50_000, "a"))
    paths = [f["file_path"] for f in table.inspect.files().to_pylist()]
    commit_delete_files(
        table,
        [write_position_deletes(table, p, list(range(j, 50_000, 50)), "a") for p in paths for j in range(5)],
    )
    before = live_checksum(table)
    tight = ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(tmp_path / "spill"))

    result = rewrite_position_deletes(table, options={"rewrite-all": "true"}, limits=tight)

    assert result["rewritten_delete_files_count"] == 200
    assert result["added_delete_files_count"] == 40
    assert live_checksum(table) == before
