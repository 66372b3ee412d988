"""An external merge sort under the memory limit: sorted runs by NumPy or PyArrow, merged by DataFusion.

Rows come in batches. Every :attr:`MergePlan.run_bytes` of them (a sixteenth of the limit) are sorted in
memory (by NumPy, by radix, when every key compares as fixed-width integers, by PyArrow's
``sort_indices`` otherwise; then PyArrow's ``take``: all release the GIL) and written as one run file
(Arrow IPC, uncompressed) into the spill directory. Two runs are sorted at once, each on a thread of its own,
while the caller's thread collects the next from the input (read ahead on another thread): the runs are
small enough to be sorted in the CPU's caches. Every run is cut as it is spilled into fine key ranges at
splitters taken from the first run (:data:`_FINE_PER_RANGE` to a key range, more for a sort told it
holds more rows than that keeps small), so a key range is merged by
sorting in memory the rows of a few consecutive fine ranges of every run at a time, about half a run's
bytes (:func:`_merged_in_memory`): its rows sort before or with every row of the next group in every run.
DataFusion merges a range's runs where that cannot hold (a key on more rows than two groups hold): a
SortPreservingMerge over scans declared sorted, so it neither sorts nor spills itself, and
each input holds one batch of its run at a time. At most :attr:`MergePlan.fan_in` runs are merged at
once; with more, just enough of the smallest are first merged into one longer run (in memory where their
fine ranges fit a group; its fine key ranges its inputs' together) to leave that many. Input that ends within
:attr:`MergePlan.whole_bytes` (a quarter of the limit) is sorted in one piece and never touches the disk.

:func:`sorted_lanes` hands the sorted rows out as several streams of disjoint key ranges, each merged
and finished on its own, for a writer each: every run is cut as it is spilled at splitters taken from
the first run (sorted with the run's rows, so the cut follows the sort's own order), two ranges per lane.
After the last run, a range the first run misjudged (input whose first run is unlike the rest) is cut
again at splitters sampled from every run's piece of it, until no lane holds more than 1.5x its share;
the key ranges are dealt to the lanes by their bytes.

Both sides order rows the same way: DataFusion compares floating-point values by their total order
(``-NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN``), so PyArrow sorts a floating-point key by an
integer that orders as that total order does (:func:`_sort_images`); every other key type (whole numbers,
decimals, dates, timestamps, booleans, strings and binaries by their bytes) compares the same in both.
Equal keys keep no particular order (the sort is not stable).

Before this, DataFusion's own external sort took the staged rows: in batches small enough to keep its
merge of spill files (every one open at once, their read buffers outside the memory pool) under the
limit, mostly on one core (docs/benchmarks.md, "Sort").
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import IcebergExecError
from airflow_provider_iceberg_exec.engine.io.read import read_ahead
from airflow_provider_iceberg_exec.engine.io.session import build_session, release_memory

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = ["MergePlan", "SortColumn", "SortStats", "external_sort", "merge_plan", "sorted_lanes"]

log = logging.getLogger(__name__)

#: a sort column: (name, ascending, nulls_first)
SortColumn = tuple[str, bool, bool]

#: compression of the run files' buffers: none, as DataFusion's own spill files (LZ4: 4M rows 0.8 s CPU more)
_RUN_COMPRESSION: str | None = None
#: what one input of a merge holds, for the fan-in: a merge of 256 run files held about 70 MiB more than
#: one of 128 (beside 100-150 MiB for the merge itself, whatever its inputs); a 200M-row sort at 256 MiB
#: (about a thousand runs, two lanes merging 128 inputs each at once) peaked at 532 MiB, 495 MiB with 100
#: inputs a lane, about what the 20M-row sort's 97 runs a lane take (445-475 MiB)
_MERGE_INPUT_BYTES = 640 << 10
_MIN_FAN_IN = 2
_MAX_FAN_IN = 256
#: runs sorted and written at once, each on its own thread (beside the thread that reads the input)
_SORTERS = 2
#: bytes of each batch of a run file: DataFusion's merge of Arrow files held about 30 MiB more per input
#: with batches of 8192 rows (of 80 bytes) than with 1024-row ones, and a merge of 128 runs 25 MiB more
#: with batches of 128 KiB than with 64 KiB ones (the same CPU)
_MERGE_BATCH_BYTES = 64 << 10
#: bytes a run file's writes are gathered into: Arrow's IPC writer makes a system call for every buffer of
#: every batch (about 600,000 for the runs of the bench's 20M-row sort); 384 MiB of runs were written in
#: 0.15 s of CPU gathered, 0.42 s not
_RUN_WRITE_BUFFER_BYTES = 1 << 20
#: bytes of each batch the merge hands on (at most ``limits.batch_size`` rows)
_OUTPUT_BATCH_BYTES = 1 << 20
_MIN_BATCH_ROWS = 64
#: bytes of finished batches the merge's output is ahead of the writer by, all lanes together
_FINISH_LEAD_BYTES = 16 << 20
#: a run is a sixteenth of the limit, within these bounds: a small run is sorted and taken from in the
#: CPU's caches (2M rows: sort + take 0.9 s CPU in 64 MiB runs, 0.4 s in 16 MiB ones), and five of them
#: are held at once (one collected, two sorted and their sorted copies)
_RUN_SHARE = 16
_MIN_RUN_BYTES = 1 << 20
#: key ranges per lane of a sort merged in lanes, cut at splitters from the first run and dealt to the
#: lanes by the bytes every run put in them; ranges too heavy to deal evenly are cut again
#: (:func:`_balanced`). Each range is a merge of its own (its runs registered and planned, a batch of each
#: read before its first row: 0.08-0.23 s) and a file a run: with four, the bench's sort took 11.2 s on
#: average against 10.7 (five runs each), its z-order 13.2 s against 12.6 (four); both deal the bench's
#: z-order evenly (two: four ranges of 387-392 MiB, none cut again)
_RANGES_PER_LANE = 2
#: a lane may hold this much more than its share of the bytes before its heaviest range is cut again:
#: cutting again rewrites the range, which cost more than it saved below this (a z-order of the bench's
#: table, its lanes within 1.5x, re-cut all its 1.6 GB: 19.3 s against 15.9 without, on a quiet machine)
_LANE_SLACK = 1.5
#: sample rows per fine key range a range is cut again into, taken from every run's piece of it
_SAMPLE_PER_FINE_RANGE = 2
_MAX_RUN_BYTES = 32 << 20
#: input that ends within this share of the limit is sorted in one piece (:func:`_sorted_run`): no run
#: spilled and merged back, and no more held than the runs hold (five of a sixteenth of the limit at once).
#: At half the limit the 30-day bench's groups (57 MB of Arrow each, two at once in half the limit each)
#: sorted in 22.3-29.4 s of CPU against 26.2-33.6 s in runs, but the bench's sort and z-order peaked at
#: 597 and 610 MiB, over their 600 MiB bound (docs/benchmarks.md, session 35)
_WHOLE_SHARE = 4
#: finer key ranges each key range is cut into as the runs are spilled (at splitters from the first run),
#: at least: a key range is merged by sorting a few consecutive fine ranges' rows of every run at a time in
#: memory (:func:`_merged_in_memory`), each group within half a run's bytes
_FINE_PER_RANGE = 256
#: fine key ranges a group is expected to hold at least, for the count of fine ranges of a sort told its
#: rows: with fewer, one fine range of a larger sort is more than a group holds and its range goes to
#: DataFusion (a 200M-row sort's fine ranges at 256 a range: 15 MiB each, against 8 MiB groups)
_FINE_PER_GROUP = 2
#: a group of fine key ranges merged in memory holds at most a run's bytes over this: the bench's key range
#: of 2.5M rows merged in 0.52-0.62 s of CPU in 8 MiB groups, 0.73-0.95 s in 16 MiB ones, 0.61-0.66 s in
#: 4 MiB ones; two lanes' groups, their sorted copies and their finished batches held at once
_GROUP_SHARE = 2


@dataclass(frozen=True)
class MergePlan:
    """How an external sort splits its budget.

    :param run_bytes: Arrow bytes of input sorted in memory at a time (one run).
    :param fan_in: runs one merge reads at once.
    :param whole_bytes: Arrow bytes of input that, if the input ends within them, are sorted in one piece
        and never spilled (at least ``run_bytes``; a sort in lanes keeps to ``run_bytes``).
    """

    run_bytes: int
    fan_in: int
    whole_bytes: int = 0


def merge_plan(limits: ResourceLimits) -> MergePlan:
    """The plan for ``limits``: runs of a sixteenth of the limit (at most 32 MiB), as many merge inputs as
    half the limit holds (at most 256), and input within a quarter of the limit sorted in one piece.

    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> merge_plan(ResourceLimits(memory_limit_bytes=256 << 20))
    MergePlan(run_bytes=16777216, fan_in=204, whole_bytes=67108864)
    >>> merge_plan(ResourceLimits(memory_limit_bytes=64 << 20))
    MergePlan(run_bytes=4194304, fan_in=51, whole_bytes=16777216)
    """
    budget = limits.memory_limit_bytes
    fan_in = max(_MIN_FAN_IN, min(_MAX_FAN_IN, budget // 2 // _MERGE_INPUT_BYTES))
    run_bytes = max(_MIN_RUN_BYTES, min(_MAX_RUN_BYTES, budget // _RUN_SHARE))
    return MergePlan(run_bytes=run_bytes, fan_in=fan_in, whole_bytes=max(run_bytes, budget // _WHOLE_SHARE))


def external_sort(
    batches: Iterator[pa.RecordBatch],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    *,
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    finish: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    plan: MergePlan | None = None,
) -> Iterator[pa.RecordBatch]:
    """Sort ``batches`` by ``order`` within ``limits``; spill files go under ``spill_dir`` and are removed.

    :param prepare: turns one run's input batches into the table to sort (every run the same schema,
        holding the columns of ``order``); runs on the sorting threads, two at once.
    :param finish: turns the sorted stream of those tables' rows into the output; runs on a thread of its
        own, beside the caller that consumes the output.
    :param plan: the budget (default :func:`merge_plan` of ``limits``).
    """
    with sorted_lanes(batches, order, limits, spill_dir, prepare=prepare, finish=finish, plan=plan) as lanes:
        for lane in lanes:
            yield from lane


@contextlib.contextmanager
def sorted_lanes(
    batches: Iterator[pa.RecordBatch],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    *,
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    finish: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    lanes: int = 1,
    plan: MergePlan | None = None,
    stats: SortStats | None = None,
    expected_rows: int = 0,
) -> Iterator[list[Iterator[pa.RecordBatch]]]:
    """Sort ``batches`` (as :func:`external_sort`) and hand out the sorted rows as up to ``lanes`` streams
    of disjoint key ranges, in key order: every row of a stream sorts before (or with) every row of the
    next one. Each stream merges its own ranges (its own DataFusion merge and ``finish``) and may be
    consumed on a thread of its own; consume or close them all before leaving the ``with``.

    The sorting happens on entry. With more than one lane, every run is cut into key ranges as it is
    spilled (:data:`_RANGES_PER_LANE` per lane, at splitters sampled from the first run), ranges too heavy
    to deal evenly are cut again from every run's sample (:func:`_balanced`), and the ranges are dealt to
    the lanes in contiguous groups of about equal bytes. The lanes share the plan's fan-in.

    :param expected_rows: about how many rows come (0: not known): a larger sort cuts its key ranges into
        more fine ranges, so that each still holds a small part of a group merged in memory.
    """
    plan = plan or merge_plan(limits)
    stats = stats if stats is not None else SortStats()
    directory = os.path.join(spill_dir, "sort-runs")
    sorter = _RunSorter(
        order,
        prepare,
        directory,
        ranges=lanes * _RANGES_PER_LANE if lanes > 1 else 1,
        fine_bytes=plan.run_bytes // _GROUP_SHARE // _FINE_PER_GROUP,
        expected_rows=expected_rows,
    )
    streams: list[Iterator[pa.RecordBatch]] = []
    try:
        # a sort in lanes keeps to runs: one piece per lane would hold a lane's share beside the others'
        whole_bytes = plan.whole_bytes if lanes == 1 else 0
        single = sorter.sort(batches, plan.run_bytes, whole_bytes, limits.batch_size)
        stats.runs = sorter.number
        stats.spilled_bytes = sum(piece.size for piece in sorter.pieces)
        if single is not None:
            streams = [_finished(finish, _drained(single))]
        elif sorter.pieces:
            ranges = _pieces_by_range(sorter.pieces)
            if lanes > 1:
                ranges = _balanced(ranges, lanes, order, sorter, stats)
            groups = _even_groups([sum(piece.size for piece in pieces) for pieces in ranges], lanes)
            fan_in = max(_MIN_FAN_IN, plan.fan_in // len(groups))
            stats.lanes = len(groups)
            streams = [
                _finished(
                    finish,
                    _lane_rows(
                        [ranges[r] for r in group],
                        order,
                        limits,
                        spill_dir,
                        directory,
                        dataclasses.replace(plan, fan_in=fan_in),
                        sorter,
                        stats,
                    ),
                    len(groups),
                )
                for group in groups
            ]
        yield streams
        log.debug(
            "sorted %d runs in %d lanes (%d bytes of key ranges cut again); %d key ranges merged in memory, "
            "%d by DataFusion; %d extra merge passes (%d in memory) re-merged %d bytes",
            stats.runs,
            stats.lanes,
            stats.recut_bytes,
            stats.ranges_in_memory,
            stats.ranges_by_datafusion,
            stats.merge_passes,
            stats.memory_passes,
            stats.remerged_bytes,
        )
    finally:
        for stream in streams:
            with contextlib.suppress(ValueError):  # still running on a lane that failed: its thread closes it
                stream.close()  # type: ignore[attr-defined]
        sorter.close()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class SortStats:
    """What one sort did: its runs, the lanes it merged in, the merge passes before the last and the bytes
    they merged again, and the bytes of the runs it spilled."""

    runs: int = 0
    lanes: int = 1
    merge_passes: int = 0
    remerged_bytes: int = 0
    #: of the merge passes, those merged in memory (the rest by DataFusion)
    memory_passes: int = 0
    spilled_bytes: int = 0
    #: bytes of key ranges cut again to balance the lanes (:func:`_balanced`)
    recut_bytes: int = 0
    #: key ranges merged in memory (:func:`_merged_in_memory`) and by DataFusion (:func:`_merged`)
    ranges_in_memory: int = 0
    ranges_by_datafusion: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def add_pass(self, merged_bytes: int, *, in_memory: bool) -> None:
        with self._lock:
            self.merge_passes += 1
            self.memory_passes += in_memory
            self.remerged_bytes += merged_bytes

    def add_range(self, *, in_memory: bool) -> None:
        with self._lock:
            if in_memory:
                self.ranges_in_memory += 1
            else:
                self.ranges_by_datafusion += 1


@dataclass(frozen=True, eq=False)
class _Piece:
    """One key range of one sorted run, in a run file of its own."""

    run: int
    range: int
    path: str
    size: int
    #: the rows before each fine key range of the piece, and its rows (:func:`_fine_bounds`)
    fine: npt.NDArray[np.int64] | npt.NDArray[np.int32]


def _fine_bounds(bounds: Sequence[int] | npt.NDArray[Any]) -> npt.NDArray[np.int64] | npt.NDArray[np.int32]:
    """``bounds`` (rising row counts) as an array, of 32-bit numbers where they fit: a sort of 200M rows
    holds 3,204 pieces of 954 fine ranges each until they are merged."""
    import numpy as np

    bounds = np.asarray(bounds, dtype=np.int64)
    return bounds.astype(np.int32) if not len(bounds) or bounds[-1] < 1 << 31 else bounds


class _RunSorter:
    """Sorts the input in runs on two threads and spills each run as one file per key range."""

    def __init__(
        self,
        order: Sequence[SortColumn],
        prepare: Callable[[list[pa.RecordBatch]], pa.Table],
        directory: str,
        ranges: int,
        fine_bytes: int,
        expected_rows: int,
    ) -> None:
        self.order = order
        self.prepare = prepare
        self.directory = directory
        self.ranges = ranges
        self.fine_bytes = fine_bytes
        self.expected_rows = expected_rows
        #: fine key ranges to a key range, set by the first run
        self.fine_per_range = _FINE_PER_RANGE
        self.number = 0  # runs started
        self.next_range = ranges  # the id of the next key range cut again
        self.pieces: list[_Piece] = []
        self.row_bytes = 0  # of the first run, for the merge's batches
        #: the key values that split the ranges, from the first run (sorted): every later run waits for them
        self.splitters: Future[pa.Table] = Future()
        self._sorting: collections.deque[Future[list[_Piece]]] = collections.deque()
        self._pool = ThreadPoolExecutor(max_workers=_SORTERS, thread_name_prefix="iceberg-exec-sort")

    def sort(
        self, batches: Iterator[pa.RecordBatch], run_bytes: int, whole_bytes: int, batch_size: int
    ) -> collections.deque[pa.RecordBatch] | None:
        """Sort and spill every run; the sorted rows themselves, in batches of at most ``batch_size`` rows,
        when the input ends within ``whole_bytes`` (nothing spilled)."""
        for raw, complete in _collect(batches, run_bytes, whole_bytes, self.expected_rows):
            if not self.number and not complete:  # the only run: no file, no merge
                return _sorted_run(raw, self.prepare, self.order, batch_size)
            while len(self._sorting) >= _SORTERS:  # the input waits (its read-ahead fills) while both sort
                self.pieces.extend(self._sorting.popleft().result())
            self.row_bytes = self.row_bytes or max(
                1, sum(b.nbytes for b in raw) // max(1, sum(b.num_rows for b in raw))
            )
            self._sorting.append(self._pool.submit(self._sort_and_spill, raw, self.number))
            self.number += 1
            del raw
        while self._sorting:
            self.pieces.extend(self._sorting.popleft().result())
        release_memory()  # before the merges
        return None

    def _sort_and_spill(self, raw: list[pa.RecordBatch], number: int) -> list[_Piece]:
        """One run sorted and written as one run file per key range, with the rows of each of its fine key
        ranges (on a sorting thread)."""
        try:
            prepared = self.prepare(raw)
            raw.clear()
            if number == 0:
                table = _sort_table(prepared, self.order)
                self.fine_per_range = self._fine_count(table)
                splitters = _splitters(table, self.order, self.ranges * self.fine_per_range)
                self.splitters.set_result(splitters)
                cuts = _sorted_cuts(table, self.order, splitters)
            else:
                table, cuts = _sort_table_cut(prepared, self.order, self.splitters.result())
            del prepared
        except BaseException as err:
            if number == 0 and not self.splitters.done():
                self.splitters.set_exception(err)  # the runs waiting for the splitters fail too
            raise
        pieces = _spilled(table, [0, *cuts, table.num_rows], self.directory, number, 0, self.fine_per_range)
        # Freed buffers stay in PyArrow's allocator for the next run (the reader's batches, the next sort):
        # handed back after every run, each run faulted its pages in afresh, zeroed by the kernel (12 % of
        # a 20M-row sort's CPU); they are handed back once, after the last run.
        return pieces

    def _fine_count(self, first: pa.Table) -> int:
        """Fine key ranges to a key range: :data:`_FINE_PER_RANGE`, or more where the rows expected would
        make each more than ``fine_bytes`` (at the first run's bytes a row), as many as its rows allow."""
        expected_bytes = self.expected_rows * _row_bytes(first)
        wanted = -(-expected_bytes // max(1, self.fine_bytes * self.ranges))
        return max(_FINE_PER_RANGE, min(wanted, int(first.num_rows) // self.ranges))

    def close(self) -> None:
        for future in self._sorting:
            future.cancel()
        if not self.splitters.done():
            self.splitters.set_exception(IcebergExecError("the sort stopped before its first run was sorted"))
        self._pool.shutdown(wait=True)  # a run still being written is finished before its directory goes


def _spilled(
    table: pa.Table, bounds: Sequence[int], directory: str, run: int, first_range: int, fine_per_range: int
) -> list[_Piece]:
    """The rows of sorted ``table`` written as one run file per key range (ids from ``first_range`` on),
    each with its fine key ranges: ``bounds`` are where each fine range starts, and the end
    (``fine_per_range`` fine ranges to a key range)."""
    pieces = []
    for index in range((len(bounds) - 1) // fine_per_range):
        fine = bounds[index * fine_per_range : (index + 1) * fine_per_range + 1]
        start, stop = fine[0], fine[-1]
        if stop > start:
            name = f"{run:05d}-{first_range + index:03d}"
            path = _write_run(table.slice(start, stop - start), directory, name)
            fine_rows = _fine_bounds([bound - start for bound in fine])
            pieces.append(_Piece(run, first_range + index, path, os.path.getsize(path), fine_rows))
    return pieces


def _pieces_by_range(pieces: Sequence[_Piece]) -> list[list[_Piece]]:
    """The pieces of each key range that has any, in key order, each range's in run order."""
    by_range: dict[int, list[_Piece]] = collections.defaultdict(list)
    for piece in sorted(pieces, key=lambda p: (p.range, p.run)):
        by_range[piece.range].append(piece)
    return [by_range[r] for r in sorted(by_range)]


def _balanced(
    ranges: list[list[_Piece]], lanes: int, order: Sequence[SortColumn], sorter: _RunSorter, stats: SortStats
) -> list[list[_Piece]]:
    """``ranges`` (in key order) with the heaviest range cut again while the lanes they are dealt to are
    uneven: the first run's splitters misjudge input whose first run is unlike the rest (files in the
    order of a key correlated with the sort's), which would leave one lane with most of the rows.

    The range is cut at splitters sampled from every run's piece of it; each piece is sorted already, so
    it is only sliced and written again. A range whose keys are all equal cannot be cut: left as it is.
    """
    cut: set[int] = set()
    while True:
        sizes = [sum(piece.size for piece in pieces) for pieces in ranges]
        groups = _even_groups(sizes, lanes)
        share = sum(sizes) / lanes
        if max(sum(sizes[r] for r in group) for group in groups) <= share * _LANE_SLACK:
            return ranges
        heaviest = max(range(len(ranges)), key=lambda r: sizes[r])
        if ranges[heaviest][0].range in cut:  # its keys are too few to cut any finer
            return ranges
        count = max(2, min(lanes * 8, -(-sizes[heaviest] * 4 // max(1, int(share)))))
        parts = _recut(ranges[heaviest], order, count, sorter)
        stats.recut_bytes += sizes[heaviest]
        cut.update(pieces[0].range for pieces in parts)
        ranges = [*ranges[:heaviest], *parts, *ranges[heaviest + 1 :]]
        if len(parts) == 1:
            return ranges


def _recut(
    pieces: Sequence[_Piece], order: Sequence[SortColumn], count: int, sorter: _RunSorter
) -> list[list[_Piece]]:
    """One key range's pieces (sorted, in run order) cut again into up to ``count`` ranges, in key order,
    each into its fine key ranges, at splitters sampled from all of them (as many sample rows from each as
    its share of the rows)."""
    import pyarrow as pa

    names = [name for name, _asc, _nulls in order]
    rows = [_run_rows(piece.path) for piece in pieces]
    step = max(1, sum(rows) // (count * sorter.fine_per_range * _SAMPLE_PER_FINE_RANGE))
    samples = []
    for piece, piece_rows in zip(pieces, rows, strict=True):
        positions = pa.array(
            range(step // 2, piece_rows, step), pa.int64()
        )  # none from a piece under step / 2
        with _mapped_run(piece.path) as table:
            samples.append(table.select(names).take(positions).combine_chunks())
    sample = pa.concat_tables(samples).combine_chunks()
    sample = sample.take(_sort_indices([sample], order))
    splitters = _splitters(sample, order, count * sorter.fine_per_range)
    first = sorter.next_range
    sorter.next_range += count
    parts: list[list[_Piece]] = [[] for _ in range(count)]
    for piece in pieces:
        with _mapped_run(piece.path) as table:
            bounds = [0, *_sorted_cuts(table, order, splitters), table.num_rows]
            for part in _spilled(table, bounds, sorter.directory, piece.run, first, sorter.fine_per_range):
                parts[part.range - first].append(part)
        os.remove(piece.path)
    return [part for part in parts if part]


@contextlib.contextmanager
def _mapped_run(path: str) -> Iterator[pa.Table]:
    """A run file's rows, memory-mapped (read in place: only the pages touched come in)."""
    import pyarrow as pa

    with pa.memory_map(path) as source:
        yield pa.ipc.open_file(source).read_all()


def _run_rows(path: str) -> int:
    import pyarrow as pa

    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        return sum(reader.get_record_batch(i).num_rows for i in range(reader.num_record_batches))


def _even_groups(sizes: Sequence[int], count: int) -> list[list[int]]:
    """The indexes of ``sizes`` cut into at most ``count`` contiguous, non-empty groups of about equal sum.

    >>> _even_groups([5, 5, 5, 5], 2), _even_groups([9, 1, 1, 1], 2), _even_groups([1, 1], 4)
    ([[0, 1], [2, 3]], [[0], [1, 2, 3]], [[0], [1]])
    >>> _even_groups([125, 124, 125, 125, 124, 125, 127, 125], 2)  # a hair short of half: four, not five
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    total, before = sum(sizes), 0
    groups: list[list[int]] = []
    current: list[int] = []
    current_size = 0
    for index, size in enumerate(sizes):
        current.append(index)
        current_size += size
        after = count - len(groups) - 1  # groups still to come after this one
        if after <= 0 or index + 1 >= len(sizes):
            continue
        # its share of what is left for it and the groups after it; closed here when taking the next
        # size too would leave it further from that share than it is now
        share = (total - before) / (after + 1)
        if current_size + sizes[index + 1] - share > share - current_size:
            groups.append(current)
            before += current_size
            current, current_size = [], 0
    if current:
        groups.append(current)
    return groups


def _lane_rows(
    ranges: Sequence[Sequence[_Piece]],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    directory: str,
    plan: MergePlan,
    sorter: _RunSorter,
    stats: SortStats,
) -> Iterator[pa.RecordBatch]:
    """The rows of a lane's key ranges, one merge after another: in memory, a few fine key ranges at a time,
    where they are small enough (:func:`_fine_groups`), by DataFusion otherwise, each with at most its
    fan-in of runs (passes over the smallest first, :func:`_reduced`). Each range's run files are removed
    as soon as its merge is done."""
    group_bytes = plan.run_bytes // _GROUP_SHARE
    for range_pieces in ranges:
        pieces = _reduced(
            list(range_pieces),
            order,
            limits,
            spill_dir,
            directory,
            plan.fan_in,
            sorter.row_bytes,
            stats,
            group_bytes,
        )
        paths = [piece.path for piece in pieces]
        groups = _fine_groups(pieces, group_bytes)
        stats.add_range(in_memory=groups is not None)
        if groups is not None:
            yield from _merged_in_memory(pieces, groups, order, limits, sorter.row_bytes)
        elif paths:
            yield from _merged(paths, order, limits, spill_dir, sorter.row_bytes)
        # Their page-cache pages go back now, for the output written next, not at the sort's end: on a
        # virtual machine that hands free memory back to its host, writing into fresh pages cost 10-20x
        # as much per byte as into pages just freed (docs/benchmarks.md).
        for path in paths:
            os.remove(path)


def _fine_groups(pieces: Sequence[_Piece], budget: int) -> list[tuple[int, int]] | None:
    """The fine key ranges of one key range's ``pieces`` in consecutive groups of at most ``budget`` bytes
    (of every piece together, at the pieces' bytes a row), as ``(first, stop)``, but for a fine range alone
    of up to twice that; None when there are no pieces or one fine range alone holds more (a key as common
    as that). Fine ranges cut at splitters from one run vary in size: twice leaves room for the largest.

    >>> a, b = _fine_bounds([0, 2, 5, 6]), _fine_bounds([0, 1, 1, 4])
    >>> pieces = [_Piece(0, 0, "a", 60, a), _Piece(1, 0, "b", 40, b)]
    >>> _fine_groups(pieces, 60), _fine_groups(pieces, 40), _fine_groups(pieces, 20), _fine_groups(pieces, 15)
    ([(0, 2), (2, 3)], [(0, 1), (1, 2), (2, 3)], [(0, 1), (1, 2), (2, 3)], None)
    """
    import numpy as np

    if not pieces:
        return None
    total = _summed_fine(pieces)
    budget_rows = budget * int(total[-1]) // max(1, sum(piece.size for piece in pieces))
    rows_per_fine = np.diff(total)
    if rows_per_fine.size and int(rows_per_fine.max()) > 2 * budget_rows:
        return None
    groups: list[tuple[int, int]] = []
    first = held = 0
    for index, rows in enumerate(rows_per_fine.tolist()):
        if held and held + rows > budget_rows:
            groups.append((first, index))
            first, held = index, 0
        held += rows
    return [*groups, (first, len(rows_per_fine))]


def _summed_fine(pieces: Sequence[_Piece]) -> npt.NDArray[np.int64]:
    """The rows before each fine key range of all of ``pieces`` together."""
    import numpy as np

    summed: npt.NDArray[np.int64] = np.stack([piece.fine for piece in pieces]).sum(axis=0, dtype=np.int64)
    return summed


def _merged_in_memory(
    pieces: Sequence[_Piece],
    groups: Sequence[tuple[int, int]],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    row_bytes: int,
) -> Iterator[pa.RecordBatch]:
    """The rows of one key range's ``pieces`` (sorted runs), merged by sorting each of ``groups`` of their
    fine key ranges in memory: every row of a group sorts before (or with) every row of the next in every
    run, the runs having been cut at the same splitters. Each run file is read once, a batch at a time.

    One key range of the bench's sort (2.53M rows, 81 runs) was merged so in 0.52-0.62 s of CPU, by
    DataFusion in 0.91-1.24 s (docs/benchmarks.md).
    """
    import pyarrow as pa

    batch_rows = _output_batch_rows(limits.batch_size, row_bytes)
    with contextlib.ExitStack() as stack:
        cursors = [stack.enter_context(_RunCursor(piece.path)) for piece in pieces]
        for first, stop in groups:
            batches = []
            for piece, cursor in zip(pieces, cursors, strict=True):
                batches.extend(cursor.read(int(piece.fine[stop] - piece.fine[first])))
            if batches:
                table = _sort_table(pa.Table.from_batches(batches), order)
                del batches
                yield from table.to_batches(max_chunksize=batch_rows)


class _RunCursor:
    """A run file read from its start, so many rows at a time (each of its batches read once, into memory:
    not mapped, whose pages would count in the process's memory until the file is closed)."""

    def __init__(self, path: str) -> None:
        import pyarrow as pa

        self._file = pa.OSFile(path, "rb")
        try:
            self._reader = pa.ipc.open_file(self._file)
        except BaseException:
            self._file.close()
            raise
        self._next = 0  # the next batch to read
        self._rest: pa.RecordBatch | None = None  # what is left of the last batch read

    def read(self, rows: int) -> list[pa.RecordBatch]:
        """The next ``rows`` rows."""
        out = []
        while rows > 0:
            if self._rest is None:
                self._rest = self._reader.get_record_batch(self._next)
                self._next += 1
            batch = self._rest
            if batch.num_rows <= rows:
                out.append(batch)
                rows -= batch.num_rows
                self._rest = None
            else:
                out.append(batch.slice(0, rows))
                self._rest = batch.slice(rows)
                rows = 0
        return out

    def __enter__(self) -> _RunCursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._rest = None
        self._file.close()


def _output_batch_rows(batch_size: int, row_bytes: int) -> int:
    """Rows of each batch a sort hands on: :data:`_OUTPUT_BATCH_BYTES` of rows of ``row_bytes``, at most
    ``batch_size`` (the limits')."""
    return max(_MIN_BATCH_ROWS, min(batch_size, _OUTPUT_BATCH_BYTES // max(1, row_bytes)))


def _sorted_run(
    raw: list[pa.RecordBatch],
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    order: Sequence[SortColumn],
    batch_size: int,
) -> collections.deque[pa.RecordBatch]:
    """The whole input's batches prepared and sorted, as output batches (:func:`_output_batch_rows`); ``raw``
    is emptied.

    The sorted copy is taken column by column, each input column freed once taken, and batch by batch,
    each output batch in buffers of its own: the input and its copy hold about the input's bytes and one
    column more, not twice the input, and every batch is freed once its rows are written."""
    import pyarrow as pa

    prepared = prepare(raw)
    raw.clear()
    indices = _sort_indices([prepared], order)
    rows = _output_batch_rows(batch_size, _row_bytes(prepared))
    pieces = [indices.slice(start, rows) for start in range(0, len(indices), rows)]
    schema = prepared.schema
    columns = collections.deque(prepared.columns)
    del prepared
    taken: list[list[pa.Array]] = []
    while columns:
        # A take from many chunks joins them first: joined once here, not for every batch. The input
        # column's last reference goes with the pop: its chunks are freed once joined.
        joined = columns.popleft().combine_chunks()
        taken.append([joined.take(piece) for piece in pieces])
        del joined
    release_memory()
    return collections.deque(
        pa.RecordBatch.from_arrays([chunks[b] for chunks in taken], schema=schema) for b in range(len(pieces))
    )


def _finished(
    finish: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    rows: Iterator[pa.RecordBatch],
    lanes: int = 1,
) -> Iterator[pa.RecordBatch]:
    """``finish(rows)`` produced on its own thread, a few batches ahead of the caller (the lanes of a sort
    share one lead of :data:`_FINISH_LEAD_BYTES`)."""
    with closing(read_ahead(finish(rows), depth=4, max_bytes=_FINISH_LEAD_BYTES // lanes)) as out:
        yield from out


def _collect(
    batches: Iterator[pa.RecordBatch], run_bytes: int, whole_bytes: int = 0, expected_rows: int = 0
) -> Iterator[tuple[list[pa.RecordBatch], bool]]:
    """The input in runs of about ``run_bytes``, each with whether it is complete (not the input's end);
    an input that ends within ``whole_bytes`` comes as one run. The input's start is held until it is
    known to fit or not, unless ``expected_rows`` (0: not known), at the first batch's bytes a row, would not.

    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"k": list(range(128))})  # 1 KiB
    >>> [(len(run), complete) for run, complete in _collect(iter([batch] * 5), 2048, 8192)]
    [(5, False)]
    >>> [(len(run), complete) for run, complete in _collect(iter([batch] * 9), 2048, 8192)]
    [(2, True), (2, True), (2, True), (2, True), (1, False)]
    """
    head: collections.deque[pa.RecordBatch] = collections.deque()
    size = 0
    for batch in batches:  # the input's start, held while all of it may still fit one piece
        if batch.num_rows:
            if not head and expected_rows * batch.nbytes > whole_bytes * batch.num_rows:
                whole_bytes = 0  # told more is coming than fits: runs from the start, as it is read
            head.append(batch)
            size += batch.nbytes
        if size >= max(run_bytes, whole_bytes):
            break
    else:
        if head:
            whole = list(head)
            head.clear()  # the sort frees the input's columns as it takes them: no other reference
            yield whole, False
        return
    yield from _runs(itertools.chain(_drained(head), batches), run_bytes)


def _drained(batches: collections.deque[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` handed out one by one, each let go of as it goes."""
    while batches:
        yield batches.popleft()


def _runs(batches: Iterator[pa.RecordBatch], run_bytes: int) -> Iterator[tuple[list[pa.RecordBatch], bool]]:
    """The input in runs of about ``run_bytes``, each with whether it is complete (not the input's end)."""
    run: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        run.append(batch)
        size += batch.nbytes
        if size >= run_bytes:
            yield run, True
            run, size = [], 0
    if run:
        yield run, False


def _sort_table(table: pa.Table, order: Sequence[SortColumn]) -> pa.Table:
    """``table`` sorted by ``order``, as DataFusion orders rows (see :func:`_sort_images`)."""
    return _taken(table, _sort_indices([table], order))


def _sort_table_cut(
    table: pa.Table, order: Sequence[SortColumn], splitters: pa.Table
) -> tuple[pa.Table, list[int]]:
    """``table`` sorted by ``order``, and where its rows cross each of ``splitters`` (sorted key rows):
    ``cuts[j]`` rows sort before or with splitter ``j``.

    The splitters are sorted with the rows, after them: the sort is stable, so a row equal to a splitter
    comes before it, and every run cuts its equal keys the same way.

    >>> import pyarrow as pa
    >>> rows = pa.table({"k": [5, 1, 3, 3, None]})
    >>> table, cuts = _sort_table_cut(rows, [("k", True, False)], pa.table({"k": [3, 4]}))
    >>> table.column("k").to_pylist(), cuts
    ([1, 3, 3, 5, None], [3, 3])
    """
    import numpy as np
    import pyarrow.compute as pc

    rows = table.num_rows
    indices = _sort_indices([table, splitters], order)
    is_row = pc.less(indices, rows)
    markers = np.flatnonzero(~is_row.to_numpy(zero_copy_only=False))
    cuts = (markers - np.arange(len(markers))).tolist()
    return _taken(table, indices.filter(is_row)), cuts


def _sorted_cuts(table: pa.Table, order: Sequence[SortColumn], splitters: pa.Table) -> list[int]:
    """Where sorted ``table``'s rows cross each of ``splitters``, as :func:`_sort_table_cut` cuts them,
    without taking its rows again: a stable sort of its keys with the splitters after them leaves its rows
    in place and puts each splitter after the rows that sort before or with it.

    >>> import pyarrow as pa
    >>> _sorted_cuts(pa.table({"k": [1, 3, 3, 5, None]}), [("k", True, False)], pa.table({"k": [3, 4]}))
    [3, 3]
    """
    import numpy as np

    names = [name for name, _asc, _nulls in order]
    indices = _sort_indices([table.select(names), splitters], order)
    markers = np.flatnonzero(indices.to_numpy() >= table.num_rows)
    cuts: list[int] = (markers - np.arange(len(markers))).tolist()
    return cuts


def _splitters(table: pa.Table, order: Sequence[SortColumn], ranges: int) -> pa.Table:
    """The key columns of the rows of sorted ``table`` that cut it into ``ranges`` of equal rows."""
    rows = table.num_rows
    positions = [rows * k // ranges for k in range(1, ranges)]
    keys = table.select([name for name, _asc, _nulls in order])
    return keys.take(positions).combine_chunks()


def _taken(table: pa.Table, indices: pa.Array) -> pa.Table:
    """The rows of ``table`` at ``indices``, column by column (a table's take may join every column's
    chunks first, a whole copy more at once), each from its chunks: PyArrow 23 and 26 take from chunks in
    place, in as much CPU as from a joined column for a run of 220K rows in 27 chunks and in a third less
    for a merge group's 1,700 chunks, with no joined copy held."""
    import pyarrow as pa

    return pa.Table.from_arrays(
        [table.column(i).take(indices) for i in range(table.num_columns)], schema=table.schema
    )


def _sort_indices(tables: Sequence[pa.Table], order: Sequence[SortColumn]) -> pa.Array:
    """The sort of the rows of ``tables`` (one after the other) by ``order``, as DataFusion orders rows:
    indices into their concatenation. Rows with equal keys come in no particular order, except that a row
    of a later table comes after every row of an earlier one equal to it (a splitter after its equals)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for name, _asc, _nulls in order:
        kind = tables[0].schema.field(name).type
        columns.append(
            pa.concat_arrays([c for t in tables for c in t.column(name).cast(kind).chunks])
            if len(tables) > 1
            else tables[0].column(name).combine_chunks()
        )
    indices = _numpy_sort_indices(columns, order, [table.num_rows for table in tables])
    if indices is not None:
        return pa.array(indices, pa.int64())
    images: list[pa.Array] = []
    sort_keys: list[tuple[str, ...]] = []
    per_key_nulls = _per_key_null_placement()
    for column, (_name, ascending, nulls_first) in zip(columns, order, strict=True):
        placement = "at_start" if nulls_first else "at_end"
        if column.null_count and not per_key_nulls:
            # Each key's own null placement as a flag sorted first (False before True): PyArrow before 24
            # takes one null placement for all the keys of a sort (the flags cost 25 % more sort CPU).
            images.append(pc.is_valid(column) if nulls_first else pc.is_null(column))
            sort_keys.append((f"k{len(sort_keys)}", "ascending"))
        for image in _sort_images(column):
            images.append(image)
            direction = "ascending" if ascending else "descending"
            sort_keys.append(
                (f"k{len(sort_keys)}", direction, placement)
                if per_key_nulls
                else (f"k{len(sort_keys)}", direction)
            )
    keys = pa.table(images, names=[key[0] for key in sort_keys])
    del images
    return pc.sort_indices(keys, sort_keys=sort_keys)  # stable: a later table's rows after their equals


def _numpy_sort_indices(
    columns: Sequence[pa.Array], order: Sequence[SortColumn], lengths: Sequence[int]
) -> npt.NDArray[np.int64] | None:
    """:func:`_sort_indices` by NumPy when every key's images are fixed-width integers (whole numbers,
    floating point, decimals, dates, times, timestamps); None otherwise.

    The rows are sorted by the first key, then each group of rows still equal is sorted by the next key,
    and so on (:func:`_refined`): NumPy's sort of one integer column took a sixth of PyArrow's
    multi-key sort of a run (200K rows by ``user_id, event_ts DESC``: 3 ms against 20), and on most
    tables few rows share a first key. A key of several images (a decimal's limbs) is sorted by each in
    turn from the least significant (:func:`_key_order`).
    """
    import numpy as np
    import pyarrow as pa

    # decided from the types before any image is made (the images of floats and decimals are integers)
    sortable = (pa.types.is_floating, pa.types.is_decimal128, pa.types.is_decimal256)
    if not all(
        any(is_kind(c.type) for is_kind in sortable) or _integer_dtype(c.type) is not None for c in columns
    ):
        return None
    keys: list[_Key] = []
    for column, (_name, ascending, nulls_first) in zip(columns, order, strict=True):
        nulls = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
        images = [_integer_values(image) for image in _sort_images(column)]
        # ~ reverses the order
        keys.append(_Key(tuple(v if ascending else ~v for v in images), nulls, nulls_first))
    if len(lengths) > 1:
        keys.append(_Key((np.repeat(np.arange(len(lengths)), lengths),), None, False))
    keys = [part for key in keys for part in _split_limbs(key)]
    packed = _packed(keys, sum(lengths))
    if packed is not None:
        return _stable_order(packed, None, False)
    return _refined(keys, sum(lengths))


@dataclass(frozen=True)
class _Key:
    """A sort key's images as NumPy integers (ascending), the most significant first (one, or a decimal's
    limbs), its nulls, and where they go."""

    images: tuple[npt.NDArray[Any], ...]
    nulls: npt.NDArray[np.bool_] | None
    nulls_first: bool


#: a two-limb key is split (:func:`_split_limbs`) when its top limb spans at most this many bits
_SPLIT_TOP_BITS = 32


def _split_limbs(key: _Key) -> list[_Key]:
    """``key`` as keys sorted in turn; a key of two limbs (a ``decimal128``: a z-order's), without nulls,
    whose top limb takes more than one radix pass but spans at most :data:`_SPLIT_TOP_BITS` once the bits
    every row shares are taken out (:func:`_gap_closed`), as two 64-bit keys: the top limb's bits with the
    low limb's highest, then the rest of the low limb. Compared in turn they compare as the limbs do, and
    most rows differ in the first, so the second is sorted only for the few rows tied on it: a z-order's
    run of 245K rows sorted in 14-16 ms against 25-35 ms limb by limb (eight radix passes: its top limb
    spans 63 bits, the z-values of rows with a null apart from the rest). A top limb of one pass (a merge's
    group, a narrow range of z-values) is sorted limb by limb still: five passes, as many as split.

    >>> import numpy as np
    >>> key = _Key((np.array([2**20, 2, 2**20]), np.array([1, 2**64 - 1, 0], dtype=np.uint64)), None, False)
    >>> [[int(v) for v in part.images[0]] for part in _split_limbs(key)]
    [[9223372036854775808, 4611686018427387903, 9223372036854775808], [1, 3, 0]]
    """
    import numpy as np

    if len(key.images) != 2 or key.nulls is not None or not len(key.images[0]):
        return [key]
    top, low = key.images
    unsigned = _unsigned_order(top).astype(np.uint64, copy=False)
    if int(unsigned.max() - unsigned.min()) < 1 << 16:
        return [key]
    unsigned = _gap_closed(unsigned)
    distance = unsigned - unsigned.min()
    bits = int(distance.max()).bit_length()
    if bits > _SPLIT_TOP_BITS:
        return [key]
    low = low.astype(np.uint64, copy=False)
    first = (distance << np.uint64(64 - bits)) | (low >> np.uint64(bits))
    return [_Key((first,), None, False), _Key((low & np.uint64((1 << bits) - 1),), None, False)]


def _gap_closed(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """``values`` in the same order, in fewer bits: the widest run of bits every value shares, below the
    highest bit where any two differ, taken out (values in two clusters far apart come closer).

    >>> import numpy as np
    >>> _gap_closed(np.array([2**40 + 5, 2**40 + 1, 7], dtype=np.uint64)).tolist()
    [13, 9, 7]
    """
    import numpy as np

    differing = int(np.bitwise_or.reduce(values ^ values[0]))
    width = low = run = 0
    for bit in range(differing.bit_length()):
        if differing >> bit & 1:
            if run > width:
                width, low = run, bit - run
            run = 0
        else:
            run += 1
    if not width:
        return values
    below = values & np.uint64((1 << low) - 1)
    closed: npt.NDArray[np.uint64] = ((values >> np.uint64(low + width)) << np.uint64(low)) | below
    return closed


def _packed(keys: Sequence[_Key], rows: int) -> npt.NDArray[np.uint64] | None:
    """``keys`` packed into one unsigned 64-bit number a row that sorts as they do, in turn, when that is
    cheaper than sorting them in turn (:func:`_refined`); None otherwise.

    Each image of each key is its distance from its smallest value (a key's nulls in a slot below or above
    its values, and 0 in its other images), in as many bits as its values span, the first key's in the
    highest bits. Packed when the bits fit 64 and either need no more radix passes than the first key's
    alone or the first key has fewer values than there are rows (then most rows tie on it, and are sorted
    by every key after it again). A merge's group of 192,000 rows within 2,000 ``user_id`` values: sorted
    by ``user_id, event_ts DESC`` in 12 ms against 21-30 ms.

    >>> import numpy as np
    >>> first = _Key((np.array([1, 1, 0, 1]),), None, False)
    >>> second = _Key((np.array([7, 5, 9, -3]),), np.array([False, True, False, False]), False)
    >>> _packed([first, second], 4).tolist()  # 1 bit for the first key, 4 for the second and its nulls
    [26, 29, 12, 16]
    >>> _packed([_Key((np.array([0, 2**62]),), None, False), _Key((np.array([0, 3]),), None, False)], 2)
    """
    import numpy as np

    spans = _spans(keys)
    bits = [span.bit_length() for _low, span in spans]
    first_bits = sum(bits[: len(keys[0].images)])

    def passes(count: int) -> int:
        return -(-count // 16)

    if sum(bits) > 64 or (passes(sum(bits)) > passes(first_bits) and rows <= spans[0][1]):
        return None
    packed = np.zeros(rows, dtype=np.uint64)
    shift = sum(bits)
    spans_left = iter(zip(spans, bits, strict=True))
    for key in keys:
        for number, image in enumerate(key.images):
            (low, span), width = next(spans_left)
            shift -= width
            if not width:
                continue
            # the distance in unsigned arithmetic (a signed one overflows past 2**63)
            distance = image.astype(np.uint64) - np.uint64(low % (1 << 64))
            if key.nulls is not None:
                if number:
                    distance[key.nulls] = 0
                elif key.nulls_first:
                    distance += np.uint64(1)
                    distance[key.nulls] = 0
                else:
                    distance[key.nulls] = span
            packed |= distance << np.uint64(shift)
    return packed


def _spans(keys: Sequence[_Key]) -> list[tuple[int, int]]:
    """The smallest value of every image of ``keys`` (in turn) and its distance to the largest, plus one
    for a slot for the nulls in a key's first image."""
    spans = []
    for key in keys:
        for number, image in enumerate(key.images):
            present = image if key.nulls is None else image[~key.nulls]
            low, high = (int(present.min()), int(present.max())) if present.size else (0, 0)
            spans.append((low, high - low + (1 if key.nulls is not None and number == 0 else 0)))
    return spans


def _refined(keys: Sequence[_Key], rows: int) -> npt.NDArray[np.int64]:
    """The rows sorted by ``keys`` in turn: only the rows in groups still equal on the keys before are
    sorted by the next one, by a NumPy sort of the key and a stable sort of that by group.

    >>> import numpy as np
    >>> keys = [_Key((np.array([2, 1, 2, 1]),), None, False), _Key((np.array([9, 8, 7, 6]),), None, False)]
    >>> _refined(keys, 4).tolist()
    [3, 1, 2, 0]
    """
    import numpy as np

    order = np.arange(rows, dtype=np.int64)  # the rows, sorted so far
    starts = np.zeros(rows + 1, dtype=np.bool_)  # where each group of rows equal so far begins (and the end)
    starts[0] = starts[rows] = True
    tied = np.arange(rows, dtype=np.int64)  # the places in groups of more than one row
    for number, key in enumerate(keys):
        if tied.size < 2:
            break
        picked = order[tied] if number else None  # at first every row, in the input's order
        images = key.images if picked is None else tuple(image[picked] for image in key.images)
        nulls = key.nulls if picked is None or key.nulls is None else key.nulls[picked]
        within: npt.NDArray[np.int64] = _key_order(images, nulls, key.nulls_first)
        groups = None
        if number:
            groups = np.cumsum(starts[tied], dtype=np.int64)
            within = _grouped(within, groups)
        if number == len(keys) - 1:  # the last key: no ties left to find
            if picked is None:
                return within
            order[tied] = picked[within]
            return order
        # where the next row differs from the one before it: another group, another key, or null or not
        differs = np.zeros(max(0, len(within) - 1), dtype=np.bool_)
        for image in images:
            ordered = image[within]
            differs |= ordered[1:] != ordered[:-1]
        if nulls is not None:
            null = nulls[within]
            differs &= ~(null[1:] & null[:-1])  # nulls are equal whatever their slots hold
            differs |= null[1:] != null[:-1]
        if groups is not None:
            ordered_groups = groups[within]
            differs |= ordered_groups[1:] != ordered_groups[:-1]
        if picked is None:
            order = within
        else:
            order[tied] = picked[within]
        starts[tied[1:]] |= differs
        # a place is tied when it does not start its group or the next place does not start another
        tied = np.flatnonzero(~(starts[:-1] & starts[1:]))
    return order


def _key_order(
    images: tuple[npt.NDArray[Any], ...], nulls: npt.NDArray[np.bool_] | None, nulls_first: bool
) -> Any:
    """The stable order that sorts the rows by ``images`` (the most significant first), nulls first or last.

    Several images (a decimal's limbs) are sorted by from the least significant, each sort stable: a
    z-order's 128-bit key, whose top limb has few distinct values in a run (15,000 of 250,000), sorted
    in 19-26 ms against 33-35 ms by its top limb first and its groups of ties by the other.

    >>> import numpy as np
    >>> _key_order((np.array([3, -1, 7, 0]),), np.array([False, False, True, False]), True).tolist()
    [2, 1, 3, 0]
    >>> _key_order((np.array([1, 0, 1, 0]), np.array([5, 9, 2, 9])), None, False).tolist()
    [1, 3, 2, 0]
    """
    order: npt.NDArray[np.int64] | None = None
    for image in images[:0:-1]:
        step = _stable_order(image if order is None else image[order], None, False)
        order = step if order is None else order[step]
    top = images[0] if order is None else images[0][order]
    top_nulls = nulls if order is None or nulls is None else nulls[order]
    step = _stable_order(top, top_nulls, nulls_first)
    return step if order is None else order[step]


def _stable_order(
    values: npt.NDArray[Any], nulls: npt.NDArray[np.bool_] | None, nulls_first: bool
) -> npt.NDArray[np.int64]:
    """The stable order that sorts ``values``, nulls first or last."""
    import numpy as np

    if len(values) >= _RADIX_MIN_ROWS:
        radix = _radix_order(values, nulls, nulls_first)
        if radix is not None:
            return radix
    order = np.argsort(values, kind="stable")
    if nulls is not None:  # then by null or not, stably: False before True
        flags = ~nulls[order] if nulls_first else nulls[order]
        order = order[np.argsort(flags, kind="stable")]
    return order


#: rows from which a key is sorted by radix (:func:`_radix_order`); below, NumPy's argsort was as fast
_RADIX_MIN_ROWS = 4096


def _radix_order(
    values: npt.NDArray[Any], nulls: npt.NDArray[np.bool_] | None, nulls_first: bool
) -> npt.NDArray[np.int64] | None:
    """The stable order that sorts whole-number ``values`` (nulls first or last), by a radix sort of their
    distance from the smallest, 16 bits a pass from the lowest: NumPy's stable sort of 16-bit numbers is a
    counting sort. A run's ``user_id`` (250,000 values within a million) sorted in 2.5 ms against NumPy's
    argsort's 14.6; a whole 64-bit range about as fast as the argsort (four passes). None when the values
    and a slot for the nulls do not fit in 64 bits (every 64-bit value and a null).

    >>> import numpy as np
    >>> values = np.array([5, -3, 70000, -3, 0], dtype=np.int32)
    >>> _radix_order(values, None, False).tolist(), _radix_order(values, values == 0, True).tolist()
    ([1, 3, 4, 0, 2], [4, 1, 3, 0, 2])
    """
    import numpy as np

    width = values.dtype.itemsize * 8
    unsigned = np.dtype(f"u{values.dtype.itemsize}")
    keys = _unsigned_order(values)
    present = keys if nulls is None else keys[~nulls]
    if not present.size:
        return np.arange(len(values), dtype=np.int64)
    low = present.min()
    span = int(present.max() - low)
    if nulls is not None:
        if span + 1 >= 1 << width:
            if width == 64:
                return None
            width, unsigned = 64, np.dtype(np.uint64)  # a narrower whole range and its nulls: in 64 bits
            keys, low = keys.astype(unsigned), unsigned.type(low)
        span += 1  # the nulls take the slot below the smallest value or above the largest
        keys = keys - low + unsigned.type(1) if nulls_first else keys - low
        keys[nulls] = 0 if nulls_first else span
    else:
        keys = keys - low
    if span < 1 << 32 and width > 32:
        keys = keys.astype(np.uint32)  # gathered in half the bytes
    order: npt.NDArray[np.int64] | None = None
    shifts = range(0, span.bit_length(), 16)
    for shift in shifts:
        step = np.argsort((keys >> shift).astype(np.uint16), kind="stable")  # the low 16 bits: a digit
        order = step if order is None else order[step]
        if shift != shifts[-1]:
            keys = keys[step]
    return np.arange(len(values), dtype=np.int64) if order is None else order


def _unsigned_order(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Whole-number ``values`` as unsigned numbers of their width in the same order (signed ones with the
    sign bit flipped).

    >>> import numpy as np
    >>> _unsigned_order(np.array([-1, 0, 1], dtype=np.int8)).tolist()
    [127, 128, 129]
    """
    import numpy as np

    unsigned = np.dtype(f"u{values.dtype.itemsize}")
    keys = values.view(unsigned)
    if values.dtype.kind == "i":
        keys = keys ^ unsigned.type(1 << (values.dtype.itemsize * 8 - 1))
    return keys


def _grouped(within: npt.NDArray[np.int64], groups: npt.NDArray[np.int64]) -> Any:
    """``within`` (an order of the rows) made to keep the rows' ``groups`` (ascending) first: a stable sort
    by group (by radix from :data:`_RADIX_MIN_ROWS` rows)."""
    return within[_stable_order(groups[within], None, False)]


def _integer_dtype(kind: pa.DataType) -> np.dtype[Any] | None:
    """The NumPy integer type of a whole-number or temporal Arrow type's values; None for any other."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_integer(kind):
        return np.dtype(f"{'u' if pa.types.is_unsigned_integer(kind) else 'i'}{kind.bit_width // 8}")
    if any(
        is_kind(kind)
        for is_kind in (pa.types.is_date, pa.types.is_time, pa.types.is_timestamp, pa.types.is_duration)
    ):
        return np.dtype(f"i{kind.bit_width // 8}")
    return None


def _integer_values(image: pa.Array) -> npt.NDArray[Any]:
    """An integer or temporal image's values as NumPy integers (whatever is under its nulls), without a
    copy."""
    import numpy as np

    dtype = _integer_dtype(image.type)
    assert dtype is not None, image.type  # the images of the types _numpy_sort_indices takes
    return np.frombuffer(
        image.buffers()[1], dtype=dtype, count=len(image), offset=image.offset * dtype.itemsize
    )


def _per_key_null_placement() -> bool:
    """Whether PyArrow takes a null placement per sort key (``(name, order, placement)``, PyArrow >= 24)."""
    import pyarrow as pa

    return int(pa.__version__.split(".", 1)[0]) >= 24


def _sort_images(column: pa.Array) -> list[pa.Array]:
    """What PyArrow sorts for a key column, compared in turn: the column itself, or

    - for floating point, ``int64`` values that order as DataFusion orders the floats (Rust's
      ``total_cmp``: the sign bit, then the other bits flipped for negatives), where PyArrow would put
      NaN beside the nulls;
    - for ``decimal128`` / ``decimal256``, its 64-bit limbs from the most significant (signed) to the
      least (unsigned): PyArrow compares the limbs in about half the time it compares decimals (a
      z-order's key is one).

    >>> import pyarrow as pa
    >>> import pyarrow.compute as pc
    >>> values = pa.array([1.5, float("nan"), None, -float("inf"), -0.0, 0.0])
    >>> pc.sort_indices(_sort_images(values)[0]).to_pylist()
    [3, 4, 5, 0, 1, 2]
    """
    import numpy as np
    import pyarrow as pa

    kind = column.type
    mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    if pa.types.is_floating(kind):
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False).view(np.int64)
        ordered = values ^ ((values >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))
        return [pa.array(ordered, pa.int64(), mask=mask)]
    if pa.types.is_decimal128(kind) or pa.types.is_decimal256(kind):
        count = kind.byte_width // 8
        limbs = np.frombuffer(
            column.buffers()[1],
            dtype=np.uint64,
            count=count * len(column),
            offset=column.offset * kind.byte_width,
        ).reshape(-1, count)
        top = limbs[:, count - 1].view(np.int64)
        return [
            pa.array(top, pa.int64(), mask=mask),
            *(pa.array(limbs[:, i], pa.uint64(), mask=mask) for i in range(count - 2, -1, -1)),
        ]
    return [column]


def _batch_rows(table: pa.Table) -> int:
    """Rows of about :data:`_MERGE_BATCH_BYTES` of ``table`` (at least 1024)."""
    return max(_MIN_BATCH_ROWS, _MERGE_BATCH_BYTES // _row_bytes(table))


def _row_bytes(table: pa.Table) -> int:
    return max(1, int(table.nbytes) // max(1, int(table.num_rows)))


class _RunFile:
    """A run file being written: Arrow IPC (written and read back at memory speed, once), its writes
    gathered into :data:`_RUN_WRITE_BUFFER_BYTES`."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        import pyarrow as pa

        self._sink = pa.BufferedOutputStream(pa.OSFile(path, "wb"), buffer_size=_RUN_WRITE_BUFFER_BYTES)
        try:
            options = pa.ipc.IpcWriteOptions(compression=_RUN_COMPRESSION)
            self._writer = pa.ipc.new_file(self._sink, schema, options=options)
        except BaseException:
            self._sink.close()
            raise

    def write_table(self, table: pa.Table) -> None:
        """``table``'s rows in batches of about :data:`_MERGE_BATCH_BYTES` (the merge reads one at a time)."""
        self._writer.write_table(table, max_chunksize=_batch_rows(table))

    def close(self) -> None:
        try:
            self._writer.close()  # the footer
        finally:
            self._sink.close()  # the buffer flushed, the file closed

    def __enter__(self) -> _RunFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _write_run(table: pa.Table, directory: str, name: str) -> str:
    """One sorted run, in batches of about :data:`_MERGE_BATCH_BYTES`: the merge reads one at a time."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"run-{name}.arrow")
    with _RunFile(path, table.schema) as writer:
        writer.write_table(table)
    return path


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _merged(
    runs: Sequence[str], order: Sequence[SortColumn], limits: ResourceLimits, spill_dir: str, row_bytes: int
) -> Iterator[pa.RecordBatch]:
    """The rows of the sorted ``runs``, merged in ``order`` by DataFusion, in batches of at most
    :data:`_OUTPUT_BATCH_BYTES` (rows of ``row_bytes``)."""
    batch_rows = _output_batch_rows(limits.batch_size, row_bytes)
    ctx = build_session(dataclasses.replace(limits, target_partitions=1, batch_size=batch_rows), spill_dir)
    # One scan per run, whole: a run split in byte ranges is two merge inputs, each with its buffers.
    ctx.sql("SET datafusion.optimizer.repartition_file_scans = false").collect()
    keys = ", ".join(
        f"{_quoted(name)} {'ASC' if asc else 'DESC'} NULLS {'FIRST' if nulls_first else 'LAST'}"
        for name, asc, nulls_first in order
    )
    for number, path in enumerate(runs):
        # Declared sorted (an Arrow file cannot be registered with an order otherwise): the plan is a
        # SortPreservingMerge over the runs' union, with no sort of its own.
        location = path.replace("'", "''")
        ctx.sql(
            f"CREATE EXTERNAL TABLE run{number} STORED AS ARROW LOCATION '{location}' WITH ORDER ({keys})"
        ).collect()
    union = " UNION ALL ".join(f"SELECT * FROM run{number}" for number in range(len(runs)))
    for batch in ctx.sql(f"SELECT * FROM ({union}) ORDER BY {keys}").execute_stream():
        yield batch.to_pyarrow()


def _reduced(
    pieces: list[_Piece],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    directory: str,
    fan_in: int,
    row_bytes: int,
    stats: SortStats,
    group_bytes: int,
) -> list[_Piece]:
    """``pieces`` (one key range's, in run order) after as few bytes as possible are merged again to leave
    at most ``fan_in``: the smallest are merged into one, just enough of them each time, in memory in groups
    of fine key ranges of at most ``group_bytes`` (:func:`_merged_in_memory`) where they fit, by DataFusion
    otherwise. A merged piece's fine key ranges are its inputs' together (every input's rows of a fine range
    sort before the next's)."""
    import pyarrow as pa

    number = 0
    while len(pieces) > fan_in:
        count = min(fan_in, len(pieces) - fan_in + 1)
        group = {piece.path for piece in sorted(pieces, key=lambda p: p.size)[:count]}
        merging = [piece for piece in pieces if piece.path in group]
        path = os.path.join(directory, f"pass-{pieces[0].range:04d}-{number:04d}.arrow")
        number += 1
        writer = None
        try:
            groups = _fine_groups(merging, group_bytes)
            merged_rows = (
                _merged_in_memory(merging, groups, order, limits, row_bytes)
                if groups is not None
                else _merged([piece.path for piece in merging], order, limits, spill_dir, row_bytes)
            )
            rows = read_ahead(merged_rows, depth=4, max_bytes=16 << 20)
            with closing(rows):
                for batch in rows:
                    if writer is None:
                        writer = _RunFile(path, batch.schema)
                    # In the runs' small batches: a merge holds a few batches of each input at once.
                    table = pa.Table.from_batches([batch])
                    writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        stats.add_pass(sum(piece.size for piece in merging), in_memory=groups is not None)
        for done in merging:
            os.remove(done.path)
        if writer is None:  # nothing came out: the inputs were empty
            pieces = [piece for piece in pieces if piece.path not in group]
            continue
        fine = _fine_bounds(_summed_fine(merging))
        merged = _Piece(merging[0].run, merging[0].range, path, os.path.getsize(path), fine)
        # where its first input stood: ties between runs keep no particular order anyway
        pieces = [
            merged if piece is merging[0] else piece
            for piece in pieces
            if piece.path not in group or piece is merging[0]
        ]
    if number:
        # What the passes' merges freed, on their threads, goes back before the last merge: kept by the
        # allocators, it stood under the last merge's peak (the 10x sort: 439-443 MiB against 468-493)
        release_memory()
    return pieces
