"""Convert pyiceberg ``DataFile`` entries to and from the Iceberg REST ``ContentFile`` JSON.

This is the wire shape of the XCom payloads (``data_files`` items): plain JSON with the REST spec's keys
(``rest-catalog-open-api.yaml`` ``ContentFile``/``DataFile``/``PositionDeleteFile``/``EqualityDeleteFile``),
so it survives ``json.dumps`` and Airflow's XCom backends. pyiceberg's own ``_rest_file_to_data_file`` drops
the bounds and most optional fields; this codec round-trips every field a manifest entry stores, exactly.

Encoding decisions:

* Every optional field is written only when it is set, for every content type (Java's ``ContentFileParser``
  does the same): position-delete files keep their ``file_path`` bounds, which planning relies on.
* ``content`` is ``data``, ``position-deletes`` or ``equality-deletes``; ``file-format`` is lower case.
* Partition values and bounds use the Iceberg JSON single-value serialisation (:mod:`.json_values`):
  numbers and booleans as JSON, decimals as strings with exactly ``scale`` fraction digits, dates
  ``YYYY-MM-DD``, times ``HH:MM:SS.ffffff``, timestamps ``YYYY-MM-DDTHH:MM:SS.ffffff`` (``+00:00`` for
  ``timestamptz``, nine fraction digits for the ``_ns`` types), UUIDs in canonical form and fixed/binary
  as upper-case hex. Non-finite float partition values are the strings ``"NaN"``, ``"Infinity"`` and
  ``"-Infinity"``.
* Partition values are held the way pyiceberg holds them in a ``Record``: dates, times and timestamps as
  ints (days, micros or nanos since the epoch/midnight; ``day()`` yields days although its result type
  is ``date``), decimals as ``Decimal``, fixed/binary as ``bytes``. UUIDs are accepted as ``UUID`` or
  16 ``bytes`` (pyiceberg's write path uses bytes) and always decode to ``UUID``, as manifests read back.
  A partition field whose source column was dropped has type ``unknown``; its value must then be a
  JSON scalar and is passed through unchanged.
* A bound is written typed only if decoding the JSON value gives back the very same bytes. Any other
  bound -- its column was dropped from the schema, a promoted ``int``/``float`` column still carrying
  4-byte bounds, a string truncated inside a UTF-8 sequence, a non-finite float -- goes, as upper-case
  hex of the raw bytes, into the extension keys ``raw-lower-bounds``/``raw-upper-bounds`` (same
  ``{"keys": [...], "values": [...]}`` shape). A field id appears in one of the two maps, never both.
  REST readers ignore unknown keys and so see fewer bounds, which is safe: a missing bound only makes
  pruning less precise, never wrong.
* pyiceberg 0.12 reads and writes manifests with the v2 ``DataFile`` layout: the v3 fields
  (``first_row_id``, ``referenced_data_file``, ``content_offset``, ``content_size_in_bytes``) have no
  properties and exist only in a ``DataFile.from_args(_table_format_version=3, ...)``. They are read
  positionally when present, and a decoded document builds the v3 layout only if it carries one of them.

Decoding accepts what the REST spec and Java's parser produce: ``null`` for an absent optional key,
upper- or lower-case hex and file formats, Java <= 1.10 content names (``POSITION_DELETES``), fewer
fraction digits in times, ``Z`` or any UTC offset in ``timestamptz`` values. Unknown keys are ignored.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
)

from airflow_provider_iceberg_exec.engine.documents.packed import PackedDataFiles
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
from airflow_provider_iceberg_exec.engine.meta.json_values import (
    VALUE_ERRORS,
    expect,
    from_hex,
    to_hex,
    value_codec,
)

__all__ = ["content_of_json", "data_file_from_json", "data_file_to_json", "removed_files_from_json"]

_CONTENT_NAMES = {
    DataFileContent.DATA: "data",
    DataFileContent.POSITION_DELETES: "position-deletes",
    DataFileContent.EQUALITY_DELETES: "equality-deletes",
}
# Java <= 1.10 wrote the enum names; accept them on input.
_CONTENT_BY_NAME = {
    **{name: content for content, name in _CONTENT_NAMES.items()},
    **{content.name: content for content in _CONTENT_NAMES},
}


def content_of_json(doc: Mapping[str, Any]) -> DataFileContent | None:
    """The content of a content-file JSON object as :func:`data_file_from_json` reads it; ``None`` when
    it names none."""
    return _CONTENT_BY_NAME.get(doc.get("content"))  # type: ignore[arg-type]


# Metadata columns of position-delete files (spec "Reserved Field IDs"); they are not in the table schema.
_RESERVED_BOUND_TYPES: dict[int, PrimitiveType] = {2147483546: StringType(), 2147483545: LongType()}

_V2_LENGTH = len(DATA_FILE_TYPE[2].fields)
_V3_LENGTH = len(DATA_FILE_TYPE[3].fields)
_V3_POSITIONS = {field.name: pos for pos, field in enumerate(DATA_FILE_TYPE[3].fields)}

_COUNT_MAPS = (
    ("column-sizes", "column_sizes"),
    ("value-counts", "value_counts"),
    ("null-value-counts", "null_value_counts"),
    ("nan-value-counts", "nan_value_counts"),
)
# (typed key, raw-hex extension key, DataFile attribute)
_BOUND_MAPS = (
    ("lower-bounds", "raw-lower-bounds", "lower_bounds"),
    ("upper-bounds", "raw-upper-bounds", "upper_bounds"),
)
# (JSON key, v3 DataFile field name, JSON type)
_V3_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("first-row-id", "first_row_id", int),
    ("referenced-data-file", "referenced_data_file", str),
    ("content-offset", "content_offset", int),
    ("content-size-in-bytes", "content_size_in_bytes", int),
)


# ---------------------------------------------------------------------------------------------------------
# Bounds: bytes <-> typed JSON value, or raw hex when the typed form would not give back the same bytes
# ---------------------------------------------------------------------------------------------------------


#: A bound type's (raw bytes -> JSON value or None, JSON value -> raw bytes).
_BoundCoding = tuple[Callable[[bytes], Any], Callable[[Any], bytes]]


def _int_bound(width: int) -> _BoundCoding:
    bits = 8 * width

    def encode(raw: bytes) -> int | None:
        return int.from_bytes(raw, "little", signed=True) if len(raw) == width else None

    def decode(value: Any) -> bytes:
        number = expect(value, int, "an integer")
        if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
            raise ValueError(f"{number} does not fit in {bits} bits")
        return int(number).to_bytes(width, "little", signed=True)

    return encode, decode


def _string_bound_value(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _clock_bound(field_type: PrimitiveType, width: int) -> _BoundCoding:
    # Dates, times and timestamps: a little-endian integer of the type's width, written as text.
    codec = value_codec(field_type)
    int_encode, int_decode = _int_bound(width)

    def encode(raw: bytes) -> Any:
        number = int_encode(raw)
        try:
            return None if number is None else codec.encode(field_type, number)
        except VALUE_ERRORS:  # outside the years 1-9999 the text has no form: keep the bytes
            return None

    return encode, lambda value: int_decode(codec.decode(field_type, value))


def _float_bound(field_type: PrimitiveType, form: str) -> _BoundCoding:
    codec, packer = value_codec(field_type), struct.Struct(form)

    def encode(raw: bytes) -> float | None:
        if len(raw) != packer.size:
            return None
        value: float = packer.unpack(raw)[0]
        return value if math.isfinite(value) else None  # non-finite: REST numbers cannot carry it

    return encode, lambda value: packer.pack(codec.decode(field_type, value))


#: Bytes <-> JSON for the commonest bound types, exact by construction (a little-endian number of the
#: type's width, UTF-8 text), so they skip the generic codecs' round-trip check: a plan or a commit codes
#: a bound per column of every file, and that check was most of the codec's time on many small files.
#: Booleans and decimals stay on the checked path (a byte 0x02, a decimal's non-minimal bytes).
_DIRECT_BOUNDS: dict[type, _BoundCoding] = {
    IntegerType: _int_bound(4),
    LongType: _int_bound(8),
    StringType: (_string_bound_value, lambda value: expect(value, str, "a string").encode("utf-8")),
    FloatType: _float_bound(FloatType(), "<f"),
    DoubleType: _float_bound(DoubleType(), "<d"),
    DateType: _clock_bound(DateType(), 4),
    TimeType: _clock_bound(TimeType(), 8),
    TimestampType: _clock_bound(TimestampType(), 8),
    TimestamptzType: _clock_bound(TimestamptzType(), 8),
    TimestampNanoType: _clock_bound(TimestampNanoType(), 8),
    TimestamptzNanoType: _clock_bound(TimestamptzNanoType(), 8),
}


def _typed_bound(field_type: PrimitiveType | None, raw: bytes) -> Any:
    """Return the typed JSON value of a bound, or None when only the raw bytes are exact."""
    if field_type is None or isinstance(field_type, UnknownType):
        return None
    direct = _DIRECT_BOUNDS.get(type(field_type))
    if direct is not None:
        return direct[0](raw)
    try:
        codec = value_codec(field_type)
        value = codec.encode(field_type, from_bytes(field_type, raw))
        if isinstance(field_type, (FloatType, DoubleType)) and isinstance(value, str):
            return None  # NaN or infinity: REST numbers cannot carry it, so keep the exact bytes
        if to_bytes(field_type, codec.decode(field_type, value)) != raw:
            return None
    except VALUE_ERRORS:
        return None
    return value


#: Values built from the schema (and spec) objects seen last, by identity: a plan or a commit codes every
#: file of a table against one Schema object, and indexing it (a visitor) cost more than the file's own
#: coding; PyIceberg builds a new partition struct type on every call, a fifth of decoding an entry.
_BY_IDENTITY: dict[tuple[str, tuple[int, ...]], tuple[tuple[object, ...], Any]] = {}
_BY_IDENTITY_CACHED = 16
T = TypeVar("T")


def _by_identity(kind: str, objects: tuple[object, ...], build: Callable[[], T]) -> T:
    """``build()``, cached by the identity of ``objects`` (the entry holds them: their ids are not reused)."""
    # map() rather than generators: this runs for every file coded (a tenth of decoding an entry).
    key = (kind, tuple(map(id, objects)))
    cached = _BY_IDENTITY.get(key)
    if cached is not None and all(map(operator.is_, cached[0], objects)):
        return cast(T, cached[1])
    value = build()
    if len(_BY_IDENTITY) >= _BY_IDENTITY_CACHED:
        _BY_IDENTITY.pop(next(iter(_BY_IDENTITY)))
    _BY_IDENTITY[key] = (objects, value)
    return value


def _partition_fields(spec: PartitionSpec, schema: Schema) -> tuple[NestedField, ...]:
    """``spec.partition_type(schema).fields``, built once per spec and schema object."""
    return _by_identity("partition", (spec, schema), lambda: tuple(spec.partition_type(schema).fields))


def _bound_types(schema: Schema) -> Mapping[int, PrimitiveType]:
    def build() -> Mapping[int, PrimitiveType]:
        types = dict(_RESERVED_BOUND_TYPES)
        types.update(
            (field_id, field.field_type)
            for field_id, field in index_by_id(schema).items()
            if isinstance(field.field_type, PrimitiveType)
        )
        return types

    return _by_identity("bounds", (schema,), build)


# ---------------------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------------------


def _v3_value(data_file: DataFile, name: str) -> Any:
    position = _V3_POSITIONS[name]
    return data_file[position] if len(data_file) > position else None


def _encode_error(data_file: DataFile, problem: str) -> DataFileCodecError:
    return DataFileCodecError(f"cannot encode data file {data_file.file_path!r}: {problem}")


def _encode_partition(data_file: DataFile, spec: PartitionSpec, schema: Schema) -> list[Any]:
    fields = _partition_fields(spec, schema)
    partition = data_file.partition
    if len(partition) != len(fields):
        raise _encode_error(
            data_file,
            f"partition has {len(partition)} values but spec {spec.spec_id} has {len(fields)} fields",
        )
    values = []
    for pos, field in enumerate(fields):
        value = partition[pos]
        try:
            encoded = None if value is None else value_codec(field.field_type).encode(field.field_type, value)
            values.append(encoded)
        except VALUE_ERRORS as err:
            raise _encode_error(
                data_file, f"partition field {field.name!r} ({field.field_type}): {err}"
            ) from err
    return values


def _encode_count_map(data_file: DataFile, key: str, counts: Mapping[int, int]) -> dict[str, list[int]]:
    items = list(counts.items())
    for field_id, count in items:
        if type(field_id) is not int or type(count) is not int:
            raise _encode_error(data_file, f"{key}: expected int ids and counts, got {field_id!r}: {count!r}")
    return {"keys": [k for k, _ in items], "values": [v for _, v in items]}


def _encode_bounds(
    doc: dict[str, Any],
    keys: tuple[str, str],
    bounds: Mapping[int, bytes],
    types: Mapping[int, PrimitiveType],
) -> None:
    typed: dict[str, list[Any]] = {"keys": [], "values": []}
    raw: dict[str, list[Any]] = {"keys": [], "values": []}
    for field_id, bound in bounds.items():
        value = _typed_bound(types.get(field_id), bytes(bound))
        target = raw if value is None else typed
        target["keys"].append(field_id)
        target["values"].append(to_hex(bytes(bound)) if value is None else value)
    doc[keys[0]] = typed
    if raw["keys"]:
        doc[keys[1]] = raw


def data_file_to_json(
    data_file: DataFile, spec: PartitionSpec, schema: Schema, *, metrics: bool = True
) -> dict[str, Any]:
    """Encode a data or delete file entry as REST ``ContentFile`` JSON.

    :param data_file: the entry, as pyiceberg reads it from a manifest or writes it.
    :param spec: the partition spec the file was written with (``data_file.spec_id``).
    :param schema: the table schema; it types the bounds (by field id) and the partition values.
    :param metrics: write the column metrics (counts and bounds, optional in a ``ContentFile``). ``False``
        for a file a task only reads and a commit only removes: they are most of the entry's size and of
        its encoding cost, and nothing downstream reads them (:func:`data_file_from_json` ``metrics``).
    :returns: a JSON-ready dict (only ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``).
    :raises DataFileCodecError: when the spec id does not match, or the partition does not fit the spec.

    >>> from pyiceberg.manifest import DataFile, FileFormat
    >>> from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC as spec
    >>> from pyiceberg.schema import Schema
    >>> from pyiceberg.typedef import Record
    >>> from pyiceberg.types import LongType, NestedField
    >>> schema = Schema(NestedField(1, "id", LongType()))
    >>> entry = DataFile.from_args(
    ...     file_path="s3://b/t/a.parquet",
    ...     file_format=FileFormat.PARQUET,
    ...     partition=Record(),
    ...     record_count=3,
    ...     file_size_in_bytes=512,
    ...     lower_bounds={1: (7).to_bytes(8, "little"), 9: b"\\x01"},
    ... )
    >>> entry.spec_id = 0
    >>> doc = data_file_to_json(entry, spec, schema)
    >>> doc["file-format"], doc["lower-bounds"], doc["raw-lower-bounds"]
    ('parquet', {'keys': [1], 'values': [7]}, {'keys': [9], 'values': ['01']})
    """
    if len(data_file) not in (_V2_LENGTH, _V3_LENGTH):
        raise _encode_error(data_file, f"unsupported DataFile layout with {len(data_file)} fields")
    spec_id = getattr(data_file, "spec_id", spec.spec_id)
    if spec_id != spec.spec_id:
        raise _encode_error(data_file, f"its spec id is {spec_id} but spec {spec.spec_id} was given")

    doc: dict[str, Any] = {
        "spec-id": spec.spec_id,
        "content": _CONTENT_NAMES[DataFileContent(data_file.content)],
        "file-path": data_file.file_path,
        "file-format": FileFormat(data_file.file_format).value.lower(),
        "partition": _encode_partition(data_file, spec, schema),
        "file-size-in-bytes": data_file.file_size_in_bytes,
        "record-count": data_file.record_count,
    }
    if metrics:
        _encode_metrics(doc, data_file, schema)
    _encode_optional_fields(doc, data_file)
    return doc


def _encode_metrics(doc: dict[str, Any], data_file: DataFile, schema: Schema) -> None:
    """Add the count maps and the bounds that are set (bounds typed by ``schema``, else raw hex)."""
    for key, attribute in _COUNT_MAPS:
        if (counts := getattr(data_file, attribute)) is not None:
            doc[key] = _encode_count_map(data_file, key, counts)
    types = _bound_types(schema)
    for key, raw_key, attribute in _BOUND_MAPS:
        if (bounds := getattr(data_file, attribute)) is not None:
            _encode_bounds(doc, (key, raw_key), bounds, types)


def _encode_optional_fields(doc: dict[str, Any], data_file: DataFile) -> None:
    """Add the other optional fields that are set: key metadata, offsets, ids, sort order, v3 fields."""
    if data_file.key_metadata is not None:
        doc["key-metadata"] = to_hex(bytes(data_file.key_metadata))
    for key, value in (
        ("split-offsets", data_file.split_offsets),
        ("equality-ids", data_file.equality_ids),
    ):
        if value is not None:
            doc[key] = list(value)
    if data_file.sort_order_id is not None:
        doc["sort-order-id"] = data_file.sort_order_id
    for key, name, _ in _V3_FIELDS:
        if (value := _v3_value(data_file, name)) is not None:
            doc[key] = value


# ---------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------


_JSON_KINDS = {int: "an integer", str: "a string", list: "a list", dict: "an object"}


class _Reader:
    """Typed access to one JSON document; every problem becomes a one-line DataFileCodecError."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        path = doc.get("file-path")
        self.where = f"content file {path!r}" if isinstance(path, str) else "content file JSON"

    def error(self, key: str, problem: str) -> DataFileCodecError:
        return DataFileCodecError(f"invalid {self.where}: key {key!r}: {problem}")

    def get(self, key: str, kind: type, *, required: bool = False) -> Any:
        value = self.doc.get(key)
        if value is None:
            if required:
                raise self.error(key, "is missing")
            return None
        try:
            return expect(value, kind, _JSON_KINDS[kind])
        except TypeError as err:
            raise self.error(key, str(err)) from None

    def int_list(self, key: str) -> list[int] | None:
        values: list[int] | None = self.get(key, list)
        if values is not None and not all(type(v) is int for v in values):
            raise self.error(key, "expected a list of integers")
        return values

    def pairs(self, key: str) -> list[tuple[int, Any]] | None:
        """Read a REST ``CountMap``/``ValueMap`` as (field id, value) pairs."""
        value_map = self.get(key, dict)
        if value_map is None:
            return None
        keys, values = value_map.get("keys"), value_map.get("values")
        if not isinstance(keys, list) or not isinstance(values, list):
            raise self.error(key, "expected an object with 'keys' and 'values' lists")
        if len(keys) != len(values):
            raise self.error(key, f"'keys' and 'values' differ in length ({len(keys)} != {len(values)})")
        if not all(type(k) is int for k in keys):
            raise self.error(key, "expected integer field ids in 'keys'")
        if len(set(keys)) != len(keys):
            raise self.error(key, "duplicate field ids in 'keys'")
        return list(zip(keys, values, strict=True))


