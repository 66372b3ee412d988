"""Single values <-> the Iceberg JSON single-value serialisation: the exact text per type, round trips,
the forms accepted on the way in, and the values and types refused."""

from __future__ import annotations

import json
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
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
    ListType,
    LongType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
    UUIDType,
)

from airflow_provider_iceberg_exec.engine.meta.json_values import (
    VALUE_ERRORS,
    expect,
    from_hex,
    to_hex,
    value_codec,
)

U = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
MICROS_2017 = 1_510_871_468_123_456  # 2017-11-16T22:31:08.123456


def _encode(field_type: IcebergType, value: Any) -> Any:
    return value_codec(field_type).encode(field_type, value)


def _decode(field_type: IcebergType, value: Any) -> Any:
    return value_codec(field_type).decode(field_type, value)


@pytest.mark.parametrize(
    ("field_type", "value", "encoded"),
    [
        pytest.param(BooleanType(), True, True, id="boolean"),
        pytest.param(IntegerType(), -(2**31), -(2**31), id="int-min"),
        pytest.param(LongType(), 2**63 - 1, 2**63 - 1, id="long-max"),
        pytest.param(FloatType(), 1.5, 1.5, id="float"),
        pytest.param(DoubleType(), -0.25, -0.25, id="double"),
        pytest.param(DecimalType(9, 2), Decimal("14.20"), "14.20", id="decimal"),
        pytest.param(DecimalType(9, 2), Decimal("-0.05"), "-0.05", id="decimal-negative-fraction"),
        pytest.param(DecimalType(9, 0), Decimal("-42"), "-42", id="decimal-scale-0"),
        pytest.param(
            DecimalType(38, 10),
            Decimal("1234567890123456789012345678.0123456789"),
            "1234567890123456789012345678.0123456789",
            id="decimal-38-digits",
        ),
        pytest.param(DateType(), 17_486, "2017-11-16", id="date"),
        pytest.param(DateType(), -1, "1969-12-31", id="date-before-epoch"),
        pytest.param(TimeType(), 81_068_123_456, "22:31:08.123456", id="time"),
        pytest.param(TimeType(), 0, "00:00:00.000000", id="midnight"),
        pytest.param(TimestampType(), MICROS_2017, "2017-11-16T22:31:08.123456", id="timestamp"),
        pytest.param(TimestampType(), -1, "1969-12-31T23:59:59.999999", id="timestamp-before-epoch"),
        pytest.param(TimestamptzType(), MICROS_2017, "2017-11-16T22:31:08.123456+00:00", id="timestamptz"),
        pytest.param(
            TimestampNanoType(), MICROS_2017 * 1000 + 789, "2017-11-16T22:31:08.123456789", id="timestamp_ns"
        ),
        pytest.param(TimestamptzNanoType(), 1, "1970-01-01T00:00:00.000000001+00:00", id="timestamptz_ns"),
        pytest.param(StringType(), "iceberg ❄", "iceberg ❄", id="string"),
        pytest.param(UUIDType(), U, "f79c3e09-677c-4bbd-a479-3f349cb785e7", id="uuid"),
        pytest.param(FixedType(3), b"\x00\xab\xff", "00ABFF", id="fixed"),
        pytest.param(BinaryType(), b"\x0f\xe0", "0FE0", id="binary"),
        pytest.param(BinaryType(), b"", "", id="binary-empty"),
    ],
)
def test_encodes_the_spec_form_and_decodes_it_back(field_type: IcebergType, value: Any, encoded: Any) -> None:
    text = _encode(field_type, value)

    assert text == encoded
    assert type(text) is type(encoded)
    assert json.loads(json.dumps(text)) == encoded
    decoded = _decode(field_type, text)
    assert decoded == value
    assert type(decoded) is type(value)


@pytest.mark.parametrize("field_type", [FloatType(), DoubleType()])
@pytest.mark.parametrize(("value", "encoded"), [(math.inf, "Infinity"), (-math.inf, "-Infinity")])
def test_infinite_floats_are_strings(field_type: IcebergType, value: float, encoded: str) -> None:
    assert _encode(field_type, value) == encoded
    assert _decode(field_type, encoded) == value


@pytest.mark.parametrize("field_type", [FloatType(), DoubleType()])
def test_nan_is_the_string_nan(field_type: IcebergType) -> None:
    assert _encode(field_type, math.nan) == "NaN"
    assert math.isnan(_decode(field_type, "NaN"))


