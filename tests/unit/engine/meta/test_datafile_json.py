from __future__ import annotations

import datetime as dt
import json
import math
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
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
    UUIDType,
)
from pyiceberg.utils.decimal import unscaled_to_decimal

from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json, data_file_to_json

UNPARTITIONED = PartitionSpec(spec_id=0)
FILE_PATH_ID = 2147483546  # reserved id of position-delete files' file_path column
POS_ID = 2147483545
V3_FIELDS = ("first_row_id", "referenced_data_file", "content_offset", "content_size_in_bytes")
_V3_POSITIONS = {field.name: pos for pos, field in enumerate(DATA_FILE_TYPE[3].fields)}

SAMPLE_UUID = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")

# (type, value as pyiceberg holds it in a partition Record / before to_bytes, REST JSON form)
PRIMITIVES: list[tuple[PrimitiveType, Any, Any]] = [
    (BooleanType(), True, True),
    (IntegerType(), -7, -7),
    (LongType(), 2**40 + 3, 2**40 + 3),
    (FloatType(), 1.5, 1.5),
    (DoubleType(), 0.1, 0.1),
    (DecimalType(9, 2), Decimal("-12.34"), "-12.34"),
    (
        DecimalType(38, 10),
        Decimal("1234567890123456789012345678.0000000001"),
        "1234567890123456789012345678.0000000001",
    ),
    (DecimalType(5, 5), Decimal("0.00042"), "0.00042"),
    (DecimalType(4, 0), Decimal("1234"), "1234"),
    (DateType(), 19723, "2024-01-01"),
    (TimeType(), 3_723_000_004, "01:02:03.000004"),
    (TimestampType(), 1_704_070_800_123_456, "2024-01-01T01:00:00.123456"),
    (TimestamptzType(), 1_704_070_800_123_456, "2024-01-01T01:00:00.123456+00:00"),
    (TimestampNanoType(), 1_704_070_800_123_456_789, "2024-01-01T01:00:00.123456789"),
    (TimestamptzNanoType(), -1, "1969-12-31T23:59:59.999999999+00:00"),
    (StringType(), "héllo wörld", "héllo wörld"),
    (UUIDType(), SAMPLE_UUID, str(SAMPLE_UUID)),
    (FixedType(4), b"\x00\x01\xfe\xff", "0001FEFF"),
    (BinaryType(), b"\x00\xffabc", "00FF616263"),
]


def _schema(*types: PrimitiveType) -> Schema:
    return Schema(*(NestedField(i + 1, f"c{i + 1}", t, required=False) for i, t in enumerate(types)))


def _data_file(**fields: Any) -> DataFile:
    spec_id = fields.pop("spec_id", 0)
    version = 3 if any(name in fields for name in V3_FIELDS) else 2
    args: dict[str, Any] = {
        "content": DataFileContent.DATA,
        "file_path": "s3://bucket/t/data/a.parquet",
        "file_format": FileFormat.PARQUET,
        "partition": Record(),
        "record_count": 10,
        "file_size_in_bytes": 1024,
        **fields,
    }
    data_file = DataFile.from_args(_table_format_version=version, **args)
    data_file.spec_id = spec_id
    return data_file


def _v3(data_file: DataFile, name: str) -> Any:
    position = _V3_POSITIONS[name]
    return data_file[position] if len(data_file) > position else None


def _stored_fields(data_file: DataFile) -> dict[str, Any]:
    """Every field a manifest entry stores, in a form where == means "exactly the same"."""

    def as_dict(value: Any) -> Any:
        return None if value is None else dict(value)

    partition = data_file.partition
    return {
        "content": data_file.content,
        "file_path": data_file.file_path,
        "file_format": data_file.file_format,
        # the type too: 1 == 1.0 == True in Python, but not in a manifest
        "partition": [(type(partition[i]), partition[i]) for i in range(len(partition))],
        "record_count": data_file.record_count,
        "file_size_in_bytes": data_file.file_size_in_bytes,
        "column_sizes": as_dict(data_file.column_sizes),
        "value_counts": as_dict(data_file.value_counts),
        "null_value_counts": as_dict(data_file.null_value_counts),
        "nan_value_counts": as_dict(data_file.nan_value_counts),
        "lower_bounds": as_dict(data_file.lower_bounds),
        "upper_bounds": as_dict(data_file.upper_bounds),
        "key_metadata": data_file.key_metadata,
        "split_offsets": data_file.split_offsets,
        "equality_ids": data_file.equality_ids,
        "sort_order_id": data_file.sort_order_id,
        "spec_id": data_file.spec_id,
        **{name: _v3(data_file, name) for name in V3_FIELDS},
    }


