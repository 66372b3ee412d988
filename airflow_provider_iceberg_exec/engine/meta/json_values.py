"""Single values: pyiceberg's Python representation <-> the Iceberg JSON single-value serialisation.

The codecs :mod:`.datafile_json` types partition values and bounds with, one per primitive type: numbers
and booleans as JSON, decimals as strings with exactly ``scale`` fraction digits, dates ``YYYY-MM-DD``,
times ``HH:MM:SS.ffffff``, timestamps ``YYYY-MM-DDTHH:MM:SS.ffffff`` (``+00:00`` for ``timestamptz``, nine
fraction digits for the ``_ns`` types), UUIDs in canonical form and fixed/binary as upper-case hex;
non-finite floats as ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``. Kept apart from the content-file
layout so that each module holds one concern.
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from collections.abc import Callable
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

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

__all__ = ["VALUE_ERRORS", "Codec", "expect", "from_hex", "to_hex", "value_codec"]

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SECONDS_PER_DAY = 86_400
_HEX_RE = re.compile(r"(?:[0-9A-Fa-f]{2})*")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_CLOCK = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
_TIME_RE = re.compile(_CLOCK, re.ASCII)
_TIMESTAMP_RE = re.compile(rf"(\d{{4}}-\d{{2}}-\d{{2}})T{_CLOCK}(Z|[+-]\d{{2}}:\d{{2}})?", re.ASCII)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is a ``kind`` (a bool only where ``bool`` is asked for); else TypeError."""
    # bool is an int in Python but never a JSON number here.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise TypeError(f"expected {what}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def to_hex(raw: bytes) -> str:
    """Upper-case hex, the JSON form of fixed and binary values and of raw bounds."""
    return raw.hex().upper()


def from_hex(text: Any) -> bytes:
    """The bytes of a hex string (either case); raise ValueError for anything else."""
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
    unscaled = _decimal_unscaled(expect(value, Decimal, "a Decimal"), decimal_type)
    scale = decimal_type.scale
    if scale <= 0:
        return f"{unscaled}E+{-scale}" if scale else str(unscaled)
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return f"{'-' if unscaled < 0 else ''}{digits[:-scale]}.{digits[-scale:]}"


def _decode_decimal(decimal_type: DecimalType, value: Any) -> Decimal:
    try:
        parsed = Decimal(expect(value, str, "a decimal string"))
    except InvalidOperation:
        raise ValueError(f"not a decimal: {value!r}") from None
    return unscaled_to_decimal(_decimal_unscaled(parsed, decimal_type), decimal_type.scale)


def _encode_float(_: Any, value: Any) -> float | str:
    number = float(expect(value, (float, int), "a float"))
    if math.isfinite(number):
        return number
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def _decode_float(_: Any, value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return float(expect(value, (float, int), "a number"))


def _encode_uuid(_: Any, value: Any) -> str:
    if isinstance(value, bytes):
        return str(uuid.UUID(bytes=value))
    return str(expect(value, uuid.UUID, "a UUID"))


def _encode_fixed(fixed_type: FixedType, value: Any) -> str:
    if len(expect(value, bytes, "bytes")) != len(fixed_type):
        raise ValueError(f"{len(value)} bytes do not fit {fixed_type}")
    return to_hex(value)


def _decode_fixed(fixed_type: FixedType, value: Any) -> bytes:
    raw = from_hex(value)
    if len(raw) != len(fixed_type):
        raise ValueError(f"{len(raw)} bytes do not fit {fixed_type}")
    return raw


def _passthrough(_: Any, value: Any) -> Any:
    # Partition fields whose source column was dropped: the type is gone, keep JSON scalars as they are.
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a non-finite float of unknown type cannot be encoded")
    return expect(value, (bool, int, float, str), "a JSON scalar for a field of unknown type")


class Codec(NamedTuple):
    """The encoder and decoder of one type: ``(field_type, value) -> value``."""

    encode: Callable[[Any, Any], Any]
    decode: Callable[[Any, Any], Any]


def _same_codec(kind: type, what: str) -> Codec:
    def code(_: Any, value: Any) -> Any:
        return expect(value, kind, what)

    return Codec(code, code)


def _int_codec(bits: int) -> Codec:
    def code(_: Any, value: Any) -> int:
        return _check_bits(expect(value, int, "an integer"), bits)

    return Codec(code, code)


def _temporal_codec(encode: Callable[[int], str], decode: Callable[[str], int]) -> Codec:
    return Codec(
        lambda _, value: encode(expect(value, int, "an int (pyiceberg's physical value)")),
        lambda _, value: decode(expect(value, str, "a string")),
    )


def _timestamp_codec(digits: int, utc: bool) -> Codec:
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


_CODECS: dict[type[IcebergType], Codec] = {
    BooleanType: _same_codec(bool, "a boolean"),
    IntegerType: _int_codec(32),
    LongType: _int_codec(64),
    FloatType: Codec(_encode_float, _decode_float),
    DoubleType: Codec(_encode_float, _decode_float),
    DecimalType: Codec(_encode_decimal, _decode_decimal),
    DateType: _temporal_codec(_days_text, _date_days),
    TimeType: _temporal_codec(_time_text, _time_of_day),
    TimestampType: _timestamp_codec(6, utc=False),
    TimestamptzType: _timestamp_codec(6, utc=True),
    TimestampNanoType: _timestamp_codec(9, utc=False),
    TimestamptzNanoType: _timestamp_codec(9, utc=True),
    StringType: _same_codec(str, "a string"),
    UUIDType: Codec(_encode_uuid, lambda _, value: uuid.UUID(expect(value, str, "a UUID string"))),
    FixedType: Codec(_encode_fixed, _decode_fixed),
    BinaryType: Codec(
        lambda _, value: to_hex(expect(value, bytes, "bytes")), lambda _, value: from_hex(value)
    ),
    UnknownType: Codec(_passthrough, _passthrough),
}

# What a broken value or bound can raise inside the codecs and pyiceberg's conversions.
VALUE_ERRORS = (ValueError, TypeError, OverflowError, struct.error)


def value_codec(field_type: IcebergType) -> Codec:
    """The codec of ``field_type``; raise TypeError for a type with no JSON single-value form."""
    codec = _CODECS.get(type(field_type))
    if codec is None:
        raise TypeError(f"values of type {field_type} have no JSON form here")
    return codec
