"""Which target rows the source matches: a narrow, spilling join of keys, then the matched source rows in
target order.

1. The source streams once into a local staged copy, each row numbered (its source ordinal), and its
   keys into a second, narrow one (with their hash, :func:`~.deletes.keysets.key_hashes`; a row with a
   NULL key is left out: SQL's ``=`` never matches it).
2. The target files' live rows (delete files applied) are read on the key columns only, on two threads
   (:func:`~.deletes.matches.read_keys`); a row whose key hash no source key has cannot match, nor can a
   NULL key.
3. :func:`~.deletes.matches.match_keys`, the key join equality deletes use, pairs them exactly
   (every key column compared, never by hash alone): the source keys in memory, or both sides in
   buckets by hash on disk when the source keys do not fit; ``(file ordinal, position, source
   ordinal)`` pairs. Float, double and boolean keys, which the hash does not take, are joined by
   DataFusion instead (sort-merge, which spills; split by key hash first when a side is larger than
   the join's budget), their target rows ruled out first by key fingerprints
   (:mod:`~.deletes.fingerprints`).
4. Spark's cardinality check: a target row paired with two source rows fails the MERGE.
5. The pairs joined back to the whole source rows, sorted by ``(file ordinal, position)``, stream beside
   the target files as they are read (:class:`MatchedRows`); the source rows no pair names are the
   NOT MATCHED rows.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.equality import (
    bucket_pairs,
    join_limits,
    join_session,
    key_column,
)
from airflow_provider_iceberg_exec.engine.deletes.fingerprints import KeyFilter
from airflow_provider_iceberg_exec.engine.deletes.keysets import (
    HASH_BYTES,
    HashSet,
    KeySet,
    hashable,
    key_hashes,
)
from airflow_provider_iceberg_exec.engine.deletes.matches import (
    HASH,
    KeyJob,
    MatchStats,
    match_keys,
    read_keys,
)
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.io.session import release_memory
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet, register_staged, remove_staged

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField

    from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile
    from airflow_provider_iceberg_exec.engine.ops.merge.source import MergeSource

__all__ = ["CARDINALITY_ERROR", "MatchedRows", "SourceStage", "match_pairs", "match_target"]

_HIDDEN = "__iceberg_exec_"
SRC = f"{_HIDDEN}src"
ORD = f"{_HIDDEN}ord"
POS = f"{_HIDDEN}pos"

#: Spark's error text (Iceberg 1.4's MergeRowsExec, the substring Iceberg 1.10's tests match)
CARDINALITY_ERROR = (
    "The ON search condition of the MERGE statement matched a single row from the target table with "
    "multiple rows of the source table. This could result in the target row being operated on more than "
    "once with an update or delete operation and is not allowed."
)


class SourceStage:
    """The source staged locally: every row numbered, and its keys apart; removed by :meth:`remove`."""

    def __init__(
        self,
        target: Table,
        source: MergeSource,
        key_names: Sequence[str],
        key_fields: Sequence[NestedField],
        limits: ResourceLimits,
        spill_dir: str,
    ) -> None:
        self.rows = StagedParquet(os.path.join(spill_dir, "merge-source"))
        self.keys = StagedParquet(os.path.join(spill_dir, "merge-source-keys"))
        self.key_ids = [f.field_id for f in key_fields]
        #: keys the bucket transform hashes are matched by :func:`~.deletes.matches.match_keys`
        self.exact = hashable(key_fields)
        budget = limits.memory_limit_bytes // 4
        self._hashes: list[npt.NDArray[np.uint32]] | None = (
            [] if self.exact and source.record_count * HASH_BYTES + HashSet.BITMAP_BYTES <= budget else None
        )
        #: what rules target rows out before the match (``None``: nothing)
        self.filter: HashSet | KeyFilter | None = (
            None if self.exact else KeyFilter(self.key_ids, key_fields, source.record_count, budget // 2)
        )
        self.count = 0
        try:
            self._stage(target, source, key_names, key_fields, limits, spill_dir)
        except BaseException:
            self.remove()
            raise

    def _stage(
        self,
        target: Table,
        source: MergeSource,
        key_names: Sequence[str],
        key_fields: Sequence[NestedField],
        limits: ResourceLimits,
        spill_dir: str,
    ) -> None:
        import numpy as np
        import pyarrow as pa
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        key_types = [schema_to_pyarrow(f.field_type) for f in key_fields]
        for batch in source.batches(target, limits, spill_dir):
            n = batch.num_rows
            if not n:
                continue
            ordinals = pa.array(np.arange(self.count, self.count + n, dtype=np.int64))
            self.count += n
            self.rows.write(_with(batch, {SRC: ordinals}))
            keys = pa.RecordBatch.from_arrays(
                [batch.column(name).cast(t) for name, t in zip(key_names, key_types, strict=True)],
                names=[key_column(i) for i in self.key_ids],
            )
            if self.exact:
                self._stage_hashed(keys, ordinals)
            else:
                assert isinstance(self.filter, KeyFilter)
                self.filter.add_deletes(keys)
                self.keys.write(_with(keys, {SRC: ordinals}))
        self.rows.close()
        self.keys.close()
        if self._hashes is not None:
            self.filter = HashSet(np.concatenate(self._hashes) if self._hashes else np.empty(0, np.uint32))
            self._hashes = None
        # Staging and hashing leave tens of MiB freed but kept by the allocators (measured 2M source
        # rows: 350 -> 215 MiB): hand them back before the target is read and rewritten.
        release_memory()

    def _stage_hashed(self, keys: pa.RecordBatch, ordinals: pa.Array) -> None:
        """Stage the keys with their hash, those with a NULL in any key column left out (they match
        nothing)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if any(column.null_count for column in keys.columns):
            valid = np.ones(keys.num_rows, dtype=bool)
            for column in keys.columns:
                valid &= pc.is_valid(column).to_numpy(zero_copy_only=False)
            mask = pa.array(valid)
            keys, ordinals = keys.filter(mask), ordinals.filter(mask)
        if not keys.num_rows:
            return
        hashed = key_hashes(keys.columns)
        if self._hashes is not None:
            self._hashes.append(hashed)
        self.keys.write(_with(keys, {SRC: ordinals, HASH: pa.array(hashed, pa.uint32())}))

    def remove(self) -> None:
        self.rows.remove()
        self.keys.remove()


