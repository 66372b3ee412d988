"""engine/io/sorting.py: Spark's sort-order text parsed against the schema, matched with the table's
orders, and rows really sorted in that order (transforms included) within the memory limit."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType, StructType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.sorting import (
    SortKey,
    match_table_sort_order,
    parse_sort_order,
    sort_for_output,
    table_sort_keys,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "day", DateType(), required=False),
    NestedField(3, "name", StringType(), required=False),
    NestedField(4, "info", StructType(NestedField(5, "rank", LongType(), required=False)), required=False),
)


def test_keys_default_to_icebergs_null_order_and_keep_their_transform() -> None:
    keys = parse_sort_order("id, name DESC, day(day) ASC NULLS LAST, bucket(16, id) desc nulls first", SCHEMA)
    assert keys == (
        SortKey("id", 1, "identity", True, True),
        SortKey("name", 3, "identity", False, False),
        SortKey("day", 2, "day", True, False),
        SortKey("id", 1, "bucket[16]", False, True),
    )
    assert [k.to_text() for k in keys] == [
        "id ASC NULLS FIRST",
        "name DESC NULLS LAST",
        "day(day) ASC NULLS LAST",
        "bucket(16, id) DESC NULLS FIRST",
    ]
    assert parse_sort_order(", ".join(k.to_text() for k in keys), SCHEMA) == keys


def test_a_nested_column_is_named_by_its_dotted_path() -> None:
    assert parse_sort_order("info.rank", SCHEMA) == (SortKey("info.rank", 5, "identity"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the sort order is empty"),
        (" , ", "the sort order is empty"),
        ("zorder(id), name", "a z-order is a sort order of its own"),
        ("zorder()", "needs at least one column"),
        ("zorder(id, id)", "names a column twice"),
        ("missing ASC", "sort column 'missing' is not in the table schema"),
        ("ID", "sort column 'ID' is not in the table schema"),
        ("hash(id)", r"unknown transform in sort key 'hash\(id\)'"),
        ("day(name)", "cannot apply day to column 'name'"),
    ],
)
def test_orders_that_cannot_be_applied_are_refused(text, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_sort_order(text, SCHEMA)


def _order(order_id: int, *fields: SortField) -> SortOrder:
    return SortOrder(*fields, order_id=order_id)


def test_the_table_order_that_the_keys_are_exactly_is_matched() -> None:
    by_day = _order(
        1,
        SortField(
            source_id=2,
            transform=DayTransform(),
            direction=SortDirection.ASC,
            null_order=NullOrder.NULLS_LAST,
        ),
    )
    by_id = _order(2, SortField(source_id=1, transform=IdentityTransform()))
    orders = {0: SortOrder(order_id=0), 1: by_day, 2: by_id}
    assert table_sort_keys(by_day, SCHEMA) == (SortKey("day", 2, "day", True, False),)
    assert match_table_sort_order(parse_sort_order("day(day) ASC NULLS LAST", SCHEMA), orders, SCHEMA) == 1
    assert match_table_sort_order(parse_sort_order("id", SCHEMA), orders, SCHEMA) == 2
    assert match_table_sort_order(parse_sort_order("id DESC", SCHEMA), orders, SCHEMA) is None
    assert match_table_sort_order(parse_sort_order("day(day)", SCHEMA), orders, SCHEMA) is None


def test_a_table_order_on_a_dropped_column_is_refused() -> None:
    order = _order(1, SortField(source_id=99, transform=IdentityTransform()))
    with pytest.raises(ConfigurationError, match="dropped column id 99"):
        table_sort_keys(order, SCHEMA)


def _rows() -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array([5, None, 3, 8, 1, 3], pa.int64()),
            "day": pa.array([date(2024, 1, d) for d in (2, 1, 2, 1, 3, 1)], pa.date32()),
            "name": pa.array(list("abcdef")),
            "info": pa.array([{"rank": r} for r in (1, 2, 3, 4, 5, 6)], pa.struct([("rank", pa.int64())])),
        }
    )


def _sorted(keys, spec, tmp_path) -> pa.Table:
    batches = sort_for_output(iter([_rows()]), keys, spec, SCHEMA, ResourceLimits(), str(tmp_path / "spill"))
    out = pa.Table.from_batches(list(batches))
    assert not (tmp_path / "spill.stage").exists(), "the staged rows are removed"
    return out


def test_rows_follow_the_keys_nulls_where_asked_and_hidden_columns_are_dropped(tmp_path) -> None:
    out = _sorted(
        parse_sort_order("id DESC NULLS FIRST, name", SCHEMA), UNPARTITIONED_PARTITION_SPEC, tmp_path
    )
    assert out.column_names == ["id", "day", "name", "info"]
    assert out.column("id").to_pylist() == [None, 8, 5, 3, 3, 1]
    assert out.column("name").to_pylist() == ["b", "d", "a", "c", "f", "e"]


def test_rows_sort_by_the_output_partition_first_then_by_transformed_keys(tmp_path) -> None:
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day")
    )
    out = _sorted(parse_sort_order("info.rank DESC", SCHEMA), spec, tmp_path)
    assert out.column("name").to_pylist() == ["f", "d", "b", "c", "a", "e"]
    by_bucket = _sorted(
        parse_sort_order("bucket(4, id), name", SCHEMA), UNPARTITIONED_PARTITION_SPEC, tmp_path
    )
    buckets = BucketTransform(4).pyarrow_transform(LongType())(by_bucket.column("id")).to_pylist()
    assert buckets == sorted(buckets, key=lambda b: (b is not None, b))


def test_no_rows_yield_nothing(tmp_path) -> None:
    keys = parse_sort_order("id", SCHEMA)
    assert (
        list(
            sort_for_output(
                iter([]), keys, UNPARTITIONED_PARTITION_SPEC, SCHEMA, ResourceLimits(), str(tmp_path / "s")
            )
        )
        == []
    )


def test_a_z_order_of_longs_comes_back_whole_and_nulls_stay_null(tmp_path) -> None:
    out = _sorted(parse_sort_order("zorder(id)", SCHEMA), UNPARTITIONED_PARTITION_SPEC, tmp_path)
    assert out.column_names == ["id", "day", "name", "info"]
    assert sorted(out.to_pylist(), key=lambda r: r["name"]) == pa.Table.from_batches([_rows()]).to_pylist()


def test_z_order_values_changed_on_the_way_fail_instead_of_being_written(tmp_path, monkeypatch) -> None:
    """The columns a z-order stages only as its z-value are restored from it: if that ever gave back other
    values (a bug anywhere between staging and the restore), the sort fails rather than write them."""
    import airflow_provider_iceberg_exec.engine.io.sorting as sorting

    restore = sorting.zorder_columns

    def off_by_one(values, count):
        return [numbers + 1 for numbers in restore(values, count)]

    monkeypatch.setattr(sorting, "zorder_columns", off_by_one)
    with pytest.raises(sorting.IcebergExecError, match=r"z-order columns \['id'\] did not come back"):
        _sorted(parse_sort_order("zorder(id)", SCHEMA), UNPARTITIONED_PARTITION_SPEC, tmp_path)
