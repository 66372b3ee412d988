"""Test helpers: an order-independent checksum of a table's live rows, read by PyIceberg's own reader
(not by the code under test)."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import math
import uuid
from collections.abc import Sequence
from typing import Any

from pyiceberg.table import Table

_MASK = (1 << 64) - 1


def _normal(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value)  # keeps -0.0 apart from 0.0
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        # A map column comes back as a list of (key, value) pairs: order does not matter for a map.
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return sorted((repr(_normal(k)), repr(_normal(v))) for k, v in value)
        return [_normal(v) for v in value]
    return value


def row_digest(row: dict[str, Any]) -> int:
    """A 64-bit digest of one row, over every column."""
    text = repr(sorted((k, repr(_normal(v))) for k, v in row.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def live_checksum(table: Table, row_filter: str | None = None) -> tuple[int, int]:
    """``(row count, order-independent checksum)`` of the live rows, read by PyIceberg's scan."""
    table.refresh()
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    count, total = 0, 0
    for batch in scan.to_arrow_batch_reader():
        for row in batch.to_pylist():
            count += 1
            total = (total + row_digest(row)) & _MASK
    return count, total


def data_files(table: Table) -> list[Any]:
    """The live data files of the current snapshot."""
    table.refresh()
    return [task.file for task in table.scan().plan_files()]


def live_delete_entries(table: Table) -> list[tuple[Any, int]]:
    """(delete file, data sequence number) of every live delete entry of the current snapshot, read with
    the v3 manifest list layout (DVs keep their blob offset and size)."""
    from pyiceberg.manifest import ManifestContent

    from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries
    from airflow_provider_iceberg_exec.engine.meta.row_ids import read_manifest_list

    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        (entry.data_file, entry.sequence_number or 0)
        for manifest in read_manifest_list(table.io, snapshot)
        if manifest.content == ManifestContent.DELETES
        for entry in read_manifest_entries(table.io, manifest)
    ]


# -- compaction test support ---------------------------------------------------------------------------


def table_state(table: Table) -> tuple[int | None, list[str]]:
    """``(current snapshot id, sorted live data file paths)``: what "the table is unchanged" compares."""
    table.refresh()
    snapshot = table.current_snapshot()
    return (snapshot.snapshot_id if snapshot else None, sorted(f.file_path for f in data_files(table)))


def files_under(table: Table, folder: str = "data") -> set[str]:
    """Every file below ``<table location>/<folder>`` on local disk, as plain paths."""
    import os

    root = os.path.join(table.location().removeprefix("file://"), folder)
    return {os.path.join(d, name) for d, _dirs, names in os.walk(root) for name in names}


def local_path(path: str) -> str:
    """A ``file://`` location as a plain path."""
    return path.removeprefix("file://")


def commit_position_deletes(
    table: Table, data_file_path: str, positions: list[int], *, set_referenced_data_file: bool = True
) -> Any:
    """Write a position delete file for ``data_file_path`` and commit it in a ``delete`` snapshot.

    PyIceberg 0.12 cannot write delete manifests, so the manifest is written with the engine's own
    manifest writer (as in tests/integration/test_commit.py). Without ``referenced_data_file`` the file
    names its target only through its ``file_path`` bounds. Returns the delete DataFile.
    """
    return commit_position_delete_file(
        table, {data_file_path: positions}, set_referenced_data_file=set_referenced_data_file
    )


def commit_position_delete_file(
    table: Table, positions: dict[str, list[int]], *, set_referenced_data_file: bool = True
) -> Any:
    """Write one position delete file naming positions of one or more data files of one partition (the
    first path's), sorted by path and position, and commit it in a ``delete`` snapshot.

    ``referenced_data_file`` is set only when it names one data file and ``set_referenced_data_file``.
    A path that is not a live data file is written as given (a dangling position). Returns the DataFile.
    """
    import struct
    import uuid as _uuid

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    path_id, pos_id = 2147483546, 2147483545
    live = {f.file_path: f for f in data_files(table)}
    target = next(live[p] for p in positions if p in live)
    location = f"{table.location()}/data/pos-deletes-{_uuid.uuid4().hex}.parquet"
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(path_id)}),
            pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(pos_id)}),
        ]
    )
    rows = sorted((path, pos) for path, listed in positions.items() for pos in listed)
    data = pa.table({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]}, schema=schema)
    with table.io.new_output(location).create() as stream:
        pq.write_table(data, stream)
    single = len(positions) == 1
    delete_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=target.partition,
        record_count=len(rows),
        file_size_in_bytes=len(table.io.new_input(location)),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={path_id: rows[0][0].encode(), pos_id: struct.pack("<q", min(r[1] for r in rows))},
        upper_bounds={path_id: rows[-1][0].encode(), pos_id: struct.pack("<q", max(r[1] for r in rows))},
        referenced_data_file=rows[0][0] if single and set_referenced_data_file else None,
    )
    delete_file.spec_id = target.spec_id

    commit_delete_files(table, [delete_file])
    return delete_file


