"""The position delete sink: on v2 Parquet position delete files as before; on v3 one DV per data file,
merged with every position delete that applied to it, in one Puffin file, the old DV and file-scoped
position files reported as rewritten. Read back with PyIceberg's DV reader and with ours."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.puffin import PuffinFile
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.deletes.sink import (
    DeleteTarget,
    DeletionVectorSink,
    ParquetPositionDeleteSink,
    position_delete_sink,
)
from airflow_provider_iceberg_exec.engine.deletes.vectors import read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import (
    MAX_POSITION,
    DataFileDeletes,
    write_deletion_vectors,
)
from airflow_provider_iceberg_exec.engine.io.position_delete_writer import (
    DeleteGranularity,
    write_position_deletes,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "category", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"), spec_id=0)
KEY = 1 << 32


def _metadata(tmp_path: Path, version: int):
    return new_table_metadata(
        SCHEMA, SPEC, UNSORTED_SORT_ORDER, f"file://{tmp_path}/t", {"format-version": str(version)}
    )


def _data_file(tmp_path: Path, name: str, partition: str = "a") -> DataFile:
    entry = DataFile.from_args(
        file_path=f"file://{tmp_path}/t/data/category={partition}/{name}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(partition),
        record_count=10_000,
        file_size_in_bytes=1000,
    )
    entry.spec_id = 0
    return entry


def _sink(tmp_path: Path) -> DeletionVectorSink:
    sink = _any_sink(tmp_path, 3)
    assert isinstance(sink, DeletionVectorSink)
    return sink


def _any_sink(tmp_path: Path, format_version: int) -> Any:
    """The sink ``position_delete_sink`` picks for a table of ``format_version``."""
    return position_delete_sink(
        _metadata(tmp_path, format_version),
        io=PyArrowFileIO(),
        location_provider=load_location_provider(f"file://{tmp_path}/t", {}),
        spec=SPEC,
        partition=Record("a"),
        target_file_size_bytes=1 << 20,
        buffer_bytes=1 << 20,
        file_prefix="task-1",
    )


def _position_file(tmp_path: Path, rows: list[tuple[str, int]], prefix: str) -> DataFile:
    (written,) = write_position_deletes(
        PyArrowFileIO(),
        load_location_provider(f"file://{tmp_path}/t", {}),
        SPEC,
        Record("a"),
        [pa.record_batch({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]})],
        1 << 20,
        schema=SCHEMA,
        properties={},
        buffer_bytes=1 << 20,
        granularity=DeleteGranularity.PARTITION,
        file_prefix=prefix,
    )
    return written


def _old_dv(tmp_path: Path, data_file: DataFile, positions: list[int]) -> DataFile:
    (entry,) = write_deletion_vectors(
        PyArrowFileIO(),
        f"file://{tmp_path}/t/data/old-{Path(data_file.file_path).stem}.puffin",
        [DataFileDeletes(data_file.file_path, 0, data_file.partition, np.array(positions))],
    )
    return entry


def _pyiceberg_vectors(path: str) -> dict[str, list[int]]:
    with PyArrowFileIO().new_input(path).open() as stream:
        puffin = PuffinFile(stream.read())
    return {
        dv.referenced_data_file: dv.to_vector().to_pylist()
        for dv in deletion_vectors_from_puffin_file(puffin)
    }


def test_v3_writes_one_dv_per_data_file_in_one_puffin_file(tmp_path: Path) -> None:
    a, b = _data_file(tmp_path, "a"), _data_file(tmp_path, "b", "b")
    sink = _sink(tmp_path)

    sink.write(DeleteTarget(a), np.array([1, 2]))
    sink.write(DeleteTarget(b), np.array([5, KEY + 5]))
    sink.write(DeleteTarget(a), np.array([3, 900]))
    result = sink.close()

    assert [v3_field(d, "referenced_data_file") for d in result.added] == [a.file_path, b.file_path]
    assert len({d.file_path for d in result.added}) == 1
    assert _pyiceberg_vectors(result.added[0].file_path) == {
        a.file_path: [1, 2, 3, 900],
        b.file_path: [5, KEY + 5],
    }
    assert [read_deletion_vector(PyArrowFileIO(), d).tolist() for d in result.added] == [
        [1, 2, 3, 900],
        [5, KEY + 5],
    ]
    # each DV is in its data file's partition, whatever directory the Puffin file is in
    assert [d.partition for d in result.added] == [Record("a"), Record("b")]
    assert result.rewritten == []
    assert sink.rows_written == 6


def test_v3_merges_the_old_dv_not_the_position_files_readers_ignore_and_reports_the_file_scoped_ones(
    tmp_path: Path,
) -> None:
    """With a DV, readers ignore the data file's position files (spec "Scan Planning"; Java's
    DeleteFileIndex returns the DV alone): folding theirs would delete rows readers see. The file-scoped
    one is still reported, so the commit drops it; the partition-scoped one stays."""
    a, other = _data_file(tmp_path, "a"), _data_file(tmp_path, "other")
    old_dv = _old_dv(tmp_path, a, [7, 8])
    scoped = _position_file(tmp_path, [(a.file_path, 20), (a.file_path, 21)], "scoped")
    shared = _position_file(tmp_path, [(a.file_path, 30), (other.file_path, 1)], "shared")
    equality = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=f"file://{tmp_path}/t/eq.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record("a"),
        record_count=1,
        file_size_in_bytes=1,
        equality_ids=[1],
    )
    previous = tuple(ScannedDelete(f, 1) for f in (old_dv, scoped, shared, equality))
    sink = _sink(tmp_path)

    sink.write(DeleteTarget(a, previous), np.array([1, 8]))
    result = sink.close()

    (dv,) = result.added
    assert read_deletion_vector(PyArrowFileIO(), dv).tolist() == [1, 7, 8]
    assert dv.record_count == 3
    # the partition-scoped file stays: it still deletes a row of another data file
    assert [f.file_path for f in result.rewritten] == [old_dv.file_path, scoped.file_path]
    assert v3_field(result.rewritten[0], "content_offset") == v3_field(old_dv, "content_offset")


def test_v3_a_position_file_shared_by_several_changed_files_is_folded_into_each(tmp_path: Path) -> None:
    """A partition-scoped file naming three data files, two of them changed: each DV gets its own rows
    of it (read once for both), and the file stays (the third data file still needs it)."""
    a, b, c = (_data_file(tmp_path, n) for n in "abc")
    rows = [(a.file_path, 1), (a.file_path, 9), (b.file_path, 2), (c.file_path, 3)]
    shared = _position_file(tmp_path, sorted(rows), "shared")
    sink = _sink(tmp_path)

    sink.write(DeleteTarget(a, (ScannedDelete(shared, 1),)), np.array([5]))
    sink.write(DeleteTarget(b, (ScannedDelete(shared, 1),)), np.array([6]))
    result = sink.close()

    got = {
        v3_field(d, "referenced_data_file"): read_deletion_vector(PyArrowFileIO(), d).tolist()
        for d in result.added
    }
    assert got == {a.file_path: [1, 5, 9], b.file_path: [2, 6]}
    assert result.rewritten == []


def test_v3_fold_turns_earlier_position_deletes_into_one_dv(tmp_path: Path) -> None:
    """Position-delete compaction on v3: no new position, the position files become one DV."""
    a, untouched = _data_file(tmp_path, "a"), _data_file(tmp_path, "b")
    first = _position_file(tmp_path, [(a.file_path, 2)], "first")
    scoped = _position_file(tmp_path, [(a.file_path, 4)], "scoped")
    sink = _sink(tmp_path)

    sink.fold(DeleteTarget(a, (ScannedDelete(first, 1), ScannedDelete(scoped, 2))))
    sink.fold(DeleteTarget(untouched))  # nothing deletes a row of it: no DV
    result = sink.close()

    (dv,) = result.added
    assert read_deletion_vector(PyArrowFileIO(), dv).tolist() == [2, 4]
    assert [f.file_path for f in result.rewritten] == [first.file_path, scoped.file_path]


def test_v3_forget_drops_a_data_file_that_did_not_change(tmp_path: Path) -> None:
    a, b = _data_file(tmp_path, "a"), _data_file(tmp_path, "b")
    sink = _sink(tmp_path)
    sink.write(DeleteTarget(a), np.array([1]))
    sink.write(DeleteTarget(b), np.array([2]))

    sink.forget(a.file_path)
    result = sink.close()

    assert [v3_field(d, "referenced_data_file") for d in result.added] == [b.file_path]


def test_v3_with_nothing_written_writes_no_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.write(DeleteTarget(_data_file(tmp_path, "a")), np.array([], dtype=np.int64))

    assert sink.close().added == []
    assert not (tmp_path / "t").exists()


def test_v3_abort_removes_the_puffin_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.write(DeleteTarget(_data_file(tmp_path, "a")), np.array([1]))
    (dv,) = sink.close().added

    sink.abort()

    assert not PyArrowFileIO().new_input(dv.file_path).exists()


def test_v3_refuses_a_data_file_with_two_dvs(tmp_path: Path) -> None:
    a = _data_file(tmp_path, "a")
    first = _old_dv(tmp_path, a, [1])
    second = write_deletion_vectors(
        PyArrowFileIO(),
        f"file://{tmp_path}/t/data/second.puffin",
        [DataFileDeletes(a.file_path, 0, a.partition, np.array([2]))],
    )[0]
    sink = _sink(tmp_path)
    sink.write(DeleteTarget(a, (ScannedDelete(first, 1), ScannedDelete(second, 2))), np.array([3]))

    with pytest.raises(ConfigurationError, match="has 2 deletion vectors"):
        sink.close()


def test_v3_refuses_an_old_dv_of_another_data_file(tmp_path: Path) -> None:
    a, b = _data_file(tmp_path, "a"), _data_file(tmp_path, "b")
    sink = _sink(tmp_path)
    sink.write(DeleteTarget(a, (ScannedDelete(_old_dv(tmp_path, b, [1]), 1),)), np.array([3]))

    with pytest.raises(ConfigurationError, match="does not reference"):
        sink.close()


@pytest.mark.parametrize("bad", [-1, MAX_POSITION + 1])
def test_v3_refuses_positions_out_of_range(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ConfigurationError, match="outside"):
        _sink(tmp_path).write(DeleteTarget(_data_file(tmp_path, "a")), np.array([bad]))


def test_v3_takes_positions_from_several_threads(tmp_path: Path) -> None:
    files = [_data_file(tmp_path, f"f{i}") for i in range(8)]
    sink = _sink(tmp_path)

    def write(i: int) -> None:
        for start in range(0, 5000, 500):
            sink.write(DeleteTarget(files[i]), np.arange(start, start + 500) * (i + 1))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = sink.close()

    got = {
        v3_field(d, "referenced_data_file"): read_deletion_vector(PyArrowFileIO(), d) for d in result.added
    }
    assert {p: len(v) for p, v in got.items()} == {f.file_path: 5000 for f in files}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.lists(st.integers(0, 3 * KEY), max_size=40), min_size=1, max_size=4),
    st.lists(st.integers(0, 3 * KEY), max_size=20),
)
def test_v3_dv_is_the_union_of_every_chunk_and_the_old_dv(
    tmp_path_factory: pytest.TempPathFactory, chunks: list[list[int]], old: list[int]
) -> None:
    tmp_path = tmp_path_factory.mktemp("dv")
    a = _data_file(tmp_path, "a")
    previous = (ScannedDelete(_old_dv(tmp_path, a, old), 1),) if old else ()
    sink = _sink(tmp_path)
    for chunk in chunks:
        sink.write(DeleteTarget(a, previous), np.array(sorted(chunk), dtype=np.int64))
    result = sink.close()

    expected = sorted(set(old).union(*chunks)) if any(chunks) else []
    got = [read_deletion_vector(PyArrowFileIO(), d).tolist() for d in result.added]
    assert got == ([expected] if any(chunks) else [])


def test_v2_writes_parquet_position_delete_files_as_before(tmp_path: Path) -> None:
    a = _data_file(tmp_path, "a")
    sink = _any_sink(tmp_path, 2)
    assert isinstance(sink, ParquetPositionDeleteSink)
    assert not sink.folds_previous

    sink.write(DeleteTarget(a, (ScannedDelete(_old_dv(tmp_path, a, [5]), 1),)), np.array([1, 2]))
    result = sink.close()

    (written,) = result.added
    assert written.file_format == FileFormat.PARQUET
    assert written.record_count == 2
    assert v3_field(written, "referenced_data_file") == a.file_path
    assert result.rewritten == []