def _round_trip(
    data_file: DataFile, spec: PartitionSpec, schema: Schema, specs: dict[int, PartitionSpec] | None = None
) -> tuple[DataFile, dict[str, Any]]:
    doc = data_file_to_json(data_file, spec, schema)
    wire = json.loads(json.dumps(doc, allow_nan=False))
    assert wire == doc
    return data_file_from_json(wire, specs or {spec.spec_id: spec}, schema), doc


def _assert_exact_round_trip(
    data_file: DataFile, spec: PartitionSpec, schema: Schema, specs: dict[int, PartitionSpec] | None = None
) -> dict[str, Any]:
    decoded, doc = _round_trip(data_file, spec, schema, specs)
    assert _stored_fields(decoded) == _stored_fields(data_file)
    return doc


# --- bounds -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field_type", "value", "json_value"), PRIMITIVES, ids=lambda p: str(p)[:30])
def test_bound_of_every_primitive_type_is_typed_and_exact(field_type, value, json_value):
    raw = to_bytes(field_type, value)
    data_file = _data_file(lower_bounds={1: raw}, upper_bounds={1: raw})

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(field_type))

    assert doc["lower-bounds"] == {"keys": [1], "values": [json_value]}
    assert doc["upper-bounds"] == {"keys": [1], "values": [json_value]}
    assert "raw-lower-bounds" not in doc
    assert "raw-upper-bounds" not in doc


_TYPES = [field_type for field_type, _, _ in PRIMITIVES]


@settings(max_examples=300, deadline=None)
@given(field_type=st.sampled_from(_TYPES), raw=st.binary(max_size=24))
def test_any_bytes_as_a_bound_round_trip_exactly(field_type, raw):
    """Whatever a writer put in a bound -- even garbage for the type -- comes back byte for byte."""
    data_file = _data_file(lower_bounds={1: raw}, upper_bounds={1: raw, 7: raw})

    _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(field_type))


def _valid_values() -> st.SearchStrategy[tuple[PrimitiveType, Any]]:
    def typed(field_type: PrimitiveType, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.tuples(st.just(field_type), values)

    epoch = dt.date(1970, 1, 1).toordinal()
    day_range = st.integers(dt.date.min.toordinal() - epoch, dt.date.max.toordinal() - epoch)
    micros = st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999)
    nanos = st.integers(-(2**63), 2**63 - 1)
    decimals = st.integers(-(10**38) + 1, 10**38 - 1).map(lambda unscaled: unscaled_to_decimal(unscaled, 7))
    return st.one_of(
        typed(BooleanType(), st.booleans()),
        typed(IntegerType(), st.integers(-(2**31), 2**31 - 1)),
        typed(LongType(), st.integers(-(2**63), 2**63 - 1)),
        typed(FloatType(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
        typed(DoubleType(), st.floats(allow_nan=False, allow_infinity=False)),
        typed(DecimalType(38, 7), decimals),
        typed(DateType(), day_range),
        typed(TimeType(), st.integers(0, 86_400_000_000 - 1)),
        typed(TimestampType(), micros),
        typed(TimestamptzType(), micros),
        typed(TimestampNanoType(), nanos),
        typed(TimestamptzNanoType(), nanos),
        typed(StringType(), st.text(st.characters(exclude_categories=["Cs"]))),
        typed(UUIDType(), st.uuids()),
        typed(FixedType(3), st.binary(min_size=3, max_size=3)),
        typed(BinaryType(), st.binary()),
    )


@settings(max_examples=400, deadline=None)
@given(typed_value=_valid_values())
def test_valid_values_are_typed_bounds_and_partition_values(typed_value):
    field_type, value = typed_value
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "p"), spec_id=1)
    data_file = _data_file(spec_id=1, partition=Record(value), lower_bounds={1: to_bytes(field_type, value)})

    doc = _assert_exact_round_trip(data_file, spec, _schema(field_type))

    assert "raw-lower-bounds" not in doc


def test_string_bound_cut_inside_a_utf8_sequence_falls_back_to_raw_hex():
    truncated = "é".encode()[:1]
    data_file = _data_file(lower_bounds={1: b"ab"}, upper_bounds={1: b"ab" + truncated})

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(StringType()))

    assert doc["upper-bounds"] == {"keys": [], "values": []}
    assert doc["raw-upper-bounds"] == {"keys": [1], "values": ["6162C3"]}
    assert doc["lower-bounds"] == {"keys": [1], "values": ["ab"]}


