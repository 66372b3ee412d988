"""Convert pyiceberg ``DataFile`` entries to and from the Iceberg REST ``ContentFile`` JSON.

This is the wire shape of the XCom payloads (``data_files`` items): plain JSON with the REST spec's keys
(``rest-catalog-open-api.yaml`` ``ContentFile``/``DataFile``/``PositionDeleteFile``/``EqualityDeleteFile``),
so it survives ``json.dumps`` and Airflow's XCom backends. pyiceberg's own ``_rest_file_to_data_file`` drops
the bounds and most optional fields; this codec round-trips every field a manifest entry stores, exactly.

Encoding decisions:

* Every optional field is written only when it is set, for every content type (Java's ``ContentFileParser``
  does the same): position-delete files keep their ``file_path`` bounds, which planning relies on.
* ``content`` is ``data``, ``position-deletes`` or ``equality-deletes``; ``file-format`` is lower case.
* Partition values and bounds use the Iceberg JSON single-value serialisation: numbers and booleans as
  JSON, decimals as strings with exactly ``scale`` fraction digits, dates ``YYYY-MM-DD``, times
  ``HH:MM:SS.ffffff``, timestamps ``YYYY-MM-DDTHH:MM:SS.ffffff`` (``+00:00`` for ``timestamptz``, nine
  fraction digits for the ``_ns`` types), UUIDs in canonical form and fixed/binary as upper-case hex.
  Non-finite float partition values are the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
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
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, NamedTuple

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
    UUIDType,
)
from pyiceberg.utils.decimal import unscaled_to_decimal

from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = ["data_file_from_json", "data_file_to_json"]

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
# Single values: pyiceberg's Python representation <-> JSON single-value serialisation
# ---------------------------------------------------------------------------------------------------------

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SECONDS_PER_DAY = 86_400
_HEX_RE = re.compile(r"(?:[0-9A-Fa-f]{2})*")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_CLOCK = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
_TIME_RE = re.compile(_CLOCK, re.ASCII)
_TIMESTAMP_RE = re.compile(rf"(\d{{4}}-\d{{2}}-\d{{2}})T{_CLOCK}(Z|[+-]\d{{2}}:\d{{2}})?", re.ASCII)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int in Python but never a JSON number here.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise TypeError(f"expected {what}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _hex(raw: bytes) -> str:
    return raw.hex().upper()


def _unhex(text: Any) -> bytes:
    if not isinstance(text, str) or not _HEX_RE.fullmatch(text):
        raise ValueError(f"expected a hex string, got {text!r}")
    return bytes.fromhex(text)


def _check_bits(value: int, bits: int) -> int:
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"{value} does not fit in {bits} bits")
    return value


def _days_text(days: int) -> str:
    return date.fromordinal(days + _EPOCH_ORDINAL).isoformat()


def _clock_text(units: int, digits: int) -> str:
    seconds, fraction = divmod(units, 10**digits)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{fraction:0{digits}d}"


def _clock_units(match: re.Match[str], first_group: int, digits: int) -> int:
    hour, minute, second = (int(match.group(first_group + i)) for i in range(3))
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"invalid time of day in {match.group(0)!r}")
    nanos = int((match.group(first_group + 3) or "").ljust(9, "0"))
    divisor: int = 10 ** (9 - digits)
    units, lost = divmod(nanos, divisor)
    if lost:
        raise ValueError(f"{match.group(0)!r} has more than {digits} fraction digits")
    per_second: int = 10**digits
    return ((hour * 60 + minute) * 60 + second) * per_second + units


def _date_days(text: str) -> int:
    if not _DATE_RE.fullmatch(text):
        raise ValueError(f"expected YYYY-MM-DD, got {text!r}")
    return date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL


def _encode_timestamp(value: int, digits: int, utc: bool) -> str:
    days, units = divmod(value, _SECONDS_PER_DAY * 10**digits)
    return f"{_days_text(days)}T{_clock_text(units, digits)}{'+00:00' if utc else ''}"


def _decode_timestamp(text: str, digits: int, utc: bool) -> int:
    match = _TIMESTAMP_RE.fullmatch(text)
    if not match:
        raise ValueError(f"expected YYYY-MM-DDTHH:MM:SS.f, got {text!r}")
    offset = match.group(6)
    if utc != (offset is not None):
        raise ValueError(f"{text!r} {'lacks' if utc else 'must not have'} a UTC offset")
    offset_seconds = 0
    if offset and offset != "Z":
        offset_seconds = (int(offset[1:3]) * 60 + int(offset[4:6])) * 60 * (-1 if offset[0] == "-" else 1)
    per_second: int = 10**digits
    local = _date_days(match.group(1)) * _SECONDS_PER_DAY * per_second + _clock_units(match, 2, digits)
    return local - offset_seconds * per_second


def _decimal_unscaled(value: Decimal, decimal_type: DecimalType) -> int:
    # Exact integer arithmetic: Decimal.scaleb would round beyond the context's 28 digits.
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"decimal {value} is not finite")
    unscaled = int("".join(map(str, digits)) or "0")
    shift = exponent + decimal_type.scale
    factor: int = 10 ** abs(shift)
    if shift >= 0:
        unscaled *= factor
    else:
        unscaled, rest = divmod(unscaled, factor)
        if rest:
            raise ValueError(f"decimal {value} has more than {decimal_type.scale} fraction digits")
    if len(str(unscaled)) > decimal_type.precision:
        raise ValueError(f"decimal {value} exceeds precision {decimal_type.precision}")
    return -unscaled if sign else unscaled


def _encode_decimal(decimal_type: DecimalType, value: Any) -> str:
    unscaled = _decimal_unscaled(_expect(value, Decimal, "a Decimal"), decimal_type)
    scale = decimal_type.scale
    if scale <= 0:
        return f"{unscaled}E+{-scale}" if scale else str(unscaled)
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return f"{'-' if unscaled < 0 else ''}{digits[:-scale]}.{digits[-scale:]}"


def _decode_decimal(decimal_type: DecimalType, value: Any) -> Decimal:
    try:
        parsed = Decimal(_expect(value, str, "a decimal string"))
    except InvalidOperation:
        raise ValueError(f"not a decimal: {value!r}") from None
    return unscaled_to_decimal(_decimal_unscaled(parsed, decimal_type), decimal_type.scale)


def _encode_float(_: Any, value: Any) -> float | str:
    number = float(_expect(value, (float, int), "a float"))
    if math.isfinite(number):
        return number
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def _decode_float(_: Any, value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return float(_expect(value, (float, int), "a number"))


def _encode_uuid(_: Any, value: Any) -> str:
    if isinstance(value, bytes):
        return str(uuid.UUID(bytes=value))
    return str(_expect(value, uuid.UUID, "a UUID"))


def _encode_fixed(fixed_type: FixedType, value: Any) -> str:
    if len(_expect(value, bytes, "bytes")) != len(fixed_type):
        raise ValueError(f"{len(value)} bytes do not fit {fixed_type}")
    return _hex(value)


def _decode_fixed(fixed_type: FixedType, value: Any) -> bytes:
    raw = _unhex(value)
    if len(raw) != len(fixed_type):
        raise ValueError(f"{len(raw)} bytes do not fit {fixed_type}")
    return raw


def _passthrough(_: Any, value: Any) -> Any:
    # Partition fields whose source column was dropped: the type is gone, keep JSON scalars as they are.
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a non-finite float of unknown type cannot be encoded")
    return _expect(value, (bool, int, float, str), "a JSON scalar for a field of unknown type")


class _Codec(NamedTuple):
    encode: Callable[[Any, Any], Any]
    decode: Callable[[Any, Any], Any]


def _same_codec(kind: type, what: str) -> _Codec:
    def code(_: Any, value: Any) -> Any:
        return _expect(value, kind, what)

    return _Codec(code, code)


def _int_codec(bits: int) -> _Codec:
    def code(_: Any, value: Any) -> int:
        return _check_bits(_expect(value, int, "an integer"), bits)

    return _Codec(code, code)


def _temporal_codec(encode: Callable[[int], str], decode: Callable[[str], int]) -> _Codec:
    return _Codec(
        lambda _, value: encode(_expect(value, int, "an int (pyiceberg's physical value)")),
        lambda _, value: decode(_expect(value, str, "a string")),
    )


def _timestamp_codec(digits: int, utc: bool) -> _Codec:
    return _temporal_codec(
        lambda value: _encode_timestamp(value, digits, utc), lambda text: _decode_timestamp(text, digits, utc)
    )


def _time_of_day(text: str) -> int:
    match = _TIME_RE.fullmatch(text)
    if not match:
        raise ValueError(f"expected HH:MM:SS.ffffff, got {text!r}")
    return _clock_units(match, 1, 6)


def _time_text(micros: int) -> str:
    if not 0 <= micros < _SECONDS_PER_DAY * 10**6:
        raise ValueError(f"{micros} is not a time of day in microseconds")
    return _clock_text(micros, 6)


_CODECS: dict[type[IcebergType], _Codec] = {
    BooleanType: _same_codec(bool, "a boolean"),
    IntegerType: _int_codec(32),
    LongType: _int_codec(64),
    FloatType: _Codec(_encode_float, _decode_float),
    DoubleType: _Codec(_encode_float, _decode_float),
    DecimalType: _Codec(_encode_decimal, _decode_decimal),
    DateType: _temporal_codec(_days_text, _date_days),
    TimeType: _temporal_codec(_time_text, _time_of_day),
    TimestampType: _timestamp_codec(6, utc=False),
    TimestamptzType: _timestamp_codec(6, utc=True),
    TimestampNanoType: _timestamp_codec(9, utc=False),
    TimestamptzNanoType: _timestamp_codec(9, utc=True),
    StringType: _same_codec(str, "a string"),
    UUIDType: _Codec(_encode_uuid, lambda _, value: uuid.UUID(_expect(value, str, "a UUID string"))),
    FixedType: _Codec(_encode_fixed, _decode_fixed),
    BinaryType: _Codec(lambda _, value: _hex(_expect(value, bytes, "bytes")), lambda _, value: _unhex(value)),
    UnknownType: _Codec(_passthrough, _passthrough),
}

# What a broken value or bound can raise inside the codecs and pyiceberg's conversions.
_VALUE_ERRORS = (ValueError, TypeError, OverflowError, struct.error)


def _codec(field_type: IcebergType) -> _Codec:
    codec = _CODECS.get(type(field_type))
    if codec is None:
        raise TypeError(f"values of type {field_type} have no JSON form here")
    return codec


# ---------------------------------------------------------------------------------------------------------
# Bounds: bytes <-> typed JSON value, or raw hex when the typed form would not give back the same bytes
# ---------------------------------------------------------------------------------------------------------


def _typed_bound(field_type: PrimitiveType | None, raw: bytes) -> Any:
    """Return the typed JSON value of a bound, or None when only the raw bytes are exact."""
    if field_type is None or isinstance(field_type, UnknownType):
        return None
    try:
        codec = _codec(field_type)
        value = codec.encode(field_type, from_bytes(field_type, raw))
        if isinstance(field_type, (FloatType, DoubleType)) and isinstance(value, str):
            return None  # NaN or infinity: REST numbers cannot carry it, so keep the exact bytes
        if to_bytes(field_type, codec.decode(field_type, value)) != raw:
            return None
    except _VALUE_ERRORS:
        return None
    return value


def _bound_types(schema: Schema) -> dict[int, PrimitiveType]:
    types = dict(_RESERVED_BOUND_TYPES)
    types.update(
        (field_id, field.field_type)
        for field_id, field in index_by_id(schema).items()
        if isinstance(field.field_type, PrimitiveType)
    )
    return types


# ---------------------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------------------


def _v3_value(data_file: DataFile, name: str) -> Any:
    position = _V3_POSITIONS[name]
    return data_file[position] if len(data_file) > position else None


def _encode_error(data_file: DataFile, problem: str) -> DataFileCodecError:
    return DataFileCodecError(f"cannot encode data file {data_file.file_path!r}: {problem}")


def _encode_partition(data_file: DataFile, spec: PartitionSpec, schema: Schema) -> list[Any]:
    fields = spec.partition_type(schema).fields
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
            values.append(None if value is None else _codec(field.field_type).encode(field.field_type, value))
        except _VALUE_ERRORS as err:
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
        target["values"].append(_hex(bytes(bound)) if value is None else value)
    doc[keys[0]] = typed
    if raw["keys"]:
        doc[keys[1]] = raw


def data_file_to_json(data_file: DataFile, spec: PartitionSpec, schema: Schema) -> dict[str, Any]:
    """Encode a data or delete file entry as REST ``ContentFile`` JSON.

    :param data_file: the entry, as pyiceberg reads it from a manifest or writes it.
    :param spec: the partition spec the file was written with (``data_file.spec_id``).
    :param schema: the table schema; it types the bounds (by field id) and the partition values.
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
    for key, attribute in _COUNT_MAPS:
        if (counts := getattr(data_file, attribute)) is not None:
            doc[key] = _encode_count_map(data_file, key, counts)
    types = _bound_types(schema)
    for key, raw_key, attribute in _BOUND_MAPS:
        if (bounds := getattr(data_file, attribute)) is not None:
            _encode_bounds(doc, (key, raw_key), bounds, types)
    if data_file.key_metadata is not None:
        doc["key-metadata"] = _hex(bytes(data_file.key_metadata))
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
    return doc


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
            return _expect(value, kind, _JSON_KINDS[kind])
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
        try:
            bounds[field_id] = to_bytes(field_type, _codec(field_type).decode(field_type, value))
        except _VALUE_ERRORS as err:
            raise reader.error(key, f"field id {field_id} ({field_type}): {err}") from None
    for field_id, value in raw or []:
        if field_id in bounds:
            raise reader.error(raw_key, f"field id {field_id} also has a typed bound in {key!r}")
        try:
            bounds[field_id] = _unhex(value)
        except ValueError as err:
            raise reader.error(raw_key, f"field id {field_id}: {err}") from None
    return bounds


