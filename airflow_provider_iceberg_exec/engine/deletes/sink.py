"""Where merge-on-read writers put the rows they delete: position delete files (v2) or DVs (v3).

:func:`position_delete_sink` picks by the table's format version:

- **v2** (:class:`ParquetPositionDeleteSink`): Parquet position delete files, exactly as
  :class:`~.io.position_delete_writer.PositionDeleteWriter` writes them; the data file's earlier delete
  files stay (a caller that folds file-scoped ones in does so itself, as before).
- **v3** (:class:`DeletionVectorSink`): the positions are gathered per data file, and at :meth:`close`
  each data file gets **one** DV holding its new positions *merged with every position delete that
  applied to it before* (its old DV and all its position delete files: a DV replaces them for that
  data file, so a position left out would come back to life). One Puffin file holds the DVs of the
  whole sink (one per task, as Spark). The old DV and the *file-scoped* position delete files are then
  reported in :attr:`SinkResult.rewritten`: the commit must remove them in the same snapshot, a DV by
  its ``(file_path, content_offset, content_size_in_bytes)`` identity (many DVs share a Puffin path),
  so that the table keeps one DV per data file (Java 1.10 readers fail on two). Partition-scoped
  position files stay (they may hold other files' deletes), as Java's ``BaseDVFileWriter`` does.
"""

from __future__ import annotations

