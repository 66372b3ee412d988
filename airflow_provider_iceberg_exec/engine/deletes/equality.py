"""The bounded join machinery of equality deletes: key fields, kinds of deletes, the join's session and
limits, and the grace-style split of both sides into buckets by key hash.

:mod:`.matches` joins the key columns of data files with equality delete keys with these parts. Key
columns are read by field id (:func:`key_fields_of` finds a field dropped from the schema in an older
one), under hidden names (:func:`key_column`). The join is a sort-merge join (it spills; the hash join's
build side does not), in a quarter of the memory limit; a pair of sides too big for the join's budget is
first split into buckets by a hash of the null-safe key, recursively (:func:`bucket_pairs`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.staging import (
    CHUNKS_PER_PART,
    StagedParquet,
    register_staged,
    remove_staged,
)
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import NestedField

__all__ = [
    "bucket_pairs",
    "equality_kinds",
    "join_limits",
    "join_session",
    "key_column",
    "key_fields_of",
    "key_text_sql",
    "remove_part",
]

_HIDDEN = "__iceberg_exec_"
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


def key_column(field_id: int) -> str:
    return f"{_HIDDEN}k{field_id}"


def key_fields_of(metadata: TableMetadata, field_ids: Sequence[int]) -> list[NestedField]:
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
        fields.append(NestedField(field_id, key_column(field_id), found.field_type, required=False))
    return fields


def equality_kinds(
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


def join_limits(limits: ResourceLimits, staged: Sequence[StagedParquet]) -> ResourceLimits:
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


def join_session(limits: ResourceLimits, spill_dir: str) -> Any:
    from airflow_provider_iceberg_exec.engine.io.session import build_session

    ctx = build_session(limits, spill_dir)
    # A sort-merge join: the hash join's build side does not spill.
    ctx.sql("SET datafusion.optimizer.prefer_hash_join = false").collect()
    ctx.sql("SET datafusion.optimizer.repartition_file_scans = false").collect()
    return ctx


def _bucket_budget(limits: ResourceLimits) -> int:
    """The most bytes one side of one bucket's join may hold: an eighth of the join's pool."""
    from airflow_provider_iceberg_exec.engine.io.session import POOL_SHARE

    return max(1, int(limits.memory_limit_bytes * POOL_SHARE) // 8)


def key_text_sql(ids: Sequence[int], key_fields: Sequence[NestedField]) -> str:
    """SQL text of the null-safe key: equal keys (NULL equal to NULL) give equal text on both sides."""
    from pyiceberg.types import BinaryType, FixedType, UUIDType

    by_id = {f.field_id: f for f in key_fields}
    parts = []
    for i in ids:
        column = f'"{key_column(i)}"'
        text = (
            f"encode({column}, 'hex')"
            if isinstance(by_id[i].field_type, (BinaryType, FixedType, UUIDType))
            else f"CAST({column} AS VARCHAR)"
        )
        parts.append(f"coalesce({text}, '<null>'), CAST({column} IS NULL AS VARCHAR)")
    return f"concat_ws('|', {', '.join(parts)})"


def _bucket_sql(
    table: str, ids: Sequence[int], key_fields: Sequence[NestedField], buckets: int, level: int
) -> str:
    """Add a bucket column: a hash of the null-safe key, the same for equal keys on both sides.

    Each ``level`` takes other digits of the key's md5, so re-partitioning one bucket spreads its rows.
    """
    digest = f"md5({key_text_sql(ids, key_fields)})"
    # Six hex digits of the md5 as a number (24 uniform bits), other digits at each level.
    first = _BUCKET_HEX_DIGITS * level
    code = " + ".join(
        f"(strpos('{_HEX}', substr({digest}, {first + n}, 1)) - 1) * {16 ** (_BUCKET_HEX_DIGITS - n)}"
        for n in range(1, _BUCKET_HEX_DIGITS + 1)
    )
    return f'SELECT *, ({code}) % {buckets} AS "{_BUCKET}" FROM {table}'


def bucket_pairs(
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
        remove_part(data)
        remove_part(deletes)
    try:
        while split:
            data_part, delete_part = split.pop(0)
            if data_part is None:
                remove_part(delete_part)
            elif delete_part is None:
                yield data_part[0], None  # nothing to delete in this bucket
            else:
                yield from bucket_pairs(
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
            remove_part(data_part)
            remove_part(delete_part)


def remove_part(part: tuple[str, int] | None) -> None:
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
        ctx = join_session(limits, spill_dir)
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
                    remove_part(part)
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
