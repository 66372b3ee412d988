"""The one-call compaction runs small plain groups (binpack or sort) several at a time (issue 16): a table of
many small partitions otherwise writes one small file after another on one core. Checked here: the groups
do overlap (a barrier only two overlapping groups pass), rows and checksum (PyIceberg's scan) are kept with
one file a partition, sorted ones sorted, each group within a share of the limits that keeps the whole's
row groups; a group with deletes or a group large enough for lanes runs alone; a
failure in one group removes what every group wrote and leaves the table as it was, or, under partial
progress, the other groups commit; progress from the groups' threads reaches the one tracker.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    DataFileReadError,
    IcebergExecError,
)
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    compact,
    execute_rewrite_tasks,
    plan_compaction,
)
from airflow_provider_iceberg_exec.engine.ops.compaction import run as run_module
from airflow_provider_iceberg_exec.engine.progress import Progress, listening
from tests.helpers import (
    commit_position_deletes,
    data_files,
    files_under,
    live_checksum,
    local_path,
    table_state,
)
from tests.integration.compaction_support import letters_table, limits

pytestmark = pytest.mark.integration

DAYS = ("d1", "d2", "d3", "d4")
FILES_A_DAY = 3
ROWS_A_FILE = 500
OPTIONS = {"min-input-files": "2"}


def _days_table(catalog: SqlCatalog) -> Table:
    """``FILES_A_DAY`` appends of ``ROWS_A_FILE`` rows into each of ``DAYS`` (identity partitions)."""
    return letters_table(catalog, "ns.days", categories=DAYS, files=FILES_A_DAY, rows_per_file=ROWS_A_FILE)


class _Groups:
    """Wraps the group rewrite ``compact`` runs: counts the groups running at once, and holds the first
    two at a barrier that only two overlapping groups pass (a group run alone breaks it after 30 s)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, meet: bool) -> None:
        self.running = 0
        self.most = 0
        self.limits: list[ResourceLimits] = []
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(2, timeout=30) if meet else None
        self._started = 0
        rewrite: Callable[..., Any] = run_module.execute_rewrite_task

        def counted(*args: Any) -> Any:
            with self._lock:
                self._started += 1
                first_two = self._started <= 2
                self.running += 1
                self.most = max(self.most, self.running)
                self.limits.append(args[2])
            try:
                if self._barrier is not None and first_two:
                    self._barrier.wait()
                return rewrite(*args)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(run_module, "execute_rewrite_task", counted)


