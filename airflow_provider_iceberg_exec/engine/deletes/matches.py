"""The rows equality deletes match, as positions: a narrow, bounded semi-join of keys against keys.

Only the key columns of the data files are read (by field id, so a key column dropped from the schema
still applies), each row with its data file's ordinal, its position, the file's data sequence number and
a partition id; the equality deletes' keys with their sequence number and partition id. The spec's rules
(6.2) hold per pair: keys equal null-safely, ``seq(delete) > seq(data)``, same spec and partition unless
the delete is global.

- Keys the Iceberg bucket transform hashes (all but float, double and boolean) are matched exactly by
  :func:`match_keys`, the engine's one key join (MERGE's ON uses it too): the build rows (here the
  delete rows) held by :mod:`.keysets` sorted by key hash, in memory, or in buckets by hash on disk
  when they do not fit the budget; the probe rows (the data files' key columns, :func:`read_keys`, on
  two threads) compared only where a build row has their hash.
- Other keys are semi-joined by DataFusion (sort-merge, which spills), split first into buckets by key
  hash when a side is larger than the join's budget (:func:`~.equality.bucket_pairs`).

The matched ``(ordinal, position)`` pairs are sorted by :mod:`~.io.position_sort` (in memory, or by
ordinal range through files) and streamed, per data file and in position order, without ever holding
them all.

Rows already deleted by a position delete or a deletion vector are not staged: they are not live.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
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
from airflow_provider_iceberg_exec.engine.deletes.keysets import (
    DeleteKeys,
    HashSet,
    bucket_of,
    hashable,
    key_hashes,
)
from airflow_provider_iceberg_exec.engine.deletes.mapped import (
    mapped_bitmap_bytes,
    mapped_bytes,
    sorted_hash_set,
)
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.io.position_sort import ORD, POS, sorted_positions
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.io.session import release_memory
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet, register_staged, remove_staged
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata

__all__ = [
    "HASH",
    "KeyJob",
    "MatchStats",
    "Matcher",
    "delete_key_batches",
    "equality_matches",
    "match_keys",
    "partition_id",
    "read_keys",
]

_HIDDEN = "__iceberg_exec_"
_ORD = f"{_HIDDEN}ord"
_POS = f"{_HIDDEN}pos"
_SEQ = f"{_HIDDEN}seq"
_PART = f"{_HIDDEN}part"
#: the hidden column of a staged row's key hash (:func:`~.keysets.key_hashes`)
HASH = f"{_HIDDEN}hash"
_HASH = HASH
#: threads reading the data files' key columns (decoding and hashing release the GIL)
_KEY_READERS = 2
#: most buckets the hashed match splits each side into (each an open writer with a buffered row group);
#: a bucket over the budget is then matched in slices
_MAX_KEY_BUCKETS = 256
_MIN_BUCKET_ROW_GROUP_BYTES = 16384
_BUCKET_CHUNKS = 256


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
        # The matching ran on other threads: what they freed goes back before the data streams.
        release_memory()
        if not out.close():
            return
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


def partition_id(partitions: dict[tuple[int, str], int], data_file: DataFile) -> int:
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
    """Match the data files one kind of deletes applies to with those deletes; stage the matches.

    The delete rows are staged first; what they tell about their keys (their hashes, or their
    fingerprints for keys the bucket transform does not hash) keeps out of the match the data rows that
    can match none. The data files' key columns are then read on up to :data:`_KEY_READERS` threads.
    Hashable keys are matched exactly by :func:`match_keys` (in memory, or in buckets by hash when the
    delete rows do not fit); float, double and boolean keys by DataFusion's spilling semi-join.
    """
    from pyiceberg.schema import Schema

    key_fields = key_fields_of(metadata, side.ids)
    key_schema = Schema(*key_fields)
    names = [key_column(i) for i in side.ids]
    exact = hashable(key_fields)
    deletes = StagedParquet(os.path.join(spill_dir, f"eq-keys-e{side.number}"))
    try:
        with contextlib.ExitStack() as held:
            known = _stage_deletes(
                io,
                metadata,
                kind,
                key_fields,
                key_schema,
                names,
                partitions,
                limits,
                deletes,
                stats,
                held,
                os.path.join(spill_dir, f"eq-hashes-{side.number}.bin"),
                exact=exact,
            )
            if not deletes.close():
                return
            jobs = [
                KeyJob(ordinal, scanned, partition_id(partitions, scanned.data_file))
                for ordinal, scanned in enumerate(files)
                if any(d.data_file.file_path in side.paths for d in scanned.delete_files)
            ]
            read = functools.partial(
                read_keys, io, metadata, jobs, key_schema, names, known, limits, stats, hashed=exact
            )
            if exact:
                match_keys(
                    deletes,
                    read,
                    functools.partial(_delete_matcher, names=names, is_global=side.is_global),
                    limits,
                    spill_dir,
                    f"eq-keys-{side.number}",
                    out,
                )
            else:
                _semi_join_kind(deletes, read, side, key_fields, limits, spill_dir, out)
    finally:
        deletes.remove()


def _semi_join_kind(
    deletes: StagedParquet,
    read: Callable[[Callable[[pa.RecordBatch], None]], None],
    side: _Kind,
    key_fields: Sequence[Any],
    limits: ResourceLimits,
    spill_dir: str,
    out: StagedParquet,
) -> None:
    """Stage the data rows ``read`` hands over, then semi-join them with the staged ``deletes`` in
    DataFusion (sort-merge, which spills), split first into buckets by key hash when a side is larger
    than the join's budget."""
    import pyarrow as pa

    data = StagedParquet(os.path.join(spill_dir, f"eq-keys-d{side.number}"))
    lock = threading.Lock()

    def stage(batch: pa.RecordBatch) -> None:
        with lock:
            data.write(batch)

    try:
        read(stage)
        if not data.close():
            return
        # Freed staging buffers stay cached in PyArrow's allocator unless handed back now.
        pa.default_memory_pool().release_unused()
        pair_limits = join_limits(limits, [data, deletes])
        pairs = bucket_pairs(
            (data.path, data.total_bytes),
            (deletes.path, deletes.total_bytes),
            side.ids,
            key_fields,
            pair_limits,
            limits,
            spill_dir,
            f"eqm{side.number}",
        )
        for data_path, delete_path in pairs:
            try:
                if delete_path is not None:
                    for batch in _semi_join(data_path, delete_path, side, pair_limits, spill_dir):
                        out.write(batch)
            finally:
                for path in (data_path, delete_path):
                    if path not in (data.path, deletes.path):
                        remove_staged(path)
    finally:
        data.remove()


