"""The rows equality deletes match, as positions: a narrow, bounded semi-join of keys against keys.

Only the key columns of the data files are read (by field id, so a key column dropped from the schema
still applies), each row with its data file's ordinal, its position, the file's data sequence number and
a partition id; the equality deletes' keys with their sequence number and partition id. DataFusion
semi-joins the two sides (sort-merge, which spills), split first into buckets by key hash when a side
is larger than the join's budget (:func:`~.equality.bucket_pairs`). The spec's rules (6.2) hold per
pair: keys equal null-safely, ``seq(delete) > seq(data)``, same spec and partition unless the delete is
global. The matched ``(ordinal, position)`` pairs are sorted by :mod:`~.io.position_sort` (in memory,
or by ordinal range through files) and streamed, per data file and in position order, without ever
holding them all.

Rows already deleted by a position delete or a deletion vector are not staged: they are not live.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.equality import (
    bucket_pairs,
    equality_kinds,
    join_limits,
    join_session,
    key_column,
    key_fields_of,
)
from airflow_provider_iceberg_exec.engine.deletes.fingerprints import KeyFilter
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.io.position_sort import ORD, POS, sorted_positions
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet, register_staged, remove_staged
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["MatchStats", "equality_matches"]

_HIDDEN = "__iceberg_exec_"
_ORD = f"{_HIDDEN}ord"
_POS = f"{_HIDDEN}pos"
_SEQ = f"{_HIDDEN}seq"
_PART = f"{_HIDDEN}part"


@dataclass
class MatchStats:
    """What :func:`equality_matches` read and found."""

    data_rows_read: int = 0
    delete_rows_read: int = 0
    matched_rows: int = 0


def equality_matches(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    deletes: Sequence[ScannedDelete],
    *,
    limits: ResourceLimits,
    spill_dir: str,
    stats: MatchStats | None = None,
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """Stream ``(index into files, sorted positions)`` of the live rows the equality ``deletes`` match.

    A delete counts for a data file only where it applies to it (it is among the file's
    ``delete_files``, so the scan's sequence-number and partition rules already hold per file, and the
    join checks them again per row pair). One data file's positions may come in several consecutive
    chunks; every position comes once, in ascending order.

    :param files: the data files, each with the delete files that apply to it.
    :param deletes: the equality delete files to match (others applying to ``files`` are ignored).
    :param spill_dir: a directory of this run's own; staged files go below it and are removed.
    :raises DataFileReadError: when a data or delete file is missing or malformed.
    :raises ConfigurationError: for a key field found in no schema of the table, or a nested field.
    """
    import pyarrow as pa

    stats = stats if stats is not None else MatchStats()
    wanted = {d.data_file.file_path for d in deletes}
    unpartitioned = {sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()}
    selected = [_only(f, wanted) for f in files]
    partitions: dict[tuple[int, str], int] = {}
    out = StagedParquet(os.path.join(spill_dir, "eq-matches"))
    try:
        for number, ((ids, is_global), kind) in enumerate(
            sorted(equality_kinds(selected, unpartitioned).items())
        ):
            side = _Kind(number, ids, is_global, {d.data_file.file_path for d in kind})
            _match_kind(io, metadata, selected, kind, side, partitions, limits, spill_dir, out, stats)
        if not out.close():
            return
        pa.default_memory_pool().release_unused()
        yield from _sorted_matches(out, limits, spill_dir, stats)
    finally:
        out.remove()


@dataclass(frozen=True)
class _Kind:
    """One kind of equality deletes: its number, sorted equality ids, whether global, and delete paths."""

    number: int
    ids: tuple[int, ...]
    is_global: bool
    paths: set[str]


def _only(scanned: ScannedFile, paths: set[str]) -> ScannedFile:
    """``scanned`` with its equality deletes narrowed to ``paths`` (position deletes and DVs kept)."""
    from pyiceberg.manifest import DataFileContent

    kept = tuple(
        d
        for d in scanned.delete_files
        if d.data_file.content != DataFileContent.EQUALITY_DELETES or d.data_file.file_path in paths
    )
    return ScannedFile(scanned.data_file, scanned.data_sequence_number, kept)


def _partition_id(partitions: dict[tuple[int, str], int], data_file: DataFile) -> int:
    partition = data_file.partition
    key = (data_file.spec_id, repr(tuple(partition[i] for i in range(len(partition)))))
    return partitions.setdefault(key, len(partitions))


def _match_kind(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    kind: Sequence[ScannedDelete],
    side: _Kind,
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    spill_dir: str,
    out: StagedParquet,
    stats: MatchStats,
) -> None:
    """Semi-join the data files one kind of deletes applies to with those deletes; stage the matches."""
    import pyarrow as pa
    from pyiceberg.schema import Schema

    key_fields = key_fields_of(metadata, side.ids)
    key_schema = Schema(*key_fields)
    number = side.number
    data = StagedParquet(os.path.join(spill_dir, f"eq-keys-d{number}"))
    keys = StagedParquet(os.path.join(spill_dir, f"eq-keys-e{number}"))
    # The delete keys first: their fingerprints keep out of the join the data rows that match none.
    key_filter = KeyFilter(
        side.ids, key_fields, sum(d.data_file.record_count for d in kind), limits.memory_limit_bytes // 4
    )
    try:
        for delete in kind:
            _stage_delete_keys(io, metadata, delete, key_schema, partitions, limits, keys, stats, key_filter)
        for ordinal, scanned in enumerate(files):
            if any(d.data_file.file_path in side.paths for d in scanned.delete_files):
                _stage_data_keys(
                    io, metadata, scanned, ordinal, key_schema, partitions, limits, data, stats, key_filter
                )
        if not (data.close() and keys.close()):
            return
        # Freed staging buffers stay cached in PyArrow's allocator unless handed back now.
        pa.default_memory_pool().release_unused()
        pair_limits = join_limits(limits, [data, keys])
        pairs = bucket_pairs(
            (data.path, data.total_bytes),
            (keys.path, keys.total_bytes),
            side.ids,
            key_fields,
            pair_limits,
            limits,
            spill_dir,
            f"eqm{number}",
        )
        for data_path, delete_path in pairs:
            try:
                if delete_path is not None:
                    for batch in _semi_join(data_path, delete_path, side, pair_limits, spill_dir):
                        out.write(batch)
            finally:
                for path in (data_path, delete_path):
                    if path not in (data.path, keys.path):
                        remove_staged(path)
    finally:
        data.remove()
        keys.remove()


def _stage_data_keys(
    io: FileIO,
    metadata: TableMetadata,
    scanned: ScannedFile,
    ordinal: int,
    key_schema: Any,
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    stage: StagedParquet,
    stats: MatchStats,
    key_filter: KeyFilter,
) -> None:
    """Stage the key columns of one data file's live rows that may match a delete key (see
    :class:`~.fingerprints.KeyFilter`), with ordinal, position, sequence and partition."""
    import numpy as np
    import pyarrow as pa

    data_file = scanned.data_file
    gone = deleted_positions(io, scanned)
    part = _partition_id(partitions, data_file)
    start = 0
    for batch in iter_data_file_batches(
        io,
        data_file,
        table_schema=key_schema,
        spec=metadata.specs()[data_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=read_batch_rows(data_file, limits.batch_size),
    ):
        n = batch.num_rows
        stats.data_rows_read += n
        positions = np.arange(start, start + n, dtype=np.int64)
        start += n
        keep = key_filter.candidates(batch)
        if len(gone):
            live = ~np.isin(positions, gone, assume_unique=True)
            keep = live if keep is None else keep & live
        if keep is not None:
            batch, positions = batch.filter(pa.array(keep)), positions[keep]
            n = batch.num_rows
        if n:
            scope = {
                _ORD: pa.array(np.full(n, ordinal, dtype=np.int32)),
                _POS: pa.array(positions),
                _SEQ: pa.array(np.full(n, scanned.data_sequence_number, dtype=np.int64)),
                _PART: pa.array(np.full(n, part, dtype=np.int32)),
            }
            stage.write(_with(batch, scope))


def _stage_delete_keys(
    io: FileIO,
    metadata: TableMetadata,
    delete: ScannedDelete,
    key_schema: Any,
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    stage: StagedParquet,
    stats: MatchStats,
    key_filter: KeyFilter,
) -> None:
    import numpy as np
    import pyarrow as pa

    delete_file = delete.data_file
    part = _partition_id(partitions, delete_file)
    for batch in iter_data_file_batches(
        io,
        delete_file,
        table_schema=key_schema,
        spec=metadata.specs()[delete_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=limits.batch_size,
    ):
        n = batch.num_rows
        stats.delete_rows_read += n
        key_filter.add_deletes(batch)
        scope = {
            _SEQ: pa.array(np.full(n, delete.data_sequence_number, dtype=np.int64)),
            _PART: pa.array(np.full(n, part, dtype=np.int32)),
        }
        stage.write(_with(batch, scope))


def _with(batch: pa.RecordBatch, extra: dict[str, pa.Array]) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([*batch.columns, *extra.values()], names=[*batch.schema.names, *extra])


def _semi_join(
    data_path: str, delete_path: str, side: _Kind, limits: ResourceLimits, spill_dir: str
) -> Iterator[pa.RecordBatch]:
    """The ``(ordinal, position)`` of the staged data rows a staged delete row matches (spec 6.2)."""
    ctx = join_session(limits, spill_dir)
    register_staged(ctx, "d", data_path)
    register_staged(ctx, "e", delete_path)
    conditions = [f'(d."{key_column(i)}" IS NOT DISTINCT FROM e."{key_column(i)}")' for i in side.ids]
    if not side.is_global:
        conditions.append(f'(d."{_PART}" = e."{_PART}")')
    conditions.append(f'(e."{_SEQ}" > d."{_SEQ}")')
    query = (
        f'SELECT d."{_ORD}" AS "{ORD}", d."{_POS}" AS "{POS}" '
        f"FROM d LEFT SEMI JOIN e ON {' AND '.join(conditions)}"
    )
    for chunk in ctx.sql(query).execute_stream():
        batch = chunk.to_pyarrow()
        if batch.num_rows:
            yield batch


def _sorted_matches(
    out: StagedParquet, limits: ResourceLimits, spill_dir: str, stats: MatchStats
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """Stream the staged matches sorted by (ordinal, position), each pair once (two kinds of deletes may
    match one row), one item per data file."""
    for ordinal, positions in sorted_positions(out, limits, spill_dir):
        stats.matched_rows += len(positions)
        yield ordinal, positions