def test_bound_of_a_dropped_column_is_kept_as_raw_hex():
    """Field 9 is no longer in the schema: its type is unknown, so its bytes travel as they are."""
    data_file = _data_file(lower_bounds={1: to_bytes(LongType(), 5), 9: b"\x01\x02"})

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(LongType()))

    assert doc["lower-bounds"] == {"keys": [1], "values": [5]}
    assert doc["raw-lower-bounds"] == {"keys": [9], "values": ["0102"]}


def test_four_byte_bounds_of_a_promoted_column_stay_four_bytes():
    """After int -> long and float -> double, old files keep 4-byte bounds; re-encoding would widen them."""
    data_file = _data_file(
        lower_bounds={1: struct.pack("<i", -3), 2: struct.pack("<f", 1.5)},
        upper_bounds={1: struct.pack("<q", 4), 2: struct.pack("<d", 2.5)},
    )

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(LongType(), DoubleType()))

    assert doc["raw-lower-bounds"] == {"keys": [1, 2], "values": ["FDFFFFFF", "0000C03F"]}
    assert doc["upper-bounds"] == {"keys": [1, 2], "values": [4, 2.5]}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_float_bounds_are_raw_so_the_json_stays_valid(value):
    raw = struct.pack("<d", value)
    data_file = _data_file(lower_bounds={1: raw})

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(DoubleType()))

    assert doc["raw-lower-bounds"] == {"keys": [1], "values": [raw.hex().upper()]}


def test_negative_zero_bound_keeps_its_sign():
    data_file = _data_file(lower_bounds={1: struct.pack("<d", -0.0)})

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(DoubleType()))

    assert json.dumps(doc["lower-bounds"]) == '{"keys": [1], "values": [-0.0]}'


def test_empty_maps_differ_from_absent_maps():
    data_file = _data_file(column_sizes={}, lower_bounds={}, nan_value_counts=None)

    decoded, doc = _round_trip(data_file, UNPARTITIONED, _schema(LongType()))

    assert doc["column-sizes"] == {"keys": [], "values": []}
    assert "nan-value-counts" not in doc
    assert decoded.column_sizes == {}
    assert decoded.lower_bounds == {}
    assert decoded.nan_value_counts is None


# --- partition values -------------------------------------------------------------------------------------


def _transform_cases() -> list[tuple[Transform[Any, Any], PrimitiveType, Any]]:
    cases: list[tuple[Transform[Any, Any], PrimitiveType, Any]] = [
        (IdentityTransform(), field_type, value) for field_type, value, _ in PRIMITIVES
    ]
    for transform in (
        BucketTransform(16),
        TruncateTransform(3),
        YearTransform(),
        MonthTransform(),
        DayTransform(),
        HourTransform(),
        VoidTransform(),
    ):
        cases += [
            (transform, field_type, value)
            for field_type, value, _ in PRIMITIVES
            if transform.can_transform(field_type) and not isinstance(field_type, (FloatType, DoubleType))
        ]
    return cases


@pytest.mark.parametrize(
    ("transform", "source_type", "source_value"), _transform_cases(), ids=lambda p: str(p)[:24]
)
def test_partition_value_of_every_transform_round_trips(transform, source_type, source_value):
    schema = _schema(source_type)
    spec = PartitionSpec(PartitionField(1, 1000, transform, "p"), spec_id=3)
    value = transform.transform(source_type)(source_value)
    data_file = _data_file(spec_id=3, partition=Record(value))

    doc = _assert_exact_round_trip(data_file, spec, schema)

    assert doc["spec-id"] == 3
    assert len(doc["partition"]) == 1


@pytest.mark.parametrize(
    ("transform", "source_type", "value", "json_value"),
    [
        (DayTransform(), TimestampType(), 19723, "2024-01-01"),  # day() yields days, typed as date
        (DayTransform(), DateType(), 19723, "2024-01-01"),
        (HourTransform(), TimestamptzType(), 473_353, 473_353),
        (MonthTransform(), DateType(), 648, 648),
        (YearTransform(), TimestampNanoType(), 54, 54),
        (BucketTransform(16), StringType(), 11, 11),
        (TruncateTransform(10), DecimalType(9, 2), Decimal("12.30"), "12.30"),
        (TruncateTransform(2), BinaryType(), b"\xab\xcd", "ABCD"),
        (IdentityTransform(), TimeType(), 3_723_000_004, "01:02:03.000004"),
        (IdentityTransform(), FloatType(), math.inf, "Infinity"),
        (IdentityTransform(), DoubleType(), -math.inf, "-Infinity"),
        (VoidTransform(), LongType(), None, None),
    ],
)
def test_partition_values_use_the_rest_json_forms(transform, source_type, value, json_value):
    spec = PartitionSpec(PartitionField(1, 1000, transform, "p"), spec_id=0)
    data_file = _data_file(partition=Record(value))

    doc = _assert_exact_round_trip(data_file, spec, _schema(source_type))

    assert doc["partition"] == [json_value]


