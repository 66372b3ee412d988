"""Local staging: rows written once, read back by a sort or a join that spills.

:class:`StagedParquet` is for DataFusion, which reads Parquet; :class:`StagedArrow`, for the engine's own
reads, writes Arrow's IPC format, which takes no encoding.

A staged set is a directory of part files that DataFusion reads as one table. A Parquet writer keeps the
metadata of every row group it wrote until it closes (about 850 bytes per column chunk), so a single
staged file of a few GB in small row groups held hundreds of MB of it: a part is closed after a fixed
number of column chunks instead, which keeps the writer's memory flat whatever the size. Row groups stay
small because DataFusion buffers a whole row group per scan (16 MiB row groups cost a sort ~100 MiB
more peak RSS than 256 KiB ones). No dictionary encoding: only DataFusion reads these files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["StagedArrow", "StagedParquet", "register_staged", "remove_staged"]

#: Rows buffered before a row group is written.
ROW_GROUP_BYTES = 256 * 1024
#: Column chunks (row groups x columns) per part file: a few MB of writer metadata at most.
CHUNKS_PER_PART = 4096


class _Buffered:
    """Batches written to a stage are buffered until ``buffer_bytes`` of them, then flushed as one table."""

    def __init__(self, path: str, buffer_bytes: int) -> None:
        self.path = path
        self.rows = 0
        self.total_bytes = 0
        self._buffer_bytes = buffer_bytes
        self._buffered: list[pa.RecordBatch] = []
        self._bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (every batch of one stager has the same schema)."""
        self._buffered.append(batch)
        self._bytes += batch.nbytes
        self.total_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._bytes >= self._buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        raise NotImplementedError

    def _take(self) -> pa.Table | None:
        """The buffered batches as one table, the buffer emptied (``None``: it was empty)."""
        import pyarrow as pa

        if not self._buffered:
            return None
        table = pa.Table.from_batches(self._buffered)
        self._buffered, self._bytes = [], 0
        return table


class StagedParquet(_Buffered):
    """Write record batches into a directory of local LZ4 Parquet part files.

    :param path: the directory to create; register it with :func:`register_staged`.
    :param row_group_bytes: bytes buffered per row group.
    :param chunks_per_part: column chunks per part file; lower it when many stagers are open at once.
    """

    def __init__(
        self, path: str, row_group_bytes: int = ROW_GROUP_BYTES, chunks_per_part: int = CHUNKS_PER_PART
    ) -> None:
        super().__init__(path, row_group_bytes)
        self._chunks_per_part = chunks_per_part
        self._writer: Any = None
        self._parts = 0
        self._chunks = 0

    def _flush(self) -> None:
        table = self._take()
        if table is None:
            return
        # A single batch can be bigger than a row group (reads come in ~4 MiB batches): split it.
        rows_per_group = max(1, int(table.num_rows * self._buffer_bytes / max(1, table.nbytes)))
        while table.num_rows:
            groups_left = max(1, (self._chunks_per_part - self._chunks) // max(1, table.num_columns))
            piece = table.slice(0, groups_left * rows_per_group)
            table = table.slice(piece.num_rows)
            self._part_writer(piece.schema).write_table(piece, row_group_size=rows_per_group)
            self._chunks += -(-piece.num_rows // rows_per_group) * piece.num_columns
            if self._chunks >= self._chunks_per_part:
                self._writer.close()
                self._writer, self._chunks = None, 0

    def _part_writer(self, schema: pa.Schema) -> Any:
        import pyarrow.parquet as pq

        if self._writer is None:
            os.makedirs(self.path, exist_ok=True)
            part = os.path.join(self.path, f"part-{self._parts:05d}.parquet")
            self._writer = pq.ParquetWriter(part, schema, compression="lz4", use_dictionary=False)
            self._parts += 1
        return self._writer

    def close(self) -> bool:
        """Flush and close; return whether anything was written."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self._parts > 0

    def remove(self) -> None:
        """Close and delete everything written."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._buffered = []
        remove_staged(self.path)


class StagedArrow(_Buffered):
    """Write record batches to one local file of Arrow's IPC stream format, for the engine to read back.

    Parquet encodes each column and computes its statistics: staging the 10M delete rows of bench/mor.py's
    200M-row table in 16 KiB row groups (one stager per hash range, so each buffers little) took 9.8 s of
    its 25 s of mapping in ``ParquetWriter.write_table``. A batch of the IPC format is its buffers as they
    are, written here in one system call.

    :param path: the file to write.
    :param batch_bytes: bytes buffered before they are written as one batch.
    """

    def __init__(self, path: str, batch_bytes: int = ROW_GROUP_BYTES) -> None:
        super().__init__(path, batch_bytes)
        self._fd: int | None = None

    def _flush(self) -> None:
        table = self._take()
        if table is None:
            return
        batches = table.combine_chunks().to_batches()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            _write_all(self._fd, batches[0].schema.serialize())
        for batch in batches:
            _write_all(self._fd, batch.serialize())

    def close(self) -> bool:
        """Flush and close; return whether anything was written."""
        self._flush()
        if self._fd is not None:
            _write_all(self._fd, _END_OF_STREAM)
            os.close(self._fd)
            self._fd = None
        return os.path.exists(self.path)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The batches written, in their order (none when nothing was)."""
        import pyarrow as pa

        if not os.path.exists(self.path):
            return
        with pa.memory_map(self.path) as source:
            yield from pa.ipc.open_stream(source)

    def remove(self) -> None:
        """Close and delete everything written."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._buffered = []
        remove_staged(self.path)


#: the end-of-stream marker of Arrow's IPC stream format: a continuation token and a zero length
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def register_staged(ctx: Any, name: str, path: str) -> None:
    """Register a staged directory as table ``name``, its schema read from one part.

    Given no schema, DataFusion infers it from every part's footer before the first row is read.
    """
    import pyarrow.parquet as pq

    first = min(f for f in os.listdir(path) if f.endswith(".parquet"))
    ctx.register_parquet(name, path, schema=pq.read_schema(os.path.join(path, first)))


def remove_staged(path: str | None) -> None:
    """Delete a staged directory (or file), if it exists."""
    if path is None:
        return
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)
