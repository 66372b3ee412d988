"""The one module of reading and writing that relies on PyIceberg's private API (PyIceberg 0.12).

PyIceberg has no public API for what these small functions do; each wraps the private names it needs:

- :func:`batch_projection`: project a Parquet batch into the table schema by field id
  (``pyiceberg.io.pyarrow._to_requested_schema``);
- :func:`partition_projection_values`: the values of columns a file lacks but an identity partition fixes
  (``pyiceberg.io.pyarrow._get_column_projection_values``);
- :func:`parquet_writer_kwargs`: PyArrow's Parquet writer options from the table properties
  (``pyiceberg.io.pyarrow._get_parquet_writer_kwargs``);
- :func:`strict_metrics_evaluator`: "does every row of this file match?" from column metrics
  (``pyiceberg.expressions.visitors._StrictMetricsEvaluator``);
- :func:`inclusive_metrics_evaluator`: "may a row of this file match?" from column metrics, as PyIceberg's
  scan planning prunes (``pyiceberg.expressions.visitors._InclusiveMetricsEvaluator``);
- :func:`inherit_from_manifest`: sequence numbers and spec id an entry inherits from its manifest
  (``pyiceberg.manifest._inherit_from_manifest``);
- :func:`open_manifest_writer`: PyIceberg's v1 / v2 manifest writer (and a v3 one made from v2's) with
  the file and record schemas, the entry conversion and the extra metadata of our choice (overriding
  ``new_writer``, ``add_entry``, ``content`` and the private ``_meta`` property; reading ``_output_file``);
  :func:`add_copied_entry` writes an entry whose ``data_file`` is copied as stored (see below);
- :class:`AvroRecords`: the records of an Avro file each with its encoded bytes, read as ``AvroFile`` reads
  them (its public ``decoder``, ``header`` and ``reader``, and ``new_decoder``).

A manifest entry rewritten with a new status keeps its ``data_file`` unchanged (Java's
``ManifestFilterManager``), so the filtered copy of a manifest copies each ``data_file``'s Avro bytes
instead of encoding it again (most of a commit's time on tables of many small files, through PyIceberg's
pure-Python writer). A copy is exact only when the stored Avro type of ``data_file`` encodes like the one
written: :func:`data_file_copy_suffix` compares the two types structurally (field ids, unions, sizes).

tests/unit/engine/test_pyiceberg_private_api.py checks every one of these names against the installed
PyIceberg, and that no other engine module but :mod:`~.commit.pyiceberg_producer` uses a private one.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.encoder import BinaryEncoder
from pyiceberg.avro.file import SYNC_SIZE, AvroFile, AvroOutputFile
from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestWriter,
    ManifestWriterV1,
    ManifestWriterV2,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.avro.codecs import AvroCompressionCodec
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import InputFile, OutputFile
    from pyiceberg.manifest import DataFile, ManifestFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import TableVersion

__all__ = [
    "AvroRecords",
    "add_copied_entry",
    "batch_projection",
    "copy_suffix",
    "data_file_copy_suffix",
    "inclusive_metrics_evaluator",
    "inherit_from_manifest",
    "open_manifest_writer",
    "parquet_writer_kwargs",
    "partition_projection_values",
    "strict_metrics_evaluator",
]

#: Converts (and checks) an entry before the writer counts and writes it.
PrepareEntry = Callable[[ManifestEntry], ManifestEntry]


def batch_projection(
    table_schema: Schema,
    file_projection: Schema,
    *,
    format_version: int,
    missing_values: dict[int, Any],
) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """Return the projection of a Parquet file's batches into ``table_schema``, with field ids.

    As PyIceberg's ArrowScan does it: renamed, added and promoted columns; nanosecond timestamps
    downcast in v1 and v2 tables; ``missing_values`` (see :func:`partition_projection_values`) fill the
    columns the file lacks.

    :param file_projection: the file's schema, pruned to the columns read.
    """
    from pyiceberg.io.fileformat import FileFormatFactory
    from pyiceberg.io.pyarrow import _to_requested_schema
    from pyiceberg.manifest import FileFormat

    def project(batch: pa.RecordBatch) -> pa.RecordBatch:
        return _to_requested_schema(
            table_schema,
            file_projection,
            batch,
            downcast_ns_timestamp_to_us=format_version <= 2,
            include_field_ids=True,
            format_model=FileFormatFactory.get(FileFormat.PARQUET),
            projected_missing_fields=missing_values,
            allow_timestamp_tz_mismatch=True,
        )

    return project


def partition_projection_values(
    data_file: DataFile, table_schema: Schema, spec: PartitionSpec, file_field_ids: set[int]
) -> dict[int, Any]:
    """The values of the columns ``data_file`` lacks but an identity partition fixes, by field id."""
    from pyiceberg.io.pyarrow import _get_column_projection_values

    return _get_column_projection_values(data_file, table_schema, table_schema, spec, file_field_ids)


def parquet_writer_kwargs(properties: Mapping[str, str]) -> dict[str, Any]:
    """PyArrow ``ParquetWriter`` options from the table's ``write.parquet.*`` properties, as PyIceberg's."""
    from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs

    return _get_parquet_writer_kwargs(dict(properties))


def strict_metrics_evaluator(
    schema: Schema, expression: BooleanExpression, *, case_sensitive: bool = True
) -> Callable[[DataFile], bool]:
    """A test "do the column metrics prove every row of the file matches ``expression``?".

    ``False`` means "cannot tell". PyIceberg's strict evaluator does not know SQL's nulls: the caller
    checks null and NaN counts first.
    """
    from pyiceberg.expressions.visitors import _StrictMetricsEvaluator

    evaluator = _StrictMetricsEvaluator(schema, expression, case_sensitive=case_sensitive)
    return lambda data_file: bool(evaluator.eval(data_file))


def inclusive_metrics_evaluator(
    schema: Schema, expression: BooleanExpression, *, case_sensitive: bool = True
) -> Callable[[DataFile], bool]:
    """A test "may a row of the file match ``expression``?" from its column metrics (``True`` when unsure),
    exactly the one PyIceberg's ``ManifestGroupPlanner`` applies to every data file it plans (empty files
    excluded, as its default ``include_empty_files=false``)."""
    from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator

    evaluator = _InclusiveMetricsEvaluator(schema, expression, case_sensitive, False)
    return lambda data_file: bool(evaluator.eval(data_file))


def inherit_from_manifest(entry: ManifestEntry, manifest: ManifestFile) -> ManifestEntry:
    """``entry`` with the snapshot id, sequence numbers and spec id it inherits from ``manifest``."""
    from pyiceberg.manifest import _inherit_from_manifest

    return _inherit_from_manifest(entry, manifest)


class AvroRecords:
    """The records of an Avro file, read as ``AvroFile`` reads them, each with its encoded bytes.

    Iterating yields ``(record, record_bytes)``; :attr:`avro_schema` is the file's Avro schema (JSON).
    The file is read whole, as ``AvroFile`` reads it.
    """

    def __init__(
        self,
        input_file: InputFile,
        read_schema: Schema,
        read_types: dict[int, Callable[..., Any]],
        read_enums: dict[int, Callable[..., Any]],
    ) -> None:
        self._file = AvroFile[Any](input_file, read_schema, read_types, read_enums).__enter__()
        self.avro_schema: Any = json.loads(self._file.header.meta["avro.schema"])

    def __iter__(self) -> Iterator[tuple[Any, bytes]]:
        read = _flat_reader(self._file.reader)
        for block, block_decoder, count in self._blocks():
            for _ in range(count):
                start = block_decoder.tell()
                record = read(block_decoder)
                yield record, block[start : block_decoder.tell()]

    def records(self) -> Iterator[Any]:
        """The records alone."""
        read = _flat_reader(self._file.reader)
        for _, block_decoder, count in self._blocks():
            for _ in range(count):
                yield read(block_decoder)

    def _blocks(self) -> Iterator[tuple[bytes, Any, int]]:
        """Each block's bytes (uncompressed), a decoder of them and its record count."""
        avro_file = self._file
        decoder, sync = avro_file.decoder, avro_file.header.sync
        codec = avro_file.header.compression_codec()
        while True:
            try:
                count = decoder.read_int()
            except EOFError:
                return
            block = decoder.read_bytes()
            if codec:
                block = codec.decompress(block)
            yield block, new_decoder(block), count
            if decoder.read(SYNC_SIZE) != sync:
                raise ValueError(f"invalid sync marker in {avro_file.input_file.location}")