def test_nan_partition_value_round_trips_as_a_string():
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "p"), spec_id=0)
    decoded, doc = _round_trip(_data_file(partition=Record(math.nan)), spec, _schema(DoubleType()))

    assert doc["partition"] == ["NaN"]
    assert math.isnan(decoded.partition[0])


def test_null_partition_values_round_trip():
    schema = _schema(DateType(), StringType(), LongType())
    spec = PartitionSpec(
        PartitionField(1, 1000, DayTransform(), "d"),
        PartitionField(2, 1001, IdentityTransform(), "s"),
        PartitionField(3, 1002, BucketTransform(4), "b"),
        spec_id=2,
    )
    data_file = _data_file(spec_id=2, partition=Record(None, "x", None))

    doc = _assert_exact_round_trip(data_file, spec, schema, {0: UNPARTITIONED, 2: spec})

    assert doc["partition"] == [None, "x", None]


def test_uuid_partition_held_as_bytes_decodes_to_uuid():
    """pyiceberg's write path holds identity(uuid) values as bytes; manifests read them back as UUID."""
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "u"), spec_id=0)
    decoded, doc = _round_trip(_data_file(partition=Record(SAMPLE_UUID.bytes)), spec, _schema(UUIDType()))

    assert doc["partition"] == [str(SAMPLE_UUID)]
    assert decoded.partition == Record(SAMPLE_UUID)


def test_partition_field_of_a_dropped_source_column_passes_json_scalars_through():
    """partition_type() types such a field as unknown; bucket/day/... values are plain ints."""
    spec = PartitionSpec(PartitionField(42, 1000, BucketTransform(4), "gone_bucket"), spec_id=0)

    doc = _assert_exact_round_trip(_data_file(partition=Record(3)), spec, _schema(LongType()))

    assert doc["partition"] == [3]


# --- content types ----------------------------------------------------------------------------------------


def test_every_field_of_a_data_file_round_trips():
    schema = _schema(LongType(), StringType())
    data_file = _data_file(
        column_sizes={1: 100, 2: 200},
        value_counts={1: 10, 2: 10},
        null_value_counts={1: 0, 2: 1},
        nan_value_counts={},
        lower_bounds={1: to_bytes(LongType(), 1), 2: b"a"},
        upper_bounds={1: to_bytes(LongType(), 9), 2: b"z"},
        key_metadata=b"\x00\x01key",
        split_offsets=[4, 1000],
        sort_order_id=1,
        first_row_id=5000,
    )

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, schema)

    assert doc == {
        "spec-id": 0,
        "content": "data",
        "file-path": "s3://bucket/t/data/a.parquet",
        "file-format": "parquet",
        "partition": [],
        "file-size-in-bytes": 1024,
        "record-count": 10,
        "column-sizes": {"keys": [1, 2], "values": [100, 200]},
        "value-counts": {"keys": [1, 2], "values": [10, 10]},
        "null-value-counts": {"keys": [1, 2], "values": [0, 1]},
        "nan-value-counts": {"keys": [], "values": []},
        "lower-bounds": {"keys": [1, 2], "values": [1, "a"]},
        "upper-bounds": {"keys": [1, 2], "values": [9, "z"]},
        "key-metadata": "00016B6579",
        "split-offsets": [4, 1000],
        "sort-order-id": 1,
        "first-row-id": 5000,
    }


def test_minimal_v2_file_writes_only_required_keys_and_decodes_to_the_v2_layout():
    decoded, doc = _round_trip(_data_file(), UNPARTITIONED, _schema(LongType()))

    assert set(doc) == {
        "spec-id",
        "content",
        "file-path",
        "file-format",
        "partition",
        "file-size-in-bytes",
        "record-count",
    }
    assert len(decoded) == len(DATA_FILE_TYPE[2].fields)
    assert _stored_fields(decoded) == _stored_fields(_data_file())


