"""Reading and writing manifests, including the delete manifests PyIceberg 0.12 cannot write.

PyIceberg's ``ManifestWriterV2`` hard-codes ``content = data`` and reads ``data_file`` with the v2 field
layout, which drops ``referenced_data_file`` (field 143; optional in v2 since the spec added file-scoped
position deletes). A commit that rewrites a delete manifest would silently lose that field, so this
module:

- reads every manifest into the v3 ``data_file`` layout (a superset of v1 and v2, same positions for
  the first 16 fields), keeping ``referenced_data_file``;
- writes v1 and v2 manifests from that layout, for either content (``data`` or ``deletes``), with the
  v2 file schema extended by field 143 and the ``schema-id`` key the v2 spec requires;
- writes v3 manifests as Java 1.10 does: the v3 ``data_file`` type (fields 142-145) and the metadata
  keys ``schema``, ``partition-spec``, ``partition-spec-id``, ``format-version`` and ``content`` (no
  ``schema-id``). ADDED entries get a null ``first_row_id`` (inherited from the manifest list); EXISTING
  and DELETED entries carry the id they were read with (:mod:`.row_ids`).

The writers are PyIceberg's, subclassed in :mod:`~.io.pyiceberg_internals` (the one module of reading
and writing that touches PyIceberg's private API); this module gives them the schemas, the entry
conversion and the metadata.

Sequence numbers are written as given: ``None`` on an ADDED entry means "inherit the snapshot's",
anything else is explicit (spec, "Sequence Number Inheritance").

An entry written again with only a new status, snapshot id or sequence numbers (the filtered copy of a
manifest in a commit) keeps its ``data_file`` unchanged: :func:`iter_stored_entries` reads each entry with
its ``data_file``'s Avro bytes, and :func:`entry_copier` writes them as they are where that is exact (the
same encoding, and on v3 the ``first_row_id`` to be written already stored), encoding the entry otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    data_file_with_partition,
    manifest_entry_schema_with_data_file,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record, TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import (
    AvroRecords,
    add_copied_entry,
    copy_suffix,
    inherit_from_manifest,
    open_manifest_writer,
)
from airflow_provider_iceberg_exec.engine.meta.row_ids import (
    FIRST_ROW_ID_FIELD_ID,
    first_row_id,
    inherit_first_row_ids,
)

__all__ = [
    "REFERENCED_DATA_FILE_FIELD_ID",
    "StoredDataFile",
    "drop_metrics",
    "entry_copier",
    "iter_manifest_entries",
    "iter_stored_entries",
    "new_manifest_writer",
    "read_manifest_entries",
    "referenced_data_file",
    "to_record_layout",
    "v3_field",
    "with_first_row_id",
]

#: ``data_file.referenced_data_file``: the data file every delete in a delete file points at.
REFERENCED_DATA_FILE_FIELD_ID = 143
#: ``data_file.equality_ids`` and its element.
_EQUALITY_IDS_FIELD_ID, _EQUALITY_IDS_ELEMENT_ID = 135, 136

# In memory every DataFile uses the v3 layout; v2's 16 fields are its prefix.
_RECORD_VERSION: TableVersion = 3
_RECORD_FIELD_COUNT = len(DATA_FILE_TYPE[_RECORD_VERSION].fields)
_REFERENCED_DATA_FILE_POS = next(
    pos
    for pos, field in enumerate(DATA_FILE_TYPE[_RECORD_VERSION].fields)
    if field.field_id == REFERENCED_DATA_FILE_FIELD_ID
)


_PARTITION_POS = next(
    pos for pos, field in enumerate(DATA_FILE_TYPE[_RECORD_VERSION].fields) if field.name == "partition"
)
_FIRST_ROW_ID_POS = next(
    pos
    for pos, field in enumerate(DATA_FILE_TYPE[_RECORD_VERSION].fields)
    if field.field_id == FIRST_ROW_ID_FIELD_ID
)


def to_record_layout(data_file: DataFile) -> DataFile:
    """Return ``data_file`` in the v3 field layout this module writes from.

    PyIceberg builds data files with the v2 layout (16 fields); the missing v3 fields are ``None``.

    :param data_file: a data or delete file in the v2 or v3 layout.
    :returns: the same file (when already in the v3 layout) or a padded copy with the same ``spec_id``.
    """
    if len(data_file) == _RECORD_FIELD_COUNT:
        return data_file
    if len(data_file) != len(DATA_FILE_TYPE[2].fields):
        raise ValueError(f"unexpected data_file layout with {len(data_file)} fields: {data_file.file_path}")
    values = [data_file[pos] for pos in range(len(data_file))]
    padded = DataFile(*values, *([None] * (_RECORD_FIELD_COUNT - len(values))))
    # PyIceberg's writers leave spec_id unset; callers then fall back to the table's default spec.
    with contextlib.suppress(AttributeError):
        padded.spec_id = data_file.spec_id
    return padded


def with_first_row_id(data_file: DataFile, value: int | None) -> DataFile:
    """``data_file`` in the v3 layout with ``first_row_id`` set to ``value`` (a copy when padded)."""
    padded = to_record_layout(data_file)
    padded[_FIRST_ROW_ID_POS] = value
    return padded


def referenced_data_file(data_file: DataFile) -> str | None:
    """Return ``referenced_data_file`` of a delete file, or ``None`` (unknown, or not in the layout).

    :param data_file: a delete file, ideally read by :func:`read_manifest_entries`.
    :returns: the referenced data file location, if recorded.
    """
    if len(data_file) <= _REFERENCED_DATA_FILE_POS:
        return None
    value = data_file[_REFERENCED_DATA_FILE_POS]
    return value if isinstance(value, str) else None


#: position of each field in the v3 layout of a content file (a commit asks once per file it removes)
_V3_POSITIONS = {field.name: position for position, field in enumerate(DATA_FILE_TYPE[3].fields)}


def v3_field(data_file: DataFile, name: str) -> Any:
    """A format-version 3 field of a content file (``content_offset``, ...), or ``None`` when absent."""
    position = _V3_POSITIONS[name]  # every name asked for is a v3 field
    return data_file[position] if len(data_file) > position else None


def read_manifest_entries(
    io: FileIO, manifest: ManifestFile, *, discard_deleted: bool = True
) -> list[ManifestEntry]:
    """Read a manifest's entries in the v3 layout, with sequence numbers and spec id inherited.

    Same as :meth:`pyiceberg.manifest.ManifestFile.fetch_manifest_entry` except for the read schema,
    which keeps ``referenced_data_file``, and, for a manifest read in the v3 layout
    (:func:`~.row_ids.read_manifest_list`), the ``first_row_id`` each data file inherits.

    :param io: the table's FileIO.
    :param manifest: a manifest-list entry.
    :param discard_deleted: drop entries with status DELETED.
    :returns: the entries, in file order.
    """
    return list(iter_manifest_entries(io, manifest, discard_deleted=discard_deleted))


def drop_metrics(data_file: DataFile) -> DataFile:
    """``data_file`` with its column metrics (sizes, counts and bounds) set to ``None``, in place: most of
    a decoded entry, and read by no proof, validation or summary. Only for a file nothing else shares."""
    for position in _METRIC_POSITIONS:
        data_file[position] = None
    return data_file


#: where the column metrics sit in a content file (the same positions in the v2 and v3 layouts)
_METRIC_POSITIONS = tuple(
    position
    for position, field in enumerate(DATA_FILE_TYPE[2].fields)
    if field.name
    in (
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "lower_bounds",
        "upper_bounds",
    )
)


def _spec_equality_ids(data_file_type: StructType) -> StructType:
    """``equality_ids`` as the spec's ``list<int>``: PyIceberg 0.12 declares ``list<long>``
    (apache/iceberg-python#3840), which Java refuses in a manifest holding an equality delete entry
    (ClassCastException in BaseFile). Avro int and long share one encoding: only the schema changes."""
    fields = [
        NestedField(
            field_id=f.field_id,
            name=f.name,
            field_type=ListType(
                element_id=_EQUALITY_IDS_ELEMENT_ID, element_type=IntegerType(), element_required=True
            ),
            required=f.required,
            doc=f.doc,
        )
        if f.field_id == _EQUALITY_IDS_FIELD_ID
        else f
        for f in data_file_type.fields
    ]
    return StructType(*fields)


def _entry_schema(spec: PartitionSpec, schema: Schema, version: TableVersion) -> Schema:
    data_file_type = _spec_equality_ids(
        data_file_with_partition(partition_type=spec.partition_type(schema), format_version=version)
    )
    if version == 2:
        # v2 allows referenced_data_file (optional); PyIceberg's v2 schema omits it.
        field_143 = DATA_FILE_TYPE[_RECORD_VERSION].field(REFERENCED_DATA_FILE_FIELD_ID)
        if field_143 is None:  # pragma: no cover - guards a future PyIceberg layout change
            raise RuntimeError("PyIceberg's v3 data_file type has no referenced_data_file field")
        data_file_type = StructType(*data_file_type.fields, field_143)
    return manifest_entry_schema_with_data_file(format_version=version, data_file=data_file_type)


def _without_first_row_id(data_file: DataFile) -> DataFile:
    if first_row_id(data_file) is None:
        return data_file
    values = [data_file[pos] for pos in range(len(data_file))]
    values[_FIRST_ROW_ID_POS] = None
    copied = DataFile(*values)
    with contextlib.suppress(AttributeError):
        copied.spec_id = data_file.spec_id
    return copied


def _in_record_layout(entry: ManifestEntry) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=entry.status,
        snapshot_id=entry.snapshot_id,
        sequence_number=entry.sequence_number,
        file_sequence_number=entry.file_sequence_number,
        data_file=to_record_layout(entry.data_file),
    )


def new_manifest_writer(
    *,
    format_version: int,
    content: ManifestContent,
    spec: PartitionSpec,
    schema: Schema,
    output_file: OutputFile,
    snapshot_id: int,
    avro_compression: AvroCompressionCodec,
) -> ManifestWriter:
    """Open a manifest writer for a v1, v2 or v3 table; use it as a context manager.

    :param format_version: the table's format version, 1, 2 or 3.
    :param content: ``DATA`` or ``DELETES`` (v2 and v3).
    :param spec: the partition spec of every file written.
    :param schema: the table's current schema.
    :param output_file: where the manifest goes.
    :param snapshot_id: the snapshot being produced; written on ADDED and DELETED entries.
    :param avro_compression: the table's ``write.avro.compression-codec``.
    :returns: a writer whose :meth:`~pyiceberg.manifest.ManifestWriter.to_manifest_file` gives the
        manifest-list entry (sequence numbers left for the manifest-list writer to assign).
    :raises ValueError: for format version 4 or more, or delete content in a v1 table.
    """
    prepare: Callable[[ManifestEntry], ManifestEntry]
    if format_version == 1:
        if content != ManifestContent.DATA:
            raise ValueError("v1 tables have no delete manifests")
        prepare, extra_metadata = _in_record_layout, {}
        file_schema = _entry_schema(spec, schema, 1)
    elif format_version == 2:
        prepare = _content_checked(content)
        # v2 requires schema-id; PyIceberg's v2 writer always writes content "data".
        extra_metadata = {
            "content": "deletes" if content == ManifestContent.DELETES else "data",
            "schema-id": str(schema.schema_id),
        }
        file_schema = _entry_schema(spec, schema, 2)
    elif format_version == 3:
        prepare = _content_checked(content, v3=True)
        # Java 1.10's v3 writer: no schema-id (ManifestWriter.V3Writer).
        extra_metadata = {"content": "deletes" if content == ManifestContent.DELETES else "data"}
        file_schema = _entry_schema(spec, schema, 3)
    else:
        raise ValueError(f"cannot write manifests for format version {format_version}")
    return open_manifest_writer(
        format_version=format_version,
        content=content,
        spec=spec,
        schema=schema,
        output_file=output_file,
        snapshot_id=snapshot_id,
        avro_compression=avro_compression,
        file_schema=file_schema,
        record_schema=_entry_schema(spec, schema, _RECORD_VERSION),
        prepare=prepare,
        extra_metadata=extra_metadata,
    )


def _content_checked(
    content: ManifestContent, *, v3: bool = False
) -> Callable[[ManifestEntry], ManifestEntry]:
    """Convert an entry to the record layout, refusing a file of the other content.

    With ``v3``, an ADDED entry's ``first_row_id`` is written null: it is inherited from the manifest
    list (spec "Row Lineage"), and Java never writes one for ADDED entries.
    """

    def prepare(entry: ManifestEntry) -> ManifestEntry:
        is_delete_file = entry.data_file.content != DataFileContent.DATA
        if is_delete_file != (content == ManifestContent.DELETES):
            raise ValueError(f"cannot write {entry.data_file.content!r} into a {content!r} manifest")
        prepared = _in_record_layout(entry)
        if v3 and (entry.status == ManifestEntryStatus.ADDED or is_delete_file):
            prepared.data_file = _without_first_row_id(prepared.data_file)
        return prepared

    return prepare


def iter_manifest_entries(
    io: FileIO, manifest: ManifestFile, *, discard_deleted: bool = True
) -> Iterator[ManifestEntry]:
    """Stream a manifest's entries, as :func:`read_manifest_entries` reads them, one at a time.

    For passes over every entry of a large table (the manifest rewrite): no list of a manifest's entries
    is built.

    :param io: the table's FileIO.
    :param manifest: a manifest-list entry.
    :param discard_deleted: skip entries with status DELETED.
    :returns: the entries, in file order, with sequence numbers and spec id inherited.
    """
    records = AvroRecords(
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[_RECORD_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    )
    for entry in inherit_first_row_ids(records.records(), manifest):
        if not discard_deleted or entry.status != ManifestEntryStatus.DELETED:
            yield inherit_from_manifest(entry, manifest)


@dataclass(frozen=True)
class StoredDataFile:
    """An entry's ``data_file`` as its manifest stores it."""

    #: the Avro bytes of the ``data_file`` record
    data: bytes
    #: the manifest's Avro type of ``data_file`` (JSON), one object for all its entries
    avro_type: Any
    #: the ``first_row_id`` stored (before inheritance; ``None`` when null or not in the layout)
    first_row_id: int | None


def iter_stored_entries(
    io: FileIO, manifest: ManifestFile, *, discard_deleted: bool = True
) -> Iterator[tuple[ManifestEntry, StoredDataFile | None]]:
    """:func:`iter_manifest_entries`, each entry with its ``data_file`` as stored (``None`` when the
    manifest's entry schema is not one whose ``data_file`` bytes can be found: never for Java's or
    PyIceberg's)."""
    records = AvroRecords(
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[_RECORD_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    )
    header = _stored_header(records.avro_schema)
    avro_type = records.avro_schema["fields"][-1]["type"] if header is not None else None
    stored: list[StoredDataFile | None] = [None]  # the entry's being handled

    def entries() -> Iterator[ManifestEntry]:
        for entry, record in records:
            if header is not None:
                data = record[_header_length(record, header) :]
                stored[0] = StoredDataFile(data, avro_type, first_row_id(entry.data_file))
            yield entry

    for entry in inherit_first_row_ids(entries(), manifest):  # one entry out for each in, in order
        if not discard_deleted or entry.status != ManifestEntryStatus.DELETED:
            yield inherit_from_manifest(entry, manifest), stored[0]


def _stored_header(avro_schema: Any) -> tuple[bool, ...] | None:
    """For each field stored before ``data_file``, whether it is optional; ``None`` unless ``data_file``
    is last and every other field an int or long, optional ones as the spec's ``["null", long]``."""
    try:
        fields = avro_schema["fields"]
        if fields[-1].get("field-id") != 2:
            return None
        header = []
        for field in fields[:-1]:
            avro_type = field["type"]
            optional = isinstance(avro_type, list)
            if optional:
                if len(avro_type) != 2 or avro_type[0] != "null":
                    return None
                avro_type = avro_type[1]
            if isinstance(avro_type, dict):
                avro_type = avro_type.get("type")
            if avro_type not in ("int", "long"):
                return None
            header.append(optional)
        return tuple(header)
    except (KeyError, TypeError, IndexError, AttributeError):
        return None


def _header_length(record: bytes, header: tuple[bool, ...]) -> int:
    """Where ``data_file`` starts in an entry's bytes: after ``header``'s varints and union branches."""
    position = 0
    for optional in header:
        if optional:
            position += 1
            if record[position - 1] == 0:  # branch 0: null
                continue
        while record[position] & 0x80:
            position += 1
        position += 1
    return position


def entry_copier(writer: ManifestWriter) -> Callable[[ManifestEntry, StoredDataFile | None], None]:
    """Return "add this entry to ``writer``": with its ``data_file`` copied as stored where the copy is
    exact, encoded from the entry otherwise (as :meth:`~pyiceberg.manifest.ManifestWriter.add_entry`).

    An exact copy needs the stored Avro type to encode as the written one
    (:func:`~.io.pyiceberg_internals.data_file_copy_suffix`) and, in a v3 manifest, the stored
    ``first_row_id`` to be the one written: the inherited id of a data file, null for a delete file.
    """
    suffixes: dict[int, tuple[Any, bytes | None]] = {}
    v3 = writer.version >= 3
    deletes = writer.content() == ManifestContent.DELETES
    previous: list[Record] = []  # the partition of the entry added before

    def add(entry: ManifestEntry, stored: StoredDataFile | None) -> None:
        # PyIceberg's writer keeps every entry's partition for the manifest's summaries: entries of one
        # partition share one object (most of a manifest: ~120 bytes an entry, 6 MB at 50,000).
        partition = entry.data_file.partition
        if previous and partition == previous[0]:
            entry.data_file[_PARTITION_POS] = previous[0]
        else:
            previous[:] = [partition]
        if stored is None or entry.status == ManifestEntryStatus.ADDED:
            writer.add_entry(entry)
            return
        key = id(stored.avro_type)
        if key not in suffixes:
            suffixes[key] = (stored.avro_type, copy_suffix(writer, stored.avro_type))
        suffix = suffixes[key][1]
        is_delete_file = entry.data_file.content != DataFileContent.DATA
        if is_delete_file != deletes:
            raise ValueError(f"cannot write {entry.data_file.content!r} into a {writer.content()!r} manifest")
        if suffix is None or (
            v3 and stored.first_row_id != (None if is_delete_file else first_row_id(entry.data_file))
        ):
            writer.add_entry(entry)
            return
        add_copied_entry(writer, entry, stored.data + suffix if suffix else stored.data)

    return add
