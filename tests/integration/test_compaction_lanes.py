"""A binpack group large enough for several output files is rewritten in two lanes (issue 16): each
lane a contiguous share of the group's files with its own reader and writer, run at once. Checked here:
rows and checksum (PyIceberg's scan) are kept, unpartitioned and partitioned, with position deletes;
each lane adds at most one file under the target size; a group with equality deletes or under two
target sizes keeps one lane; a failure in either lane removes every file both wrote and leaves the
table as it was; progress counts both lanes. (v3 row lineage across lanes:
tests/integration/test_v3_commit.py.)
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import threading
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO, InputStream
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.ops.compaction import compact, plan_compaction
from airflow_provider_iceberg_exec.engine.progress import Progress, listening
from tests.helpers import (
    commit_delete_files,
    commit_position_deletes,
    data_files,
    files_under,
    live_checksum,
    local_path,
    table_state,
)
from tests.integration.compaction_support import letters_table, limits
from tests.integration.maintenance_support import write_equality_deletes

pytestmark = pytest.mark.integration

REWRITE_LOG = "airflow_provider_iceberg_exec.engine.ops.compaction.rewrite"
WRITE_LOG = "airflow_provider_iceberg_exec.engine.io.write"
FILES = 8
ROWS_PER_FILE = 3000


def _two_cores(tmp_path: Path) -> ResourceLimits:
    """The tests' small limits, with two cores given whatever the machine has (two lanes at most)."""
    return limits(tmp_path, target_partitions=2)


def _table(catalog: SqlCatalog, *, categories: tuple[str, ...] = ("a",), files: int = FILES) -> Table:
    """``files`` appends per category of ``ROWS_PER_FILE`` rows with 40 random letters each (about
    80 KiB a file); partitioned by identity(category) when there are several categories."""
    return letters_table(catalog, "ns.lanes", categories=categories, files=files, rows_per_file=ROWS_PER_FILE)


def _hold_read_until_written(monkeypatch: pytest.MonkeyPatch, location: str, *, files: int) -> None:
    """Hold the first opening of ``location`` until ``files`` output files were written (60 s at most; a
    failed read is retried file by file). Each file is read ahead on its own, so holding one holds no
    other."""
    import airflow_provider_iceberg_exec.engine.io.read as read_module

    written = threading.Semaphore(0)

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("wrote "):
                written.release()

    logger = logging.getLogger(WRITE_LOG)
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, Counter()])
    monkeypatch.setattr(read_module, "_RUN_FILES", 1)
    open_file = read_module._open

    first = threading.Event()

    def held(io: FileIO, location_read: str) -> InputStream:
        if location_read == location and not first.is_set():
            first.set()
            for _ in range(files):
                written.acquire(timeout=60)
        return open_file(io, location_read)

    monkeypatch.setattr(read_module, "_open", held)


def _options(table: Table, group_target_sizes: float) -> dict[str, str]:
    """A target size that makes each partition's group hold ``group_target_sizes`` target sizes."""
    files = data_files(table)
    partitions = {tuple(f.partition) for f in files}
    per_group = sum(f.file_size_in_bytes for f in files) / len(partitions)
    target = int(per_group / group_target_sizes)
    return {"target-file-size-bytes": str(target), "rewrite-all": "true", "min-input-files": "2"}


def _lanes_of_groups(caplog: pytest.LogCaptureFixture) -> list[int]:
    """The lane count of every group rewritten, from the group's log line."""
    found = [
        re.search(r"in (\d+) lane\(s\)", r.getMessage()) for r in caplog.records if r.name == REWRITE_LOG
    ]
    return [int(m.group(1)) for m in found if m]


def _assert_files_are_sane(table: Table, target: int, lanes: int) -> None:
    """Per partition: the files hold the target size but for at most one per lane, and there are no more
    of them than one writer would have made plus one per extra lane."""
    by_partition: dict[tuple[object, ...], list[int]] = {}
    for data_file in data_files(table):
        by_partition.setdefault(tuple(data_file.partition), []).append(data_file.file_size_in_bytes)
    for sizes in by_partition.values():
        small = [s for s in sizes if s < 0.9 * target]
        assert len(small) <= lanes, (sizes, target)
        assert all(s <= 1.1 * target for s in sizes), (sizes, target)
        assert len(sizes) <= math.ceil(sum(sizes) / target) + lanes - 1, (sizes, target)


@pytest.mark.parametrize("categories", [("a",), ("a", "b")], ids=["unpartitioned", "two-partitions"])
def test_a_group_of_several_target_sizes_is_written_in_two_lanes_and_keeps_every_row(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture, categories: tuple[str, ...]
) -> None:
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog, categories=categories)
    options = _options(table, 3.5)
    before = live_checksum(table)

    result = compact(table, options=options, limits=_two_cores(tmp_path))

    assert _lanes_of_groups(caplog) == [2] * len(categories)
    assert live_checksum(table) == before
    assert result["rewritten_data_files_count"] == FILES * len(categories)
    assert result["added_data_files_count"] == len(data_files(table))
    _assert_files_are_sane(table, int(options["target-file-size-bytes"]), lanes=2)
    partitions = {tuple(f.partition) for f in data_files(table)}
    assert partitions == ({(c,) for c in categories} if len(categories) > 1 else {()})