#: how :func:`_flat_reader` reads a field
_READ, _SKIP, _INT, _OPTIONAL, _OPTIONAL_INT = range(5)


def _flat_reader(reader: Any) -> Callable[[Any], Any]:
    """``reader.read``, PyIceberg's resolved reader of a record, with fewer Python calls per record.

    The same field readers read the same values into the same positions; only the struct and option
    glue is flattened: one loop over the fields, integers and union branches read inline, and each
    record built at once from its values instead of field by field (reading manifest entries was most of
    a commit's time on tables of many small files). Records of any other reader, or built by anything
    but a plain ``Record`` class, are read by PyIceberg's own reader.
    """
    from pyiceberg.avro.reader import StructReader
    from pyiceberg.typedef import Record

    create = getattr(reader, "create_struct", None)
    if (
        type(reader) is not StructReader
        or not isinstance(create, type)
        or not issubclass(create, Record)
        or create.__init__ is not Record.__init__
    ):
        return reader.read  # type: ignore[no-any-return]
    size = 1 + max((pos for pos, _ in reader.field_readers if pos is not None), default=-1)
    fields = tuple(_flat_field(pos, field) for pos, field in reader.field_readers)

    def read(decoder: Any) -> Any:
        values: list[Any] = [None] * size
        read_int = decoder.read_int
        for pos, kind, field_read in fields:
            if kind == _READ:
                values[pos] = field_read(decoder)  # type: ignore[misc]
            elif kind == _INT:
                values[pos] = read_int()
            elif kind == _SKIP:
                field_read(decoder)  # type: ignore[misc]
            elif read_int() > 0:  # a union's branch: 0 is null (spec)
                values[pos] = read_int() if kind == _OPTIONAL_INT else field_read(decoder)  # type: ignore[misc]
        return create(*values)

    return read