def _decode_partition(reader: _Reader, spec: PartitionSpec, schema: Schema) -> Record:
    values = reader.get("partition", list, required=True)
    fields = spec.partition_type(schema).fields
    if len(values) != len(fields):
        raise reader.error(
            "partition", f"{len(values)} values but spec {spec.spec_id} has {len(fields)} fields"
        )
    decoded = []
    for pos, (field, value) in enumerate(zip(fields, values, strict=True)):
        try:
            decoded.append(
                None if value is None else _codec(field.field_type).decode(field.field_type, value)
            )
        except _VALUE_ERRORS as err:
            raise reader.error("partition", f"[{pos}] ({field.name}: {field.field_type}): {err}") from None
    return Record(*decoded)


def _decode_enum(reader: _Reader, key: str, parse: Callable[[str], Any]) -> Any:
    text = reader.get(key, str, required=True)
    try:
        return parse(text)
    except (KeyError, ValueError):
        raise reader.error(key, f"unknown value {text!r}") from None


def data_file_from_json(
    doc: Mapping[str, Any], specs: Mapping[int, PartitionSpec], schema: Schema
) -> DataFile:
    """Decode REST ``ContentFile`` JSON into a pyiceberg ``DataFile``.

    :param doc: one content file, as :func:`data_file_to_json` (or a REST server) produces it.
    :param specs: the table's partition specs by id (``table.specs()``).
    :param schema: the table schema used when the document was encoded.
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
        "partition": _decode_partition(reader, spec, schema),
        "record_count": reader.get("record-count", int, required=True),
        "file_size_in_bytes": reader.get("file-size-in-bytes", int, required=True),
        "split_offsets": reader.int_list("split-offsets"),
        "equality_ids": reader.int_list("equality-ids"),
        "sort_order_id": reader.get("sort-order-id", int),
    }
    for key, attribute in _COUNT_MAPS:
        fields[attribute] = _decode_counts(reader, key)
    for key, raw_key, attribute in _BOUND_MAPS:
        fields[attribute] = _decode_bounds(reader, key, raw_key, types)
    key_metadata = reader.get("key-metadata", str)
    try:
        fields["key_metadata"] = None if key_metadata is None else _unhex(key_metadata)
    except ValueError as err:
        raise reader.error("key-metadata", str(err)) from None

    v3_fields = {name: reader.get(key, kind) for key, name, kind in _V3_FIELDS}
    version: Literal[2, 3] = 2
    if any(value is not None for value in v3_fields.values()):
        version = 3
        fields.update(v3_fields)
    data_file = DataFile.from_args(_table_format_version=version, **fields)
    data_file.spec_id = spec_id
    return data_file