def _with(batch: pa.RecordBatch, extra: dict[str, pa.Array]) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([*batch.columns, *extra.values()], names=[*batch.schema.names, *extra])


def stage_target_keys(
    table: Table,
    files: Sequence[tuple[int, ScannedFile, npt.NDArray[np.int64]]],
    key_fields: Sequence[NestedField],
    source: SourceStage,
    limits: ResourceLimits,
    spill_dir: str,
) -> StagedParquet:
    """Stage the keys of the live rows of ``files`` (``(ordinal, file, dead positions)``) that may match a
    source key, with their ordinal and position."""
    import numpy as np
    import pyarrow as pa
    from pyiceberg.schema import Schema

    metadata = table.metadata
    key_schema = Schema(*key_fields)
    stage = StagedParquet(os.path.join(spill_dir, "merge-target-keys"))
    for ordinal, scanned, dead in files:
        data_file = scanned.data_file
        start = 0
        for batch in iter_data_file_batches(
            table.io,
            data_file,
            table_schema=key_schema,
            spec=metadata.specs()[data_file.spec_id],
            name_mapping=metadata.name_mapping(),
            format_version=metadata.format_version,
            batch_size=read_batch_rows(data_file, limits.batch_size),
        ):
            n = batch.num_rows
            positions = np.arange(start, start + n, dtype=np.int64)
            start += n
            assert isinstance(source.filter, KeyFilter), "fingerprints rule out the unhashed keys"
            keep = source.filter.candidates(batch)
            if len(dead):
                live = ~np.isin(positions, dead, assume_unique=True)
                keep = live if keep is None else keep & live
            if keep is not None:
                batch, positions = batch.filter(pa.array(keep)), positions[keep]
            if batch.num_rows:
                ordinals = pa.array(np.full(batch.num_rows, ordinal, dtype=np.int32))
                stage.write(_with(batch, {ORD: ordinals, POS: pa.array(positions)}))
    stage.close()
    return stage