def _flat_field(pos: int | None, field: Any) -> tuple[int, int, Callable[[Any], Any] | None]:
    """How :func:`_flat_reader` reads one field: (position, kind, reader)."""
    from pyiceberg.avro.reader import IntegerReader, OptionReader

    if pos is None:
        return -1, _SKIP, field.skip
    if type(field) is OptionReader:
        if type(field.option) is IntegerReader:
            return pos, _OPTIONAL_INT, None
        return pos, _OPTIONAL, _flat_reader(field.option)
    if type(field) is IntegerReader:
        return pos, _INT, None
    return pos, _READ, _flat_reader(field)


def _avro_encoding(avro_type: Any) -> Any:
    """What decides the binary encoding of a value of ``avro_type``, with the Iceberg field ids.

    Two types with equal results encode every datum into the same bytes and are read back as the same
    fields. Names, docs and logical types are dropped (the encoding is the underlying type's); ``int``
    and ``long`` share one encoding (zig-zag varints), so ``equality_ids`` declared ``list<long>`` by
    PyIceberg and ``list<int>`` by the spec match. A type by name (a record used twice) is refused.
    """
    if isinstance(avro_type, list):
        return ("union", *(_avro_encoding(branch) for branch in avro_type))
    if isinstance(avro_type, str):
        if avro_type in ("int", "long"):
            return "varint"
        if avro_type in ("null", "boolean", "float", "double", "bytes", "string"):
            return avro_type
        raise ValueError(f"named Avro type {avro_type!r}")
    kind = avro_type["type"]
    if kind == "record":
        return (
            "record",
            tuple((f.get("field-id"), _avro_encoding(f["type"])) for f in avro_type["fields"]),
        )
    if kind == "array":
        return ("array", avro_type.get("element-id"), _avro_encoding(avro_type["items"]))
    if kind == "map":
        return (
            "map",
            avro_type.get("key-id"),
            avro_type.get("value-id"),
            _avro_encoding(avro_type["values"]),
        )
    if kind == "fixed":
        return ("fixed", avro_type["size"])
    if kind == "enum":
        raise ValueError("Avro enum")
    return _avro_encoding(kind)  # a primitive with a logical type


