"""Reading a group of Iceberg data files as one bounded stream of record batches in the table schema.

Files are read one after another, each with PyArrow's streaming Parquet reader (no pre-buffering, one
row group in flight), so memory does not grow with the number or the size of the files. Columns are
matched by Iceberg field id through PyIceberg's projection (renamed, added, dropped and promoted
columns; files without field ids through the table's name mapping). We measured DataFusion 55's own
Parquet scan holding memory in proportion to the bytes it had read (about 780 MB peak RSS for one 627 MB
file, against 146 MB for this reader), so DataFusion gets the work that can spill -- sorting and
joining -- over a staged copy, not the scan of the inputs (docs/adr/0001-reading-and-staging.md).
"""

from __future__ import annotations

import collections
import itertools
import logging
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.lineage import (
    RowLineage,
    materialise_lineage,
    with_lineage_columns,
)

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    import pyarrow as pa
    from pyarrow.fs import FileSystem
    from pyiceberg.io import FileIO, InputStream
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import NameMapping

__all__ = [
    "READ_AHEAD_BATCHES",
    "READ_AHEAD_BYTES",
    "TINY_FILE_BYTES",
    "ProjectionCache",
    "coalesce_batches",
    "iter_data_file_batches",
    "iter_group_batches",
    "read_ahead",
    "read_batch_rows",
    "read_files_ahead",
    "read_files_joined",
]

log = logging.getLogger(__name__)

_READ_BUFFER_BYTES = 1 << 20
#: Batches a rewrite reads ahead of its writer, and their most bytes (beyond one batch).
READ_AHEAD_BATCHES = 8
READ_AHEAD_BYTES = 16 * 1024 * 1024
#: Decoded bytes per batch of a streamed read: the projection into the table schema runs in Python once
#: per batch, so 8192-row batches of narrow rows spent a fifth of the read there.
_READ_BATCH_BYTES = 4 * 1024 * 1024
_MAX_READ_BATCH_ROWS = 65536
#: Decoded rows take about this many times their compressed Parquet bytes (a guess on the safe side).
_DECODED_PER_STORED_BYTE = 2
#: How often a blocked producer checks whether its consumer went away.
_POLL_SECONDS = 0.1
#: A data file up to this many stored bytes is read whole, in one request, by a worker thread ahead of
#: the stream (:func:`read_files_ahead`): a tiny file costs about 0.4 ms of CPU to open and decode (about
#: 40 % of it zstd's set-up per column chunk, whose CPU feature probe traps to the hypervisor on a VM), so
#: tables of thousands of small files are bound by the file count, not the bytes, and the next files'
#: decoding overlaps the Python work on this one.
SMALL_FILE_BYTES = 1 << 20
#: Threads that read small files ahead, and how far ahead they may be, in files and stored bytes. Three
#: on two cores: a worker back from decoding waits for the GIL while the others run Python.
_AHEAD_WORKERS = 3
_AHEAD_FILES = 128
_AHEAD_STORED_BYTES = 4 * SMALL_FILE_BYTES
#: A tiny file: one whose per-file costs outweigh its bytes. It is decoded in one call (not a call a
#: batch: each call hands the GIL over and back, which the readers ahead contend for), and consecutive
#: small files are read by one worker in one task, in runs of up to ``_RUN_FILES`` files and
#: ``_RUN_BYTES`` stored bytes (a run is handed out once all its files are read).
TINY_FILE_BYTES = 64 * 1024
_RUN_FILES = 32
_RUN_BYTES = 256 * 1024

T = TypeVar("T")
U = TypeVar("U")