def _decode_counts(reader: _Reader, key: str) -> dict[int, int] | None:
    pairs = reader.pairs(key)
    if pairs is None:
        return None
    if not all(type(count) is int for _, count in pairs):
        raise reader.error(key, "expected integer counts in 'values'")
    return dict(pairs)


def _decode_bounds(
    reader: _Reader, key: str, raw_key: str, types: Mapping[int, PrimitiveType]
) -> dict[int, bytes] | None:
    typed, raw = reader.pairs(key), reader.pairs(raw_key)
    if typed is None and raw is None:
        return None
    bounds: dict[int, bytes] = {}
    for field_id, value in typed or []:
        field_type = types.get(field_id)
        if field_type is None:
            raise reader.error(key, f"field id {field_id} is not in the schema; its bound must be raw")
        direct = _DIRECT_BOUNDS.get(type(field_type))
        try:
            if direct is not None:
                bounds[field_id] = direct[1](value)
            else:
                bounds[field_id] = to_bytes(field_type, value_codec(field_type).decode(field_type, value))
        except VALUE_ERRORS as err:
            raise reader.error(key, f"field id {field_id} ({field_type}): {err}") from None
    for field_id, value in raw or []:
        if field_id in bounds:
            raise reader.error(raw_key, f"field id {field_id} also has a typed bound in {key!r}")
        try:
            bounds[field_id] = from_hex(value)
        except ValueError as err:
            raise reader.error(raw_key, f"field id {field_id}: {err}") from None
    return bounds


