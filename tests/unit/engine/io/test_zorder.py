"""Z-order values against a literal, row-at-a-time port of Iceberg's ``ZOrderByteUtils`` (the reference),
written here from Java's loop, independent of the vectorized code under test."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.io.zorder import (
    ZOrder,
    zorder_columns,
    zorder_restorable,
    zorder_values,
    zorder_width,
)


def _whole(value: int | None) -> bytes:
    return bytes(8) if value is None else struct.pack(">q", value ^ -(2**63))


def _double(value: float | None) -> bytes:
    if value is None:
        return bytes(8)
    bits = struct.unpack(">q", struct.pack(">d", value))[0]
    bits ^= (bits >> 63) | -(2**63)
    return struct.pack(">q", bits)


def _string(value: str | None, length: int) -> bytes:
    out = b""
    for char in value or "":  # Java's encoder stops before a character that does not fit
        encoded = char.encode("utf-8")
        if len(out) + len(encoded) > length:
            break
        out += encoded
    return out + bytes(length - len(out))


def _interleave(columns: list[bytes], size: int) -> bytes:
    """ZOrderByteUtils.interleaveBits, as Java loops."""
    out = bytearray(size)
    source_column = source_byte = 0
    source_bit = interleave_bit = 7
    interleave_byte = 0
    while interleave_byte < size:
        bit = (columns[source_column][source_byte] >> source_bit) & 1
        out[interleave_byte] |= bit << interleave_bit
        interleave_bit -= 1
        if interleave_bit == -1:
            interleave_byte += 1
            interleave_bit = 7
        if interleave_byte == size:
            break
        while True:
            source_column += 1
            if source_column == len(columns):
                source_column = 0
                source_bit -= 1
                if source_bit == -1:
                    source_byte += 1
                    source_bit = 7
            if len(columns[source_column]) > source_byte:
                break
    return bytes(out)


def _reference(rows: list[tuple[Any, ...]], kinds: list[str], length: int, max_size: int) -> list[bytes]:
    encode = {"long": _whole, "double": _double, "string": lambda v: _string(v, length)}
    out = []
    for row in rows:
        parts = [encode[kind](value) for kind, value in zip(kinds, row, strict=True)]
        out.append(_interleave(parts, min(sum(len(p) for p in parts), max_size)))
    return out


def _ours(rows: list[tuple[Any, ...]], kinds: list[str], length: int, max_size: int) -> list[bytes]:
    types = {"long": pa.int64(), "double": pa.float64(), "string": pa.string()}
    columns = [pa.array([r[i] for r in rows], types[k]) for i, k in enumerate(kinds)]
    iceberg = {"long": LongType(), "double": DoubleType(), "string": StringType()}
    schema = Schema(*(NestedField(i + 1, f"c{i}", iceberg[k], required=False) for i, k in enumerate(kinds)))
    key = ZOrder(tuple(f"c{i}" for i in range(len(kinds))), tuple(range(1, len(kinds) + 1)), length, max_size)
    width = zorder_width(key, schema)
    return _bytes_of(zorder_values(columns, key, width), width)


def _bytes_of(values: pa.Array, width: int) -> list[bytes]:
    """The z-values' bytes back from the sort column: a binary as is, a decimal's integer unflipped."""
    if pa.types.is_fixed_size_binary(values.type):
        assert values.type.byte_width == width > 32
        return values.to_pylist()
    size = 16 if width <= 16 else 32
    assert values.type == (pa.decimal128(38, 0) if size == 16 else pa.decimal256(76, 0))
    raw = values.buffers()[1].to_pybytes()
    integers = [int.from_bytes(raw[i : i + size], "little", signed=True) for i in range(0, len(raw), size)]
    return [(n + 2 ** (8 * size - 1)).to_bytes(size, "big")[:width] for n in integers]


_longs = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
_doubles = st.one_of(st.none(), st.floats(allow_nan=False, width=64))
_strings = st.one_of(st.none(), st.text(max_size=12))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(_longs, _doubles, _strings), min_size=1, max_size=30),
    length=st.integers(1, 10),
    max_size=st.integers(1, 40),
)
def test_values_are_javas(rows: list[tuple[Any, ...]], length: int, max_size: int) -> None:
    kinds = ["long", "double", "string"]
    assert _ours(rows, kinds, length, max_size) == _reference(rows, kinds, length, max_size)


_VALUES = {"long": _longs, "double": _doubles, "string": _strings}


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    kinds=st.lists(st.sampled_from(sorted(_VALUES)), min_size=1, max_size=10),
    length=st.sampled_from([8, 8, 3]),
    max_size=st.integers(1, 90),
)
def test_values_are_javas_for_any_column_count(
    data: st.DataObject, kinds: list[str], length: int, max_size: int
) -> None:
    """One to ten columns: equal byte widths up to 8 columns take the table-lookup interleaving."""
    rows = data.draw(st.lists(st.tuples(*(_VALUES[kind] for kind in kinds)), min_size=1, max_size=20))
    assert _ours(rows, kinds, length, max_size) == _reference(rows, kinds, length, max_size)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    kinds=st.lists(st.sampled_from(sorted(_VALUES)), min_size=1, max_size=2),
    max_size=st.integers(1, 20),
)
def test_values_of_one_or_two_eight_byte_columns_are_javas(
    data: st.DataObject, kinds: list[str], max_size: int
) -> None:
    """One or two columns of 8 bytes each take the interleaving on 64-bit words."""
    rows = data.draw(st.lists(st.tuples(*(_VALUES[kind] for kind in kinds)), min_size=1, max_size=20))
    assert _ours(rows, kinds, 8, max_size) == _reference(rows, kinds, 8, max_size)


def test_values_are_javas_across_the_slices_of_a_large_batch() -> None:
    """The words are interleaved a slice of rows at a time: rows on both sides of a slice's end."""
    import random

    rng = random.Random(16)
    rows = [(rng.randint(-(2**63), 2**63 - 1), rng.uniform(-1e300, 1e300)) for _ in range(70_000)]
    rows[40_000] = (None, None)
    ours = _ours(rows, ["long", "double"], 8, 16)
    picked = [*range(32_760, 32_780), *range(65_530, 65_540), 40_000, 69_999]
    assert [ours[i] for i in picked] == _reference([rows[i] for i in picked], ["long", "double"], 8, 16)


