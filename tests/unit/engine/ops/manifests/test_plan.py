"""The pure rules of the manifest rewrite: output count, key order, range boundaries."""

from __future__ import annotations

import decimal
import random

import pytest

from airflow_provider_iceberg_exec.engine.ops.manifests.plan import (
    needs_rewrite,
    output_count,
    range_boundaries,
    range_of,
    roll_size,
    sort_key,
)

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("total", "target", "expected"),
    [
        (1, 8 * MIB, 1),
        (8 * MIB, 8 * MIB, 1),
        (8 * MIB + 1, 8 * MIB, 2),
        (80 * MIB, 8 * MIB, 10),
        (0, 8 * MIB, 1),
    ],
)
def test_output_count_is_the_ceiling_of_bytes_over_target(total: int, target: int, expected: int) -> None:
    assert output_count(total, target) == expected


def test_one_manifest_that_stays_one_is_nothing_to_do_but_a_large_one_is_split() -> None:
    assert not needs_rewrite(0, 0, 8 * MIB)
    assert not needs_rewrite(1, 8 * MIB, 8 * MIB)
    assert needs_rewrite(1, 9 * MIB, 8 * MIB)
    assert needs_rewrite(2, 2, 8 * MIB)


def test_writers_roll_at_one_point_two_times_the_target() -> None:
    assert roll_size(8 * MIB) == int(8 * MIB * 1.2)


def test_nulls_sort_first_and_mixed_types_never_fail_to_compare() -> None:
    values = [None, 3, "b", b"\x00", 2.5, float("nan"), True, decimal.Decimal("1.5"), "a", -1]
    ordered = sorted(values, key=lambda v: sort_key([v]))
    assert ordered[0] is None
    assert ordered[1] is True  # booleans apart from numbers
    assert ordered[2:6] == [-1, decimal.Decimal("1.5"), 2.5, 3]
    assert str(ordered[6]) == "nan"
    assert ordered[7:] == ["a", "b", b"\x00"]


def test_tuples_order_field_by_field_with_nulls_first() -> None:
    keys = [("b", None), ("a", 2), (None, 5), ("a", None), ("a", 1)]
    assert sorted(keys, key=sort_key) == [(None, 5), ("a", None), ("a", 1), ("a", 2), ("b", None)]


def test_boundaries_cut_by_cumulative_count_and_never_split_a_key() -> None:
    counts = [
        (sort_key([k]), c) for k, c in [("a", 10), ("b", 10), ("c", 10), ("d", 10), ("e", 10), ("f", 10)]
    ]
    boundaries = range_boundaries(counts, 3)
    assert boundaries == [sort_key(["c"]), sort_key(["e"])]
    assert [range_of(sort_key([k]), boundaries) for k in "abcdef"] == [0, 0, 1, 1, 2, 2]


def test_a_heavy_key_stays_in_one_range() -> None:
    """A range starts where the cumulative count crosses its share; the key that crosses it is not cut."""
    counts = [(sort_key([k]), c) for k, c in [(1, 1), (2, 100), (3, 1), (4, 1)]]
    boundaries = range_boundaries(counts, 3)
    assert [range_of(sort_key([k]), boundaries) for k in (1, 2, 3, 4)] == [0, 0, 1, 2]


@pytest.mark.parametrize("ranges", [1, 2, 3, 7, 50])
def test_ranges_are_contiguous_and_at_most_as_many_as_asked(ranges: int) -> None:
    rng = random.Random(ranges)
    keys = sorted({rng.choice([None, *range(40)]) for _ in range(60)}, key=lambda v: sort_key([v]))
    counts = [(sort_key([k]), rng.randint(1, 20)) for k in keys]
    boundaries = range_boundaries(counts, ranges)
    assigned = [range_of(key, boundaries) for key, _ in counts]
    assert assigned == sorted(assigned)  # range order follows key order
    assert len(set(assigned)) == len(boundaries) + 1 <= max(1, ranges)
    # a key outside the counted ones still routes somewhere valid
    assert 0 <= range_of(sort_key([1000]), boundaries) <= len(boundaries)


def test_no_entries_means_one_range() -> None:
    assert range_boundaries([], 4) == []