def _shared_partition(
    reader: _Reader, spec: PartitionSpec, schema: Schema, partitions: dict[tuple[int, str], Record] | None
) -> Record:
    if partitions is None:
        return _decode_partition(reader, spec, schema)
    # repr, unlike ==, tells true from 1 and 1.0 from 1, as JSON does
    key = (spec.spec_id, repr(reader.get("partition", list, required=True)))
    if (record := partitions.get(key)) is None:
        record = partitions[key] = _decode_partition(reader, spec, schema)
    return record


def _decode_partition(reader: _Reader, spec: PartitionSpec, schema: Schema) -> Record:
    values = reader.get("partition", list, required=True)
    fields = _partition_fields(spec, schema)
    if len(values) != len(fields):
        raise reader.error(
            "partition", f"{len(values)} values but spec {spec.spec_id} has {len(fields)} fields"
        )
    decoded = []
    for pos, (field, value) in enumerate(zip(fields, values, strict=True)):
        try:
            decoded.append(
                None if value is None else value_codec(field.field_type).decode(field.field_type, value)
            )
        except VALUE_ERRORS as err:
            raise reader.error("partition", f"[{pos}] ({field.name}: {field.field_type}): {err}") from None
    return Record(*decoded)


def _decode_enum(reader: _Reader, key: str, parse: Callable[[str], Any]) -> Any:
    text = reader.get(key, str, required=True)
    try:
        return parse(text)
    except (KeyError, ValueError):
        raise reader.error(key, f"unknown value {text!r}") from None