def test_progress_counts_the_files_and_rows_of_both_lanes(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both lanes advance the one tracker from their own threads: monotone, reaching the plan's totals."""
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)
    inputs = data_files(table)
    events: list[Progress] = []

    with listening(events.append):
        compact(table, options=_options(table, 3.5), limits=_two_cores(tmp_path))

    assert _lanes_of_groups(caplog) == [2]
    for name in ("files_done", "bytes_done", "rows"):
        values = [getattr(e, name) for e in events]
        assert values == sorted(values), name
    last = events[-1]
    assert last.phase == "done"
    assert (last.files_done, last.bytes_done, last.rows) == (
        len(inputs),
        sum(f.file_size_in_bytes for f in inputs),
        FILES * ROWS_PER_FILE,
    )


def test_the_lanes_files_come_back_in_lane_order(catalog: SqlCatalog, tmp_path: Path) -> None:
    """The result lists lane 1's files, then lane 2's: the same group gives the same order every run."""
    from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task

    table = _table(catalog)
    (task,) = plan_compaction(table, options=_options(table, 3.5))["tasks"]

    result = execute_rewrite_task(table, task, _two_cores(tmp_path))

    # input file ordinal of every id: each input holds one run of ROWS_PER_FILE ids
    ordinal = {}
    for number, entry in enumerate(task["data_files"]):
        ids = pq.read_table(local_path(entry["data-file"]["file-path"]), columns=["id"]).column("id")
        ordinal.update(dict.fromkeys(ids.to_pylist(), number))
    spans = []
    for entry in result["added_data_files"]:
        ids = pq.read_table(local_path(entry["file-path"]), columns=["id"]).column("id").to_pylist()
        spans.append((min(ordinal[i] for i in ids), max(ordinal[i] for i in ids)))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert spans[0][0] == 0
    assert spans[-1][1] == len(task["data_files"]) - 1
    # two writers, each naming its files <group>-<write id>-<number>
    assert len({re.sub(r"-\d{5}\.parquet$", "", e["file-path"]) for e in result["added_data_files"]}) == 2


def test_a_group_under_two_target_sizes_keeps_one_lane(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two lanes would turn one full file and a small one into two small ones."""
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)
    before = live_checksum(table)

    result = compact(table, options=_options(table, 1.8), limits=_two_cores(tmp_path))

    assert _lanes_of_groups(caplog) == [1]
    assert live_checksum(table) == before
    assert result["added_data_files_count"] <= 2


def test_one_core_keeps_one_lane(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)

    compact(table, options=_options(table, 3.5), limits=limits(tmp_path, target_partitions=1))

    assert _lanes_of_groups(caplog) == [1]


def test_position_deletes_are_applied_in_both_lanes(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)
    ordered = sorted(data_files(table), key=lambda f: f.file_path)
    for data_file, positions in ((ordered[0], [0, 7, 2999]), (ordered[-1], list(range(100, 400)))):
        commit_position_deletes(table, data_file.file_path, positions)
    before = live_checksum(table)
    assert before[0] == FILES * ROWS_PER_FILE - 303

    result = compact(table, options=_options(table, 3.0), limits=_two_cores(tmp_path))

    assert _lanes_of_groups(caplog) == [2]
    assert live_checksum(table) == before
    assert result["rewritten_data_files_count"] == FILES


def test_a_group_with_equality_deletes_keeps_one_lane(
    catalog: SqlCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its matches come from one bounded join over the whole group, not one per lane."""
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)
    options = _options(table, 3.5)
    # PyIceberg refuses to scan a table with equality deletes: the expected rows are read before.
    expected = live_checksum(table, "id not in (5, 6000, 23999)")
    assert expected[0] == FILES * ROWS_PER_FILE - 3
    commit_delete_files(table, [write_equality_deletes(table, [5, 6000, 23999], "a")])

    result = compact(table, options=options, limits=_two_cores(tmp_path))

    assert _lanes_of_groups(caplog) == [1]
    assert result["removed_delete_files_count"] == 1  # nothing left that PyIceberg cannot read
    assert live_checksum(table) == expected


@pytest.mark.parametrize("damaged", ["first", "last"], ids=["lane-1-fails-early", "lane-2-fails-late"])
def test_a_failure_in_one_lane_removes_the_files_of_both(
    catalog: SqlCatalog,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    damaged: str,
) -> None:
    """The first file of the group (lane 1 fails at once, lane 2 is stopped) or the last one (lane 2
    fails once both lanes wrote files: its read is held until they have): the group fails, and every
    file of either lane is removed."""
    caplog.set_level(logging.INFO, logger=WRITE_LOG)
    caplog.set_level(logging.INFO, logger=REWRITE_LOG)
    table = _table(catalog)
    options = _options(table, 3.5)
    (task,) = plan_compaction(table, options=options)["tasks"]
    entries = task["data_files"]
    damaged_location = str(entries[0 if damaged == "first" else -1]["data-file"]["file-path"])
    path = local_path(damaged_location)
    Path(path).write_bytes(np.random.default_rng(1).bytes(os.path.getsize(path)))
    state, files = table_state(table), files_under(table, "")
    if damaged == "last":
        _hold_read_until_written(monkeypatch, damaged_location, files=2)

    with pytest.raises(DataFileReadError, match="not readable Parquet"):
        compact(table, options=options, limits=_two_cores(tmp_path))

    if damaged == "last":
        written = [r for r in caplog.records if r.getMessage().startswith("wrote ")]
        assert len(written) >= 2, "the failure came before both lanes wrote: the clean-up was not exercised"
    assert table_state(table) == state
    assert files_under(table, "") == files