def data_file_copy_suffix(stored: Any, written: Any) -> bytes | None:
    """The bytes that make a ``data_file`` stored with Avro type ``stored`` a ``data_file`` of type
    ``written``, or ``None`` when no copy is exact.

    ``b""`` when both encode alike; when ``written`` only adds optional fields after ``stored``'s (the
    ``referenced_data_file`` our v2 manifests declare and PyIceberg's do not), one null for each.
    """
    try:
        source, target = _avro_encoding(stored), _avro_encoding(written)
    except (KeyError, TypeError, ValueError):
        return None
    if source == target:
        return b""
    if source[0] != "record" or target[0] != "record":
        return None
    source_fields, target_fields = source[1], target[1]
    if target_fields[: len(source_fields)] != source_fields:
        return None
    extra = target_fields[len(source_fields) :]
    if not all(t[0] == "union" and t[1] == "null" for _, t in extra):
        return None
    return b"\x00" * len(extra)  # union branch 0: null


def copy_suffix(writer: ManifestWriter, stored: Any) -> bytes | None:
    """:func:`data_file_copy_suffix` of a ``data_file`` stored with Avro type ``stored`` into the manifest
    ``writer`` writes, ``None`` when it cannot be copied there (or ``writer`` is not ours)."""
    if not isinstance(writer, (_ManifestWriterV1, _ManifestWriterV2)):
        return None
    layout = writer.entry_layout
    if layout.entry_header() is None:
        return None
    return data_file_copy_suffix(stored, layout.written_data_file())


def add_copied_entry(writer: ManifestWriter, entry: ManifestEntry, data_file: bytes) -> None:
    """Add ``entry`` to one of our manifest writers with its ``data_file`` written as ``data_file``, bytes
    in the writer's layout (see :func:`data_file_copy_suffix` and :meth:`_EntryLayout.written_data_file`).

    The entry is counted as :meth:`~pyiceberg.manifest.ManifestWriter.add_entry` counts it (files, rows,
    partition summaries, minimum sequence number); its status, snapshot id and sequence numbers are
    encoded from ``entry``, and its ``data_file`` is not read but for its record count and partition.
    """
    if not isinstance(writer, (_ManifestWriterV1, _ManifestWriterV2)) or writer.avro_file is None:
        raise TypeError("entries are copied only by an open manifest writer of open_manifest_writer")
    writer.avro_file.copy_next(data_file)
    ManifestWriter.add_entry(writer, entry)


def open_manifest_writer(
    *,
    format_version: int,
    content: ManifestContent,
    spec: PartitionSpec,
    schema: Schema,
    output_file: OutputFile,
    snapshot_id: int,
    avro_compression: AvroCompressionCodec,
    file_schema: Schema,
    record_schema: Schema,
    prepare: PrepareEntry,
    extra_metadata: Mapping[str, str],
) -> ManifestWriter:
    """PyIceberg's manifest writer for format version 1, 2 or 3, with our schemas, entries and metadata.

    PyIceberg 0.12 has no v3 writer: ours is its v2 writer with ``format-version`` 3 in the metadata
    (the file schema, entries and ``content`` key are ours, as for v2).

    :param content: the manifest content (v2; a v1 manifest is always ``DATA``).
    :param file_schema: the Avro file schema of the manifest entries.
    :param record_schema: the schema of the entries given to ``add_entry`` (after ``prepare``).
    :param prepare: applied to every entry before it is counted and written.
    :param extra_metadata: Avro file metadata added to (or replacing) PyIceberg's (v2 and v3).
    """
    layout = _EntryLayout(file_schema, record_schema, prepare, content, dict(extra_metadata))
    if format_version == 1:
        return _ManifestWriterV1(spec, schema, output_file, snapshot_id, avro_compression, layout)
    if format_version == 3:
        return _ManifestWriterV3(spec, schema, output_file, snapshot_id, avro_compression, layout)
    return _ManifestWriterV2(spec, schema, output_file, snapshot_id, avro_compression, layout)