_BLOB_KEYS = ("content-offset", "content-size-in-bytes")


def _check_blob_fields(
    reader: _Reader, content: DataFileContent, file_format: FileFormat, v3_fields: Mapping[str, Any]
) -> None:
    """A deletion vector (a Puffin position delete) has its referenced data file and blob location;
    nothing else has a blob location (Java's ``FileMetadata.Builder`` checks the same)."""
    if file_format == FileFormat.PUFFIN:
        if content != DataFileContent.POSITION_DELETES:
            raise reader.error("file-format", "a Puffin content file must be a position delete (a DV)")
        for key, name, _ in _V3_FIELDS[1:]:
            if v3_fields[name] is None:
                raise reader.error(
                    key,
                    "is missing: a deletion vector needs referenced-data-file, "
                    "content-offset and content-size-in-bytes",
                )
        if v3_fields["content_offset"] < 0 or v3_fields["content_size_in_bytes"] <= 0:
            raise reader.error("content-offset", "a deletion vector's blob offset/size must be >= 0 / > 0")
        return
    for key in _BLOB_KEYS:
        if reader.doc.get(key) is not None:
            raise reader.error(key, f"only a deletion vector (Puffin) has it, not a {file_format.name} file")


def data_file_from_json(
    doc: Mapping[str, Any],
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
    *,
    metrics: bool = True,
    partitions: dict[tuple[int, str], Record] | None = None,
) -> DataFile:
    """Decode REST ``ContentFile`` JSON into a pyiceberg ``DataFile``.

    :param doc: one content file, as :func:`data_file_to_json` (or a REST server) produces it.
    :param specs: the table's partition specs by id (``table.specs()``).
    :param schema: the table schema used when the document was encoded.
    :param metrics: decode the column metrics (counts and bounds). ``False`` for a file that is only read
        or removed: a rewrite reads no metrics, and a commit removes the base manifest's own entry, so
        their maps are only checked for shape and the entry has none (a third of the cost and most of
        the memory of a decoded entry).
    :param partitions: share one partition record among the files decoded with this dict whose partition
        values are the same JSON, for a caller that holds many files and changes none (a commit's removed
        files: ~100 bytes a file).
    :returns: the entry, with ``spec_id`` set; the v3 layout only if the document has a v3 field.
    :raises DataFileCodecError: when a required key is missing, a value has the wrong type or form, the
        content or file format is unknown, the spec id is not in ``specs``, or a map is malformed.

    >>> from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC as spec
    >>> from pyiceberg.schema import Schema
    >>> from pyiceberg.types import DateType, NestedField
    >>> schema = Schema(NestedField(1, "day", DateType()))
    >>> entry = data_file_from_json(
    ...     {
    ...         "spec-id": 0,
    ...         "content": "data",
    ...         "file-path": "s3://b/t/a.parquet",
    ...         "file-format": "parquet",
    ...         "partition": [],
    ...         "file-size-in-bytes": 512,
    ...         "record-count": 3,
    ...         "upper-bounds": {"keys": [1], "values": ["2024-01-31"]},
    ...     },
    ...     {0: spec},
    ...     schema,
    ... )
    >>> entry.upper_bounds, entry.content
    ({1: b')M\\x00\\x00'}, DataFileContent.DATA)
    """
    if not isinstance(doc, Mapping):
        raise DataFileCodecError(f"invalid content file JSON: expected an object, got {type(doc).__name__}")
    reader = _Reader(doc)
    spec_id = reader.get("spec-id", int, required=True)
    if spec_id not in specs:
        raise reader.error("spec-id", f"unknown partition spec id {spec_id}; known: {sorted(specs)}")
    spec = specs[spec_id]
    types = _bound_types(schema)
    fields: dict[str, Any] = {
        "content": _decode_enum(reader, "content", _CONTENT_BY_NAME.__getitem__),
        "file_path": reader.get("file-path", str, required=True),
        "file_format": _decode_enum(reader, "file-format", lambda text: FileFormat[text.upper()]),
        "partition": _shared_partition(reader, spec, schema, partitions),
        "record_count": reader.get("record-count", int, required=True),
        "file_size_in_bytes": reader.get("file-size-in-bytes", int, required=True),
        "split_offsets": reader.int_list("split-offsets"),
        "equality_ids": reader.int_list("equality-ids"),
        "sort_order_id": reader.get("sort-order-id", int),
    }
    if metrics:
        for key, attribute in _COUNT_MAPS:
            fields[attribute] = _decode_counts(reader, key)
        for key, raw_key, attribute in _BOUND_MAPS:
            fields[attribute] = _decode_bounds(reader, key, raw_key, types)
    else:
        for key in (*(k for k, _ in _COUNT_MAPS), *(k for pair in _BOUND_MAPS for k in pair[:2])):
            reader.pairs(key)
    key_metadata = reader.get("key-metadata", str)
    try:
        fields["key_metadata"] = None if key_metadata is None else from_hex(key_metadata)
    except ValueError as err:
        raise reader.error("key-metadata", str(err)) from None

    v3_fields = {name: reader.get(key, kind) for key, name, kind in _V3_FIELDS}
    _check_blob_fields(reader, fields["content"], fields["file_format"], v3_fields)
    version: Literal[2, 3] = 2
    if any(value is not None for value in v3_fields.values()):
        version = 3
        fields.update(v3_fields)
    data_file = DataFile.from_args(_table_format_version=version, **fields)
    data_file.spec_id = spec_id
    return data_file