def test_integers_are_accepted_as_floats() -> None:
    assert _encode(DoubleType(), 3) == 3.0
    assert isinstance(_encode(DoubleType(), 3), float)
    assert _decode(FloatType(), 2) == 2.0
    assert isinstance(_decode(FloatType(), 2), float)


def test_a_uuid_as_16_bytes_encodes_canonically() -> None:
    assert _encode(UUIDType(), U.bytes) == str(U)


def test_decimals_are_padded_to_the_scale() -> None:
    decimal = DecimalType(9, 3)

    assert _encode(decimal, Decimal("1.5")) == "1.500"
    assert _encode(decimal, Decimal("7")) == "7.000"
    assert _encode(decimal, Decimal("0.001")) == "0.001"
    assert _encode(decimal, Decimal("1.50000")) == "1.500"  # trailing zeros beyond the scale are exact
    assert _decode(decimal, "2.5") == Decimal("2.500")
    assert str(_decode(decimal, "2.5")) == "2.500"


@pytest.mark.parametrize(
    ("field_type", "text", "expected"),
    [
        pytest.param(TimeType(), "10:00:00", 36_000_000_000, id="time-no-fraction"),
        pytest.param(TimeType(), "00:00:00.5", 500_000, id="time-short-fraction"),
        pytest.param(TimestamptzType(), "1970-01-01T00:00:01Z", 1_000_000, id="tz-z"),
        pytest.param(TimestamptzType(), "1970-01-01T02:00:00+02:00", 0, id="tz-positive-offset"),
        pytest.param(TimestamptzType(), "1969-12-31T19:00:00-05:00", 0, id="tz-negative-offset"),
        pytest.param(TimestampNanoType(), "1970-01-01T00:00:00.5", 500_000_000, id="ns-short-fraction"),
    ],
)
def test_decodes_java_style_shorter_forms_and_offsets(
    field_type: IcebergType, text: str, expected: int
) -> None:
    assert _decode(field_type, text) == expected