def commit_delete_files(
    table: Table, delete_files: Sequence[Any], branch: str = "main", *, data_files: Sequence[Any] = ()
) -> None:
    """A test-only RowDelta: one snapshot on ``branch`` adding ``delete_files`` (a delete manifest per
    spec) and ``data_files`` (then an ``overwrite``, so that both get its sequence number; else a
    ``delete``). PyIceberg cannot commit delete files; the product's own commits are not under test here.
    """
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer

    def spec_id(f: Any) -> int:  # PyIceberg's writer leaves a new DataFile's spec id unset
        known = getattr(f, "_spec_id", None)
        return table.metadata.default_spec_id if known is None else int(known)

    by_spec: dict[tuple[Any, int], list[Any]] = {}
    for f in data_files:
        by_spec.setdefault((ManifestContent.DATA, spec_id(f)), []).append(f)
    for f in delete_files:
        by_spec.setdefault((ManifestContent.DELETES, spec_id(f)), []).append(f)

    class _AddFiles(_FastAppendFiles):
        def _manifests(self) -> list[Any]:
            metadata = self._transaction.table_metadata
            manifests = []
            for (content, spec_id), files in by_spec.items():
                with new_manifest_writer(
                    format_version=2,
                    content=content,
                    spec=metadata.specs()[spec_id],
                    schema=metadata.schema(),
                    output_file=self.new_manifest_output(),
                    snapshot_id=self.snapshot_id,
                    avro_compression=self._compression,
                ) as writer:
                    for f in files:
                        writer.add_entry(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self.snapshot_id,
                                sequence_number=None,
                                file_sequence_number=None,
                                data_file=f,
                            )
                        )
                manifests.append(writer.to_manifest_file())
            return [*manifests, *self._existing_manifests()]

    tx = table.transaction()
    operation = Operation.OVERWRITE if data_files else Operation.DELETE
    producer = _AddFiles(operation, tx, table.io, branch=branch)
    producer._added_data_files = [*data_files, *delete_files]  # PyIceberg's summary counts them all
    producer.commit()
    tx.commit_transaction()
    table.refresh()


def parquet_data_page_counts(path: str) -> list[int]:
    """The number of data pages of each column chunk of row group 0, read from the page headers.

    PyArrow does not expose pages, so this walks the Thrift compact-protocol ``PageHeader`` of every
    page (type: field 1, compressed size: field 3) and skips the page bodies.
    """
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    counts = []
    with open(path, "rb") as f:
        data = f.read()
    row_group = metadata.row_group(0)
    for i in range(row_group.num_columns):
        chunk = row_group.column(i)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        end = start + chunk.total_compressed_size
        pos, pages = start, 0
        while pos < end:
            header, pos = _read_thrift_struct(data, pos)
            if header.get(1) in (0, 3):  # DATA_PAGE, DATA_PAGE_V2
                pages += 1
            pos += header[3]
        counts.append(pages)
    return counts


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _read_thrift_value(data: bytes, pos: int, kind: int) -> tuple[Any, int]:
    if kind in (1, 2):  # booleans carry their value in the type nibble
        return kind == 1, pos
    if kind == 3:
        return data[pos], pos + 1
    if kind in (4, 5, 6):
        raw, pos = _varint(data, pos)
        return (raw >> 1) ^ -(raw & 1), pos
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        size, pos = _varint(data, pos)
        return None, pos + size
    if kind in (9, 10):
        head = data[pos]
        pos += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        for _ in range(size):
            _value, pos = _read_thrift_value(data, pos, 1 if element == 2 else element)
        return None, pos
    if kind == 12:
        return _read_thrift_struct(data, pos)
    raise ValueError(f"unsupported thrift compact type {kind}")


def _read_thrift_struct(data: bytes, pos: int) -> tuple[dict[int, Any], int]:
    fields: dict[int, Any] = {}
    last = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, kind = head >> 4, head & 0x0F
        if delta:
            field_id = last + delta
        else:
            raw, pos = _varint(data, pos)
            field_id = (raw >> 1) ^ -(raw & 1)
        fields[field_id], pos = _read_thrift_value(data, pos, kind)
        last = field_id
