"""The manifest writer's integer encoding: byte for byte PyIceberg's zig-zag varints."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.avro.encoder import BinaryEncoder

from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import (
    _SMALL_INT_MAX,
    _SMALL_INT_MIN,
    _ManifestEntryEncoder,
)


def _encoded(encoder_type: type[BinaryEncoder], values: list[int]) -> bytes:
    out = io.BytesIO()
    encoder = encoder_type(out)
    for value in values:
        encoder.write_int(value)
        encoder.write_bytes(b"x" * (value % 7 if value > 0 else 0))
    return out.getvalue()


def test_every_small_integer_and_the_edges_encode_as_pyiceberg_does() -> None:
    values = [*range(_SMALL_INT_MIN - 2, _SMALL_INT_MAX + 2), -(1 << 63), (1 << 63) - 1, 1 << 40, -(1 << 40)]
    assert _encoded(_ManifestEntryEncoder, values) == _encoded(BinaryEncoder, values)


@given(st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), max_size=50))
def test_any_long_encodes_as_pyiceberg_does(values: list[int]) -> None:
    assert _encoded(_ManifestEntryEncoder, values) == _encoded(BinaryEncoder, values)