@pytest.mark.parametrize("columns", [2, 3, 5])  # decimal128, decimal256 and binary sort columns
def test_the_sort_column_orders_rows_as_their_bytes(columns: int) -> None:
    """Arrow's own sort of the column (as DataFusion's, by the type's comparison) is the bytes' order."""
    import random

    import pyarrow.compute as pc

    rng = random.Random(columns)
    rows = [
        tuple(rng.choice([None, rng.randint(-(2**63), 2**63 - 1)]) for _ in range(columns))
        for _ in range(300)
    ]
    kinds = ["long"] * columns
    schema = Schema(*(NestedField(i + 1, f"c{i}", LongType(), required=False) for i in range(columns)))
    key = ZOrder(tuple(f"c{i}" for i in range(columns)), tuple(range(1, columns + 1)))
    arrays = [pa.array([r[i] for r in rows], pa.int64()) for i in range(columns)]
    values = zorder_values(arrays, key, zorder_width(key, schema))
    expected = _reference(rows, kinds, 8, 2**31 - 1)
    assert [expected[i] for i in pc.sort_indices(values).to_pylist()] == sorted(expected)


def test_a_multibyte_character_is_not_split() -> None:
    assert _ours([("aé",)], ["string"], 2, 100) == [_string("aé", 2)] == [b"a\x00"]


def test_order_follows_both_columns() -> None:
    rows = [(x, y) for x in range(4) for y in range(4)]
    values = _ours([(float(x), float(y)) for x, y in rows], ["double", "double"], 8, 16)
    ranked = [rows[i] for i in sorted(range(len(rows)), key=lambda i: values[i])]
    # The Z curve over a 4x4 grid: quadrant by quadrant.
    assert ranked[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("bad", ["zorder(nope)"])
def test_unknown_columns_are_refused(bad: str) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.io.sorting import parse_sort_order

    with pytest.raises(ConfigurationError, match="not in the table schema"):
        parse_sort_order(bad, Schema(NestedField(1, "id", LongType())))


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(_longs, _longs), min_size=1, max_size=30), count=st.sampled_from([1, 2]))
def test_longs_come_back_from_their_z_values(rows: list[tuple[Any, ...]], count: int) -> None:
    """Nulls come back as the minimum (the caller keeps null flags); every other value as it was."""
    columns = [pa.array([r[i] for r in rows], pa.int64()) for i in range(count)]
    key = ZOrder(tuple(f"c{i}" for i in range(count)), tuple(range(1, count + 1)))
    values = zorder_values(columns, key, 8 * count)
    back = [list(map(int, numbers)) for numbers in zorder_columns(values.slice(1), count)]
    assert back == [[-(2**63) if v is None else v for v in c.to_pylist()[1:]] for c in columns]


def test_only_whole_numbers_interleaved_in_full_are_restorable() -> None:
    from pyiceberg.types import TimestamptzType

    schema = Schema(
        NestedField(1, "a", LongType()),
        NestedField(2, "t", TimestamptzType()),
        NestedField(3, "d", DoubleType()),
    )
    assert zorder_restorable(ZOrder(("a", "t"), (1, 2)), schema)
    assert zorder_restorable(ZOrder(("t",), (2,)), schema)
    assert not zorder_restorable(ZOrder(("a", "d"), (1, 3)), schema)  # a double stays staged as itself
    assert not zorder_restorable(ZOrder(("a", "t"), (1, 2), max_output_size=15), schema)  # cut short
