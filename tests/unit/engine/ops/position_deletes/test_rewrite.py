"""Which positions a position-delete rewrite keeps: live targets only, never one its input did not apply to,
each once, in order."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete
from airflow_provider_iceberg_exec.engine.ops.position_deletes.rewrite import (
    _Counts,
    _live_positions,
    _with_paths,
)


def _delete(
    tmp_path: Path, name: str, rows: list[tuple[str, int]], referenced: str | None = None
) -> DataFile:
    path = tmp_path / name
    pq.write_table(pa.table({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]}), path)
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=str(path),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(rows),
        file_size_in_bytes=path.stat().st_size,
        referenced_data_file=referenced,
    )


def _kept(tmp_path: Path, inputs: list[ScannedDelete], live: dict[str, int]) -> tuple[list[tuple], _Counts]:
    counts = _Counts()
    table = SimpleNamespace(io=PyArrowFileIO())
    limits = ResourceLimits(spill_dir=str(tmp_path / "spill"))
    paths = pa.array(sorted(live), pa.string())
    rows = [
        (paths[r["ord"]].as_py(), r["pos"])
        for b in _live_positions(table, inputs, live, paths, limits, counts)  # type: ignore[arg-type]
        for r in b.to_pylist()
    ]
    return rows, counts


def test_positions_of_files_not_live_are_dangling(tmp_path: Path) -> None:
    delete = _delete(tmp_path, "d.parquet", [("a", 1), ("gone", 2), ("b", 3)])
    rows, counts = _kept(tmp_path, [ScannedDelete(delete, 5)], {"a": 1, "b": 5})
    assert rows == [("a", 1), ("b", 3)]
    assert (counts.read, counts.dangling) == (3, 1)


def test_a_position_never_comes_to_apply_to_a_newer_data_file(tmp_path: Path) -> None:
    """The output carries the largest input's sequence number: a position of an older input that named a
    data file newer than that input (it never applied) must not be carried to the output."""
    old = _delete(tmp_path, "old.parquet", [("newer", 0), ("older", 0)])
    new = _delete(tmp_path, "new.parquet", [("newer", 4)])
    rows, counts = _kept(tmp_path, [ScannedDelete(old, 2), ScannedDelete(new, 9)], {"newer": 6, "older": 1})
    assert sorted(rows) == [("newer", 4), ("older", 0)]
    assert counts.dangling == 1


def test_a_file_scoped_input_applies_to_its_referenced_file_only(tmp_path: Path) -> None:
    delete = _delete(tmp_path, "d.parquet", [("a", 1), ("b", 1)], referenced="a")
    rows, _counts = _kept(tmp_path, [ScannedDelete(delete, 5)], {"a": 1, "b": 1})
    assert rows == [("a", 1)]


def test_repeated_positions_are_written_once_and_counted() -> None:
    paths = pa.array(["a", "b"])
    counts = _Counts()
    sorted_rows = iter([(0, np.array([1])), (1, np.array([1, 2]))])
    rows = [
        (r["file_path"], r["pos"]) for b in _with_paths(sorted_rows, paths, 5, counts) for r in b.to_pylist()
    ]
    assert rows == [("a", 1), ("b", 1), ("b", 2)]
    assert counts.duplicates == 2  # 5 staged rows, 3 written
