"""Writing v2 position delete files: Parquet ``file_path``, ``pos`` sorted by path then position.

One writer serves one partition of one spec. Rows arrive already sorted (data file path, then position);
the writer rolls to a new file at the target size and, with ``file`` granularity (Spark's default), at
every new data file, so that each file names one data file and carries ``referenced_data_file`` (Java's
file-scoped deletes, which readers match by path alone). Every file carries the ``file_path`` and
``pos`` bounds Java's ``PositionDeleteWriter`` writes.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.locations import LocationProvider
    from pyiceberg.typedef import Record

__all__ = ["FILE_PATH_FIELD_ID", "POS_FIELD_ID", "DeleteGranularity", "PositionDeleteWriter"]

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
#: Positions buffered before a row group is written (about 8 MiB of positions).
_ROW_GROUP_ROWS = 1 << 20


class DeleteGranularity(str, enum.Enum):
    """``write.delete.granularity``: one delete file per data file, or per partition."""

    FILE = "file"
    PARTITION = "partition"


@dataclass
class _OpenFile:
    path: str
    stream: Any
    writer: Any = None
    rows: int = 0
    first_path: str | None = None
    last_path: str | None = None
    min_pos: int | None = None
    max_pos: int | None = None
    paths: list[Any] = field(default_factory=list)
    positions: list[Any] = field(default_factory=list)
    buffered: int = 0


class PositionDeleteWriter:
    """Write sorted ``(data file path, positions)`` runs of one partition as position delete files.

    :param io: the table's FileIO.
    :param location_provider: the table's location provider (names the files).
    :param spec_id: the partition spec of the data files named.
    :param partition: their partition values.
    :param target_file_size_bytes: roll to a new file once the current one reaches this size.
    :param granularity: ``file`` (a file per data file) or ``partition``.
    :param file_prefix: a prefix for file names.
    """

    def __init__(
        self,
        *,
        io: FileIO,
        location_provider: LocationProvider,
        spec_id: int,
        partition: Record,
        target_file_size_bytes: int,
        granularity: DeleteGranularity = DeleteGranularity.FILE,
        file_prefix: str = "deletes",
    ) -> None:
        import pyarrow as pa

        self._io = io
        self._locations = location_provider
        self._spec_id = spec_id
        self._partition = partition
        self._target = target_file_size_bytes
        self._granularity = granularity
        self._prefix = f"{file_prefix}-{uuid.uuid4().hex}"
        self._number = 0
        self._current: _OpenFile | None = None
        self._written: list[DataFile] = []
        self._schema = pa.schema(
            [
                pa.field("file_path", pa.string(), False, {"PARQUET:field_id": str(FILE_PATH_FIELD_ID)}),
                pa.field("pos", pa.int64(), False, {"PARQUET:field_id": str(POS_FIELD_ID)}),
            ]
        )

    @property
    def files(self) -> list[DataFile]:
        """The delete files closed so far."""
        return list(self._written)

    def write(self, data_file_path: str, positions: npt.NDArray[np.int64]) -> None:
        """Append positions of ``data_file_path``: paths in ascending order, positions ascending within."""
        if not len(positions):
            return
        current = self._current
        if (
            current is not None
            and current.last_path != data_file_path
            and (self._granularity is DeleteGranularity.FILE or current.stream.tell() >= self._target)
        ):
            self._close_current()
        current = self._current or self._open()
        if current.first_path is None:
            current.first_path = data_file_path
        current.last_path = data_file_path
        current.min_pos = (
            int(positions[0]) if current.min_pos is None else min(current.min_pos, int(positions[0]))
        )
        current.max_pos = (
            int(positions[-1]) if current.max_pos is None else max(current.max_pos, int(positions[-1]))
        )
        current.paths.append((data_file_path, len(positions)))
        current.positions.append(positions)
        current.buffered += len(positions)
        current.rows += len(positions)
        if current.buffered >= _ROW_GROUP_ROWS:
            self._flush(current)

    def close(self) -> list[DataFile]:
        """Finish the open file; return every delete file written."""
        self._close_current()
        return self.files

    def abort(self) -> None:
        """Close and delete every file written (nothing was committed)."""
        current, self._current = self._current, None
        paths = [f.file_path for f in self._written] + ([current.path] if current else [])
        if current is not None:
            if current.writer is not None:
                current.writer.close()
            current.stream.close()
        for path in paths:
            self._io.delete(path)
        self._written = []

    def _open(self) -> _OpenFile:
        self._number += 1
        name = f"{self._prefix}-{self._number:05d}-deletes.parquet"
        path = self._locations.new_data_location(data_file_name=name)
        self._current = _OpenFile(path=path, stream=self._io.new_output(path).create(overwrite=False))
        return self._current

    def _flush(self, current: _OpenFile) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not current.buffered:
            return
        paths = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(current.paths), dtype=np.int32), [n for _, n in current.paths])),
            pa.array([p for p, _ in current.paths], pa.string()),
        ).cast(pa.string())
        batch = pa.record_batch([paths, pa.array(np.concatenate(current.positions))], schema=self._schema)
        if current.writer is None:
            current.writer = pq.ParquetWriter(current.stream, self._schema, compression="zstd")
        current.writer.write_batch(batch, row_group_size=batch.num_rows)
        current.paths, current.positions, current.buffered = [], [], 0

    def _close_current(self) -> None:
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

        current, self._current = self._current, None
        if current is None:
            return
        self._flush(current)
        if current.writer is not None:
            current.writer.close()
        size = current.stream.tell()
        current.stream.close()
        if not current.rows or current.first_path is None or current.last_path is None:
            self._io.delete(current.path)
            return
        lower, upper = current.first_path.encode(), current.last_path.encode()
        delete_file = DataFile.from_args(
            _table_format_version=3,
            content=DataFileContent.POSITION_DELETES,
            file_path=current.path,
            file_format=FileFormat.PARQUET,
            partition=self._partition,
            record_count=current.rows,
            file_size_in_bytes=size,
            column_sizes={},
            value_counts={FILE_PATH_FIELD_ID: current.rows, POS_FIELD_ID: current.rows},
            null_value_counts={FILE_PATH_FIELD_ID: 0, POS_FIELD_ID: 0},
            nan_value_counts={},
            lower_bounds={FILE_PATH_FIELD_ID: lower, POS_FIELD_ID: struct.pack("<q", current.min_pos or 0)},
            upper_bounds={FILE_PATH_FIELD_ID: upper, POS_FIELD_ID: struct.pack("<q", current.max_pos or 0)},
            referenced_data_file=current.first_path if current.first_path == current.last_path else None,
        )
        delete_file.spec_id = self._spec_id  # from_args does not take it
        self._written.append(delete_file)