@dataclass(frozen=True)
class _EntryLayout:
    """What our manifest writers do differently from PyIceberg's."""

    file_schema: Schema
    record_schema: Schema
    prepare: PrepareEntry
    content: ManifestContent
    extra_metadata: dict[str, str]

    def avro_writer(self, output_file: OutputFile, metadata: dict[str, str]) -> _BlockedAvroOutputFile:
        return _BlockedAvroOutputFile(
            output_file=output_file,
            file_schema=self.file_schema,
            record_schema=self.record_schema,
            schema_name="manifest_entry",
            metadata=metadata,
            header=self.entry_header(),
        )

    def entry_header(self) -> tuple[tuple[int, bool], ...] | None:
        """The fields written before ``data_file``, each as (position in the record, optional), when all
        are integers and ``data_file`` comes last (as in every version's entry schema); else ``None``."""
        from pyiceberg.types import IntegerType, LongType

        fields = self.file_schema.fields
        record_positions = {f.field_id: pos for pos, f in enumerate(self.record_schema.fields)}
        if not fields or fields[-1].field_id != _DATA_FILE_FIELD_ID:
            return None
        header = []
        for field in fields[:-1]:
            if (
                not isinstance(field.field_type, (IntegerType, LongType))
                or field.field_id not in record_positions
            ):
                return None
            header.append((record_positions[field.field_id], not field.required))
        return tuple(header)

    def written_data_file(self) -> Any:
        """The Avro type of ``data_file`` in the file written (JSON, as in its header)."""
        from pyiceberg.utils.schema_conversion import AvroSchemaConversion

        avro: Any = AvroSchemaConversion().iceberg_to_avro(self.file_schema, schema_name="manifest_entry")
        return next(f["type"] for f in avro["fields"] if f.get("field-id") == _DATA_FILE_FIELD_ID)


#: ``manifest_entry.data_file``
_DATA_FILE_FIELD_ID = 2


#: Entries are gathered into Avro blocks of about this many bytes (Java's Avro sync interval).
_AVRO_BLOCK_BYTES = 64 * 1024


def _varint(integer: int) -> bytes:
    """Avro's zig-zag varint of ``integer``, as ``BinaryEncoder.write_int`` writes it."""
    datum = (integer << 1) ^ (integer >> 63)
    out = bytearray()
    while datum & ~0x7F:
        out.append((datum & 0x7F) | 0x80)
        datum >>= 7
    out.append(datum)
    return bytes(out)


#: The varints of the small integers a manifest entry is mostly made of (field ids, counts, lengths).
_SMALL_INT_MIN, _SMALL_INT_MAX = -(1 << 13), 1 << 14
_SMALL_VARINTS = [_varint(i) for i in range(_SMALL_INT_MIN, _SMALL_INT_MAX)]


class _ManifestEntryEncoder(BinaryEncoder):
    """PyIceberg's encoder, the same bytes, with one write per integer instead of one per byte: a manifest
    entry with column metrics is about 130 integers, and writing them was most of a commit's time on
    tables of many small files."""

    def write_int(self, integer: int) -> None:
        if _SMALL_INT_MIN <= integer < _SMALL_INT_MAX:
            self._output_stream.write(_SMALL_VARINTS[integer - _SMALL_INT_MIN])
        else:
            self._output_stream.write(_varint(integer))


#: Encoded entry headers a writer keeps (a few in a filtered copy: one per snapshot that added files).
_HEADERS_KEPT = 1024