@pytest.mark.parametrize("strategy", ["binpack", "sort"])
def test_small_groups_run_at_once_each_in_a_share_of_the_limits_and_keep_every_row(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    table = _days_table(catalog)
    before = live_checksum(table)
    groups = _Groups(monkeypatch, meet=True)
    whole = limits(tmp_path, target_partitions=2)
    sort_order = "id DESC" if strategy == "sort" else None

    result = compact(table, options=OPTIONS, strategy=strategy, sort_order=sort_order, limits=whole)

    assert groups.most == 2
    # a share of the memory and of the cores each, the writers sized as the whole's
    assert {(each.memory_limit_bytes, each.target_partitions) for each in groups.limits} == {
        (whole.memory_limit_bytes // 2, 1)
    }
    assert {each.writer_buffer_bytes for each in groups.limits} == {whole.writer_buffer_bytes}
    assert live_checksum(table) == before
    assert result["rewritten_data_files_count"] == len(DAYS) * FILES_A_DAY
    written = data_files(table)
    assert sorted(tuple(f.partition) for f in written) == [(day,) for day in DAYS]
    for data_file in written if strategy == "sort" else ():
        ids = pq.read_table(local_path(data_file.file_path), columns=["id"]).column("id").to_pylist()
        assert len(ids) == FILES_A_DAY * ROWS_A_FILE
        assert ids == sorted(ids, reverse=True)


@pytest.mark.parametrize("case", ["position deletes", "one core", "max-concurrent-file-group-rewrites=1"])
def test_a_group_with_deletes_or_one_core_runs_one_group_at_a_time(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    table = _days_table(catalog)
    options = dict(OPTIONS)
    cores = 1 if case == "one core" else 2
    if case.startswith("max-concurrent"):
        options["max-concurrent-file-group-rewrites"] = "1"
    if case == "position deletes":
        first = data_files(table)[0]
        commit_position_deletes(table, first.file_path, [0, 1])
    before = live_checksum(table)
    groups = _Groups(monkeypatch, meet=False)

    compact(table, options=options, limits=limits(tmp_path, target_partitions=cores))

    assert groups.most == 1
    assert live_checksum(table) == before


@pytest.mark.parametrize("strategy", ["binpack", "sort"])
def test_a_failing_group_removes_what_every_group_wrote(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    """The third group's last file is gone: the two groups before it ran at once and wrote their files,
    the fourth never starts; nothing any group wrote or spilled is left, and the table is as it was."""
    table = _days_table(catalog)
    sort_order = "id DESC" if strategy == "sort" else None
    tasks = plan_compaction(table, options=OPTIONS, strategy=strategy, sort_order=sort_order)["tasks"]
    os.remove(local_path(tasks[2]["data_files"][-1]["data-file"]["file-path"]))
    state, files = table_state(table), files_under(table, "")
    groups = _Groups(monkeypatch, meet=True)
    whole = limits(tmp_path, target_partitions=2)

    with pytest.raises(DataFileReadError, match="cannot be opened"):
        compact(table, options=OPTIONS, strategy=strategy, sort_order=sort_order, limits=whole)

    assert groups.most == 2
    assert table_state(table) == state
    assert files_under(table, "") == files
    assert [path for _, _, names in os.walk(whole.spill_dir) for path in names] == []


def test_under_partial_progress_the_other_groups_commit(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second group's first file is garbage: that group fails and its day keeps its files; the
    other days are compacted into one file each, with their rows."""
    table = _days_table(catalog)
    tasks = plan_compaction(table, options=OPTIONS)["tasks"]
    damaged = tasks[1]["data_files"][0]["data-file"]["file-path"]
    failing_day = next(f.partition[0] for f in data_files(table) if f.file_path == damaged)
    others = f"category != '{failing_day}'"
    before = live_checksum(table, others)
    Path(local_path(damaged)).write_bytes(b"not parquet")
    groups = _Groups(monkeypatch, meet=True)

    result = compact(
        table,
        options={**OPTIONS, "partial-progress.enabled": "true"},
        limits=limits(tmp_path, target_partitions=2),
    )

    assert groups.most == 2
    assert result["failed_data_files_count"] == FILES_A_DAY
    assert result["rewritten_data_files_count"] == (len(DAYS) - 1) * FILES_A_DAY
    files_a_day: dict[str, int] = {}
    for data_file in data_files(table):
        files_a_day[data_file.partition[0]] = files_a_day.get(data_file.partition[0], 0) + 1
    assert files_a_day == {day: FILES_A_DAY if day == failing_day else 1 for day in DAYS}
    assert live_checksum(table, others) == before


def test_progress_of_groups_run_at_once_reaches_the_plan_totals(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _days_table(catalog)
    inputs = data_files(table)
    events: list[Progress] = []

    with listening(events.append):
        compact(table, options=OPTIONS, limits=limits(tmp_path, target_partitions=2))

    files_done = [e.files_done for e in events]
    assert files_done == sorted(files_done)
    last = events[-1]
    assert last.phase == "done"
    assert (last.files_done, last.bytes_done, last.rows) == (
        len(inputs),
        sum(f.file_size_in_bytes for f in inputs),
        len(DAYS) * FILES_A_DAY * ROWS_A_FILE,
    )


def test_a_malformed_task_fails_with_its_own_error_after_the_groups_before_it(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """A task handed in without its files: the plan runs one group at a time, the group before it is
    rewritten (its result is the caller's to commit or remove), and the task's own check fails."""
    table = _days_table(catalog)
    tasks = plan_compaction(table, options=OPTIONS)["tasks"][:2]
    del tasks[1]["data_files"]  # type: ignore[misc]
    results: list[Any] = []

    with pytest.raises(IcebergExecError, match="data_files"):
        execute_rewrite_tasks(table, collections.deque(tasks), limits(tmp_path, target_partitions=2), results)

    assert [r["group_id"] for r in results] == [tasks[0]["group_id"]]


def test_max_concurrent_file_group_rewrites_below_one_is_refused(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _days_table(catalog)
    state = table_state(table)

    with pytest.raises(ConfigurationError, match="max-concurrent-file-group-rewrites must be >= 1"):
        compact(
            table, options={**OPTIONS, "max-concurrent-file-group-rewrites": "0"}, limits=limits(tmp_path)
        )

    assert table_state(table) == state
