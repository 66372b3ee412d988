"""Reading data files with their delete files applied: the live rows of a group, streamed.

Which delete files apply to a data file is decided by the scan (:mod:`scan`, spec "Scan Planning"); this
module streams each data file and turns its deletes into the rows to keep:

- the positions its deletion vector (:mod:`.vectors`) or position delete files (:mod:`.positions`)
  delete are dropped by their running position while the data file streams
  (:func:`read.iter_data_file_batches` reads in file order);
- the positions equality deletes match come from the narrow, bounded join of :mod:`.matches` (key
  columns only) and are dropped the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.matches import equality_matches
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.io.lineage import RowLineage
from airflow_provider_iceberg_exec.engine.io.read import (
    ProjectionCache,
    iter_data_file_batches,
    read_batch_rows,
    read_files_ahead,
)
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Tracker

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["DeleteStats", "iter_live_group_batches"]


@dataclass
class DeleteStats:
    """Rows seen and removed while applying deletes to a group of data files."""

    rows_read: int = 0
    position_deleted: int = 0
    equality_deleted: int = 0

    @property
    def rows_deleted(self) -> int:
        """Rows removed by position deletes, deletion vectors and equality deletes."""
        return self.position_deleted + self.equality_deleted


def iter_live_group_batches(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    *,
    limits: ResourceLimits,
    spill_dir: str,
    stats: DeleteStats,
    progress: Tracker = NOT_TRACKED,
    row_lineage: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Stream the live rows of ``files`` in the table schema, in file order: every applying delete applied.

    Each data file streams once, its deleted positions dropped by running position: those of its
    deletion vector or position delete files, and, where equality deletes apply, the positions they
    match, found first by the narrow join of :mod:`.matches` (key columns only, spilling under a quarter
    of the memory limit to ``spill_dir``) and taken one data file at a time, in file order.

    :param files: the data files with the delete files that apply to each (from the scan or the task).
    :param stats: filled in while the stream is consumed.
    :param progress: advanced by each data file once it is read (on the thread that reads).
    :param row_lineage: the rows also carry ``_row_id`` and ``_last_updated_sequence_number`` (the last
        two columns), materialised from each file's ``first_row_id``, positions before deletes and data
        sequence number (:mod:`~.io.lineage`): what a v3 rewrite writes.
    :raises DataFileReadError: when a data or delete file is missing or malformed.
    :raises ConfigurationError: for an equality delete on a field found in no schema, or a nested field.
    """
    import numpy as np
    from pyiceberg.manifest import DataFileContent

    schema = metadata.schema()
    specs = metadata.specs()
    name_mapping = metadata.name_mapping()
    equality = {
        d.data_file.file_path: d
        for f in files
        for d in f.delete_files
        if d.data_file.content == DataFileContent.EQUALITY_DELETES
    }
    matches = _Matches(
        equality_matches(io, metadata, files, list(equality.values()), limits=limits, spill_dir=spill_dir)
        if equality
        else iter(())
    )
    cache = ProjectionCache()

    def read(scanned: ScannedFile) -> Iterator[pa.RecordBatch]:
        data_file = scanned.data_file
        return iter_data_file_batches(
            io,
            data_file,
            table_schema=schema,
            spec=specs[data_file.spec_id],
            name_mapping=name_mapping,
            format_version=metadata.format_version,
            batch_size=read_batch_rows(data_file, limits.batch_size),
            cache=cache,
            lineage=RowLineage(first_row_id(data_file), scanned.data_sequence_number)
            if row_lineage
            else None,
        )

    no_positions = np.empty(0, dtype=np.int64)
    # Small files are read whole on worker threads ahead of this one; each still comes in file order.
    streams = read_files_ahead(files, read, lambda scanned: scanned.data_file.file_size_in_bytes)
    try:
        for ordinal, (scanned, batches) in enumerate(zip(files, streams, strict=True)):
            positions = deleted_positions(io, scanned) if scanned.delete_files else no_positions
            yield from _drop_positions(batches, positions, matches.of(ordinal), stats)
            progress.advance(files=1, bytes_done=scanned.data_file.file_size_in_bytes)
    finally:
        streams.close()


class _Matches:
    """The equality matches of a group, taken data file by data file (they come in ordinal order)."""

    def __init__(self, chunks: Iterator[tuple[int, npt.NDArray[np.int64]]]) -> None:
        self._chunks = chunks
        self._next: tuple[int, npt.NDArray[np.int64]] | None = next(chunks, None)

    def of(self, ordinal: int) -> npt.NDArray[np.int64]:
        """The sorted positions equality deletes match in data file ``ordinal`` (none position-deleted)."""
        import numpy as np

        parts = []
        while self._next is not None and self._next[0] == ordinal:
            parts.append(self._next[1])
            self._next = next(self._chunks, None)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _drop_positions(
    batches: Iterator[pa.RecordBatch],
    positions: npt.NDArray[np.int64],
    matched: npt.NDArray[np.int64],
    stats: DeleteStats,
) -> Iterator[pa.RecordBatch]:
    """Drop the rows at ``positions`` (position deletes) and ``matched`` (equality deletes; both sorted,
    disjoint) from a data file's batches, read in file order."""
    import numpy as np
    import pyarrow as pa

    if not len(positions) and not len(matched):
        # The common case (no delete applies): nothing to look up per batch.
        for batch in batches:
            stats.rows_read += batch.num_rows
            yield batch
        return
    start = 0
    for batch in batches:
        n = batch.num_rows
        stats.rows_read += n
        lo, hi = np.searchsorted(positions, [start, start + n])
        mlo, mhi = np.searchsorted(matched, [start, start + n])
        if lo == hi and mlo == mhi:
            yield batch
        else:
            keep = np.ones(n, dtype=bool)
            keep[positions[lo:hi] - start] = False
            keep[matched[mlo:mhi] - start] = False
            stats.position_deleted += int(hi - lo)
            stats.equality_deleted += int(mhi - mlo)
            kept = batch.filter(pa.array(keep))
            if kept.num_rows:
                yield kept
        start += n
