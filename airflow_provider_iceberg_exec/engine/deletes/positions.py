"""Position delete files: the row positions a Parquet position delete file deletes in one data file.

A position delete file is streamed with a ``file_path == <data file>`` filter; the positions of one data
file are bounded by its row count and kept as one sorted array (:func:`deleted_positions`), which the
reader drops rows by while the data file streams (:mod:`.apply`). Where a deletion vector applies, it
replaces the position delete files (:mod:`.vectors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile

__all__ = [
    "FILE_PATH_FIELD_ID",
    "POS_FIELD_ID",
    "deleted_positions",
    "iter_position_delete_rows",
    "read_position_deletes",
]

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
_READ_BUFFER_BYTES = 1 << 20


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


def iter_position_delete_rows(io: FileIO, delete_file: DataFile, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Stream every ``(file_path, pos)`` row of a Parquet position delete file, one row group at a time.

    The optional ``row`` column is not read. Batches have exactly the columns ``file_path`` (string) and
    ``pos`` (int64), whatever the file names them (they are found by field id).

    :raises DataFileReadError: when the file is missing or is not a readable position delete file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("file_path", pa.string()), ("pos", pa.int64())])
    try:
        with io.new_input(delete_file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=_READ_BUFFER_BYTES)
            columns = [
                _column_by_field_id(parquet.schema_arrow, FILE_PATH_FIELD_ID, "file_path"),
                _column_by_field_id(parquet.schema_arrow, POS_FIELD_ID, "pos"),
            ]
            for batch in parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
                yield pa.RecordBatch.from_arrays(
                    [batch.column(0).cast(pa.string()), batch.column(1).cast(pa.int64())], schema=schema
                )
    except (FileNotFoundError, OSError, pa.ArrowInvalid) as err:
        raise DataFileReadError(
            f"position delete file {delete_file.file_path} cannot be read: {err}"
        ) from err
