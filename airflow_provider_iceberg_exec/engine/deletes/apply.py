"""Applying delete files while streaming data files: position deletes, deletion vectors, equality deletes.

Which delete files apply to a data file is decided by the scan (:mod:`scan`, spec "Scan Planning"); this
module turns them into the rows to keep:

- **Deletion vectors** (v3, Puffin ``deletion-vector-v1`` blobs) are read blob by blob at
  ``content_offset``/``content_size_in_bytes`` (length, magic and CRC-32 checked) and decoded from the
  portable 64-bit roaring format with pyroaring. Where a DV applies to a data file, position delete files do
  not (spec 6.2).
- **Position delete files** are streamed with a ``file_path == <data file>`` filter; the positions of one
  data file are bounded by its row count and kept as one sorted array. Rows are dropped by their running
  position while the data file streams (:func:`read.iter_data_file_batches` reads in file order).
- **Equality deletes** need an anti-join whose right side can be larger than memory. The data rows
  (after position deletes, with the data file's sequence number, spec and partition) and the equality
  delete keys (with the delete's sequence number, spec and partition) are staged into local Parquet
  files and joined in DataFusion with a sort-merge ``LEFT ANTI JOIN`` (it spills; the hash join does
  not): keys compared null-safely (``IS NOT DISTINCT FROM``), ``delete_seq > data_seq``, same spec and
  partition unless the delete file's spec is unpartitioned (global). Key columns are read by field id,
  so a column dropped from the schema after the delete was written still applies.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.io.staging import (
    CHUNKS_PER_PART,
    StagedParquet,
    register_staged,
    remove_staged,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import v3_field
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import NestedField

__all__ = [
    "DeleteStats",
    "deleted_positions",
    "is_deletion_vector",
    "iter_live_group_batches",
    "read_deletion_vector",
    "read_position_deletes",
]

log = logging.getLogger(__name__)

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
_DV_MAGIC = b"\xd1\xd3\x39\x64"
_READ_BUFFER_BYTES = 1 << 20
_HIDDEN = "__iceberg_exec_"
_SEQ = f"{_HIDDEN}seq"
_SPEC = f"{_HIDDEN}spec"
_PART = f"{_HIDDEN}part"
_JOIN_BATCH_BYTES = 65536
_MIN_JOIN_BATCH_ROWS = 128
#: Bucket files one partitioning pass writes at once (each an open writer with a buffered row group);
#: a side that needs more buckets is partitioned again, bucket by bucket, on other bits of the hash.
_BUCKET_FAN_OUT = 64
#: Each level hashes on six more hex digits of the key's md5 (32 in all).
_BUCKET_HEX_DIGITS = 6
_HEX = "0123456789abcdef"
_MAX_BUCKET_LEVELS = 4
_MIN_BUCKET_ROW_GROUP_BYTES = 16384
_MIN_BUCKET_CHUNKS_PER_PART = 256
_BUCKET = f"{_HIDDEN}bucket"


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


def is_deletion_vector(delete_file: DataFile) -> bool:
    """Whether ``delete_file`` is a deletion vector (a position delete stored in a Puffin file)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    return (
        delete_file.content == DataFileContent.POSITION_DELETES
        and delete_file.file_format == FileFormat.PUFFIN
    )


# -- deletion vectors ------------------------------------------------------------------------------------


def read_deletion_vector(io: FileIO, dv: DataFile) -> npt.NDArray[np.int64]:
    """Read one ``deletion-vector-v1`` blob and return the deleted positions, sorted.

    :param io: the table's FileIO.
    :param dv: the DV's manifest entry, with ``content_offset`` and ``content_size_in_bytes``.
    :returns: the positions as a sorted int64 array.
    :raises DataFileReadError: when the entry lacks the blob location or the blob is malformed.
    """
    offset = v3_field(dv, "content_offset")
    size = v3_field(dv, "content_size_in_bytes")
    if offset is None or size is None:
        raise DataFileReadError(
            f"deletion vector {dv.file_path} has no content_offset/content_size_in_bytes in its manifest"
        )
    try:
        with io.new_input(dv.file_path).open() as stream:
            stream.seek(int(offset))
            blob = stream.read(int(size))
    except (FileNotFoundError, OSError) as err:
        raise DataFileReadError(f"deletion vector file {dv.file_path} cannot be read: {err}") from err
    return decode_deletion_vector(blob, what=f"{dv.file_path}@{offset}")


