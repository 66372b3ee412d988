"""read_ahead: the same items in the same order, errors raised in the caller, a bounded lead, and a
producer that stops (and closes its source) when the caller stops early; read_files_ahead: the same, per
file, with small files read on worker threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING

import pytest

from airflow_provider_iceberg_exec.engine.io.read import (
    _AHEAD_FILES,
    _AHEAD_STORED_BYTES,
    _RUN_FILES,
    SMALL_FILE_BYTES,
    read_ahead,
    read_files_ahead,
)

if TYPE_CHECKING:
    import pyarrow as pa


def test_yields_every_item_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))
    assert list(read_ahead(iter([]), depth=3)) == []


def test_producer_error_is_raised_in_the_caller_after_the_items_before_it() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("corrupt file")

    items = read_ahead(failing(), depth=2)
    assert [next(items), next(items)] == [1, 2]
    with pytest.raises(ValueError, match="corrupt file"):
        next(items)


def test_the_producer_stays_at_most_depth_items_ahead() -> None:
    produced = 0
    lead: list[int] = []

    def counting() -> Iterator[int]:
        nonlocal produced
        for i in range(200):
            produced += 1
            yield i

    for consumed, _ in enumerate(read_ahead(counting(), depth=4), start=1):
        lead.append(produced - consumed)
    # Queue of 4, plus the one the producer holds while waiting for a slot.
    assert max(lead) <= 5


def test_closing_early_stops_the_producer_and_closes_the_source() -> None:
    closed = threading.Event()
    produced = 0

    def endless() -> Iterator[int]:
        nonlocal produced
        try:
            while True:
                produced += 1
                yield produced
        finally:
            closed.set()

    with closing(read_ahead(endless(), depth=2)) as items:
        assert next(items) == 1
        assert next(items) == 2
    assert closed.is_set()
    assert produced <= 5
    assert not [t for t in threading.enumerate() if t.name == "iceberg-exec-read-ahead"]


class _Sized:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_the_lead_is_bounded_in_bytes_but_one_big_item_always_passes() -> None:
    produced = 0
    lead: list[int] = []

    def sized() -> Iterator[_Sized]:
        nonlocal produced
        for i in range(100):
            produced += 1
            yield _Sized(1000 if i % 10 else 50_000)  # every tenth item is bigger than the budget

    for consumed, _ in enumerate(read_ahead(sized(), depth=50, max_bytes=3500), start=1):
        lead.append(produced - consumed)
    # At most 3 items of 1000 bytes queued, plus the one the producer holds while waiting.
    assert max(lead) <= 4


# read_files_ahead: small files read whole on worker threads, in order; large ones streamed in their turn.


def _fake_read(
    log: list[str], fail: str | None = None
) -> Callable[[tuple[str, int]], Iterator[pa.RecordBatch]]:
    import pyarrow as pa

    def read(item: tuple[str, int]) -> Iterator[pa.RecordBatch]:
        name, _size = item
        log.append(name)
        if name == fail:
            raise ValueError(f"{name} is corrupt")
        for part in range(2):
            yield pa.record_batch({"file": [name], "part": [part]})

    return read


def _size(item: tuple[str, int]) -> int:
    return item[1]


def test_files_come_back_in_order_small_and_large_alike() -> None:
    files = [(f"f{i}", SMALL_FILE_BYTES + 1 if i % 7 == 3 else 100) for i in range(200)]
    log: list[str] = []
    got = [
        (b.column("file")[0].as_py(), b.column("part")[0].as_py())
        for batches in read_files_ahead(files, _fake_read(log), _size)
        for b in batches
    ]
    assert got == [(name, part) for name, _ in files for part in range(2)]
    assert sorted(log) == sorted(name for name, _ in files)  # each file read once


def test_a_small_file_is_read_ahead_on_another_thread_a_large_one_on_the_callers() -> None:
    threads: dict[str, str] = {}

    def read(item: tuple[str, int]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        threads[item[0]] = threading.current_thread().name
        yield pa.record_batch({"x": [1]})

    for batches in read_files_ahead([("small", 10), ("large", SMALL_FILE_BYTES + 1)], read, _size):
        list(batches)
    assert threads["small"].startswith("iceberg-exec-read-file")
    assert threads["large"] == threading.current_thread().name


def test_a_read_error_is_raised_in_its_files_turn_after_the_files_before_it() -> None:
    files = [("a", 10), ("b", 10), ("bad", 10), ("c", 10)]
    streams = read_files_ahead(files, _fake_read([], fail="bad"), _size)
    assert len(list(next(streams))) == 2
    assert len(list(next(streams))) == 2
    with pytest.raises(ValueError, match="bad is corrupt"):
        next(streams)
    streams.close()


def test_a_failed_file_in_a_run_is_raised_in_its_turn_and_the_rest_of_its_run_is_not_read() -> None:
    """Consecutive small files are read in runs (``_RUN_FILES``) by one worker: a file failing in the
    middle of a run still comes after the files before it, and nothing after it in its run is read."""
    files = [(f"f{i}", 10) for i in range(_RUN_FILES)]
    bad = files[_RUN_FILES // 2][0]
    log: list[str] = []
    streams = read_files_ahead(files, _fake_read(log, fail=bad), _size)
    for _ in range(_RUN_FILES // 2):
        assert len(list(next(streams))) == 2
    with pytest.raises(ValueError, match=f"{bad} is corrupt"):
        next(streams)
    streams.close()
    assert log == [name for name, _ in files[: _RUN_FILES // 2 + 1]]


def test_a_run_stops_at_a_large_file_which_keeps_its_place() -> None:
    files = [
        ("a", 10),
        ("b", 10),
        ("large", SMALL_FILE_BYTES + 1),
        ("c", 10),
        ("large2", SMALL_FILE_BYTES + 1),
    ]
    got = [
        b.column("file")[0].as_py()
        for batches in read_files_ahead(files, _fake_read([]), _size)
        for b in batches
    ]
    assert got == [name for name, _ in files for _ in range(2)]


def test_reads_stay_a_bounded_number_of_files_ahead_and_stop_when_closed() -> None:
    log: list[str] = []
    files = [(f"f{i}", 10) for i in range(1000)]
    with closing(read_files_ahead(files, _fake_read(log), _size)) as streams:
        list(next(streams))
    # One taken, at most a window ahead of it; closing waited for the reads in flight, started no more.
    assert len(log) <= 1 + _AHEAD_FILES
    started = len(log)
    time.sleep(0.05)
    assert len(log) == started


def test_reads_ahead_are_bounded_in_stored_bytes() -> None:
    log: list[str] = []
    size = SMALL_FILE_BYTES // 2
    files = [(f"f{i}", size) for i in range(100)]
    with closing(read_files_ahead(files, _fake_read(log), _size)) as streams:
        list(next(streams))
    assert len(log) * size <= _AHEAD_STORED_BYTES + size


def test_runs_stay_whole_as_the_window_moves() -> None:
    """Runs are handed to workers whole: topping the window up file by file made every run after the
    first one file long (a task and a GIL hand-over a tiny file)."""
    runs: list[int] = []
    lock = threading.Lock()

    def read_run(items: list[tuple[str, int]]) -> Iterator[list[pa.RecordBatch]]:
        with lock:
            runs.append(len(items))
        for item in items:
            yield list(_fake_read([])(item))

    files = [(f"f{i}", 10) for i in range(20 * _RUN_FILES)]
    got = [
        b.column("file")[0].as_py()
        for batches in read_files_ahead(files, _fake_read([]), _size, read_run=read_run)
        for b in batches
    ]
    assert got == [name for name, _ in files for _ in range(2)]
    assert runs == [_RUN_FILES] * 20


def test_a_run_reader_may_give_one_file_the_rows_of_several_and_its_error_is_the_next_files() -> None:
    import pyarrow as pa

    def read_run(items: list[tuple[str, int]]) -> Iterator[list[pa.RecordBatch]]:
        names = [name for name, _ in items]
        if "bad" in names:
            before = names[: names.index("bad")]
            yield [pa.record_batch({"file": before})]
            for _ in before[1:]:
                yield []
            raise ValueError("bad is corrupt")
        yield [pa.record_batch({"file": names})]
        for _ in names[1:]:
            yield []

    files = [("a", 10), ("b", 10), ("c", 10), ("bad", 10), ("d", 10)]
    streams = read_files_ahead(files, _fake_read([]), _size, read_run=read_run)
    assert [b.column("file").to_pylist() for b in next(streams)] == [["a", "b", "c"]]
    assert list(next(streams)) == []
    assert list(next(streams)) == []
    with pytest.raises(ValueError, match="bad is corrupt"):
        next(streams)
    streams.close()