class ProjectionCache:
    """The per-schema work of reading a file, done once per distinct Parquet schema of a stream.

    Mapping a file's Arrow schema to Iceberg, pruning it and building the projection cost about 20 times
    the reading of a 20-row file; the files of one group nearly always share one schema. Entries are
    keyed by the file's Arrow schema with its field metadata (the field ids) and by the values that
    fill the columns the file lacks.
    """

    def __init__(self) -> None:
        self._schemas: dict[bytes, Schema] = {}
        self._projections: dict[tuple[bytes, tuple[tuple[int, object], ...]], _Projection] = {}
        #: the last file's (Arrow schema, spec id, partition) and projection: the next file nearly always
        #: has the same, and comparing schemas costs far less than the cache key (measured per 20-row file:
        #: 0.06 ms of 0.65)
        self._last: tuple[pa.Schema, int, object, _Projection] | None = None

    def last_projection(self, arrow_schema: pa.Schema, spec_id: int, partition: object) -> _Projection | None:
        """The last file's projection when this file has its schema, spec and partition, else ``None``."""
        last = self._last
        if (
            last is not None
            and last[1] == spec_id
            and last[2] == partition
            and arrow_schema.equals(last[0], check_metadata=True)
        ):
            return last[3]
        return None

    def file_schema(self, key: bytes, build: Callable[[], Schema]) -> Schema:
        if (found := self._schemas.get(key)) is None:
            found = self._schemas[key] = build()
        return found

    def projection(
        self, key: bytes, missing: dict[int, object], build: Callable[[], _Projection]
    ) -> _Projection:
        try:
            full = (key, tuple(sorted(missing.items())))
            hash(full)
        except TypeError:  # an unhashable fill value: no caching
            return build()
        if (found := self._projections.get(full)) is None:
            found = self._projections[full] = build()
        return found

    def remember_last(
        self, arrow_schema: pa.Schema, spec_id: int, partition: object, projection: _Projection
    ) -> None:
        """Keep ``projection`` as the last file's, for :meth:`last_projection`."""
        self._last = (arrow_schema, spec_id, partition, projection)


class _Projection:
    """The columns to read and the projection of their batches into the table schema.

    ``project`` is PyIceberg's projection. Where every table column is a primitive the file has with
    the same Iceberg and Arrow type, that projection only renames and re-labels the columns (names,
    nullability, field ids): the fast path then builds the batch from the same arrays under the
    projected schema, once checked against PyIceberg's result on a real batch.
    """

    def __init__(
        self,
        columns: list[str],
        project: Callable[[pa.RecordBatch], pa.RecordBatch],
        order: dict[str, str] | None,
        leaf_indices: list[int] | None,
        file_leaves: int,
    ) -> None:
        self.columns = columns
        #: the Parquet leaf columns of ``columns`` in the file's schema; ``None`` when a name is repeated
        #: (``ParquetFile`` then maps the names)
        self.leaf_indices = leaf_indices
        #: the leaf columns the file's Arrow schema is made of (checked against the file's own count)
        self.file_leaves = file_leaves
        self._project = project
        #: table column name -> file column name, when the fast path may apply
        self._order = order
        self._source: pa.Schema | None = None
        self._target: pa.Schema | None = None
        self._names: list[str] = []
        #: the file's batches already are the projection's (same columns, order, names and field ids)
        self._identity = False

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        if self._target is not None:
            schema = batch.schema
            if self._identity and schema.equals(self._target, check_metadata=True):
                return batch
            if schema.equals(self._source):
                return pa.RecordBatch.from_arrays([batch.column(n) for n in self._names], schema=self._target)
        projected = self._project(batch)
        if self._order is not None and self._target is None:
            self._learn(batch, projected)
        return projected

    def _learn(self, batch: pa.RecordBatch, projected: pa.RecordBatch) -> None:
        """Take the fast path from now on if it gives exactly PyIceberg's result on this batch."""
        import pyarrow as pa

        assert self._order is not None
        names = (
            [self._order[name] for name in projected.schema.names]
            if len(self._order) == projected.num_columns
            else []
        )
        if not names or len(set(batch.schema.names)) != batch.num_columns:
            self._order = None
            return
        fast = pa.RecordBatch.from_arrays([batch.column(n) for n in names], schema=projected.schema)
        same = _same_buffers(fast, projected) or fast.equals(projected)  # equals() fails on a NaN
        if same and fast.schema.equals(projected.schema, check_metadata=True):
            # _target last: threads reading files ahead share this projection and test it first.
            self._names, self._source = names, batch.schema
            self._identity = names == batch.schema.names and batch.schema.equals(
                projected.schema, check_metadata=True
            )
            self._target = projected.schema
        else:
            self._order = None


def _same_buffers(one: pa.RecordBatch, other: pa.RecordBatch) -> bool:
    """Whether every column of ``other`` is ``one``'s own array: same type, slice and buffers (what a
    projection that only relabels returns; NaN-safe, unlike ``equals``)."""
    if one.num_columns != other.num_columns:
        return False
    for mine, theirs in zip(one.columns, other.columns, strict=True):
        if mine.type != theirs.type or mine.offset != theirs.offset or len(mine) != len(theirs):
            return False
        if _addresses(mine) != _addresses(theirs):
            return False
    return True