def decode_deletion_vector(blob: bytes, what: str = "blob") -> npt.NDArray[np.int64]:
    """Decode a ``deletion-vector-v1`` blob: length, magic, portable 64-bit roaring bitmap, CRC-32.

    >>> decode_deletion_vector(bytes.fromhex(
    ...     "00000026d1d339640100000000000000000000003a300000010000000000020010000000030005000700000bc16c"
    ... )).tolist()
    [3, 5, 7]
    """
    if len(blob) < 12:
        raise DataFileReadError(f"deletion vector {what} is too short ({len(blob)} bytes)")
    (length,) = struct.unpack(">I", blob[:4])
    if length != len(blob) - 8:
        raise DataFileReadError(
            f"deletion vector {what}: length {length} does not match blob size {len(blob)}"
        )
    body = blob[4 : 4 + length]
    if body[:4] != _DV_MAGIC:
        raise DataFileReadError(f"deletion vector {what}: bad magic {body[:4].hex()}")
    (crc,) = struct.unpack(">I", blob[4 + length : 8 + length])
    if zlib.crc32(body) & 0xFFFFFFFF != crc:
        raise DataFileReadError(f"deletion vector {what}: CRC-32 mismatch")
    return _decode_roaring64(bytes(body[4:]), what)


def _decode_roaring64(data: bytes, what: str) -> npt.NDArray[np.int64]:
    """The positions of a portable 64-bit roaring bitmap (the spec's layout, CRoaring's portable format)."""
    import numpy as np
    from pyroaring import BitMap64

    try:
        bitmap = BitMap64.deserialize(data)
    except (ValueError, OverflowError) as err:
        raise DataFileReadError(f"deletion vector {what}: truncated or malformed bitmap ({err})") from err
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64).astype(np.int64)


# -- position delete files ---------------------------------------------------------------------------------


def _column_by_field_id(schema: pa.Schema, field_id: int, fallback: str) -> str:
    for field in schema:
        if field.metadata and field.metadata.get(b"PARQUET:field_id") == str(field_id).encode():
            return str(field.name)
    if fallback in schema.names:
        return fallback
    raise DataFileReadError(f"position delete file has no column with field id {field_id} ({fallback})")