def _stage_deletes(
    io: FileIO,
    metadata: TableMetadata,
    kind: Sequence[ScannedDelete],
    key_fields: Sequence[Any],
    key_schema: Any,
    names: Sequence[str],
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    deletes: StagedParquet,
    stats: MatchStats,
    held: contextlib.ExitStack,
    hashes_path: str,
    *,
    exact: bool,
) -> HashSet | KeyFilter | None:
    """Stage the delete rows of one kind (with their key hash when ``exact``); return what rules data rows
    out before the match: the set of the delete keys' hashes (``exact``) or their fingerprints, or
    ``None`` when that would take more than a quarter of the memory limit.

    When the hashes do not fit that quarter but their bitmap and fences do, the hashes are written to
    ``hashes_path``, sorted there and mapped (:func:`~.mapped.sorted_hash_set`, closed by ``held``): only
    the data rows whose hash a delete row has are then staged for the match (measured on bench/mor.py's
    200M-row table with 10M delete keys, about 5 % of the rows, against all of them unfiltered).
    """
    import numpy as np

    rows = sum(d.data_file.record_count for d in kind)
    budget = limits.memory_limit_bytes // 4
    in_memory = exact and mapped_bytes(rows) <= budget
    on_disk = exact and not in_memory and mapped_bytes(rows, hashes_held=False) <= budget
    hashes: list[npt.NDArray[np.uint32]] = []
    fingerprints = None if exact else KeyFilter([f.field_id for f in key_fields], key_fields, rows, budget)
    with open(hashes_path, "wb") if on_disk else contextlib.nullcontext() as hashes_out:
        for delete in kind:
            for batch in delete_key_batches(io, metadata, delete, key_schema, partitions, limits, stats):
                if fingerprints is not None:
                    fingerprints.add_deletes(batch)
                if exact:
                    hashed = key_hashes([batch.column(n) for n in names])
                    if in_memory:
                        hashes.append(hashed)
                    elif hashes_out is not None:
                        hashed.tofile(hashes_out)
                    batch = _with(batch, {_HASH: _uint32(hashed)})
                deletes.write(batch)
    if fingerprints is not None:
        return fingerprints
    if on_disk:
        return held.enter_context(
            sorted_hash_set(
                hashes_path,
                bitmap_bytes=mapped_bitmap_bytes(rows, budget),
                sort_bytes=max(1 << 20, limits.memory_limit_bytes // 16),
            )
        )
    if not in_memory:
        return None
    return HashSet(np.concatenate(hashes) if hashes else np.empty(0, dtype=np.uint32))


#: builds the in-memory side of :func:`match_keys` from staged rows: a function from a batch of probe
#: rows to the batch of what they match
Matcher = Callable[[Iterator["pa.RecordBatch"]], Callable[["pa.RecordBatch"], "pa.RecordBatch"]]


def match_keys(
    build: StagedParquet,
    read: Callable[[Callable[[pa.RecordBatch], None]], None],
    matcher: Matcher,
    limits: ResourceLimits,
    spill_dir: str,
    name: str,
    out: StagedParquet,
) -> None:
    """Match probe rows against staged build rows by key, exactly, in memory when the build rows fit and
    by buckets of key hash on disk when they do not; write what matches to ``out``.

    The one key join of the engine (equality deletes, the equality -> position conversion, MERGE's ON):
    ``build`` holds the build rows, closed, each with its key hash (:func:`~.keysets.key_hashes`, in the
    hidden hash column); ``read(emit)`` hands ``emit`` the probe rows with their hash, possibly from
    several threads; ``matcher(batches)`` holds build rows in memory (a :class:`~.keysets.KeySet`) and
    returns the function that turns a batch of probe rows into the batch of matches written to ``out``.

    When the build rows take more than :func:`_keys_budget`, both sides are split into up to
    :data:`_MAX_KEY_BUCKETS` buckets by their hash, and bucket after bucket is matched; a bucket still
    over the budget (keys repeated many times) is matched a slice of build rows at a time.
    """
    buckets = min(_MAX_KEY_BUCKETS, -(-build.total_bytes // _keys_budget(limits)))
    if buckets <= 1:
        probe = matcher(_batches_of(build.path))
        lock = threading.Lock()

        def found(batch: pa.RecordBatch) -> None:
            matched = probe(batch)
            if matched.num_rows:
                with lock:
                    out.write(matched)

        read(found)
    else:
        _match_in_buckets(build, buckets, read, matcher, limits, spill_dir, name, out)


def _match_in_buckets(
    build: StagedParquet,
    buckets: int,
    read: Callable[[Callable[[pa.RecordBatch], None]], None],
    matcher: Matcher,
    limits: ResourceLimits,
    spill_dir: str,
    name: str,
    out: StagedParquet,
) -> None:
    """Split the staged build rows and the probe rows ``read`` hands over into ``buckets`` by key hash,
    then match bucket by bucket, each bucket's build rows in memory."""
    # Every bucket of one side buffers a row group: together a sixteenth of the limit.
    row_group = max(_MIN_BUCKET_ROW_GROUP_BYTES, limits.memory_limit_bytes // 16 // buckets)

    def stagers(side_name: str) -> list[StagedParquet]:
        return [
            StagedParquet(os.path.join(spill_dir, f"{name}-{side_name}-b{b:03d}"), row_group, _BUCKET_CHUNKS)
            for b in range(buckets)
        ]

    split, candidates = stagers("build"), stagers("probe")
    # The probe rows are gathered a sixteenth of the limit at a time before they are split: that much
    # again beside the buckets' row groups, while the probe side is read.
    probe = _Splitter(candidates, buckets, max(1 << 20, limits.memory_limit_bytes // 16))
    try:
        for batch in _batches_of(build.path):
            _split_by_hash(batch, split, buckets)
        written = [part.close() for part in split]  # their buffers go before the probe side's fill
        build.remove()
        read(probe.write)
        probe.flush()
        for build_part, probe_part, has_rows in zip(split, candidates, written, strict=True):
            if probe_part.close() and has_rows:
                for in_memory in _build_slices(build_part.path, matcher, _keys_budget(limits)):
                    for batch in _batches_of(probe_part.path):
                        matched = in_memory(batch)
                        if matched.num_rows:
                            out.write(matched)
            build_part.remove()
            probe_part.remove()
    finally:
        for stager in (*split, *candidates):
            stager.remove()


class _Splitter:
    """Rows handed over by several threads, split by key hash into ``stagers`` ``gather`` bytes at a time.

    Probe rows come a file's batch at a time, a few of them for each bucket once a hash set has ruled
    most out: split batch by batch, the takes and row groups of a few rows each were most of the key
    pass (py-spy on bench/mor.py's 200M rows with 10M delete keys).
    """

    def __init__(self, stagers: Sequence[StagedParquet], buckets: int, gather: int) -> None:
        self._stagers = stagers
        self._buckets = buckets
        self._gather = gather
        self._pending: list[pa.RecordBatch] = []
        self._bytes = 0
        self._lock = threading.Lock()

    def write(self, batch: pa.RecordBatch) -> None:
        with self._lock:
            self._pending.append(batch)
            self._bytes += batch.nbytes
            if self._bytes >= self._gather:
                self._split()

    def flush(self) -> None:
        """Split what is still gathered (once every writer is done)."""
        with self._lock:
            self._split()

    def _split(self) -> None:
        import pyarrow as pa

        pending, self._pending, self._bytes = self._pending, [], 0
        if len(pending) > 1:  # one batch: one take for each bucket, not one for each batch
            pending = pa.Table.from_batches(pending).combine_chunks().to_batches()
        for batch in pending:
            _split_by_hash(batch, self._stagers, self._buckets)


def _keys_budget(limits: ResourceLimits) -> int:
    """The most bytes of staged build rows held in memory at once (a sixteenth of the memory limit: the
    sorted copy and the probes' temporaries come on top, and whatever the allocator takes for them it
    keeps for the rewrite that follows)."""
    return max(1 << 20, limits.memory_limit_bytes // 16)


def _uint32(values: npt.NDArray[np.uint32]) -> pa.Array:
    import pyarrow as pa

    return pa.array(values, type=pa.uint32())


def delete_key_batches(
    io: FileIO,
    metadata: TableMetadata,
    delete: ScannedDelete,
    key_schema: Any,
    partitions: dict[tuple[int, str], int],
    limits: ResourceLimits,
    stats: MatchStats,
) -> Iterator[pa.RecordBatch]:
    """The key columns of one equality delete file, with its sequence number and partition id."""
    import numpy as np
    import pyarrow as pa

    delete_file = delete.data_file
    part = partition_id(partitions, delete_file)
    for batch in iter_data_file_batches(
        io,
        delete_file,
        table_schema=key_schema,
        spec=metadata.specs()[delete_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=read_batch_rows(delete_file, limits.batch_size),
    ):
        n = batch.num_rows
        stats.delete_rows_read += n
        yield _with(
            batch,
            {
                _SEQ: pa.array(np.full(n, delete.data_sequence_number, dtype=np.int64)),
                _PART: pa.array(np.full(n, part, dtype=np.int32)),
            },
        )


def _batches_of(path: str) -> Iterator[pa.RecordBatch]:
    """The batches of a closed staged set, part after part, row group by row group (about 256 KiB
    each; none when it got no row)."""
    import pyarrow.parquet as pq

    if not os.path.isdir(path):
        return
    for name in sorted(os.listdir(path)):
        parquet = pq.ParquetFile(os.path.join(path, name))
        for group in range(parquet.num_row_groups):
            yield from parquet.iter_batches(row_groups=[group], batch_size=1 << 20, use_threads=False)


def _build_slices(
    path: str, matcher: Matcher, budget: int
) -> Iterator[Callable[[pa.RecordBatch], pa.RecordBatch]]:
    """A staged bucket of build rows held in memory by ``matcher``, one slice of about ``budget`` bytes
    at a time (a bucket over the budget, from keys repeated many times, comes in several)."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in _batches_of(path):
        pending.append(batch)
        size += batch.nbytes
        if size >= budget:
            yield matcher(iter(pending))
            pending, size = [], 0
    if pending:
        yield matcher(iter(pending))


def _delete_matcher(
    batches: Iterator[pa.RecordBatch], *, names: Sequence[str], is_global: bool
) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """Staged delete rows (keys, sequence number, partition id, hash) held as :class:`DeleteKeys`; the
    function that gives the ``(ordinal, position)`` of the rows of a batch of data keys (keys, ordinal,
    position, sequence number, partition id, hash) they delete."""
    import numpy as np
    import pyarrow as pa

    rows = pa.Table.from_batches(list(batches)).combine_chunks()
    keys = DeleteKeys(
        [rows.column(n).combine_chunks() for n in names],
        rows.column(_HASH).to_numpy().astype(np.uint32),
        rows.column(_SEQ).to_numpy().astype(np.int64),
        rows.column(_PART).to_numpy().astype(np.int32),
        is_global=is_global,
    )
    del rows

    def deleted(batch: pa.RecordBatch) -> pa.RecordBatch:
        gone = keys.deleted(
            [batch.column(n) for n in names],
            batch.column(_HASH).to_numpy().astype(np.uint32),
            batch.column(_SEQ).to_numpy().astype(np.int64),
            batch.column(_PART).to_numpy().astype(np.int32),
        )
        at = pa.array(np.flatnonzero(gone))
        return pa.RecordBatch.from_arrays(
            [batch.column(_ORD).take(at), batch.column(_POS).take(at)], names=[ORD, POS]
        )

    return deleted


def _split_by_hash(batch: pa.RecordBatch, stagers: Sequence[StagedParquet], buckets: int) -> None:
    """Write each row of ``batch`` to the stager of its key hash's bucket.

    Each bucket gets a copy of its rows, not a slice of the batch: a stager keeps what it is given until
    its row group fills, and slices would keep every batch whole in each of the buckets' buffers.
    """
    import numpy as np
    import pyarrow as pa

    which = bucket_of(batch.column(_HASH).to_numpy().astype(np.uint32), buckets)
    order = np.argsort(which, kind="stable")
    values, starts = np.unique(which[order], return_index=True)
    for value, start, end in zip(values, starts, [*starts[1:], len(order)], strict=True):
        stagers[int(value)].write(batch.take(pa.array(order[start:end])))


@dataclass(frozen=True)
class KeyJob:
    """A data file whose key columns :func:`read_keys` reads: its ordinal, partition id, and the positions
    of its rows that are not live (``None``: those its position deletes and deletion vector remove)."""

    ordinal: int
    scanned: ScannedFile
    partition: int = 0
    dead: npt.NDArray[np.int64] | None = None


def read_keys(
    io: FileIO,
    metadata: TableMetadata,
    jobs: Sequence[KeyJob],
    key_schema: Any,
    names: Sequence[str],
    known: HashSet | KeyFilter | None,
    limits: ResourceLimits,
    stats: MatchStats,
    emit: Callable[[pa.RecordBatch], None],
    *,
    hashed: bool = True,
    null_keys: bool = True,
) -> None:
    """Read the key columns of the live rows of ``jobs`` on up to :data:`_KEY_READERS` threads, and hand
    ``emit`` those that may match (``known``: a :class:`~.keysets.HashSet` of the other side's key
    hashes or a :class:`~.fingerprints.KeyFilter`; ``None``: every live row), each with its ordinal,
    position, sequence number, partition id and, when ``hashed``, key hash. Without ``null_keys`` a row
    with a NULL key is left out (SQL's ``=`` never matches it). ``emit`` is called from the reading
    threads."""
    from concurrent.futures import ThreadPoolExecutor

    readers = max(1, min(_KEY_READERS, limits.target_partitions, len(jobs)))
    counts = [0] * len(jobs)

    def read(job: int) -> None:
        counts[job] = _read_job_keys(
            io,
            metadata,
            jobs[job],
            key_schema,
            names,
            known,
            limits,
            emit,
            hashed=hashed,
            null_keys=null_keys,
        )
        # Two threads decoding and hashing leave freed memory in their malloc arenas: hand it back as
        # each file is done, or it adds up to tens of MiB beside the budget.
        release_memory(arrow=False)

    if readers == 1:
        for job in range(len(jobs)):
            read(job)
    else:
        with ThreadPoolExecutor(readers, thread_name_prefix="iceberg-exec-keys") as pool:
            futures = [pool.submit(read, job) for job in range(len(jobs))]
            try:
                for future in futures:
                    future.result()
            finally:
                for future in futures:
                    future.cancel()
    stats.data_rows_read += sum(counts)


def _read_job_keys(
    io: FileIO,
    metadata: TableMetadata,
    job: KeyJob,
    key_schema: Any,
    names: Sequence[str],
    known: HashSet | KeyFilter | None,
    limits: ResourceLimits,
    emit: Callable[[pa.RecordBatch], None],
    *,
    hashed: bool,
    null_keys: bool,
) -> int:
    """One data file's part of :func:`read_keys`; returns the rows read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    scanned = job.scanned
    data_file = scanned.data_file
    gone = deleted_positions(io, scanned) if job.dead is None else job.dead
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
        first, n = start, batch.num_rows
        positions = np.arange(first, first + n, dtype=np.int64)
        start += n
        columns = [batch.column(c) for c in names]
        hashes = key_hashes(columns) if hashed else None
        keep: npt.NDArray[np.bool_] | None = None
        if isinstance(known, HashSet):
            assert hashes is not None, "a hash set rules out hashed rows only"
            keep = known.contains(hashes)
        elif known is not None:
            keep = known.candidates(batch)
        if not null_keys and any(c.null_count for c in columns):
            valid = np.ones(n, dtype=bool)
            for column in columns:
                valid &= pc.is_valid(column).to_numpy(zero_copy_only=False)
            keep = valid if keep is None else keep & valid
        low, high = np.searchsorted(gone, [first, first + n])
        if low < high:  # rows a position delete or a DV removed are not live
            keep = np.ones(n, dtype=bool) if keep is None else keep
            keep[gone[low:high] - first] = False
        if keep is not None:
            rows = np.flatnonzero(keep)
            batch, positions = batch.take(pa.array(rows)), positions[rows]
            hashes = None if hashes is None else hashes[rows]
            n = batch.num_rows
        if n:
            extra = {
                _ORD: pa.array(np.full(n, job.ordinal, dtype=np.int32)),
                _POS: pa.array(positions),
                _SEQ: pa.array(np.full(n, scanned.data_sequence_number, dtype=np.int64)),
                _PART: pa.array(np.full(n, job.partition, dtype=np.int32)),
            }
            if hashes is not None:
                extra[_HASH] = _uint32(hashes)
            emit(_with(batch, extra))
    return start


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