def test_position_delete_file_keeps_its_file_path_bounds():
    """Planning matches position deletes to data files by these bounds (reserved field ids)."""
    target = "s3://bucket/t/data/a.parquet"
    data_file = _data_file(
        content=DataFileContent.POSITION_DELETES,
        file_path="s3://bucket/t/data/a-deletes.parquet",
        lower_bounds={FILE_PATH_ID: target.encode(), POS_ID: to_bytes(LongType(), 0)},
        upper_bounds={FILE_PATH_ID: target.encode(), POS_ID: to_bytes(LongType(), 99)},
        value_counts={FILE_PATH_ID: 3, POS_ID: 3},
    )

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(LongType()))

    assert doc["content"] == "position-deletes"
    assert doc["lower-bounds"] == {"keys": [FILE_PATH_ID, POS_ID], "values": [target, 0]}


def test_equality_delete_file_keeps_its_equality_ids():
    data_file = _data_file(
        content=DataFileContent.EQUALITY_DELETES,
        file_path="s3://bucket/t/data/eq-deletes.parquet",
        equality_ids=[1, 2],
        sort_order_id=0,
    )

    doc = _assert_exact_round_trip(data_file, UNPARTITIONED, _schema(LongType(), StringType()))

    assert doc["content"] == "equality-deletes"
    assert doc["equality-ids"] == [1, 2]


def test_deletion_vector_entry_round_trips_in_the_v3_layout():
    data_file = _data_file(
        content=DataFileContent.POSITION_DELETES,
        file_path="s3://bucket/t/data/dv.puffin",
        file_format=FileFormat.PUFFIN,
        record_count=3,
        referenced_data_file="s3://bucket/t/data/a.parquet",
        content_offset=4,
        content_size_in_bytes=42,
    )

    decoded, doc = _round_trip(data_file, UNPARTITIONED, _schema(LongType()))

    assert _stored_fields(decoded) == _stored_fields(data_file)
    assert len(decoded) == len(DATA_FILE_TYPE[3].fields)
    assert {
        k: doc[k] for k in ("file-format", "referenced-data-file", "content-offset", "content-size-in-bytes")
    } == {
        "file-format": "puffin",
        "referenced-data-file": "s3://bucket/t/data/a.parquet",
        "content-offset": 4,
        "content-size-in-bytes": 42,
    }


def _dv_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "spec-id": 0,
        "content": "position-deletes",
        "file-path": "s3://b/t/data/dv.puffin",
        "file-format": "puffin",
        "partition": [],
        "file-size-in-bytes": 120,
        "record-count": 3,
        "referenced-data-file": "s3://b/t/data/a.parquet",
        "content-offset": 4,
        "content-size-in-bytes": 42,
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize("missing", ["referenced-data-file", "content-offset", "content-size-in-bytes"])
def test_a_deletion_vector_document_without_its_blob_fields_is_refused(missing: str):
    with pytest.raises(DataFileCodecError, match=rf"key '{missing}': is missing: a deletion vector needs"):
        data_file_from_json(_dv_doc(**{missing: None}), {0: UNPARTITIONED}, _schema(LongType()))


def test_a_puffin_document_that_is_not_a_position_delete_is_refused():
    with pytest.raises(DataFileCodecError, match="must be a position delete"):
        data_file_from_json(_dv_doc(content="data"), {0: UNPARTITIONED}, _schema(LongType()))


def test_a_deletion_vector_with_a_negative_offset_is_refused():
    with pytest.raises(DataFileCodecError, match="blob offset/size"):
        data_file_from_json(_dv_doc(**{"content-offset": -1}), {0: UNPARTITIONED}, _schema(LongType()))


@pytest.mark.parametrize("key", ["content-offset", "content-size-in-bytes"])
def test_a_parquet_delete_file_with_a_blob_location_is_refused(key: str):
    doc = _dv_doc(**{"file-format": "parquet", "content-offset": None, "content-size-in-bytes": None})
    doc[key] = 4

    with pytest.raises(DataFileCodecError, match=rf"key '{key}': only a deletion vector \(Puffin\) has it"):
        data_file_from_json(doc, {0: UNPARTITIONED}, _schema(LongType()))


def test_a_parquet_position_delete_file_may_reference_its_data_file():
    doc = _dv_doc(**{"file-format": "parquet", "content-offset": None, "content-size-in-bytes": None})

    decoded = data_file_from_json(doc, {0: UNPARTITIONED}, _schema(LongType()))

    assert decoded.file_format == FileFormat.PARQUET


