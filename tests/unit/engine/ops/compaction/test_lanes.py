"""How a compaction group is cut into lanes (issue 16): only binpack groups of at least two target sizes
per lane, never with equality deletes, contiguous runs of files as even by bytes as they can be."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile
from airflow_provider_iceberg_exec.engine.ops.compaction.rewrite import _LaneInputs, _lanes, _OutputLayout

MiB = 1024 * 1024
TARGET = 100 * MiB
TWO_CORES = ResourceLimits(memory_limit_bytes=256 * MiB, target_partitions=2)


def _file(size: int, rows: int = 1000, *, content: DataFileContent = DataFileContent.DATA) -> DataFile:
    return DataFile.from_args(
        content=content,
        file_path=f"s3://b/{size}-{rows}-{content.name}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=size,
    )


def _scanned(size: int, *deletes: DataFile) -> ScannedFile:
    return ScannedFile(_file(size), 1, tuple(ScannedDelete(d, 2) for d in deletes))


def _layout(needs_order: bool = False) -> _OutputLayout:
    return _OutputLayout(PartitionSpec(), TARGET, (), needs_order, None)


def _sizes(lanes: list[_LaneInputs]) -> list[list[int]]:
    sizes = [[f.data_file.file_size_in_bytes for f in lane.files] for lane in lanes]
    assert [lane.stored_bytes for lane in lanes] == [sum(lane) for lane in sizes]
    return sizes


def test_a_group_of_several_target_sizes_is_cut_in_two_even_contiguous_halves() -> None:
    inputs = [_scanned(30 * MiB + i) for i in range(10)]  # 300 MiB

    lanes = _lanes(inputs, _layout(), TWO_CORES)

    assert [f for lane in lanes for f in lane.files] == inputs  # contiguous, in file order
    assert [len(lane.files) for lane in lanes] == [5, 5]
    assert [lane.records for lane in lanes] == [5000, 5000]


def test_a_group_under_two_target_sizes_is_one_lane() -> None:
    inputs = [_scanned(19 * MiB) for _ in range(10)]  # 190 MiB: one full file and a 90 MiB one

    assert _sizes(_lanes(inputs, _layout(), TWO_CORES)) == [[19 * MiB] * 10]


def test_a_lane_under_one_target_size_is_not_made() -> None:
    """150 + 10 + 10 + 10 + 10 MiB: the even cut leaves 40 MiB to one lane, which would only add a
    small file."""
    inputs = [_scanned(150 * MiB), *(_scanned(10 * MiB) for _ in range(4))]

    assert len(_lanes(inputs, _layout(), TWO_CORES)) == 1


def test_the_cut_follows_the_bytes_not_the_file_count() -> None:
    inputs = [_scanned(120 * MiB), *(_scanned(20 * MiB) for _ in range(6))]

    assert _sizes(_lanes(inputs, _layout(), TWO_CORES)) == [[120 * MiB], [20 * MiB] * 6]


def test_position_deletes_count_against_the_live_bytes() -> None:
    """250 MiB of files, but position deletes that could remove 60 % of their rows: at least 100 MiB
    live, not two target sizes."""
    deletes = _file(1000, rows=600, content=DataFileContent.POSITION_DELETES)
    inputs = [_scanned(50 * MiB, deletes) for _ in range(5)]

    assert len(_lanes(inputs, _layout(), TWO_CORES)) == 1
    assert len(_lanes([_scanned(50 * MiB) for _ in range(5)], _layout(), TWO_CORES)) == 2


def test_equality_deletes_keep_one_lane() -> None:
    equality = _file(1000, rows=1, content=DataFileContent.EQUALITY_DELETES)
    inputs = [_scanned(60 * MiB), _scanned(60 * MiB), _scanned(60 * MiB), _scanned(60 * MiB, equality)]

    assert len(_lanes(inputs, _layout(), TWO_CORES)) == 1


def test_sorted_or_reclustered_output_keeps_one_lane() -> None:
    inputs = [_scanned(60 * MiB) for _ in range(5)]

    assert len(_lanes(inputs, _layout(needs_order=True), TWO_CORES)) == 1


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (ResourceLimits(memory_limit_bytes=256 * MiB, target_partitions=1), 1),  # one core given
        (ResourceLimits(memory_limit_bytes=256 * MiB, target_partitions=8), 2),  # four buffers per lane
        (ResourceLimits(memory_limit_bytes=2048 * MiB, target_partitions=8), 4),  # four target sizes
    ],
)
def test_lanes_follow_the_cores_and_memory_given(limits: ResourceLimits, expected: int) -> None:
    inputs = [_scanned(50 * MiB) for _ in range(8)]  # 400 MiB: four target sizes

    assert len(_lanes(inputs, _layout(), limits)) == expected


def test_a_single_file_is_one_lane() -> None:
    assert len(_lanes([_scanned(500 * MiB)], _layout(), TWO_CORES)) == 1


def test_a_task_s_files_are_decoded_once_to_cut_its_lanes_and_each_lane_stays_lazy() -> None:
    """The lanes of a task's files (decoded as they are asked for) come from one pass, and each lane is a
    slice of the same entries, not a list of decoded files."""
    from airflow_provider_iceberg_exec.engine.meta.task_files import TaskFiles, scanned_to_json

    spec = PartitionSpec()
    schema = Schema()
    files = [_scanned(30 * MiB + i) for i in range(10)]
    for scanned in files:
        scanned.data_file.spec_id = 0
    entries = [scanned_to_json(scanned, {0: spec}, schema) for scanned in files]
    decoded: list[int] = []

    class Counted(TaskFiles):
        def __iter__(self) -> Iterator[ScannedFile]:
            for scanned in super().__iter__():
                decoded.append(1)
                yield scanned

    lanes = _lanes(Counted(entries, {0: spec}, schema), _layout(), TWO_CORES)

    assert len(decoded) == len(entries)
    assert all(isinstance(lane.files, TaskFiles) for lane in lanes)
    assert [f.data_file.file_size_in_bytes for lane in lanes for f in lane.files] == [
        30 * MiB + i for i in range(10)
    ]
    assert sum(lane.records for lane in lanes) == 10_000