def read_position_deletes(io: FileIO, delete_file: DataFile, data_file_path: str) -> npt.NDArray[np.int64]:
    """Stream a Parquet position delete file and return the positions it deletes in ``data_file_path``.

    :returns: the positions (int64), unsorted, possibly with duplicates.
    :raises DataFileReadError: when the file is missing or is not a readable position delete file.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parts: list[npt.NDArray[np.int64]] = []
    try:
        with io.new_input(delete_file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=_READ_BUFFER_BYTES)
            path_column = _column_by_field_id(parquet.schema_arrow, FILE_PATH_FIELD_ID, "file_path")
            pos_column = _column_by_field_id(parquet.schema_arrow, POS_FIELD_ID, "pos")
            for batch in parquet.iter_batches(columns=[path_column, pos_column], use_threads=False):
                mask = pc.equal(
                    batch.column(path_column), pa.scalar(data_file_path, batch.schema.field(path_column).type)
                )
                selected = pc.filter(batch.column(pos_column), mask)
                if len(selected):
                    parts.append(selected.to_numpy(zero_copy_only=False).astype(np.int64))
    except (FileNotFoundError, OSError, pa.ArrowInvalid) as err:
        raise DataFileReadError(
            f"position delete file {delete_file.file_path} cannot be read: {err}"
        ) from err
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def deleted_positions(io: FileIO, scanned: ScannedFile) -> npt.NDArray[np.int64]:
    """The sorted, unique row positions of ``scanned`` deleted by its DV or its position delete files.

    Where a deletion vector applies, position delete files are ignored (spec "Scan Planning").
    """
    import numpy as np
    from pyiceberg.manifest import DataFileContent

    path = scanned.data_file.file_path
    positional = [
        d.data_file for d in scanned.delete_files if d.data_file.content == DataFileContent.POSITION_DELETES
    ]
    dvs = [f for f in positional if is_deletion_vector(f)]
    if dvs:
        from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

        wrong = [f.file_path for f in dvs if referenced_data_file(f) not in (None, path)]
        if wrong:
            raise DataFileReadError(f"deletion vector {wrong[0]} does not reference {path}")
        parts = [read_deletion_vector(io, f) for f in dvs]
    else:
        parts = [read_position_deletes(io, f, path) for f in positional]
    if not parts:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


def _drop_positions(
    batches: Iterator[pa.RecordBatch], positions: npt.NDArray[np.int64], stats: DeleteStats
) -> Iterator[pa.RecordBatch]:
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


# -- equality deletes --------------------------------------------------------------------------------------


def _key(field_id: int) -> str:
    return f"{_HIDDEN}k{field_id}"


def _key_fields(metadata: TableMetadata, field_ids: Sequence[int]) -> list[NestedField]:
    """The fields of the equality ids, from the current schema or, for dropped columns, an older one."""
    from pyiceberg.types import NestedField, PrimitiveType

    schemas = [metadata.schema(), *reversed(metadata.schemas)]
    fields = []
    for field_id in field_ids:
        found = None
        for schema in schemas:
            try:
                found = schema.find_field(field_id)
                break
            except ValueError:
                continue
        if found is None:
            raise ConfigurationError(f"equality delete field id {field_id} is in no schema of the table")
        if not isinstance(found.field_type, PrimitiveType):
            raise ConfigurationError(f"equality delete on non-primitive field {found.name} is not supported")
        fields.append(NestedField(field_id, _key(field_id), found.field_type, required=False))
    return fields


def _partition_text(data_file: DataFile) -> str:
    partition = data_file.partition
    return repr(tuple(partition[i] for i in range(len(partition))))


def _with_scope(batch: pa.RecordBatch, extra: dict[str, pa.Array]) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([*batch.columns, *extra.values()], names=[*batch.schema.names, *extra])


def _scope_columns(n: int, seq: int, spec_id: int, partition: str) -> dict[str, pa.Array]:
    import pyarrow as pa

    return {
        _SEQ: pa.array([seq] * n, pa.int64()),
        _SPEC: pa.array([spec_id] * n, pa.int32()),
        _PART: pa.array([partition] * n, pa.string()),
    }


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
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.schema import Schema

    schema = metadata.schema()
    specs = metadata.specs()
    name_mapping = metadata.name_mapping()
    with_equality = [
        f
        for f in files
        if any(d.data_file.content == DataFileContent.EQUALITY_DELETES for d in f.delete_files)
    ]
    key_ids = sorted(
        {
            i
            for f in with_equality
            for d in f.delete_files
            if d.data_file.content == DataFileContent.EQUALITY_DELETES
            for i in (d.data_file.equality_ids or ())
        }
    )
    key_fields = _key_fields(metadata, key_ids) if with_equality else []
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
    yield from _anti_join(
        io, metadata, with_equality, key_fields, read_schema, width, live, limits, spill_dir, stats
    )


def _stage_equality_deletes(
    io: FileIO,
    metadata: TableMetadata,
    deletes: Sequence[ScannedDelete],
    key_schema: Any,
    limits: ResourceLimits,
    stage: StagedParquet,
) -> None:
    """Stage the key columns of equality delete files (read by field id) with their scope columns."""
    specs = metadata.specs()
    for d in deletes:
        df = d.data_file
        part = _partition_text(df)
        for batch in iter_data_file_batches(
            io,
            df,
            table_schema=key_schema,
            spec=specs[df.spec_id],
            name_mapping=metadata.name_mapping(),
            format_version=metadata.format_version,
            batch_size=limits.batch_size,
        ):
            scope = _scope_columns(batch.num_rows, d.data_sequence_number, df.spec_id, part)
            stage.write(_with_scope(batch, scope))


def _equality_kinds(
    files: Sequence[ScannedFile], unpartitioned: set[int]
) -> dict[tuple[tuple[int, ...], bool], list[ScannedDelete]]:
    """The equality delete files of ``files``, deduplicated, by (sorted equality ids, global)."""
    from pyiceberg.manifest import DataFileContent

    deletes: dict[str, ScannedDelete] = {}
    for f in files:
        for d in f.delete_files:
            if d.data_file.content == DataFileContent.EQUALITY_DELETES:
                deletes.setdefault(d.data_file.file_path, d)
    kinds: dict[tuple[tuple[int, ...], bool], list[ScannedDelete]] = {}
    for d in deletes.values():
        ids = tuple(sorted(d.data_file.equality_ids or ()))
        if not ids:
            raise DataFileReadError(f"equality delete file {d.data_file.file_path} has no equality_ids")
        kinds.setdefault((ids, d.data_file.spec_id in unpartitioned), []).append(d)
    return kinds


def _anti_join_sql(query: str, name: str, ids: Sequence[int], is_global: bool) -> str:
    """Wrap ``query`` in a null-safe anti-join against the staged deletes ``name`` (spec 6.2 rules)."""
    conditions = [f'(d."{_key(i)}" IS NOT DISTINCT FROM {name}."{_key(i)}")' for i in ids]
    if not is_global:
        conditions += [f'(d."{_SPEC}" = {name}."{_SPEC}")', f'(d."{_PART}" = {name}."{_PART}")']
    conditions.append(f'({name}."{_SEQ}" > d."{_SEQ}")')
    return f"SELECT d.* FROM ({query}) AS d LEFT ANTI JOIN {name} ON {' AND '.join(conditions)}"


def _join_limits(limits: ResourceLimits, staged: Sequence[StagedParquet]) -> ResourceLimits:
    """Limits for the sort-merge anti-join: a quarter of the memory, batches of about 64 KiB.

    Each sorted run being merged holds a batch outside the pool: with 8192-row batches of 200-byte keys
    the merge of a 60 MB side failed under a 16 MiB pool, with 64 KiB batches it finished. Two target
    partitions, because with one DataFusion plans a (non-spilling) CollectLeft hash join whatever
    ``prefer_hash_join`` says.
    """
    row_bytes = max(1, *(s.total_bytes // max(1, s.rows) for s in staged))
    rows = max(_MIN_JOIN_BATCH_ROWS, min(limits.batch_size, _JOIN_BATCH_BYTES // row_bytes))
    return dataclasses.replace(
        limits,
        batch_size=rows,
        memory_limit_bytes=max(MIN_MEMORY_LIMIT_BYTES, limits.memory_limit_bytes // 4),
        target_partitions=2,
    )


def _join_session(limits: ResourceLimits, spill_dir: str) -> Any:
    from airflow_provider_iceberg_exec.engine.io.session import build_session

    ctx = build_session(limits, spill_dir)
    # A sort-merge join: the hash join's build side does not spill.
    ctx.sql("SET datafusion.optimizer.prefer_hash_join = false").collect()
    ctx.sql("SET datafusion.optimizer.repartition_file_scans = false").collect()
    return ctx


def _join_pair(
    data_path: str | None,
    delete_path: str | None,
    ids: Sequence[int],
    is_global: bool,
    limits: ResourceLimits,
    spill_dir: str,
) -> Iterator[pa.RecordBatch]:
    """The rows of the staged data file ``data_path`` that no staged delete of ``delete_path`` matches."""
    if data_path is None:
        return
    ctx = _join_session(limits, spill_dir)
    register_staged(ctx, "d0", data_path)
    query = "SELECT * FROM d0"
    if delete_path is not None:
        register_staged(ctx, "e0", delete_path)
        query = _anti_join_sql(query, "e0", ids, is_global)
    for chunk in ctx.sql(query).execute_stream():
        arrow = chunk.to_pyarrow()
        if arrow.num_rows:
            yield arrow


def _bucket_budget(limits: ResourceLimits) -> int:
    """The most bytes one side of one bucket's join may hold: an eighth of the join's pool."""
    from airflow_provider_iceberg_exec.engine.io.session import POOL_SHARE

    return max(1, int(limits.memory_limit_bytes * POOL_SHARE) // 8)


def _bucket_sql(
    table: str, ids: Sequence[int], key_fields: Sequence[NestedField], buckets: int, level: int
) -> str:
    """Add a bucket column: a hash of the null-safe key, the same for equal keys on both sides.

    Each ``level`` takes other digits of the key's md5, so re-partitioning one bucket spreads its rows.
    """
    from pyiceberg.types import BinaryType, FixedType, UUIDType

    by_id = {f.field_id: f for f in key_fields}
    parts = []
    for i in ids:
        column = f'"{_key(i)}"'
        text = (
            f"encode({column}, 'hex')"
            if isinstance(by_id[i].field_type, (BinaryType, FixedType, UUIDType))
            else f"CAST({column} AS VARCHAR)"
        )
        parts.append(f"coalesce({text}, '<null>'), CAST({column} IS NULL AS VARCHAR)")
    digest = f"md5(concat_ws('|', {', '.join(parts)}))"
    # Six hex digits of the md5 as a number (24 uniform bits), other digits at each level.
    first = _BUCKET_HEX_DIGITS * level
    code = " + ".join(
        f"(strpos('{_HEX}', substr({digest}, {first + n}, 1)) - 1) * {16 ** (_BUCKET_HEX_DIGITS - n)}"
        for n in range(1, _BUCKET_HEX_DIGITS + 1)
    )
    return f'SELECT *, ({code}) % {buckets} AS "{_BUCKET}" FROM {table}'


def _bucket_pairs(
    data: tuple[str, int],
    deletes: tuple[str, int],
    ids: Sequence[int],
    key_fields: Sequence[NestedField],
    join_limits: ResourceLimits,
    scan_limits: ResourceLimits,
    spill_dir: str,
    name: str,
    level: int = 0,
) -> Iterator[tuple[str, str | None]]:
    """(data, deletes) file pairs whose join fits the join's budget: a grace-style partitioned join.

    ``data`` and ``deletes`` are staged files with their in-memory sizes. A pair that is too big is split
    into at most ``_BUCKET_FAN_OUT`` buckets by key hash, and each bucket pair again if still too big,
    so a pass never holds more than that many open writers. Bucket files (level > 0) are removed as soon
    as they are split further; the caller removes the ones it is handed (its own inputs aside).
    """
    budget = _bucket_budget(join_limits)
    biggest = max(data[1], deletes[1])
    if biggest <= budget or level >= _MAX_BUCKET_LEVELS:
        yield data[0], deletes[0]
        return
    fan_out = min(_BUCKET_FAN_OUT, -(-biggest // budget))
    split = _bucketize(
        data[0], deletes[0], ids, key_fields, fan_out, level, scan_limits, spill_dir, f"{name}-{level}"
    )
    if level > 0:  # a bucket of the level above: split now, no longer needed
        _remove(data)
        _remove(deletes)
    try:
        while split:
            data_part, delete_part = split.pop(0)
            if data_part is None:
                _remove(delete_part)
            elif delete_part is None:
                yield data_part[0], None  # nothing to delete in this bucket
            else:
                yield from _bucket_pairs(
                    data_part,
                    delete_part,
                    ids,
                    key_fields,
                    join_limits,
                    scan_limits,
                    spill_dir,
                    f"{name}-{level}.{len(split)}",
                    level + 1,
                )
    finally:
        for data_part, delete_part in split:
            _remove(data_part)
            _remove(delete_part)


def _remove(part: tuple[str, int] | None) -> None:
    if part is not None:
        remove_staged(part[0])


def _bucketize(
    data_path: str,
    delete_path: str,
    ids: Sequence[int],
    key_fields: Sequence[NestedField],
    buckets: int,
    level: int,
    limits: ResourceLimits,
    spill_dir: str,
    name: str,
) -> list[tuple[tuple[str, int] | None, tuple[str, int] | None]]:
    """Split both staged sides by key bucket into files in ``spill_dir``: (path, bytes) per bucket."""
    # Every bucket buffers its rows up to one row group: together an eighth of the memory limit.
    row_group_bytes = max(_MIN_BUCKET_ROW_GROUP_BYTES, limits.memory_limit_bytes // 8 // buckets)
    split: list[list[tuple[str, int] | None]] = []
    for side, path in (("d", data_path), ("e", delete_path)):
        ctx = _join_session(limits, spill_dir)
        register_staged(ctx, "t", path)
        stagers: dict[int, StagedParquet] = {}

        def stager(b: int, side: str = side, stagers: dict[int, StagedParquet] = stagers) -> StagedParquet:
            if b not in stagers:
                stagers[b] = StagedParquet(
                    os.path.join(spill_dir, f"{name}-{side}-b{b}"),
                    row_group_bytes,
                    # Every bucket's writer is open at once: share one writer's metadata budget.
                    chunks_per_part=max(_MIN_BUCKET_CHUNKS_PER_PART, CHUNKS_PER_PART // buckets),
                )
            return stagers[b]

        try:
            # Chunks are gathered to about a row group per bucket before they are split, so each bucket
            # gets one sizeable piece per round rather than a few rows per chunk.
            pending: list[pa.RecordBatch] = []
            pending_bytes = 0
            for chunk in ctx.sql(_bucket_sql("t", ids, key_fields, buckets, level)).execute_stream():
                batch = chunk.to_pyarrow()
                pending.append(batch)
                pending_bytes += batch.nbytes
                if pending_bytes >= row_group_bytes * buckets // 4:
                    _split_by_bucket(pending, stager)
                    pending, pending_bytes = [], 0
            _split_by_bucket(pending, stager)
            split.append(
                [
                    (stagers[b].path, stagers[b].total_bytes) if b in stagers and stagers[b].close() else None
                    for b in range(buckets)
                ]
            )
        except BaseException:
            for one in stagers.values():
                one.remove()
            for done in split:
                for part in done:
                    _remove(part)
            raise
    return list(zip(split[0], split[1], strict=True))


def _split_by_bucket(batches: Sequence[pa.RecordBatch], stager: Any) -> None:
    """Write the rows of ``batches`` to the stager of their bucket (the hidden bucket column dropped).

    One ``take`` copies the rows in bucket order; each bucket gets a slice of that copy, so the rows
    of a round are held once, until the buckets' row groups are written.
    """
    import numpy as np
    import pyarrow as pa

    rows = pa.Table.from_batches(batches).combine_chunks() if batches else None
    if rows is None or not rows.num_rows:
        return
    which = rows.column(_BUCKET).to_numpy()
    order = np.argsort(which, kind="stable")
    ordered = rows.drop_columns([_BUCKET]).take(order)
    values, starts = np.unique(which[order], return_index=True)
    ends = [*starts[1:], len(order)]
    for bucket, start, end in zip(values, starts, ends, strict=True):
        for piece in ordered.slice(int(start), int(end - start)).to_batches():
            stager(int(bucket)).write(piece)


def _stage_data(
    files: Sequence[ScannedFile],
    live: Any,
    read_schema: Any,
    width: int,
    schema: Any,
    current_keys: Sequence[int],
    stage: StagedParquet,
) -> pa.Schema | None:
    """Stage the live rows of ``files`` with key and scope columns; return the table's Arrow schema."""
    import pyarrow as pa

    from airflow_provider_iceberg_exec.engine.io.write import column_of

    target_schema = None
    for scanned in files:
        data_file = scanned.data_file
        part = _partition_text(data_file)
        for batch in live(scanned, read_schema):
            if target_schema is None:
                target_schema = pa.schema(list(batch.schema)[:width])
            keys = {_key(i): column_of(batch, str(schema.find_column_name(i))) for i in current_keys}
            scope = _scope_columns(batch.num_rows, scanned.data_sequence_number, data_file.spec_id, part)
            stage.write(_with_scope(batch, {**keys, **scope}))
    return target_schema


