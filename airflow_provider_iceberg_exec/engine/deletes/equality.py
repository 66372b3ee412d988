"""Equality deletes: a bounded anti-join of the data rows against the delete keys, in DataFusion.

The right side can be larger than memory. The data rows (after position deletes, with the data file's
sequence number, spec and partition) and the equality delete keys (with the delete's sequence number,
spec and partition) are staged into local Parquet files and joined in DataFusion with a sort-merge
``LEFT ANTI JOIN`` (it spills; the hash join does not): keys compared null-safely (``IS NOT DISTINCT
FROM``), ``delete_seq > data_seq``, same spec and partition unless the delete file's spec is
unpartitioned (global). Key columns are read by field id, so a column dropped from the schema after the
delete was written still applies. A pair of sides too big for the join's budget is first split into
buckets by key hash (a grace-style partitioned join).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches
from airflow_provider_iceberg_exec.engine.io.staging import (
    CHUNKS_PER_PART,
    StagedParquet,
    register_staged,
    remove_staged,
)
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import NestedField

__all__ = [
    "apply_equality_deletes",
    "bucket_pairs",
    "equality_key_fields",
    "equality_kinds",
    "has_equality_deletes",
    "join_limits",
    "join_session",
    "key_column",
    "key_fields_of",
    "remove_part",
]

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


def key_column(field_id: int) -> str:
    return f"{_HIDDEN}k{field_id}"


def has_equality_deletes(scanned: ScannedFile) -> bool:
    """Whether an equality delete file applies to ``scanned``."""
    from pyiceberg.manifest import DataFileContent

    return any(d.data_file.content == DataFileContent.EQUALITY_DELETES for d in scanned.delete_files)


def equality_key_fields(metadata: TableMetadata, files: Sequence[ScannedFile]) -> list[NestedField]:
    """The key columns of every equality delete applying to ``files``, by field id, as hidden columns.

    :raises ConfigurationError: for a field found in no schema of the table, or a nested field.
    """
    from pyiceberg.manifest import DataFileContent

    key_ids = sorted(
        {
            i
            for f in files
            for d in f.delete_files
            if d.data_file.content == DataFileContent.EQUALITY_DELETES
            for i in (d.data_file.equality_ids or ())
        }
    )
    return key_fields_of(metadata, key_ids)


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


def _anti_join_sql(query: str, name: str, ids: Sequence[int], is_global: bool) -> str:
    """Wrap ``query`` in a null-safe anti-join against the staged deletes ``name`` (spec 6.2 rules)."""
    conditions = [f'(d."{key_column(i)}" IS NOT DISTINCT FROM {name}."{key_column(i)}")' for i in ids]
    if not is_global:
        conditions += [f'(d."{_SPEC}" = {name}."{_SPEC}")', f'(d."{_PART}" = {name}."{_PART}")']
    conditions.append(f'({name}."{_SEQ}" > d."{_SEQ}")')
    return f"SELECT d.* FROM ({query}) AS d LEFT ANTI JOIN {name} ON {' AND '.join(conditions)}"


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
    ctx = join_session(limits, spill_dir)
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
        column = f'"{key_column(i)}"'
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
            keys = {key_column(i): column_of(batch, str(schema.find_column_name(i))) for i in current_keys}
            scope = _scope_columns(batch.num_rows, scanned.data_sequence_number, data_file.spec_id, part)
            stage.write(_with_scope(batch, {**keys, **scope}))
    return target_schema


def apply_equality_deletes(
    io: FileIO,
    metadata: TableMetadata,
    files: Sequence[ScannedFile],
    key_fields: Sequence[NestedField],
    read_schema: Any,
    width: int,
    live: Callable[[ScannedFile, Any], Iterator[pa.RecordBatch]],
    limits: ResourceLimits,
    spill_dir: str,
) -> Generator[pa.RecordBatch, None, int]:
    """Stream the rows of ``files`` that no equality delete applying to them matches; return the count
    of rows deleted.

    ``live`` streams a data file's rows (position deletes applied) in ``read_schema``, the table schema
    plus the key columns dropped from it; the first ``width`` columns are the table's. Each kind of
    delete (its equality ids, global or not) is one anti-join pass over what the previous pass kept.
    """
    from pyiceberg.schema import Schema

    schema = metadata.schema()
    unpartitioned = {sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()}
    by_id = {f.field_id: f for f in key_fields}
    current_keys = [f.field_id for f in key_fields if f.field_id in set(schema.field_ids)]
    kinds = equality_kinds(files, unpartitioned)

    # Beside the run's spill directory, not in it: the execution stats count that directory as spilled.
    data_stage = StagedParquet(f"{spill_dir}.eq-data")
    stages: list[_Pass] = []
    try:
        target_schema = _stage_data(files, live, read_schema, width, schema, current_keys, data_stage)
        for number, ((ids, is_global), group) in enumerate(sorted(kinds.items())):
            stage = StagedParquet(f"{spill_dir}.eq-del{number}")
            stages.append((stage, ids, is_global))
            _stage_equality_deletes(io, metadata, group, Schema(*(by_id[i] for i in ids)), limits, stage)
        if not data_stage.close() or target_schema is None:
            return 0
        staged_rows = data_stage.rows
        pair_limits = join_limits(limits, [data_stage, *(stage for stage, _i, _g in stages)])
        passes = [(stage, ids, is_global) for stage, ids, is_global in stages if stage.close()]
        kept_rows = yield from _join_passes(
            (data_stage.path, data_stage.total_bytes),
            passes,
            stages,
            _JoinContext(key_fields, width, target_schema, pair_limits, limits.batch_size, spill_dir),
        )
        return staged_rows - kept_rows
    finally:
        data_stage.remove()
        for stage, _ids, _global in stages:
            stage.remove()


#: one anti-join pass: the staged deletes of one kind, their equality ids, and whether they are global
_Pass = tuple[StagedParquet, tuple[int, ...], bool]


@dataclasses.dataclass(frozen=True)
class _JoinContext:
    """What every pass of one group's anti-join shares."""

    key_fields: Sequence[NestedField]
    width: int
    target_schema: pa.Schema
    join_limits: ResourceLimits
    scan_batch_size: int
    spill_dir: str