def match_target(
    table: Table,
    files: Sequence[tuple[int, ScannedFile, npt.NDArray[np.int64]]],
    key_fields: Sequence[NestedField],
    source: SourceStage,
    limits: ResourceLimits,
    spill_dir: str,
) -> StagedParquet:
    """The ``(ordinal, position, source ordinal)`` pairs of the live rows of ``files`` (``(ordinal, file,
    dead positions)``) whose keys equal a source row's (SQL's ``=``: NULL matches nothing)."""
    from pyiceberg.schema import Schema

    if not source.exact:
        keys = stage_target_keys(table, files, key_fields, source, limits, spill_dir)
        try:
            return match_pairs(keys, source, key_fields, limits, spill_dir)
        finally:
            keys.remove()
    pairs = StagedParquet(os.path.join(spill_dir, "merge-pairs"))
    if source.keys.rows:
        names = [key_column(i) for i in source.key_ids]
        jobs = [KeyJob(ordinal, scanned, dead=dead) for ordinal, scanned, dead in files]
        assert not isinstance(source.filter, KeyFilter)
        read = functools.partial(
            read_keys,
            table.io,
            table.metadata,
            jobs,
            Schema(*key_fields),
            names,
            source.filter,
            limits,
            MatchStats(),
            null_keys=False,
        )
        match_keys(
            source.keys,
            read,
            functools.partial(_source_matcher, names=names),
            limits,
            spill_dir,
            "merge-keys",
            pairs,
        )
        # The hashes are no longer needed, and what the key readers freed goes back before the rewrite.
        source.filter = None
        release_memory()
    pairs.close()
    return pairs


def _source_matcher(
    batches: Iterator[pa.RecordBatch], *, names: Sequence[str]
) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """Staged source keys (keys, source ordinal, hash) held as a :class:`~.deletes.keysets.KeySet`; the
    function that pairs a batch of target keys (keys, ordinal, position, ..., hash) with every source
    row of an equal key: ``(ordinal, position, source ordinal)``."""
    import numpy as np
    import pyarrow as pa

    rows = pa.Table.from_batches(list(batches)).combine_chunks()
    held = KeySet([rows.column(n).combine_chunks() for n in names], rows.column(HASH).to_numpy())
    ordinals = rows.column(SRC).to_numpy()
    del rows

    def pairs(batch: pa.RecordBatch) -> pa.RecordBatch:
        target, found = held.pairs(
            [batch.column(n) for n in names], batch.column(HASH).to_numpy().astype(np.uint32)
        )
        at = pa.array(target)
        return pa.RecordBatch.from_arrays(
            [batch.column(ORD).take(at), batch.column(POS).take(at), pa.array(ordinals[found])],
            names=[ORD, POS, SRC],
        )

    return pairs


def match_pairs(
    target_keys: StagedParquet,
    source: SourceStage,
    key_fields: Sequence[NestedField],
    limits: ResourceLimits,
    spill_dir: str,
) -> StagedParquet:
    """Join staged target keys with the source keys in DataFusion (keys the hash does not take): the
    ``(ordinal, position, source ordinal)`` pairs."""
    pairs = StagedParquet(os.path.join(spill_dir, "merge-pairs"))
    if not (target_keys.rows and source.keys.rows):
        pairs.close()
        return pairs
    ids = source.key_ids
    pair_limits = join_limits(limits, [target_keys, source.keys])
    parts = bucket_pairs(
        (target_keys.path, target_keys.total_bytes),
        (source.keys.path, source.keys.total_bytes),
        ids,
        key_fields,
        pair_limits,
        limits,
        spill_dir,
        "merge",
    )
    on = " AND ".join(f'd."{key_column(i)}" = e."{key_column(i)}"' for i in ids)
    query = f'SELECT d."{ORD}", d."{POS}", e."{SRC}" FROM d JOIN e ON {on}'
    for data_path, source_path in parts:
        try:
            if source_path is None:
                continue
            ctx = join_session(pair_limits, spill_dir)
            register_staged(ctx, "d", data_path)
            register_staged(ctx, "e", source_path)
            for chunk in ctx.sql(query).execute_stream():
                batch = chunk.to_pyarrow()
                if batch.num_rows:
                    pairs.write(batch)
        finally:
            for path in (data_path, source_path):
                if path not in (target_keys.path, source.keys.path):
                    remove_staged(path)
    pairs.close()
    return pairs


