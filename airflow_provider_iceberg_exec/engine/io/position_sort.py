"""Sorting row positions (data file ordinal, position) under the memory limit, without DataFusion's sort.

Position deletes, equality matches and rewritten position deletes all come down to the same rows: a
data file's ordinal (its index in path order) and a row position, 12 bytes. DataFusion 55's spilling sort
failed to merge its runs of such rows under a 32 MiB pool (20 M-row tables, 2 M positions), so they are
sorted here: staged rows that fit the budget are sorted in memory by NumPy; more are first split by
ordinal range into files of at most the budget (ranges cut on the ordinals' counts, one pass), each then
sorted alone, in order. The one thing never split is one data file's positions: a consumer holds those
together anyway (they are dropped from that file's stream at once).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = ["ORD", "POS", "sorted_positions"]

#: the staged columns: the data file's ordinal (int32) and the row position (int64)
ORD = "ord"
POS = "pos"
#: bytes one row costs while sorted in memory (ordinal and position as int64, the sort's index, slack)
_SORT_BYTES_PER_ROW = 32
_MIN_RANGE_ROWS = 1 << 16
#: a range split writes at most this many range files at once (each buffers one row group)
_MAX_RANGES = 256


def sorted_positions(
    stage: StagedParquet, limits: ResourceLimits, spill_dir: str
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """Stream the closed ``stage``'s ``(ord, pos)`` rows as ``(ord, sorted unique positions)``, in
    ordinal order, one item per ordinal.

    :param stage: staged rows with columns :data:`ORD` and :data:`POS`, closed.
    :param spill_dir: where range files go (removed as they are consumed).
    """
    budget_rows = max(_MIN_RANGE_ROWS, limits.memory_limit_bytes // 8 // _SORT_BYTES_PER_ROW)
    if stage.rows <= budget_rows:
        yield from _sorted(_read(stage.path))
        return
    boundaries = _ranges(_ordinal_counts(stage.path), budget_rows)
    parts = _split(stage.path, boundaries, limits, os.path.join(spill_dir, "position-ranges"))
    try:
        for part in parts:
            try:
                yield from _sorted(_read(part.path))
            finally:
                part.remove()
    finally:
        for part in parts:
            part.remove()


def _batches(path: str) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    if not os.path.isdir(path):  # a stage or range that got no row
        return
    for name in sorted(os.listdir(path)):
        parquet = pq.ParquetFile(os.path.join(path, name))
        yield from parquet.iter_batches(columns=[ORD, POS], use_threads=False)


def _read(path: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    import numpy as np

    ords: list[npt.NDArray[np.int64]] = []
    positions: list[npt.NDArray[np.int64]] = []
    for batch in _batches(path):
        ords.append(batch.column(0).to_numpy().astype(np.int64))
        positions.append(batch.column(1).to_numpy().astype(np.int64))
    if not ords:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(ords), np.concatenate(positions)


def _sorted(
    rows: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """Sort in memory; drop repeated pairs; one item per ordinal."""
    import numpy as np

    ords, positions = rows
    if not len(ords):
        return
    order = np.lexsort((positions, ords))
    ords, positions = ords[order], positions[order]
    keep = np.ones(len(ords), dtype=bool)
    keep[1:] = (ords[1:] != ords[:-1]) | (positions[1:] != positions[:-1])
    ords, positions = ords[keep], positions[keep]
    bounds = np.flatnonzero(np.diff(ords)) + 1
    for start, end in zip([0, *bounds], [*bounds, len(ords)], strict=True):
        yield int(ords[start]), positions[start:end]


def _ordinal_counts(path: str) -> npt.NDArray[np.int64]:
    import numpy as np

    counts = np.zeros(0, dtype=np.int64)
    for batch in _batches(path):
        found = np.bincount(batch.column(0).to_numpy())
        if len(found) > len(counts):
            counts = np.pad(counts, (0, len(found) - len(counts)))
        counts[: len(found)] += found
    return counts


def _ranges(counts: npt.NDArray[np.int64], budget_rows: int) -> list[int]:
    """The first ordinal of every range but the first: consecutive ordinals of at most ``budget_rows``
    rows (a single ordinal above the budget is a range of its own), at most :data:`_MAX_RANGES` ranges.

    >>> import numpy as np
    >>> _ranges(np.array([5, 5, 5, 20, 1]), 10)
    [2, 3, 4]
    """
    total = int(counts.sum())
    budget = max(budget_rows, -(-total // _MAX_RANGES))
    starts: list[int] = []
    filled = 0
    for ordinal, count in enumerate(counts.tolist()):
        if filled and filled + count > budget:
            starts.append(ordinal)
            filled = 0
        filled += count
    return starts


def _split(path: str, starts: Sequence[int], limits: ResourceLimits, prefix: str) -> list[StagedParquet]:
    """Write the staged rows into one staged file per ordinal range; return them in range order."""
    import numpy as np

    edges = np.array(starts, dtype=np.int64)
    row_group = max(16384, limits.memory_limit_bytes // 8 // (len(starts) + 1))
    parts = [StagedParquet(f"{prefix}-{i:04d}", row_group) for i in range(len(starts) + 1)]
    try:
        for batch in _batches(path):
            which = np.searchsorted(edges, batch.column(0).to_numpy(), side="right")
            order = np.argsort(which, kind="stable")
            ordered = batch.take(order)
            values, firsts = np.unique(which[order], return_index=True)
            for value, first, end in zip(values, firsts, [*firsts[1:], len(order)], strict=True):
                parts[int(value)].write(ordered.slice(int(first), int(end - first)))
        for part in parts:
            part.close()
    except BaseException:
        for part in parts:
            part.remove()
        raise
    return parts