def _anti_join(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    key_fields: Sequence[NestedField],
    read_schema: Any,
    width: int,
    live: Any,
    limits: ResourceLimits,
    spill_dir: str,
    stats: DeleteStats,
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    from pyiceberg.schema import Schema

    schema = metadata.schema()
    specs = metadata.specs()
    unpartitioned = {sid for sid, spec in specs.items() if spec.is_unpartitioned()}
    by_id = {f.field_id: f for f in key_fields}
    current_keys = [f.field_id for f in key_fields if f.field_id in set(schema.field_ids)]
    kinds = _equality_kinds(files, unpartitioned)

    # Beside the run's spill directory, not in it: the execution stats count that directory as spilled.
    data_stage = StagedParquet(f"{spill_dir}.eq-data")
    stages: list[tuple[StagedParquet, tuple[int, ...], bool]] = []
    try:
        target_schema = _stage_data(files, live, read_schema, width, schema, current_keys, data_stage)
        for number, ((ids, is_global), group) in enumerate(sorted(kinds.items())):
            stage = StagedParquet(f"{spill_dir}.eq-del{number}")
            stages.append((stage, ids, is_global))
            _stage_equality_deletes(io, metadata, group, Schema(*(by_id[i] for i in ids)), limits, stage)
        if not data_stage.close() or target_schema is None:
            return
        staged_rows = data_stage.rows
        join_limits = _join_limits(limits, [data_stage, *(stage for stage, _i, _g in stages)])
        passes = [(stage, ids, is_global) for stage, ids, is_global in stages if stage.close()]
        current, current_bytes = data_stage.path, data_stage.total_bytes
        kept_rows = 0
        for number, (stage, ids, is_global) in enumerate(passes):
            last = number == len(passes) - 1
            out = None if last else StagedParquet(os.path.join(spill_dir, f"eq-pass{number}"))
            if out is not None:
                stages.append((out, ids, is_global))  # removed with the others
            scan_limits = dataclasses.replace(join_limits, batch_size=limits.batch_size)
            pairs = _bucket_pairs(
                (current, current_bytes),
                (stage.path, stage.total_bytes),
                ids,
                key_fields,
                join_limits,
                scan_limits,
                spill_dir,
                f"eq{number}",
            )
            for data_path, delete_path in pairs:
                for arrow in _join_pair(data_path, delete_path, ids, is_global, join_limits, spill_dir):
                    if out is not None:
                        out.write(arrow)
                        continue
                    kept_rows += arrow.num_rows
                    columns = [
                        column if column.type == field.type else column.cast(field.type)
                        for column, field in zip(arrow.columns[:width], target_schema, strict=True)
                    ]
                    yield pa.RecordBatch.from_arrays(columns, schema=target_schema)
                for path in (data_path, delete_path):
                    if path not in (current, stage.path):
                        remove_staged(path)
            if out is not None:
                if not out.close():
                    break  # every row was deleted
                current, current_bytes = out.path, out.total_bytes
        stats.equality_deleted += staged_rows - kept_rows
    finally:
        data_stage.remove()
        for stage, _ids, _global in stages:
            stage.remove()
