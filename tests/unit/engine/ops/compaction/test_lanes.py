"""How a compaction group is cut into lanes (issue 16): only binpack groups of at least two target sizes
per lane, never with equality deletes, contiguous runs of files as even by bytes as they can be."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile
from airflow_provider_iceberg_exec.engine.ops.compaction.rewrite import _lanes, _OutputLayout

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


def _sizes(lanes: list[list[ScannedFile]]) -> list[list[int]]:
    return [[f.data_file.file_size_in_bytes for f in lane] for lane in lanes]


def test_a_group_of_several_target_sizes_is_cut_in_two_even_contiguous_halves() -> None:
    inputs = [_scanned(30 * MiB + i) for i in range(10)]  # 300 MiB

    lanes = _lanes(inputs, _layout(), TWO_CORES)

    assert [f for lane in lanes for f in lane] == inputs  # contiguous, in file order
    assert [len(lane) for lane in lanes] == [5, 5]


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