def _join_passes(
    data: tuple[str, int], passes: Sequence[_Pass], stages: list[_Pass], join: _JoinContext
) -> Generator[pa.RecordBatch, None, int]:
    """Run the passes in turn, each over the rows the one before kept; stream the last one's rows in the
    table's Arrow schema and return their count.

    Every pass but the last writes its rows to a staged file, appended to ``stages`` so that the caller
    removes it with the others.
    """
    current, current_bytes = data
    kept_rows = 0
    for number, (stage, ids, is_global) in enumerate(passes):
        out = (
            None
            if number == len(passes) - 1
            else StagedParquet(os.path.join(join.spill_dir, f"eq-pass{number}"))
        )
        if out is not None:
            stages.append((out, ids, is_global))  # removed with the others
        kept_rows += yield from _join_pass(
            (current, current_bytes), (stage, ids, is_global), number, out, join
        )
        if out is not None:
            if not out.close():
                break  # every row was deleted
            current, current_bytes = out.path, out.total_bytes
    return kept_rows


def _join_pass(
    data: tuple[str, int],
    deletes: _Pass,
    number: int,
    out: StagedParquet | None,
    join: _JoinContext,
) -> Generator[pa.RecordBatch, None, int]:
    """Anti-join ``data`` with one kind of deletes, bucket pair by bucket pair: into ``out``, or (the last
    pass, ``out`` None) streamed in the table's schema; return the count of rows streamed."""
    import pyarrow as pa

    stage, ids, is_global = deletes
    kept_rows = 0
    scan_limits = dataclasses.replace(join.join_limits, batch_size=join.scan_batch_size)
    pairs = bucket_pairs(
        data,
        (stage.path, stage.total_bytes),
        ids,
        join.key_fields,
        join.join_limits,
        scan_limits,
        join.spill_dir,
        f"eq{number}",
    )
    for data_path, delete_path in pairs:
        for arrow in _join_pair(data_path, delete_path, ids, is_global, join.join_limits, join.spill_dir):
            if out is not None:
                out.write(arrow)
                continue
            kept_rows += arrow.num_rows
            columns = [
                column if column.type == field.type else column.cast(field.type)
                for column, field in zip(arrow.columns[: join.width], join.target_schema, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=join.target_schema)
        for path in (data_path, delete_path):
            if path not in (data[0], stage.path):
                remove_staged(path)
    return kept_rows
