"""The pure rules of a manifest rewrite (Spark's ``RewriteManifestsSparkAction``): how many manifests to
write, and which one each entry goes to.

- :func:`output_count`: ``ceil(total manifest bytes / target)``, at least 1;
- :func:`needs_rewrite`: nothing to do when there is no manifest, or a single one that already fits;
- :func:`sort_key`: a total order over partition tuples of any values, nulls first (as Spark sorts);
- :func:`range_boundaries` and :func:`range_of`: Spark's ``repartitionByRange(n, key)`` over the key
  counts, cut by cumulative count so that the ranges hold about as many entries each; one key never
  spans two ranges.
"""

from __future__ import annotations

import bisect
import decimal
import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_TARGET_SIZE_BYTES",
    "ROLL_FACTOR",
    "TARGET_SIZE_PROPERTY",
    "SortKey",
    "needs_rewrite",
    "output_count",
    "range_boundaries",
    "range_of",
    "roll_size",
    "sort_key",
]

#: the table property of the manifest size a rewrite aims at, and its default (8 MiB), as in Java
TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"
DEFAULT_TARGET_SIZE_BYTES = 8 * 1024 * 1024
#: Spark's rolling writers cap a manifest at 1.2 x the target
ROLL_FACTOR = 1.2

#: a comparable form of a partition tuple (see :func:`sort_key`)
SortKey = tuple[tuple[Any, ...], ...]


def output_count(total_bytes: int, target_size_bytes: int) -> int:
    """How many manifests the rewrite writes: ``ceil(total / target)``, at least 1.

    >>> output_count(20 * 1024, 8 * 1024 * 1024)
    1
    >>> output_count(17 * 1024 * 1024, 8 * 1024 * 1024)
    3
    """
    return max(1, math.ceil(total_bytes / target_size_bytes))


def needs_rewrite(manifest_count: int, total_bytes: int, target_size_bytes: int) -> bool:
    """Whether manifests of one content are worth rewriting (Java skips one manifest that stays one).

    >>> needs_rewrite(1, 1000, 8 << 20), needs_rewrite(2, 1000, 8 << 20), needs_rewrite(1, 20 << 20, 8 << 20)
    (False, True, True)
    """
    if manifest_count == 0:
        return False
    return not (manifest_count == 1 and output_count(total_bytes, target_size_bytes) == 1)


def roll_size(target_size_bytes: int) -> int:
    """The size at which an output manifest is closed and the next one opened (1.2 x target).

    >>> roll_size(1000)
    1200
    """
    return int(target_size_bytes * ROLL_FACTOR)


def _value_key(value: Any) -> tuple[Any, ...]:
    """Nulls first, then booleans, numbers, NaN, strings, bytes, anything else by its text."""
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (1, 0, int(value))
    if isinstance(value, float) and math.isnan(value):
        return (1, 2)
    if isinstance(value, decimal.Decimal) and value.is_nan():
        return (1, 2)
    if isinstance(value, (int, float, decimal.Decimal)):
        return (1, 1, value)
    if isinstance(value, str):
        return (1, 3, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return (1, 4, bytes(value))
    return (1, 5, type(value).__name__, str(value))


def sort_key(values: Sequence[Any]) -> SortKey:
    """A key that orders partition tuples totally, whatever their values: nulls first, mixed types apart.

    >>> sorted([(2,), (None,), (1,)], key=sort_key)
    [(None,), (1,), (2,)]
    >>> sort_key(("a", None)) < sort_key(("a", 1)) < sort_key(("b", None))
    True
    """
    return tuple(_value_key(value) for value in values)


def range_boundaries(sorted_counts: Sequence[tuple[SortKey, int]], ranges: int) -> list[SortKey]:
    """The first key of every range but the first, cutting ``sorted_counts`` into at most ``ranges``
    contiguous ranges of about equal entry counts; a key is never split.

    :param sorted_counts: ``(key, entry count)`` in ascending key order, keys distinct.
    :param ranges: the number of ranges wanted (the output manifest count).
    :returns: ascending boundary keys, fewer than ``ranges``; route with :func:`range_of`.

    >>> range_boundaries([((1,), 5), ((2,), 5), ((3,), 5), ((4,), 5)], 2)
    [(3,)]
    >>> range_boundaries([((1,), 100), ((2,), 1)], 2)
    [(2,)]
    >>> range_boundaries([((1,), 3)], 4)
    []
    """
    total = sum(count for _, count in sorted_counts)
    if total == 0 or ranges <= 1:
        return []
    boundaries: list[SortKey] = []
    before = 0
    for key, count in sorted_counts:
        # the range the key's first entry falls into, by cumulative count
        if before * ranges // total > len(boundaries):
            boundaries.append(key)
        before += count
    return boundaries


def range_of(key: SortKey, boundaries: Sequence[SortKey]) -> int:
    """The range index of ``key``: 0 below the first boundary, ``i`` from boundary ``i - 1`` on.

    >>> [range_of((k,), [(3,), (5,)]) for k in (1, 3, 4, 5, 9)]
    [0, 1, 1, 2, 2]
    """
    return bisect.bisect_right(boundaries, key)