def test_file_without_spec_id_uses_the_given_spec():
    data_file = DataFile.from_args(
        file_path="a.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=1,
    )

    doc = data_file_to_json(data_file, PartitionSpec(spec_id=4), _schema(LongType()))

    assert doc["spec-id"] == 4


def test_decodes_java_style_documents():
    """Java <= 1.10 wrote enum names, and Java formats times with as few fraction digits as it can."""
    schema = _schema(TimestamptzType(), TimeType(), FixedType(2))
    doc = {
        "spec-id": 0,
        "content": "POSITION_DELETES",
        "file-path": "a.parquet",
        "file-format": "PARQUET",
        "partition": [],
        "file-size-in-bytes": 1,
        "record-count": 1,
        "lower-bounds": {"keys": [1, 2, 3], "values": ["2024-01-01T02:00:00.5+02:00", "01:02:03", "abcd"]},
        "key-metadata": None,
        "data-sequence-number": 7,
    }

    decoded = data_file_from_json(doc, {0: UNPARTITIONED}, schema)

    assert decoded.content == DataFileContent.POSITION_DELETES
    assert decoded.file_format == FileFormat.PARQUET
    assert decoded.key_metadata is None
    assert decoded.lower_bounds == {
        1: to_bytes(TimestamptzType(), 1_704_067_200_500_000),
        2: to_bytes(TimeType(), 3_723_000_000),
        3: b"\xab\xcd",
    }


def test_files_decoded_with_shared_partitions_equal_those_decoded_alone() -> None:
    """One record per distinct partition JSON of a spec; every file still decodes as it does alone, and a
    bad partition is still refused."""
    schema = _schema(LongType(), DateType())
    specs = _error_specs()
    docs = [
        {**_valid_doc(), "file-path": f"s3://b/t/{i}.parquet", "partition": [value]}
        for i, value in enumerate(["2024-01-01", "2024-01-02", "2024-01-01", None, None])
    ]
    shared: dict[tuple[int, str], Record] = {}

    files = [data_file_from_json(d, specs, schema, partitions=shared) for d in docs]

    assert [_stored_fields(f) for f in files] == [
        _stored_fields(data_file_from_json(d, specs, schema)) for d in docs
    ]
    assert files[0].partition is files[2].partition
    assert files[3].partition is files[4].partition
    assert files[0].partition is not files[1].partition
    assert len(shared) == 3
    with pytest.raises(DataFileCodecError, match="partition"):
        data_file_from_json({**docs[0], "partition": ["not a date"]}, specs, schema, partitions=shared)


# --- errors -----------------------------------------------------------------------------------------------


def _valid_doc() -> dict[str, Any]:
    schema = _schema(LongType(), DateType())
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "d"), spec_id=0)
    data_file = _data_file(
        partition=Record(19723),
        column_sizes={1: 10},
        lower_bounds={1: to_bytes(LongType(), 1), 9: b"\x01"},
    )
    return data_file_to_json(data_file, spec, schema)


def _error_specs() -> dict[int, PartitionSpec]:
    return {0: PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "d"), spec_id=0)}


def _without(key: str) -> dict[str, Any]:
    doc = _valid_doc()
    del doc[key]
    return doc


def _with(**changes: Any) -> dict[str, Any]:
    return {**_valid_doc(), **{key.replace("_", "-"): value for key, value in changes.items()}}


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        *[
            (_without(key), key)
            for key in (
                "spec-id",
                "content",
                "file-path",
                "file-format",
                "partition",
                "file-size-in-bytes",
                "record-count",
            )
        ],
        (_with(record_count="10"), "record-count"),
        (_with(record_count=True), "record-count"),
        (_with(record_count=1.0), "record-count"),
        (_with(file_path=5), "file-path"),
        (_with(content="deletes"), "content"),
        (_with(file_format="csv"), "file-format"),
        (_with(spec_id=7), "spec-id"),
        (_with(partition="2024-01-01"), "partition"),
        (_with(partition=[]), "partition"),
        (_with(partition=[19723]), "partition"),
        (_with(partition=["2024-13-01"]), "partition"),
        (_with(column_sizes={"keys": [1, 2], "values": [10]}), "column-sizes"),
        (_with(column_sizes={"keys": [1]}), "column-sizes"),
        (_with(column_sizes=[1, 10]), "column-sizes"),
        (_with(column_sizes={"keys": [1], "values": ["10"]}), "column-sizes"),
        (_with(column_sizes={"keys": ["1"], "values": [10]}), "column-sizes"),
        (_with(column_sizes={"keys": [1, 1], "values": [10, 11]}), "column-sizes"),
        (_with(lower_bounds={"keys": [1], "values": ["one"]}), "lower-bounds"),
        (_with(lower_bounds={"keys": [1], "values": [2**63]}), "lower-bounds"),
        (_with(lower_bounds={"keys": [9], "values": [1]}), "lower-bounds"),
        (_with(raw_lower_bounds={"keys": [1], "values": ["01"]}), "raw-lower-bounds"),
        (_with(raw_lower_bounds={"keys": [9], "values": ["0g"]}), "raw-lower-bounds"),
        (_with(key_metadata="xyz"), "key-metadata"),
        (_with(split_offsets=[4, "8"]), "split-offsets"),
        (_with(equality_ids="1"), "equality-ids"),
        (_with(first_row_id="1"), "first-row-id"),
    ],
)
def test_malformed_documents_raise_a_one_line_codec_error_naming_the_key(doc, where):
    with pytest.raises(DataFileCodecError) as exc:
        data_file_from_json(doc, _error_specs(), _schema(LongType(), DateType()))

    message = str(exc.value)
    assert f"'{where}'" in message
    assert "\n" not in message