class _BlockedAvroOutputFile(AvroOutputFile[ManifestEntry]):
    """PyIceberg's Avro writer with entries gathered into blocks of about 64 KiB, as Java writes them.

    PyIceberg's ``ManifestWriter.add_entry`` writes a block per entry (its own codec frame and 16-byte sync
    marker): 1M entries made 336 MB of manifests against Java's 132 MB, and most of the writing time.
    """

    def __init__(
        self,
        output_file: OutputFile,
        file_schema: Schema,
        schema_name: str,
        record_schema: Schema,
        metadata: dict[str, str],
        header: tuple[tuple[int, bool], ...] | None,
    ) -> None:
        super().__init__(output_file, file_schema, schema_name, record_schema, metadata)
        self.header = header
        self._copied: bytes | None = None
        self._headers: dict[tuple[Any, ...], bytes] = {}

    def __enter__(self) -> _BlockedAvroOutputFile:
        super().__enter__()
        self._pending = io.BytesIO()
        self._pending_encoder = _ManifestEntryEncoder(self._pending)
        self._pending_count = 0
        return self

    def copy_next(self, data_file: bytes) -> None:
        """Write the next entry with ``data_file`` as its ``data_file``'s bytes."""
        if self.header is None:
            raise ValueError("this manifest's entry schema has no copyable layout")
        self._copied = data_file

    def write_block(self, objects: list[ManifestEntry]) -> None:
        for entry in objects:
            if self._copied is not None:
                self._write_copied(entry, self._copied)
                self._copied = None
            else:
                self.writer.write(self._pending_encoder, entry)
            self._pending_count += 1
        if self._pending.tell() >= _AVRO_BLOCK_BYTES:
            self._flush_block()

    def _write_copied(self, entry: ManifestEntry, data_file: bytes) -> None:
        values = tuple(entry[position] for position, _ in self.header or ())
        # The entries of a filtered copy share a few headers (status, snapshot id, sequence numbers).
        header = self._headers.get(values)
        if header is None:
            out = io.BytesIO()
            encoder = _ManifestEntryEncoder(out)
            for (_, optional), value in zip(self.header or (), values, strict=True):
                if optional:
                    if value is None:
                        encoder.write_int(0)
                        continue
                    encoder.write_int(1)
                encoder.write_int(int(value))
            if len(self._headers) >= _HEADERS_KEPT:
                self._headers.clear()
            header = self._headers[values] = out.getvalue()
        self._pending.write(header)
        self._pending.write(data_file)

    def tell(self) -> int:
        """Bytes written so far, the pending block's uncompressed bytes included (for rolling)."""
        return super().tell() + self._pending.tell()

    def _flush_block(self) -> None:
        if not self._pending_count:
            return
        content = self._pending.getvalue()
        self.encoder.write_int(self._pending_count)
        if codec := self.compression_codec():
            compressed, length = codec.compress(content)
            self.encoder.write_int(length)
            self.encoder.write(compressed)
        else:
            self.encoder.write_int(len(content))
            self.encoder.write(content)
        self.encoder.write(self.sync_bytes)
        self._pending = io.BytesIO()
        self._pending_encoder = _ManifestEntryEncoder(self._pending)
        self._pending_count = 0

    def __exit__(
        self, exctype: type[BaseException] | None, excinst: BaseException | None, exctb: TracebackType | None
    ) -> None:
        if exctype is None:
            self._flush_block()
        super().__exit__(exctype, excinst, exctb)


class _ManifestWriterV1(ManifestWriterV1):
    """PyIceberg's v1 writer, fed with entries in our record layout."""

    def __init__(
        self,
        spec: PartitionSpec,
        schema: Schema,
        output_file: OutputFile,
        snapshot_id: int,
        avro_compression: AvroCompressionCodec,
        layout: _EntryLayout,
    ) -> None:
        super().__init__(spec, schema, output_file, snapshot_id, avro_compression)
        self.entry_layout = layout
        self.avro_file: _BlockedAvroOutputFile | None = None

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        self.avro_file = self.entry_layout.avro_writer(self._output_file, self._meta)
        return self.avro_file

    def add_entry(self, entry: ManifestEntry) -> ManifestWriter:
        return super().add_entry(self.entry_layout.prepare(entry))


class _ManifestWriterV2(ManifestWriterV2):
    """PyIceberg's v2 writer with a content and extra metadata of our choice."""

    def __init__(
        self,
        spec: PartitionSpec,
        schema: Schema,
        output_file: OutputFile,
        snapshot_id: int,
        avro_compression: AvroCompressionCodec,
        layout: _EntryLayout,
    ) -> None:
        super().__init__(spec, schema, output_file, snapshot_id, avro_compression)
        self.entry_layout = layout
        self.avro_file: _BlockedAvroOutputFile | None = None

    def content(self) -> ManifestContent:
        return self.entry_layout.content

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, **self.entry_layout.extra_metadata}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        self.avro_file = self.entry_layout.avro_writer(self._output_file, self._meta)
        return self.avro_file

    def add_entry(self, entry: ManifestEntry) -> ManifestWriter:
        return super().add_entry(self.entry_layout.prepare(entry))


class _ManifestWriterV3(_ManifestWriterV2):
    """Our v2 writer declaring format version 3 (the ``format-version`` key of ``_meta``)."""

    @property
    def version(self) -> TableVersion:
        return 3