def check_cardinality(
    pairs: StagedParquet, files: Sequence[ScannedFile], limits: ResourceLimits, spill_dir: str
) -> None:
    """Fail when a target row is paired with more than one source row (Spark's cardinality check).

    :raises ConfigurationError: with Spark's message and the row's file and position.
    """
    if pairs.rows < 2:
        return
    ctx = join_session(limits, spill_dir)
    register_staged(ctx, "p", pairs.path)
    found = ctx.sql(
        f'SELECT "{ORD}", "{POS}", count(*) AS n FROM p GROUP BY "{ORD}", "{POS}" HAVING count(*) > 1 LIMIT 1'
    ).to_pylist()
    if found:
        row = found[0]
        path = files[int(row[ORD])].data_file.file_path
        raise ConfigurationError(
            f"{CARDINALITY_ERROR} (row {row[POS]} of {path} matched {row['n']} source rows); the table is "
            "unchanged"
        )


def matched_ordinals(
    pairs: StagedParquet, file_count: int, limits: ResourceLimits, spill_dir: str
) -> set[int]:
    """The ordinals below ``file_count`` of the target files with a matched row."""
    if not pairs.rows:
        return set()
    ctx = join_session(limits, spill_dir)
    register_staged(ctx, "p", pairs.path)
    rows = ctx.sql(f'SELECT DISTINCT "{ORD}" AS o FROM p WHERE "{ORD}" < {int(file_count)}').to_pydict()
    return {int(o) for o in rows["o"]}


