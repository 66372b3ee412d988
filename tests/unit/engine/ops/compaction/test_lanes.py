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
from airflow_provider_iceberg_exec.engine.meta.task_files import FileCounts, TaskFiles, scanned_to_json
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


def _task(inputs: list[ScannedFile]) -> TaskFiles:
    """``inputs`` as a task's entries, decoded as they are asked for."""
    for scanned in inputs:
        for data_file in (scanned.data_file, *(d.data_file for d in scanned.delete_files)):
            data_file.spec_id = 0
    return TaskFiles(
        [scanned_to_json(s, {0: PartitionSpec()}, Schema()) for s in inputs], {0: PartitionSpec()}, Schema()
    )


def _layout(needs_order: bool = False) -> _OutputLayout:
    return _OutputLayout(PartitionSpec(), TARGET, (), needs_order, None)


def _sizes(lanes: list[_LaneInputs]) -> list[list[int]]:
    sizes = [[f.data_file.file_size_in_bytes for f in lane.files] for lane in lanes]
    assert [lane.stored_bytes for lane in lanes] == [sum(lane) for lane in sizes]
    return sizes


def test_a_group_of_several_target_sizes_is_cut_in_two_even_contiguous_halves() -> None:
    inputs = [_scanned(30 * MiB + i) for i in range(10)]  # 300 MiB

    lanes = _lanes(_task(inputs), _layout(), TWO_CORES)

    # contiguous, in file order
    assert [f.data_file.file_size_in_bytes for lane in lanes for f in lane.files] == [
        30 * MiB + i for i in range(10)
    ]
    assert [len(lane.files) for lane in lanes] == [5, 5]
    assert [lane.records for lane in lanes] == [5000, 5000]


def test_a_group_under_two_target_sizes_is_one_lane() -> None:
    inputs = [_scanned(19 * MiB) for _ in range(10)]  # 190 MiB: one full file and a 90 MiB one

    assert _sizes(_lanes(_task(inputs), _layout(), TWO_CORES)) == [[19 * MiB] * 10]


def test_a_lane_under_one_target_size_is_not_made() -> None:
    """150 + 10 + 10 + 10 + 10 MiB: the even cut leaves 40 MiB to one lane, which would only add a
    small file."""
    inputs = [_scanned(150 * MiB), *(_scanned(10 * MiB) for _ in range(4))]

    assert len(_lanes(_task(inputs), _layout(), TWO_CORES)) == 1


def test_the_cut_follows_the_bytes_not_the_file_count() -> None:
    inputs = [_scanned(120 * MiB), *(_scanned(20 * MiB) for _ in range(6))]

    assert _sizes(_lanes(_task(inputs), _layout(), TWO_CORES)) == [[120 * MiB], [20 * MiB] * 6]


def test_position_deletes_count_against_the_live_bytes() -> None:
    """250 MiB of files, but position deletes that could remove 60 % of their rows: at least 100 MiB
    live, not two target sizes."""
    deletes = _file(1000, rows=600, content=DataFileContent.POSITION_DELETES)
    inputs = [_scanned(50 * MiB, deletes) for _ in range(5)]

    assert len(_lanes(_task(inputs), _layout(), TWO_CORES)) == 1
    assert len(_lanes(_task([_scanned(50 * MiB) for _ in range(5)]), _layout(), TWO_CORES)) == 2


def test_equality_deletes_keep_one_lane() -> None:
    equality = _file(1000, rows=1, content=DataFileContent.EQUALITY_DELETES)
    inputs = [_scanned(60 * MiB), _scanned(60 * MiB), _scanned(60 * MiB), _scanned(60 * MiB, equality)]

    assert len(_lanes(_task(inputs), _layout(), TWO_CORES)) == 1


def test_sorted_or_reclustered_output_keeps_one_lane() -> None:
    inputs = [_scanned(60 * MiB) for _ in range(5)]

    assert len(_lanes(_task(inputs), _layout(needs_order=True), TWO_CORES)) == 1


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

    assert len(_lanes(_task(inputs), _layout(), limits)) == expected


def test_a_single_file_is_one_lane() -> None:
    assert len(_lanes(_task([_scanned(500 * MiB)]), _layout(), TWO_CORES)) == 1


def test_a_task_s_lanes_decode_no_file_and_each_lane_stays_lazy() -> None:
    """The lanes of a task's files come from one pass over their entries' counts, no file decoded, and
    each lane is a slice of the same entries, not a list of decoded files."""
    files = [_scanned(30 * MiB + i) for i in range(10)]
    task = _task(files)
    decoded: list[int] = []

    class Counted(TaskFiles):
        def __iter__(self) -> Iterator[ScannedFile]:
            for scanned in super().__iter__():
                decoded.append(1)
                yield scanned

    lanes = _lanes(Counted(task._entries, {0: PartitionSpec()}, Schema()), _layout(), TWO_CORES)

    assert decoded == []
    assert all(isinstance(lane.files, TaskFiles) for lane in lanes)
    assert [f.data_file.file_size_in_bytes for lane in lanes for f in lane.files] == [
        30 * MiB + i for i in range(10)
    ]
    assert sum(lane.records for lane in lanes) == 10_000


def test_the_counts_read_off_an_entry_are_those_of_the_decoded_file() -> None:
    equality = _file(1000, rows=7, content=DataFileContent.EQUALITY_DELETES)
    positions = _file(2000, rows=600, content=DataFileContent.POSITION_DELETES)
    files = [_scanned(50 * MiB), _scanned(60 * MiB, positions), _scanned(70 * MiB, positions, equality)]
    task = _task(files)

    assert (
        list(task.counts())
        == [FileCounts.of(scanned) for scanned in task]
        == [FileCounts.of(f) for f in files]
    )
    assert [c.has_equality_deletes for c in task.counts()] == [False, False, True]
    assert [c.delete_records for c in task.counts()] == [0, 600, 607]