import abc
import array
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from airflow_provider_iceberg_exec.engine.deletes.positions import (
    iter_position_delete_rows,
    read_position_deletes,
)
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import (
    MAX_POSITION,
    DataFileDeletes,
    write_deletion_vectors,
)
from airflow_provider_iceberg_exec.engine.io.position_delete_writer import (
    DeleteGranularity,
    PositionDeleteWriter,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile, is_file_scoped

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.locations import LocationProvider
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.typedef import Record
    from pyroaring import BitMap64

__all__ = [
    "DeleteTarget",
    "DeletionVectorSink",
    "ParquetPositionDeleteSink",
    "PositionDeleteSink",
    "SinkResult",
    "position_delete_sink",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteTarget:
    """The data file whose rows are deleted, and the delete files that apply to it now.

    :param data_file: the data file (its path, spec id and partition are the DV's).
    :param previous: its live delete files (``ScannedFile.delete_files``); equality deletes are ignored.
    """

    data_file: DataFile
    previous: tuple[ScannedDelete, ...] = ()

    @classmethod
    def of(cls, scanned: ScannedFile) -> DeleteTarget:
        """The target of a scanned data file, with the delete files the scan found for it."""
        return cls(scanned.data_file, scanned.delete_files)


@dataclass
class SinkResult:
    """What a sink wrote and what the commit must remove with it.

    :param added: the new position delete files, or the new DVs.
    :param rewritten: the delete files the new DVs replace (old DVs, file-scoped position delete files):
        the commit removes them in the same snapshot. Always empty for position delete files.
    """

    added: list[DataFile] = field(default_factory=list)
    rewritten: list[DataFile] = field(default_factory=list)


class PositionDeleteSink(abc.ABC):
    """Receives the deleted positions of data files; :meth:`close` writes (or finishes) the files."""

    #: whether the sink merges a data file's earlier position deletes into what it writes
    folds_previous: ClassVar[bool] = False

    @abc.abstractmethod
    def write(self, target: DeleteTarget, positions: npt.NDArray[np.int64]) -> None:
        """Delete ``positions`` (ascending) of ``target``'s data file."""

    @abc.abstractmethod
    def forget(self, data_file_path: str) -> None:
        """Drop what was written for one data file (it turned out unchanged)."""

    @abc.abstractmethod
    def close(self) -> SinkResult:
        """Finish every file; return what was written and what it replaces."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove every file the sink created."""


class ParquetPositionDeleteSink(PositionDeleteSink):
    """v2: Parquet position delete files of one spec and partition, through one
    :class:`PositionDeleteWriter` (rows in ``(file_path, pos)`` order, as the writer requires).

    :param writer: the writer; its spec and partition must be those of every target.
    """

    def __init__(self, writer: PositionDeleteWriter) -> None:
        self._writer = writer
        self._paths: set[str] = set()

    def write(self, target: DeleteTarget, positions: npt.NDArray[np.int64]) -> None:
        import numpy as np
        import pyarrow as pa

        if not len(positions):
            return
        path = target.data_file.file_path
        self._paths.add(path)
        # one dictionary entry for the path, not a Python list of it per row
        indices = pa.array(np.zeros(len(positions), dtype=np.int32))
        paths = pa.DictionaryArray.from_arrays(indices, pa.array([path], pa.string())).cast(pa.string())
        self._writer.write(pa.record_batch({"file_path": paths, "pos": pa.array(positions, pa.int64())}))

    def forget(self, data_file_path: str) -> None:
        """Only possible before anything was written for another file: the rows are in the files."""
        if self._paths - {data_file_path}:
            raise ConfigurationError("a position delete sink cannot forget one of several data files")
        self._writer.abort()
        self._paths.clear()

    def close(self) -> SinkResult:
        return SinkResult(added=self._writer.close())

    def abort(self) -> None:
        self._writer.abort()

    @property
    def rows_written(self) -> int:
        return self._writer.rows_written


@dataclass
class _Pending:
    target: DeleteTarget
    positions: BitMap64


class DeletionVectorSink(PositionDeleteSink):
    """v3: one DV per data file, merged with its earlier position deletes, in one Puffin file.

    Thread-safe: several threads may write the positions of different data files.

    :param io: the table's FileIO.
    :param location_provider: the table's location provider (the Puffin file goes where data files go,
        outside any partition directory: it holds DVs of many partitions).
    :param file_prefix: a prefix for the Puffin file's name, e.g. the task id.
    """

    folds_previous: ClassVar[bool] = True

    def __init__(self, *, io: FileIO, location_provider: LocationProvider, file_prefix: str) -> None:
        self._io = io
        self._locations = location_provider
        self._prefix = file_prefix
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._written: str | None = None
        self.rows_written = 0

    def write(self, target: DeleteTarget, positions: npt.NDArray[np.int64]) -> None:
        import numpy as np
        from pyroaring import BitMap64

        if not len(positions):
            return
        low, high = int(np.min(positions)), int(np.max(positions))
        if low < 0 or high > MAX_POSITION:
            raise ConfigurationError(
                f"position {low if low < 0 else high} of {target.data_file.file_path} "
                f"is outside 0..{MAX_POSITION}"
            )
        values = array.array("Q", positions.astype(np.uint64).tobytes())
        path = target.data_file.file_path
        with self._lock:
            pending = self._pending.get(path)
            if pending is None:
                pending = self._pending[path] = _Pending(target, BitMap64())
            pending.positions.update(values)

    def fold(self, target: DeleteTarget) -> None:
        """Give ``target``'s data file a DV even with no new position: its earlier position deletes
        (old DV, position delete files) become one DV (position-delete compaction on v3)."""
        from pyroaring import BitMap64

        with self._lock:
            if target.data_file.file_path not in self._pending:
                self._pending[target.data_file.file_path] = _Pending(target, BitMap64())

    def forget(self, data_file_path: str) -> None:
        with self._lock:
            self._pending.pop(data_file_path, None)

    def close(self) -> SinkResult:
        """Merge each data file's earlier deletes in, write the Puffin file, return the DVs and what
        they replace (none and nothing when no position was written)."""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        if not pending:
            return SinkResult()
        shared = _read_shared_position_files(self._io, pending)
        deletes, rewritten = [], []
        for item in pending:
            merged, replaced = _merge_previous(self._io, item.target, item.positions, shared)
            if not len(merged):  # folded, but nothing deletes a row of it
                continue
            data_file = item.target.data_file
            deletes.append(
                DataFileDeletes(data_file.file_path, data_file.spec_id, data_file.partition, merged)
            )
            rewritten.extend(replaced)
        if not deletes:
            return SinkResult()
        path = self._locations.new_data_location(
            data_file_name=f"{self._prefix}-{uuid.uuid4().hex}-deletes.puffin"
        )
        added = write_deletion_vectors(self._io, path, deletes)
        self._written = path
        self.rows_written = sum(d.record_count for d in added)
        log.info(
            "wrote %d deletion vector(s) to %s (%d positions); they replace %d delete file(s)",
            len(added),
            path,
            self.rows_written,
            len(rewritten),
        )
        return SinkResult(added=added, rewritten=rewritten)

    def abort(self) -> None:
        with self._lock:
            self._pending = {}
            path, self._written = self._written, None
        if path is not None:
            try:
                self._io.delete(path)
            except (FileNotFoundError, OSError):
                log.warning("could not remove partial output %s", path)


#: rows per batch when a position delete file shared by several data files is read once for all
_SHARED_READ_BATCH_ROWS = 1 << 16


def _read_shared_position_files(
    io: FileIO, pending: list[_Pending]
) -> dict[str, dict[str, npt.NDArray[np.int64]]]:
    """Position delete files that apply to several of the sink's data files, each read once:
    ``{delete file path: {data file path: positions}}`` (only the sink's data files are kept)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.manifest import DataFileContent

    users: dict[str, set[str]] = {}
    files: dict[str, DataFile] = {}
    for item in pending:
        for delete in item.target.previous:
            delete_file = delete.data_file
            if delete_file.content == DataFileContent.POSITION_DELETES and not is_deletion_vector(
                delete_file
            ):
                users.setdefault(delete_file.file_path, set()).add(item.target.data_file.file_path)
                files[delete_file.file_path] = delete_file
    shared: dict[str, dict[str, npt.NDArray[np.int64]]] = {}
    for path, wanted in users.items():
        if len(wanted) < 2:
            continue
        names = sorted(wanted)
        value_set = pa.array(names, pa.string())
        chunks: dict[int, list[npt.NDArray[np.int64]]] = {}
        for batch in iter_position_delete_rows(io, files[path], _SHARED_READ_BATCH_ROWS):
            ordinals = pc.index_in(batch.column(0), value_set=value_set)
            kept = pc.is_valid(ordinals)
            which = pc.filter(ordinals, kept).to_numpy(zero_copy_only=False)
            positions = pc.filter(batch.column(1), kept).to_numpy(zero_copy_only=False).astype(np.int64)
            for ordinal in np.unique(which):
                chunks.setdefault(int(ordinal), []).append(positions[which == ordinal])
        shared[path] = {
            names[o]: np.concatenate(chunks[o]) if o in chunks else np.empty(0, dtype=np.int64)
            for o in range(len(names))
        }
    return shared


def _merge_previous(
    io: FileIO,
    target: DeleteTarget,
    positions: BitMap64,
    shared: Mapping[str, Mapping[str, npt.NDArray[np.int64]]],
) -> tuple[npt.NDArray[np.int64], list[DataFile]]:
    """The new positions with every earlier position delete of the data file folded in, and the
    delete files the new DV replaces: the old DV, and file-scoped position delete files whose every
    row names this data file (bounds alone may mislead). With an old DV, only its positions are earlier
    ones: readers ignore the data file's position files then."""
    import numpy as np
    from pyiceberg.manifest import DataFileContent

    path = target.data_file.file_path
    parts = [np.frombuffer(positions.to_array(), dtype=np.uint64).astype(np.int64)]
    replaced: list[DataFile] = []
    # Readers ignore position delete files for a data file that has a DV (spec, "Scan Planning"): their
    # positions are folded only when there is none, else a row readers see would be deleted.
    has_dv = any(is_deletion_vector(d.data_file) for d in target.previous)
    for delete in target.previous:
        delete_file = delete.data_file
        if delete_file.content != DataFileContent.POSITION_DELETES:
            continue
        if has_dv and not is_deletion_vector(delete_file):
            if is_file_scoped(delete_file) and referenced_data_file(delete_file) == path:
                replaced.append(delete_file)  # ignored by readers already: the commit may drop it
            continue
        if is_deletion_vector(delete_file):
            if referenced_data_file(delete_file) != path:
                raise ConfigurationError(f"deletion vector {delete_file.file_path} does not reference {path}")
            parts.append(read_deletion_vector(io, delete_file))
            replaced.append(delete_file)
            continue
        cached = shared.get(delete_file.file_path)
        old = cached[path] if cached is not None else read_position_deletes(io, delete_file, path)
        parts.append(old)
        if is_file_scoped(delete_file) and len(old) == delete_file.record_count:
            replaced.append(delete_file)
    dvs = [d for d in replaced if is_deletion_vector(d)]
    if len(dvs) > 1:
        raise ConfigurationError(f"{path} has {len(dvs)} deletion vectors; a data file may have one")
    return np.unique(np.concatenate(parts)), replaced


def position_delete_sink(
    metadata: TableMetadata,
    *,
    io: FileIO,
    location_provider: LocationProvider,
    spec: PartitionSpec,
    partition: Record,
    target_file_size_bytes: int,
    buffer_bytes: int,
    file_prefix: str,
    granularity: DeleteGranularity = DeleteGranularity.FILE,
    schema: Schema | None = None,
    properties: Mapping[str, str] | None = None,
) -> PositionDeleteSink:
    """The sink for a table: DVs on format version 3, position delete files before.

    ``spec``, ``partition``, ``target_file_size_bytes``, ``buffer_bytes`` and ``granularity`` apply to
    position delete files only (a DV takes its data file's spec and partition; a Puffin file holds them
    all). ``schema`` and ``properties`` default to the table's.
    """
    if metadata.format_version >= 3:
        return DeletionVectorSink(io=io, location_provider=location_provider, file_prefix=file_prefix)
    writer = PositionDeleteWriter(
        io=io,
        location_provider=location_provider,
        spec=spec,
        schema=schema or metadata.schema(),
        partition=partition,
        target_file_size_bytes=target_file_size_bytes,
        properties=metadata.properties if properties is None else properties,
        buffer_bytes=buffer_bytes,
        granularity=granularity,
        file_prefix=file_prefix,
    )
    return ParquetPositionDeleteSink(writer)