@pytest.mark.parametrize("doc", [None, [], "{}"])
def test_a_document_that_is_not_an_object_raises_a_codec_error(doc):
    with pytest.raises(DataFileCodecError, match="expected an object"):
        data_file_from_json(doc, _error_specs(), _schema(LongType()))


def test_encoding_with_the_wrong_spec_raises():
    with pytest.raises(DataFileCodecError, match="spec id is 0 but spec 1 was given"):
        data_file_to_json(_data_file(spec_id=0), PartitionSpec(spec_id=1), _schema(LongType()))


def test_encoding_a_partition_that_does_not_fit_the_spec_raises():
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "p"), spec_id=0)

    with pytest.raises(DataFileCodecError, match="partition has 0 values"):
        data_file_to_json(_data_file(), spec, _schema(DateType()))
    with pytest.raises(DataFileCodecError, match="partition field 'p'"):
        data_file_to_json(_data_file(partition=Record(dt.date(2024, 1, 1))), spec, _schema(DateType()))


# --- real files -------------------------------------------------------------------------------------------


def test_data_files_written_by_pyiceberg_round_trip_exactly(tmp_path):
    """Real entries, read back from manifests, including bounds of a dropped and of a promoted column."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "flag", BooleanType(), required=False),
        NestedField(2, "small", IntegerType(), required=False),
        NestedField(3, "big", LongType(), required=False),
        NestedField(4, "ratio", FloatType(), required=False),
        NestedField(5, "amount", DecimalType(10, 2), required=False),
        NestedField(6, "day", DateType(), required=False),
        NestedField(7, "clock", TimeType(), required=False),
        NestedField(8, "at", TimestampType(), required=False),
        NestedField(9, "at_tz", TimestamptzType(), required=False),
        NestedField(10, "name", StringType(), required=False),
        NestedField(11, "id", UUIDType(), required=False),
        NestedField(12, "code", FixedType(3), required=False),
        NestedField(13, "blob", BinaryType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(6, 1000, IdentityTransform(), "day"),
        PartitionField(10, 1001, IdentityTransform(), "name"),
        PartitionField(5, 1002, IdentityTransform(), "amount"),
        PartitionField(8, 1003, IdentityTransform(), "at"),
        PartitionField(1, 1004, IdentityTransform(), "flag"),
    )
    table = catalog.create_table("ns.t", schema=schema, partition_spec=spec)
    utc = dt.timezone.utc
    table.append(
        pa.table(
            {
                "flag": [True, False, None],
                "small": [1, -2, None],
                "big": [10, 2**40, 3],
                "ratio": [1.5, -0.0, None],
                "amount": [Decimal("1.23"), Decimal("-4.56"), None],
                "day": [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None],
                "clock": [dt.time(1, 2, 3, 4), dt.time(23, 59, 59, 999999), None],
                "at": [dt.datetime(2024, 1, 1, 1), dt.datetime(1900, 1, 1), None],
                "at_tz": [dt.datetime(2024, 1, 1, tzinfo=utc), None, dt.datetime(2000, 1, 1, tzinfo=utc)],
                "name": ["héllo", "a" * 40, None],
                "id": [SAMPLE_UUID.bytes, uuid.uuid4().bytes, None],
                "code": [b"abc", b"\x00\x01\x02", None],
                "blob": [b"\x00\xff", b"x" * 40, None],
            },
            schema=schema.as_arrow(),
        )
    )
    with table.update_schema() as update:
        update.delete_column("blob")
        update.update_column("small", LongType())
    table = catalog.load_table("ns.t")

    files = [task.file for task in table.scan().plan_files()]
    docs = [
        _assert_exact_round_trip(f, table.specs()[f.spec_id], table.schema(), table.specs()) for f in files
    ]

    assert len(files) == 3
    assert {doc["file-format"] for doc in docs} == {"parquet"}
    # bounds of the dropped column (13) and 4-byte bounds of the promoted one (2) travel raw
    raw_ids = [set(doc.get("raw-lower-bounds", {"keys": []})["keys"]) for doc in docs]
    assert [ids for ids in raw_ids if ids] == [{2, 13}, {2, 13}]
    assert json.loads(json.dumps(docs)) == docs


def test_without_metrics_the_entry_has_none_and_the_rest_decodes_the_same():
    schema = _schema(LongType(), StringType())
    data_file = _data_file(
        column_sizes={1: 100},
        value_counts={1: 10},
        lower_bounds={1: to_bytes(LongType(), 1), 2: b"a"},
        upper_bounds={1: to_bytes(LongType(), 9), 2: b"z"},
        split_offsets=[4],
        first_row_id=7,
    )
    doc = data_file_to_json(data_file, UNPARTITIONED, schema)

    full = data_file_from_json(doc, {0: UNPARTITIONED}, schema)
    lean = data_file_from_json(doc, {0: UNPARTITIONED}, schema, metrics=False)

    assert lean.lower_bounds is None
    assert lean.upper_bounds is None
    assert lean.column_sizes is None
    for name in (
        "file_path",
        "record_count",
        "file_size_in_bytes",
        "partition",
        "split_offsets",
    ):
        assert getattr(lean, name) == getattr(full, name)
    assert _v3(lean, "first_row_id") == _v3(full, "first_row_id") == 7


@pytest.mark.parametrize(
    "doc",
    [
        _with(column_sizes={"keys": [1, 2], "values": [10]}),
        _with(column_sizes=[1, 10]),
        _with(lower_bounds={"keys": ["1"], "values": [1]}),
        _with(raw_upper_bounds={"keys": [1, 1], "values": ["01", "02"]}),
    ],
)
def test_without_metrics_the_maps_are_still_checked_for_shape(doc):
    with pytest.raises(DataFileCodecError):
        data_file_from_json(doc, _error_specs(), _schema(LongType(), DateType()), metrics=False)


def test_removed_files_of_packed_entries_decode_as_one_by_one():
    """A commit decodes compact()'s removed files once a shared rest and copies them: each must equal its
    own decode, field for field (spec, partition, v3 ids, content), and share nothing a caller changes."""
    from airflow_provider_iceberg_exec.engine.documents.packed import PackedEntries, data_files_of
    from airflow_provider_iceberg_exec.engine.meta.datafile_json import removed_files_from_json

    schema = _schema(LongType(), StringType())
    by_c2 = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "c2"), spec_id=1)
    specs = {0: UNPARTITIONED, 1: by_c2}

    def entry(number: int) -> dict[str, Any]:
        spec = specs[number % 2]
        fields: dict[str, Any] = {
            "file_path": f"file:///w/t/data/{number:05d}.parquet",
            "record_count": 20 + number,
            "file_size_in_bytes": 4000 + number,
            "partition": Record("a" if number % 4 == 1 else "b") if spec.spec_id else Record(),
            "split_offsets": [4],
            "spec_id": spec.spec_id,
        }
        if number % 5 == 4:
            fields["first_row_id"] = 1000 * number  # a v3 file: its own rest
        doc = data_file_to_json(_data_file(**fields), spec, schema, metrics=False)
        return {"data-file": doc, "data-sequence-number": 1 + number % 3, "delete-files": []}

    entries = [entry(n) for n in range(40)]
    expected = [
        _stored_fields(data_file_from_json(e["data-file"], specs, schema, metrics=False)) for e in entries
    ]
    packed = PackedEntries.pack([json.loads(json.dumps(e)) for e in entries])
    assert 1 < packed.shapes < 40

    decoded = removed_files_from_json(data_files_of(packed), specs, schema)

    assert [_stored_fields(f) for f in decoded] == expected
    assert [
        _stored_fields(f) for f in removed_files_from_json(list(data_files_of(packed)), specs, schema)
    ] == (expected)
    decoded[0][1] = "changed"
    assert [f.file_path for f in decoded[1:]] == [e["data-file"]["file-path"] for e in entries[1:]]
