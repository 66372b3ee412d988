"""engine/commit/change.py: the plain description of one commit's change, and its small helpers.

``DanglingDeletes`` is a string enum of the three documented modes; ``FilesChange`` and ``History`` are
frozen; ``spec_id_of`` falls back to the default spec for a writer's file without one; ``partition_key``
pairs it with the file's partition; ``file_identity`` tells DVs sharing one Puffin apart by their blob
(removing by path alone would resurrect the rows of every DV in the file); ``some`` shows at most
``shown`` paths and how many more."""

from __future__ import annotations

import dataclasses
from datetime import date

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.change import (
    DanglingDeletes,
    FilesChange,
    History,
    file_identity,
    partition_key,
    some,
    spec_id_of,
)

SCHEMA = pa.schema([("id", pa.int64()), ("d", pa.date32())])


@pytest.fixture
def evolved(catalog):
    """``ns.evolved``: one file in spec 0 (unpartitioned), then one in spec 1 (identity ``d``)."""
    table = catalog.create_table("ns.evolved", schema=SCHEMA)
    table.append(pa.table({"id": [1], "d": [date(2024, 1, 1)]}, schema=SCHEMA))
    with table.update_spec() as update:
        update.add_field("d", IdentityTransform(), "d")
    table.append(pa.table({"id": [2], "d": [date(2024, 1, 2)]}, schema=SCHEMA))
    return table


def _written(partition: Record) -> DataFile:
    """A data file as PyIceberg's writers build it: no ``spec_id``."""
    return DataFile.from_args(
        _table_format_version=2,
        content=DataFileContent.DATA,
        file_path="file:///nowhere/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=1,
        file_size_in_bytes=10,
    )


def _no_checks(change, history, removed) -> None:
    return None


def test_dangling_deletes_are_the_three_documented_string_modes() -> None:
    assert [mode.value for mode in DanglingDeletes] == ["none", "rewritten", "all"]
    assert DanglingDeletes("rewritten") is DanglingDeletes.REWRITTEN
    assert DanglingDeletes.ALL == "all"
    assert isinstance(DanglingDeletes.NONE, str)
    with pytest.raises(ValueError, match="dangling"):
        DanglingDeletes("dangling")


def test_spec_id_of_a_file_read_from_a_manifest_is_its_spec(evolved) -> None:
    by_spec = {task.file.spec_id: task.file for task in evolved.scan().plan_files()}
    assert sorted(by_spec) == [0, 1]
    assert spec_id_of(by_spec[0], default=1) == 0
    assert spec_id_of(by_spec[1], default=0) == 1


def test_spec_id_of_a_writer_file_is_the_default() -> None:
    written = _written(Record())
    assert spec_id_of(written, 7) == 7
    written.spec_id = 2
    assert spec_id_of(written, 7) == 2


def test_partition_key_pairs_the_spec_id_with_the_partition(evolved) -> None:
    by_spec = {task.file.spec_id: task.file for task in evolved.scan().plan_files()}
    assert partition_key(by_spec[0], 1) == (0, Record())
    assert partition_key(by_spec[1], 0) == (1, Record(19724))
    assert partition_key(_written(Record(19723)), 1) == (1, Record(19723))
    # the same partition value under another spec is another scope
    assert partition_key(_written(Record(19724)), 0) != partition_key(by_spec[1], 0)


@pytest.mark.parametrize(
    ("paths", "shown", "expected"),
    [
        ([], 3, ""),
        (["a"], 3, "a"),
        (["a", "b", "c"], 3, "a, b, c"),
        (["a", "b", "c", "d"], 3, "a, b, c and 1 more"),
        (["a", "b", "c", "d", "e"], 3, "a, b, c and 2 more"),
        (["a", "b", "c"], 1, "a and 2 more"),
        (("a", "b"), 5, "a, b"),
    ],
)
def test_some_shows_at_most_shown_paths_and_how_many_more(paths, shown, expected) -> None:
    assert some(paths, shown=shown) == expected


def test_files_change_is_frozen_and_keeps_what_it_is_given(evolved) -> None:
    files = [task.file for task in evolved.scan().plan_files()]
    change = FilesChange(
        operation=Operation.REPLACE,
        base_snapshot_id=evolved.current_snapshot().snapshot_id,
        removed_data_files=files,
        removed_delete_files=[],
        added=[],
        commit_id="job-1",
        branch="main",
        explicit_sequence_number=True,
        dangling_deletes=DanglingDeletes.REWRITTEN,
        validate=_no_checks,
    )
    assert change.removed_data_files is files
    assert change.dangling_deletes is DanglingDeletes.REWRITTEN
    assert change.validate(change, None, []) is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.commit_id = "job-2"  # type: ignore[misc]
    assert dataclasses.replace(change, commit_id="job-2").commit_id == "job-2"
    assert change.commit_id == "job-1"


def test_history_is_frozen(evolved) -> None:
    head = evolved.current_snapshot()
    history = History(io=evolved.io, metadata=evolved.metadata, base=None, window=[head])
    assert history.window == [head]
    assert history.base is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        history.base = head  # type: ignore[misc]


def _dv(offset: int | None, size: int | None, path: str = "file:///t/data/d.puffin") -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=Record(),
        record_count=2,
        file_size_in_bytes=500,
        referenced_data_file=f"file:///t/data/{offset}.parquet",
        content_offset=offset,
        content_size_in_bytes=size,
    )


def test_dvs_in_one_puffin_file_are_told_apart_by_offset_and_size() -> None:
    first, second = _dv(4, 46), _dv(50, 46)

    assert file_identity(first) == ("file:///t/data/d.puffin", 4, 46)
    assert file_identity(first) != file_identity(second)
    assert file_identity(first) == file_identity(_dv(4, 46))


def test_a_position_delete_file_is_its_path() -> None:
    position = DataFile.from_args(
        _table_format_version=2,
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/pos.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=2,
        file_size_in_bytes=500,
    )

    assert file_identity(position) == ("file:///t/data/pos.parquet", None, None)


def test_a_dv_without_its_blob_pointers_falls_back_to_its_path() -> None:
    assert file_identity(_dv(None, None)) == ("file:///t/data/d.puffin", None, None)
