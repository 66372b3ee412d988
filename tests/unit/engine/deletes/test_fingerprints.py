"""engine/deletes/fingerprints.py: equal null-safe keys have equal fingerprints whatever else is in the
batch and in whatever order (so the filter loses no match), different keys rarely collide, and float keys
are never filtered."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.deletes.equality import key_column
from airflow_provider_iceberg_exec.engine.deletes.fingerprints import Fingerprinter, KeyFilter

FIELDS = [
    NestedField(1, key_column(1), LongType(), required=False),
    NestedField(2, key_column(2), StringType(), required=False),
]


def _batch(ids: list[int | None], names: list[str | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {key_column(1): pa.array(ids, pa.int64()), key_column(2): pa.array(names, pa.string())}
    )


def test_equal_keys_have_equal_fingerprints_in_any_batch_and_order() -> None:
    rng = np.random.default_rng(3)
    ids = [None if i % 11 == 0 else int(i % 500) for i in range(20_000)]
    names = [None if i % 13 == 0 else f"n{i % 700}" for i in range(20_000)]
    prints = Fingerprinter([1, 2], FIELDS)
    whole = prints.of(_batch(ids, names))
    order = rng.permutation(len(ids))
    shuffled = prints.of(_batch([ids[i] for i in order], [names[i] for i in order]))
    assert (shuffled == whole[order]).all()
    by_key: dict[tuple[object, object], int] = {}
    for key, value in zip(zip(ids, names, strict=True), whole.tolist(), strict=True):
        assert by_key.setdefault(key, value) == value
    assert len(set(by_key.values())) > 0.99 * len(by_key)  # distinct keys rarely collide


def test_the_filter_keeps_every_row_a_delete_key_matches() -> None:
    key_filter = KeyFilter([1, 2], FIELDS, delete_rows=3, budget_bytes=1 << 20)
    key_filter.add_deletes(_batch([1, None, 3], ["a", "b", None]))
    kept = key_filter.candidates(_batch([1, 1, None, 3, 3, None], ["a", "b", "b", None, "x", None]))
    assert kept is not None
    assert kept.tolist() == [True, False, True, True, False, False]


def test_float_keys_and_too_many_deletes_turn_the_filter_off() -> None:
    floats = [NestedField(3, key_column(3), DoubleType(), required=False)]
    assert KeyFilter([3], floats, 1, 1 << 20).candidates(pa.record_batch({key_column(3): [0.0]})) is None
    assert (
        KeyFilter([1, 2], FIELDS, delete_rows=1 << 20, budget_bytes=1024).candidates(_batch([1], ["a"]))
        is None
    )