def _addresses(array: pa.Array) -> list[int | None]:
    return [None if buffer is None else buffer.address for buffer in array.buffers()]


def _fast_order(table_schema: Schema, file_projection: Schema) -> dict[str, str] | None:
    """Table column name -> file column name when every table column is a primitive the file has with
    the same type (the projection is then a relabelling); ``None`` otherwise."""
    order = {}
    for field in table_schema.fields:
        if not field.field_type.is_primitive:
            return None
        try:
            file_field = file_projection.find_field(field.field_id)
        except ValueError:
            return None
        if file_field.field_type != field.field_type:
            return None
        order[field.name] = file_field.name
    return order


def iter_data_file_batches(
    io: FileIO,
    data_file: DataFile,
    *,
    table_schema: Schema,
    spec: PartitionSpec,
    name_mapping: NameMapping | None,
    format_version: int,
    batch_size: int,
    cache: ProjectionCache | None = None,
    lineage: RowLineage | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream one data file's rows in ``table_schema`` (with field ids), in file order.

    Row positions are the running row count, because batches come in file order and unfiltered.

    :param cache: shared by the files of one stream (one table schema, format version and ``lineage``
        either set for every file or for none: the cache is keyed by the file's schema alone).
    :param lineage: for a v3 rewrite: the rows also carry ``_row_id`` and
        ``_last_updated_sequence_number`` (last two columns), inherited values made explicit
        (:mod:`.lineage`).

    :raises DataFileReadError: when the file is missing or is not readable Parquet.
    :raises ConfigurationError: when the file has no field ids and the table has no name mapping.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = data_file.file_path
    # One request for a small file's whole bytes: a buffered stream costs more than they do.
    whole = _read_whole(io, data_file) if data_file.file_size_in_bytes <= SMALL_FILE_BYTES else None
    stream = pa.BufferReader(whole) if whole is not None else _open(io, path)
    with stream:
        try:
            parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=_READ_BUFFER_BYTES)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
            raise DataFileReadError(f"data file {path} is not readable Parquet: {err}") from err
        read_schema = with_lineage_columns(table_schema) if lineage is not None else table_schema
        project = _projection(
            data_file,
            parquet.schema_arrow,
            cache or ProjectionCache(),
            read_schema,
            spec,
            name_mapping,
            format_version,
        )
        read_rows = 0
        try:
            batches = (
                parquet.read(columns=project.columns, use_threads=False).to_batches(max_chunksize=batch_size)
                if isinstance(stream, pa.BufferReader) and stream.size() <= TINY_FILE_BYTES
                else parquet.iter_batches(batch_size=batch_size, columns=project.columns, use_threads=False)
            )
            for batch in batches:
                start, read_rows = read_rows, read_rows + batch.num_rows
                projected = project(batch)
                yield projected if lineage is None else materialise_lineage(projected, start, lineage)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
            raise DataFileReadError(f"data file {path} is corrupt: {err}") from err
        _check_rows(data_file, read_rows)


def read_files_joined(
    io: FileIO,
    data_files: Sequence[DataFile],
    *,
    table_schema: Schema,
    specs: dict[int, PartitionSpec],
    name_mapping: NameMapping | None,
    format_version: int,
    batch_size: int,
    cache: ProjectionCache,
) -> list[pa.RecordBatch]:
    """Every row of ``data_files``, in order and in the table schema, in as few batches as their schemas
    allow: consecutive tiny files (:data:`TINY_FILE_BYTES`) sharing a Parquet schema, spec and partition
    are each decoded in one call, joined and projected once; other files are streamed by
    :func:`iter_data_file_batches`.

    For files whose rows are passed on as they are (no deletes, positions or lineage to apply): every
    batch costs Python work here and downstream (measured on 20-row files read by three threads: cutting
    each file's table into batches and relabelling them alone cost 0.11 ms a file, of 0.75). Each file's
    row count is still checked against its manifest entry, and a file larger than it claims is streamed.

    :param batch_size: the configured batch size: joined rows come in batches of at most that many, a
        streamed file's as :func:`read_batch_rows` cuts them.

    :raises DataFileReadError: as :func:`iter_data_file_batches`.
    :raises ConfigurationError: as :func:`iter_data_file_batches`.
    """
    import pyarrow as pa

    out: list[pa.RecordBatch] = []
    tables: list[pa.Table] = []
    project: _Projection | None = None

    def flush() -> None:
        if tables:
            assert project is not None
            joined = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
            out.extend(project(batch) for batch in joined.to_batches(max_chunksize=batch_size))
            tables.clear()

    opener = _LocalOpener(io)
    for data_file in data_files:
        spec = specs[data_file.spec_id]
        tiny = data_file.file_size_in_bytes <= TINY_FILE_BYTES
        source = _open_tiny(io, data_file, opener) if tiny else None
        if source is None:
            flush()
            out.extend(
                iter_data_file_batches(
                    io,
                    data_file,
                    table_schema=table_schema,
                    spec=spec,
                    name_mapping=name_mapping,
                    format_version=format_version,
                    batch_size=read_batch_rows(data_file, batch_size),
                    cache=cache,
                )
            )
            continue
        with source:
            table, projection = _decode_tiny(
                source, data_file, cache, table_schema, spec, name_mapping, format_version
            )
        _check_rows(data_file, table.num_rows)
        if projection is not project:
            flush()
            project = projection
        tables.append(table)
    flush()
    return out


def _open_tiny(io: FileIO, data_file: DataFile, opener: _LocalOpener) -> pa.NativeFile | None:
    """A tiny file opened for :func:`_decode_tiny`; ``None`` when it is larger than its manifest entry
    claims (it is streamed after all).

    A local file is decoded from the open file (opened by ``opener`` where it can), a remote one from its
    bytes fetched in one request. Each call here hands the GIL over and back, which the readers ahead
    contend for: reading a local file's bytes first, and ``ParquetFile``'s Python set-up, cost 12 % of
    reading 20,000 20-row files on three threads (6.7 s against 5.9 s).
    """
    import pyarrow as pa
    from pyiceberg.io.pyarrow import PyArrowFileIO

    path = data_file.file_path
    stream = opener.open(path)
    if stream is not None:
        return _claimed_or_closed(stream, data_file)
    stream = _open(io, path)
    # A subclass's Python stream is not decoded from: it is read whole, as a remote file is.
    if isinstance(io, PyArrowFileIO) and _is_local(path) and isinstance(stream, pa.NativeFile):
        return _claimed_or_closed(stream, data_file)
    whole = _read_claimed(stream, data_file)
    return None if whole is None else pa.BufferReader(whole)


def _claimed_or_closed(stream: pa.NativeFile, data_file: DataFile) -> pa.NativeFile | None:
    """``stream`` when its file is no larger than its manifest entry claims, else ``None`` (closed)."""
    try:
        if stream.size() <= data_file.file_size_in_bytes:
            return stream
    except OSError as err:
        stream.close()
        raise DataFileReadError(f"data file {data_file.file_path} cannot be opened: {err}") from err
    stream.close()
    return None


class _LocalOpener:
    """Opens local files of PyArrow's own FileIO as ``io.new_input(path).open()`` does, parsing only one
    location per directory: PyIceberg's location parsing (``urlparse``) and file object cost more than
    the open, ~40 us a tiny file under the GIL the readers share (a third of their GIL time on 50,000
    files).

    A file whose name is plain (letters, digits, ``.``, ``_``, ``-``) is in its directory's place on that
    file system: PyIceberg maps ``<dir>/<name>`` to the path it maps ``<dir>`` to, plus ``/<name>``. Any
    other location, FileIO (a subclass may open differently) or scheme is left to ``io`` (``None``).
    """

    _PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

    def __init__(self, io: FileIO) -> None:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        self._io: PyArrowFileIO | None = io if type(io) is PyArrowFileIO else None
        #: a directory's location -> (its file system, its path there, ending in "/"); None: not local
        self._dirs: dict[str, tuple[FileSystem, str] | None] = {}

    def open(self, location: str) -> pa.NativeFile | None:
        if self._io is None or not _is_local(location):
            return None
        directory, _, name = location.rpartition("/")
        if not directory or not self._PLAIN.fullmatch(name):
            return None
        if directory not in self._dirs:
            self._dirs[directory] = self._place(directory, name)
        place = self._dirs[directory]
        if place is None:
            return None
        fs, prefix = place
        try:
            stream: pa.NativeFile = fs.open_input_file(prefix + name)
        except OSError as err:  # FileNotFoundError included
            raise DataFileReadError(f"data file {location} cannot be opened: {err}") from err
        return stream

    def _place(self, directory: str, name: str) -> tuple[FileSystem, str] | None:
        assert self._io is not None
        scheme, netloc, path = self._io.parse_location(f"{directory}/{name}", self._io.properties)
        if scheme != "file" or not path.endswith(f"/{name}"):
            return None
        return self._io.fs_by_scheme(scheme, netloc), path[: -len(name)]


def _decode_tiny(
    source: pa.NativeFile,
    data_file: DataFile,
    cache: ProjectionCache,
    table_schema: Schema,
    spec: PartitionSpec,
    name_mapping: NameMapping | None,
    format_version: int,
) -> tuple[pa.Table, _Projection]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = data_file.file_path
    try:
        # ParquetFile's own reader, without its Python set-up (nested column paths built on every open),
        # opened as ParquetFile opens it (whose default reads UUID and JSON columns as Arrow extensions).
        reader = pq.ParquetReader()
        reader.open(source, pre_buffer=False, arrow_extensions_enabled=True)
        arrow_schema = reader.schema_arrow
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise DataFileReadError(f"data file {path} is not readable Parquet: {err}") from err
    projection = _projection(data_file, arrow_schema, cache, table_schema, spec, name_mapping, format_version)
    try:
        if projection.leaf_indices is not None and reader.metadata.num_columns == projection.file_leaves:
            table = reader.read_all(projection.leaf_indices, use_threads=False)
        else:
            table = pq.ParquetFile(source, pre_buffer=False).read(
                columns=projection.columns, use_threads=False
            )
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise DataFileReadError(f"data file {path} is corrupt: {err}") from err
    return table, projection


def _is_local(path: str) -> bool:
    """Whether ``path`` names a file on this machine (where a read costs no request)."""
    return path.startswith(("/", "file:"))


def _read_whole(io: FileIO, data_file: DataFile) -> bytes | None:
    """A small file's bytes, read in one request; ``None`` when the file is larger than its manifest
    entry claims (its size there is a claim: such a file is streamed after all)."""
    return _read_claimed(_open(io, data_file.file_path), data_file)


def _read_claimed(stream: InputStream, data_file: DataFile) -> bytes | None:
    """:func:`_read_whole` from ``stream``, opened on the file; the stream is closed."""
    path, claimed = data_file.file_path, data_file.file_size_in_bytes
    try:
        with stream:
            # One byte more than the claim, not SMALL_FILE_BYTES: a 1 MiB buffer a file cost 0.07 ms of
            # page faults.
            whole: bytes = stream.read(max(0, claimed) + 1)
    except OSError as err:
        raise DataFileReadError(f"data file {path} cannot be opened: {err}") from err
    return whole if len(whole) <= claimed else None


def _open(io: FileIO, path: str) -> InputStream:
    """``path`` opened for reading (a seekable stream of ``io``)."""
    try:
        return io.new_input(path).open()
    except OSError as err:  # FileNotFoundError included
        raise DataFileReadError(f"data file {path} cannot be opened: {err}") from err


def _check_rows(data_file: DataFile, read_rows: int) -> None:
    if read_rows != data_file.record_count:
        # The manifest and the file disagree: never write a rewrite that could lose rows.
        raise DataFileReadError(
            f"data file {data_file.file_path} holds {read_rows} rows but its manifest entry says "
            f"{data_file.record_count}"
        )


def read_files_ahead(
    files: Iterable[T],
    read: Callable[[T], Iterator[U]],
    size_of: Callable[[T], int],
    *,
    read_run: Callable[[list[T]], Iterator[list[U]]] | None = None,
) -> Generator[Iterator[U], None, None]:
    """One batch iterator per file of ``files``, in their order: ``read(file)``.

    A file of at most :data:`SMALL_FILE_BYTES` (``size_of``, its stored bytes) is read whole by one of
    :data:`_AHEAD_WORKERS` threads, up to :data:`_AHEAD_FILES` files and :data:`_AHEAD_STORED_BYTES`
    stored bytes ahead of the caller; a larger file is streamed by the caller when its turn comes.
    Consecutive small files go to a worker in runs of up to :data:`_RUN_FILES` files and
    :data:`_RUN_BYTES` (one task and one hand-over of the GIL a run, not a file: measured on 5,000
    20-row files, a task a file cost 0.1 ms of CPU a file over reading them on one thread). An error reading a
    file is raised when its turn comes, as a streamed read would raise it (the files after it in its run
    are not read). Close the generator when stopping early: pending reads are cancelled and the workers
    joined.

    :param read_run: reads a run on its worker instead of ``read`` file by file: yields each file's
        batches in order (it may give one file the rows of several and the next ones none); an error it
        raises is the next file's.
    """
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(_AHEAD_WORKERS, thread_name_prefix="iceberg-exec-read-file")
    window = _Window(_Runs(files, size_of), read, pool, read_run)
    try:
        while (turn := window.next()) is not None:
            item, batches = turn
            yield read(item) if batches is None else iter(batches)
    finally:
        window.cancel()
        pool.shutdown(wait=True)


class _Window(Generic[T, U]):
    """The files read ahead and not yet handed out, in order, bounded in files and stored bytes."""

    def __init__(
        self,
        source: _Runs[T],
        read: Callable[[T], Iterator[U]],
        pool: ThreadPoolExecutor,
        read_run: Callable[[list[T]], Iterator[list[U]]] | None,
    ) -> None:
        self._source = source
        self._read = read
        self._pool = pool
        self._read_run_of = read_run or self._each
        #: (file, its run's read or ``None`` when streamed, its index in the run, its stored bytes)
        self._ahead: collections.deque[tuple[T, Future[list[list[U] | _Raised]] | None, int, int]] = (
            collections.deque()
        )
        self._bytes = 0

    def next(self) -> tuple[T, list[U] | None] | None:
        """The next file with its batches (``None``: stream it), ``None`` after the last; raises its error."""
        self._fill()
        if not self._ahead:
            return None
        item, future, index, size = self._ahead.popleft()
        if future is None:
            return item, None
        done = future.result()
        self._bytes -= size
        batches = done[index]
        if isinstance(batches, _Raised):
            raise batches.error
        done[index] = []  # the caller holds the batches from now on
        return item, batches

    def cancel(self) -> None:
        for _, future, _, _ in self._ahead:
            if future is not None:
                future.cancel()

    def _fill(self) -> None:
        ahead = self._ahead
        # Whole runs only: topping the window up as each file was taken made every run after the first
        # one file long. A run may pass _RUN_BYTES by its last file (at most SMALL_FILE_BYTES).
        while (
            not self._source.exhausted
            and len(ahead) + _RUN_FILES <= _AHEAD_FILES
            and self._bytes + _RUN_BYTES <= _AHEAD_STORED_BYTES
        ):
            run, large = self._source.take(_RUN_FILES, _RUN_BYTES)
            if large is not None:
                ahead.append((large, None, 0, 0))  # streamed on the caller's thread in its turn
            elif run:
                future = self._pool.submit(self._read_run, [item for item, _ in run])
                ahead.extend((item, future, index, size) for index, (item, size) in enumerate(run))
                self._bytes += sum(size for _, size in run)

    def _read_run(self, items: list[T]) -> list[list[U] | _Raised]:
        """Each file's batches, in order, until one fails: its error instead, and nothing after it."""
        done: list[list[U] | _Raised] = []
        try:
            for batches in self._read_run_of(items):
                done.append(batches)
        except Exception as err:  # raised in the caller, in this file's turn
            done.append(_Raised(err))
        return done

    def _each(self, items: list[T]) -> Iterator[list[U]]:
        for item in items:
            yield list(self._read(item))


class _Runs(Generic[T]):
    """``files`` in order, taken as runs of consecutive small files or one large file at a time."""

    def __init__(self, files: Iterable[T], size_of: Callable[[T], int]) -> None:
        self._files = iter(files)
        self._size_of = size_of
        self._held: object = _DONE  # a large file met while taking a run: the next take's
        self.exhausted = False

    def take(self, most_files: int, most_bytes: int) -> tuple[list[tuple[T, int]], T | None]:
        """The next run of small files with their sizes (up to ``most_files``, and while under
        ``most_bytes``: at least one file), or, when the next file is large, no run and that file."""
        run: list[tuple[T, int]] = []
        total = 0
        while len(run) < most_files and total < most_bytes:
            if self._held is not _DONE:
                item, self._held = self._held, _DONE
            else:
                item = next(self._files, _DONE)
            if item is _DONE:
                self.exhausted = True
                break
            size = self._size_of(cast(T, item))
            if size > SMALL_FILE_BYTES:
                if run:
                    self._held = item
                    break
                return [], cast(T, item)
            run.append((cast(T, item), size))
            total += size
        return run, None


def _projection(
    data_file: DataFile,
    arrow_schema: pa.Schema,
    cache: ProjectionCache,
    table_schema: Schema,
    spec: PartitionSpec,
    name_mapping: NameMapping | None,
    format_version: int,
) -> _Projection:
    """The columns to read from a file of ``arrow_schema`` and the projection of its batches."""
    if (last := cache.last_projection(arrow_schema, spec.spec_id, data_file.partition)) is not None:
        return last
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import prune_columns
    from pyiceberg.types import ListType, MapType

    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import (
        batch_projection,
        partition_projection_values,
    )

    key = arrow_schema.serialize().to_pybytes()

    def to_iceberg() -> Schema:
        try:
            return pyarrow_to_schema(
                arrow_schema,
                name_mapping,
                downcast_ns_timestamp_to_us=format_version <= 2,
                format_version=format_version,  # type: ignore[arg-type]
            )
        except ValueError as err:
            raise ConfigurationError(
                f"data file {data_file.file_path} has no Iceberg field ids and the table has no name mapping "
                "(schema.name-mapping.default); add one"
            ) from err

    file_schema = cache.file_schema(key, to_iceberg)
    # Columns missing from a file but fixed by an identity partition are filled from the partition.
    missing_values = partition_projection_values(data_file, table_schema, spec, file_schema.field_ids)

    def build() -> _Projection:
        # Like PyIceberg's ArrowScan: list and map ids cannot be selected themselves (prune_columns
        # raises); selecting their element, key and value ids keeps them.
        wanted = {
            field_id
            for field_id in table_schema.field_ids
            if not isinstance(table_schema.find_type(field_id), (ListType, MapType))
        }
        file_projection = prune_columns(file_schema, wanted, select_full_types=False)
        project = batch_projection(
            table_schema, file_projection, format_version=format_version, missing_values=missing_values
        )
        columns = [column.name for column in file_projection.columns]
        leaf_indices, file_leaves = _leaf_layout(arrow_schema, columns)
        return _Projection(
            columns, project, _fast_order(table_schema, file_projection), leaf_indices, file_leaves
        )

    projection = cache.projection(key, missing_values, build)
    cache.remember_last(arrow_schema, spec.spec_id, data_file.partition, projection)
    return projection


def _leaf_layout(arrow_schema: pa.Schema, columns: list[str]) -> tuple[list[int] | None, int]:
    """The Parquet leaf columns of the top-level ``columns`` in a file of ``arrow_schema`` (the one PyArrow
    read from it), as ``ParquetFile.read(columns=...)`` selects them (``None`` when a name is not found
    once), and the number of leaf columns the schema is made of.

    Parquet stores a file's leaves depth first, in the order of the Arrow fields they make up, so each
    top-level field owns the next :func:`_leaf_count` leaves.
    """
    # first[i]: the first leaf of field i; first[-1]: every leaf
    first = list(itertools.accumulate((_leaf_count(field.type) for field in arrow_schema), initial=0))
    indices: list[int] = []
    for name in columns:
        position = arrow_schema.get_field_index(name)
        if position == -1:
            return None, first[-1]
        indices.extend(range(first[position], first[position + 1]))
    return indices, first[-1]


def _leaf_count(arrow_type: pa.DataType) -> int:
    """The Parquet leaf columns a field of ``arrow_type`` read from Parquet is made of."""
    import pyarrow as pa

    if isinstance(arrow_type, pa.ExtensionType):
        return _leaf_count(arrow_type.storage_type)
    if pa.types.is_struct(arrow_type):
        return sum(_leaf_count(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_map(arrow_type):
        return _leaf_count(arrow_type.key_type) + _leaf_count(arrow_type.item_type)
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return _leaf_count(arrow_type.value_type)
    return 1


def read_batch_rows(data_file: DataFile, minimum: int) -> int:
    """Rows per batch for streaming ``data_file``: about ``_READ_BATCH_BYTES`` decoded, never below
    ``minimum`` (the configured batch size) nor above ``_MAX_READ_BATCH_ROWS``."""
    row_bytes = _DECODED_PER_STORED_BYTE * data_file.file_size_in_bytes // max(1, data_file.record_count)
    return max(minimum, min(_MAX_READ_BATCH_ROWS, _READ_BATCH_BYTES // max(1, row_bytes)))


def iter_group_batches(
    io: FileIO,
    data_files: Sequence[DataFile],
    *,
    table_schema: Schema,
    specs: dict[int, PartitionSpec],
    name_mapping: NameMapping | None,
    format_version: int,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """Stream every row of ``data_files``, one file after another, in ``table_schema``."""
    cache = ProjectionCache()
    for number, data_file in enumerate(data_files, start=1):
        log.debug("reading %s (%d of %d)", data_file.file_path, number, len(data_files))
        yield from iter_data_file_batches(
            io,
            data_file,
            table_schema=table_schema,
            spec=specs[data_file.spec_id],
            name_mapping=name_mapping,
            format_version=format_version,
            batch_size=batch_size,
            cache=cache,
        )


def coalesce_batches(
    batches: Iterator[pa.RecordBatch], min_rows: int, max_bytes: int = _READ_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """The same rows in the same order, batches below ``min_rows`` rows joined (up to ``min_rows`` rows
    or ``max_bytes``): tiny files make tiny batches, and everything downstream costs per batch."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if pending and (
            batch.num_rows >= min_rows or not batch.schema.equals(pending[0].schema, check_metadata=True)
        ):
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows, size = [], 0, 0
        if batch.num_rows >= min_rows:
            yield batch
            continue
        pending.append(batch)
        # The buffers' sizes, not nbytes (24 us a batch of nine columns: most of a 20-row batch's cost
        # here); at least nbytes, so joins stay within max_bytes.
        rows, size = rows + batch.num_rows, size + batch.get_total_buffer_size()
        if rows >= min_rows or size >= max_bytes:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class _Lead:
    """The items a producer thread has made and the consumer not yet taken, bounded in count and bytes."""

    def __init__(self, depth: int, max_bytes: int | None) -> None:
        self._queued: collections.deque[tuple[object, int]] = collections.deque()
        self._bytes = 0
        self._depth = max(1, depth)
        self._max_bytes = max_bytes
        self._changed = threading.Condition()
        self.stopped = False

    def _has_room(self, size: int) -> bool:
        if not self._queued:
            return True  # one item, however big, always fits: the producer never stalls for good
        if len(self._queued) >= self._depth:
            return False
        return self._max_bytes is None or self._bytes + size <= self._max_bytes

    def put(self, item: object) -> bool:
        """Queue ``item`` once there is room; ``False`` when the consumer went away."""
        size = int(getattr(item, "nbytes", 0) or 0) if self._max_bytes is not None else 0
        with self._changed:
            while not self.stopped and not self._has_room(size):
                self._changed.wait(_POLL_SECONDS)
            if self.stopped:
                return False
            self._queued.append((item, size))
            self._bytes += size
            self._changed.notify_all()
        return True

    def take(self) -> object:
        with self._changed:
            while not self._queued:
                self._changed.wait()
            item, size = self._queued.popleft()
            self._bytes -= size
            self._changed.notify_all()
        return item

    def stop(self) -> None:
        with self._changed:
            self.stopped = True
            self._changed.notify_all()


def read_ahead(items: Iterator[T], depth: int, *, max_bytes: int | None = None) -> Generator[T, None, None]:
    """Yield ``items`` while a background thread produces up to ``depth`` of them ahead.

    Decoding Parquet and encoding it release the GIL, so reading the next batches on a second thread
    while the caller writes keeps two cores busy. Memory grows by at most ``depth`` items, and, with
    ``max_bytes``, by at most that many bytes of them (``nbytes``) beyond one item. An error in the
    producer is raised in the caller. Close the returned generator (``contextlib.closing``) when stopping
    early: that stops and joins the producer, which closes ``items`` on its own thread.
    """
    lead = _Lead(depth, max_bytes)

    def produce() -> None:
        try:
            for item in items:
                if not lead.put(item):
                    return
            lead.put(_DONE)
        except BaseException as err:  # handed to the consumer, which raises it
            lead.put(_Raised(err))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="iceberg-exec-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = lead.take()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield cast(T, item)
    finally:
        lead.stop()
        worker.join()