@pytest.mark.parametrize(
    ("field_type", "value", "match"),
    [
        pytest.param(IntegerType(), 2**31, "does not fit in 32 bits", id="int-overflow"),
        pytest.param(IntegerType(), -(2**31) - 1, "does not fit in 32 bits", id="int-underflow"),
        pytest.param(LongType(), 2**63, "does not fit in 64 bits", id="long-overflow"),
        pytest.param(DecimalType(9, 2), Decimal("1.234"), "more than 2 fraction digits", id="decimal-scale"),
        pytest.param(DecimalType(3, 1), Decimal("100.0"), "exceeds precision 3", id="decimal-precision"),
        pytest.param(DecimalType(9, 2), Decimal("NaN"), "is not finite", id="decimal-nan"),
        pytest.param(FixedType(3), b"\x00\x01", "2 bytes do not fit fixed\\[3\\]", id="fixed-length"),
        pytest.param(TimeType(), 86_400_000_000, "is not a time of day", id="time-a-day"),
        pytest.param(TimeType(), -1, "is not a time of day", id="time-negative"),
        pytest.param(UnknownType(), math.inf, "non-finite float of unknown type", id="unknown-inf"),
    ],
)
def test_encoding_refuses_values_out_of_range(field_type: IcebergType, value: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _encode(field_type, value)


@pytest.mark.parametrize(
    ("field_type", "value", "match"),
    [
        pytest.param(IntegerType(), True, "expected an integer, got bool", id="bool-as-int"),
        pytest.param(LongType(), 1.0, "expected an integer, got float", id="float-as-long"),
        pytest.param(DoubleType(), False, "expected a float, got bool", id="bool-as-double"),
        pytest.param(BooleanType(), 1, "expected a boolean, got int", id="int-as-bool"),
        pytest.param(StringType(), b"x", "expected a string, got bytes", id="bytes-as-string"),
        pytest.param(DecimalType(9, 2), 1.5, "expected a Decimal, got float", id="float-as-decimal"),
        pytest.param(DateType(), "2024-01-01", "expected an int", id="text-as-date"),
        pytest.param(UUIDType(), str(U), "expected a UUID, got str", id="text-as-uuid"),
        pytest.param(BinaryType(), "00", "expected bytes, got str", id="text-as-binary"),
        pytest.param(UnknownType(), None, "expected a JSON scalar", id="unknown-none"),
    ],
)
def test_encoding_refuses_values_of_the_wrong_python_type(
    field_type: IcebergType, value: Any, match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        _encode(field_type, value)


@pytest.mark.parametrize(
    ("field_type", "text", "match"),
    [
        pytest.param(DateType(), "2024-1-01", "expected YYYY-MM-DD", id="date-short-month"),
        pytest.param(DateType(), "2024-02-30", "day is out of range", id="date-invalid-day"),
        pytest.param(TimeType(), "24:00:00", "invalid time of day", id="time-hour-24"),
        pytest.param(TimeType(), "10:60:00", "invalid time of day", id="time-minute-60"),
        pytest.param(TimeType(), "10:00", "expected HH:MM:SS", id="time-no-seconds"),
        pytest.param(TimeType(), "00:00:00.0000001", "more than 6 fraction digits", id="time-nanos"),
        pytest.param(TimestampType(), "2024-01-01 00:00:00", "expected YYYY-MM-DDTHH", id="ts-space"),
        pytest.param(
            TimestampType(), "2024-01-01T00:00:00+00:00", "must not have a UTC offset", id="ts-offset"
        ),
        pytest.param(TimestamptzType(), "2024-01-01T00:00:00", "lacks a UTC offset", id="tz-no-offset"),
        pytest.param(TimestamptzType(), "2024-01-01T00:00:00.1234567Z", "more than 6", id="tz-nanos"),
        pytest.param(DecimalType(9, 2), "abc", "not a decimal", id="decimal-text"),
        pytest.param(DecimalType(9, 2), "1.234", "more than 2 fraction digits", id="decimal-scale"),
        pytest.param(FixedType(2), "ABC", "expected a hex string", id="fixed-odd-hex"),
        pytest.param(FixedType(2), "ABCDEF", "3 bytes do not fit", id="fixed-length"),
        pytest.param(BinaryType(), "zz", "expected a hex string", id="binary-not-hex"),
        pytest.param(UUIDType(), "not-a-uuid", "badly formed", id="uuid-text"),
    ],
)
def test_decoding_refuses_malformed_text(field_type: IcebergType, text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _decode(field_type, text)


@pytest.mark.parametrize(
    ("field_type", "value"),
    [
        pytest.param(DateType(), 17_486, id="date-int"),
        pytest.param(TimestampType(), 0, id="timestamp-int"),
        pytest.param(DecimalType(9, 2), 14.2, id="decimal-float"),
        pytest.param(UUIDType(), U.bytes, id="uuid-bytes"),
        pytest.param(DoubleType(), "1.5", id="double-text"),
        pytest.param(IntegerType(), "1", id="int-text"),
    ],
)
def test_decoding_refuses_json_of_the_wrong_kind(field_type: IcebergType, value: Any) -> None:
    with pytest.raises(TypeError, match="expected"):
        _decode(field_type, value)


@pytest.mark.parametrize("value", [True, 3, 1.5, "text"])
def test_unknown_type_passes_json_scalars_through(value: Any) -> None:
    assert _encode(UnknownType(), value) == value
    assert _decode(UnknownType(), value) == value


@pytest.mark.parametrize(
    "field_type",
    [StructType(), ListType(element_id=1, element=LongType())],
    ids=["struct", "list"],
)
def test_nested_types_have_no_codec(field_type: IcebergType) -> None:
    with pytest.raises(TypeError, match="have no JSON form here"):
        value_codec(field_type)


def test_every_refusal_of_the_codecs_is_among_value_errors() -> None:
    assert {ValueError, TypeError, OverflowError} <= set(VALUE_ERRORS)


def test_hex_helpers() -> None:
    assert to_hex(b"\xde\xad\xbe\xef") == "DEADBEEF"
    assert from_hex("deadBEEF") == b"\xde\xad\xbe\xef"
    assert from_hex("") == b""
    for bad in ("0", "0x00", " 00", 0, None):
        with pytest.raises(ValueError, match="expected a hex string"):
            from_hex(bad)


def test_expect_treats_bool_as_an_int_only_where_bool_is_asked_for() -> None:
    assert expect(1, int, "an int") == 1
    assert expect(True, (bool, int), "a scalar") is True
    with pytest.raises(TypeError, match="expected an int, got bool"):
        expect(True, int, "an int")
    with pytest.raises(TypeError, match="expected a str, got int"):
        expect(1, str, "a str")
