"""Reading data files with their delete files applied: the live rows of a group, streamed.

Which delete files apply to a data file is decided by the scan (:mod:`scan`, spec "Scan Planning"); this
module streams each data file and turns its deletes into the rows to keep:

- the positions its deletion vector (:mod:`.vectors`) or position delete files (:mod:`.positions`)
  delete are dropped by their running position while the data file streams
  (:func:`read.iter_data_file_batches` reads in file order);
- the rows of files with equality deletes then go through the bounded anti-join of :mod:`.equality`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.equality import (
    apply_equality_deletes,
    equality_key_fields,
    has_equality_deletes,
)
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

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
) -> Iterator[pa.RecordBatch]:
    """Stream the live rows of ``files`` in the table schema: every applying delete file applied.

    Files without equality deletes stream straight through (position deletes dropped by running
    position). The rows of files with equality deletes are staged and anti-joined in DataFusion under a
    quarter of the memory limit, spilling to ``spill_dir``; they come after the others.

    :param files: the data files with the delete files that apply to each (from the scan or the task).
    :param stats: filled in while the stream is consumed.
    :raises DataFileReadError: when a data or delete file is missing or malformed.
    :raises ConfigurationError: for an equality delete on a field found in no schema, or a nested field.
    """
    from pyiceberg.schema import Schema

    schema = metadata.schema()
    specs = metadata.specs()
    name_mapping = metadata.name_mapping()
    with_equality = [f for f in files if has_equality_deletes(f)]
    key_fields = equality_key_fields(metadata, with_equality) if with_equality else []
    current_ids = set(schema.field_ids)
    dropped = [f for f in key_fields if f.field_id not in current_ids]
    read_schema = Schema(*schema.fields, *dropped, schema_id=schema.schema_id) if dropped else schema
    width = len(schema.fields)

    def live(scanned: ScannedFile, as_schema: Schema) -> Iterator[pa.RecordBatch]:
        data_file = scanned.data_file
        batches = iter_data_file_batches(
            io,
            data_file,
            table_schema=as_schema,
            spec=specs[data_file.spec_id],
            name_mapping=name_mapping,
            format_version=metadata.format_version,
            batch_size=read_batch_rows(data_file, limits.batch_size),
        )
        return _drop_positions(batches, deleted_positions(io, scanned), stats)

    equality_paths = {f.data_file.file_path for f in with_equality}
    for scanned in files:
        if scanned.data_file.file_path not in equality_paths:
            yield from live(scanned, schema)
    if not with_equality:
        return
    deleted = yield from apply_equality_deletes(
        io, metadata, with_equality, key_fields, read_schema, width, live, limits, spill_dir
    )
    stats.equality_deleted += deleted


def _drop_positions(
    batches: Iterator[pa.RecordBatch], positions: npt.NDArray[np.int64], stats: DeleteStats
) -> Iterator[pa.RecordBatch]:
    """Drop the rows at ``positions`` (sorted) from a data file's batches, read in file order."""
    import numpy as np
    import pyarrow as pa

    start = 0
    for batch in batches:
        n = batch.num_rows
        stats.rows_read += n
        lo, hi = np.searchsorted(positions, [start, start + n])
        if lo == hi:
            yield batch
        else:
            keep = np.ones(n, dtype=bool)
            keep[positions[lo:hi] - start] = False
            stats.position_deleted += int(hi - lo)
            kept = batch.filter(pa.array(keep))
            if kept.num_rows:
                yield kept
        start += n