def matched_source_rows(
    pairs: StagedParquet, source: SourceStage, file_count: int, limits: ResourceLimits, spill_dir: str
) -> Iterator[pa.RecordBatch]:
    """The source row of every pair of the first ``file_count`` files, with the target row's ordinal and
    position, sorted by both.

    The pairs are taken in ranges of ``(ordinal, position)`` whose source rows fit a quarter of the
    memory limit. For each range the staged source, which is in source-ordinal order, streams once and
    its rows are taken by ordinal; the range's rows are then sorted in memory. Nothing wide is spilled
    or sorted on disk: the source streams once per range instead.
    """
    if not pairs.rows:
        return
    ctx = join_session(limits, spill_dir)
    register_staged(ctx, "p", pairs.path)
    row_bytes = max(1, source.rows.total_bytes // max(1, source.rows.rows)) + 24
    budget_rows = max(1 << 14, limits.memory_limit_bytes // 4 // row_bytes)
    for low, high in _ranges(ctx, file_count, budget_rows):
        chunk = ctx.sql(
            f'SELECT "{ORD}", "{POS}", "{SRC}" FROM p WHERE "{ORD}" < {int(file_count)} AND '
            f'("{ORD}" * {_CHUNK_SPAN} + "{POS}" / {_CHUNK_ROWS}) BETWEEN {low} AND {high}'
        ).to_arrow_table()
        yield from _fetch_sorted(chunk, source, limits.batch_size)


#: pairs are counted in chunks of this many positions of one file; a range is a run of chunks
_CHUNK_ROWS = 1 << 16
_CHUNK_SPAN = 1 << 32  # chunk numbers of one ordinal stay below this


def _ranges(ctx: Any, file_count: int, budget_rows: int) -> list[tuple[int, int]]:
    """Runs of ``(ordinal, position chunk)`` keys, in order, each holding at most ``budget_rows`` pairs
    (or a single chunk that holds more)."""
    key = f'("{ORD}" * {_CHUNK_SPAN} + "{POS}" / {_CHUNK_ROWS})'
    counts = ctx.sql(
        f'SELECT {key} AS k, count(*) AS n FROM p WHERE "{ORD}" < {int(file_count)} GROUP BY 1 ORDER BY 1'
    ).to_pydict()
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    total = previous = 0
    for k, n in zip(counts["k"], counts["n"], strict=True):
        if start is not None and total + n > budget_rows:
            ranges.append((start, previous))
            start, total = None, 0
        if start is None:
            start = k
        total += n
        previous = k
    if start is not None:
        ranges.append((start, previous))
    return ranges


def _fetch_sorted(chunk: pa.Table, source: SourceStage, batch_size: int) -> Iterator[pa.RecordBatch]:
    """The source rows ``chunk``'s pairs name, beside the pairs' ordinal and position, sorted by both."""
    import numpy as np
    import pyarrow as pa

    if not chunk.num_rows:
        return
    wanted = chunk.column(SRC).to_numpy()
    order = np.argsort(wanted, kind="stable")
    wanted = wanted[order]
    ordinals = chunk.column(ORD).to_numpy()[order]
    positions = chunk.column(POS).to_numpy()[order]
    pieces, taken = [], 0
    for batch in _staged_batches(source.rows.path, batch_size):
        first = batch.column(SRC)[0].as_py()
        last = first + batch.num_rows  # ordinals are consecutive: the source was numbered as staged
        lo, hi = np.searchsorted(wanted, [first, last])
        if hi > lo:
            rows = batch.take(pa.array(wanted[lo:hi] - first))
            pieces.append(
                pa.RecordBatch.from_arrays(
                    [pa.array(ordinals[lo:hi]), pa.array(positions[lo:hi]), *rows.columns],
                    names=[ORD, POS, *rows.schema.names],
                )
            )
            taken = int(hi)
        if taken == len(wanted):
            break
    table = pa.Table.from_batches(pieces).sort_by([(ORD, "ascending"), (POS, "ascending")])
    del pieces
    yield from table.to_batches(max_chunksize=batch_size)


def unmatched_source_rows(
    pairs: StagedParquet, source: SourceStage, limits: ResourceLimits, spill_dir: str
) -> Iterator[pa.RecordBatch]:
    """The source rows no pair names (the NOT MATCHED rows), without the source ordinal.

    The matched source ordinals go into a bitmap (one bit per source row); the staged source then
    streams once, in order, and the rows whose bit is clear are the ones to insert. No join, no sort.
    """
    import numpy as np
    import pyarrow as pa

    if not source.rows.rows:
        return
    matched = np.zeros((source.count + 7) // 8, dtype=np.uint8)
    if pairs.rows:
        for batch in _staged_batches(pairs.path, limits.batch_size, columns=[SRC]):
            ordinals = batch.column(0).to_numpy()
            np.bitwise_or.at(matched, ordinals >> 3, (1 << (ordinals & 7)).astype(np.uint8))
    for batch in _staged_batches(source.rows.path, limits.batch_size):
        ordinals = batch.column(SRC).to_numpy()
        keep = ((matched[ordinals >> 3] >> (ordinals & 7)) & 1) == 0
        if keep.any():
            yield batch.filter(pa.array(keep)).drop_columns([SRC])


def _staged_batches(path: str, batch_size: int, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The batches of a staged directory, part by part in the order they were written."""
    import pyarrow.parquet as pq

    for name in sorted(f for f in os.listdir(path) if f.endswith(".parquet")):
        yield from pq.ParquetFile(os.path.join(path, name)).iter_batches(
            batch_size=batch_size, columns=columns
        )


class MatchedRows:
    """The matched source rows (sorted by ordinal and position), taken file by file, batch by batch."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._current: Any = None  # (batch, ordinals, positions, offset)
        self._advance()

    def _advance(self) -> None:
        batch = next(self._batches, None)
        if batch is None:
            self._current = None
            return
        ordinals = batch.column(ORD).to_numpy()
        positions = batch.column(POS).to_numpy()
        self._current = [batch.drop_columns([ORD, POS, SRC]), ordinals, positions, 0]

    def take(
        self, ordinal: int, end_position: int
    ) -> tuple[list[pa.RecordBatch], list[npt.NDArray[np.int64]]]:
        """The rows of file ``ordinal`` with a position below ``end_position`` not taken yet, and their
        positions (rows of earlier ordinals, whose files were not read, are skipped)."""
        import numpy as np

        rows: list[pa.RecordBatch] = []
        positions: list[npt.NDArray[np.int64]] = []
        while self._current is not None:
            batch, ords, poss, offset = self._current
            key = (ords[offset:].astype(np.int64) << 40) + poss[offset:]
            end = offset + int(np.searchsorted(key, (ordinal << 40) + end_position))
            start = offset + int(np.searchsorted(key, ordinal << 40))
            if end > start:
                rows.append(batch.slice(start, end - start))
                positions.append(poss[start:end])
            if end < len(ords):
                self._current[3] = end
                break
            self._advance()
        return rows, positions