def removed_files_from_json(
    docs: Sequence[Mapping[str, Any]], specs: Mapping[int, PartitionSpec], schema: Schema
) -> list[DataFile]:
    """The data files a commit removes, each as :func:`data_file_from_json` decodes it without metrics, the
    files of one partition sharing its record.

    Of packed documents (:class:`.PackedDataFiles`: :func:`.compact`'s results hold its plan's entries),
    the files that share all but their path, size and record count are decoded once and copied with their
    own three: 50,000 small files took 0.76 s decoded one by one.
    """
    partitions: dict[tuple[int, str], Record] = {}
    if not isinstance(docs, PackedDataFiles):
        return [data_file_from_json(d, specs, schema, metrics=False, partitions=partitions) for d in docs]
    decoded: dict[int, DataFile] = {}
    files: list[DataFile] = []
    for index, (shape, path, size, records) in enumerate(docs.columns()):
        first = decoded.get(shape)
        if first is None:
            first = decoded[shape] = data_file_from_json(
                docs[index], specs, schema, metrics=False, partitions=partitions
            )
            files.append(first)
            continue
        copy = DataFile(*(first[pos] for pos in range(len(first))))
        copy[_PATH_POS], copy[_SIZE_POS], copy[_RECORDS_POS] = path, size, records
        copy.spec_id = first.spec_id
        files.append(copy)
    return files


def _position(name: str) -> int:
    """Where field ``name`` sits in a content file: the same in the v2 and the v3 layout."""
    (position,) = {next(i for i, f in enumerate(DATA_FILE_TYPE[v].fields) if f.name == name) for v in (2, 3)}
    return position


_PATH_POS, _SIZE_POS, _RECORDS_POS = map(_position, ("file_path", "file_size_in_bytes", "record_count"))
