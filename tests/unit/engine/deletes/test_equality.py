"""The key hash of the bucketed equality anti-join: every bucket is used, rows spread evenly, each level
splits a bucket again, and equal keys (nulls included) land in the same bucket on both sides."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from datafusion import SessionContext
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.deletes import equality as deletes

KEY_FIELDS = [
    NestedField(1, deletes.key_column(1), LongType(), required=False),
    NestedField(2, deletes.key_column(2), StringType(), required=False),
]


def _buckets(keys: pa.Table, buckets: int, level: int) -> list[int]:
    ctx = SessionContext()
    ctx.register_record_batches("t", [keys.to_batches()])
    sql = deletes._bucket_sql("t", [1, 2], KEY_FIELDS, buckets, level)
    return ctx.sql(sql).to_arrow_table().column(deletes._BUCKET).to_pylist()


def _keys(n: int) -> pa.Table:
    return pa.table(
        {
            deletes.key_column(1): pa.array([None if i % 97 == 0 else i for i in range(n)], pa.int64()),
            deletes.key_column(2): pa.array([f"user-{i % 1000}" if i % 89 else None for i in range(n)]),
        }
    )


@pytest.mark.parametrize("buckets", [7, 64])
def test_every_bucket_is_used_and_rows_spread_evenly(buckets: int) -> None:
    counts = Counter(_buckets(_keys(20_000), buckets, level=0))

    assert sorted(counts) == list(range(buckets))
    expected = 20_000 / buckets
    assert max(counts.values()) < 1.25 * expected
    assert min(counts.values()) > 0.75 * expected


def test_the_next_level_splits_one_bucket_again() -> None:
    keys = _keys(20_000)
    first = _buckets(keys, 64, level=0)
    one_bucket = keys.filter(pa.array([b == 5 for b in first]))

    again = Counter(_buckets(one_bucket, 8, level=1))

    assert sorted(again) == list(range(8))


def test_equal_keys_share_a_bucket_whatever_else_is_in_the_batch() -> None:
    keys = _keys(500)
    alone = _buckets(keys.slice(100, 50), 64, level=0)
    within = _buckets(keys, 64, level=0)[100:150]

    assert alone == within
