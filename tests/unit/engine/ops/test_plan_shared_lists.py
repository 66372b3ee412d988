"""The plan shares the list values most of its entries repeat, and only those whose JSON is the same."""

from __future__ import annotations

import json

from airflow_provider_iceberg_exec.engine.ops.compaction.plan import _SharedLists


def test_empty_lists_and_lists_of_one_int_are_shared() -> None:
    shared = _SharedLists()

    assert shared.share([]) is shared.share([])
    assert shared.share([4]) is shared.share([4])
    assert shared.share([4]) is not shared.share([5])


def test_values_equal_in_python_but_not_in_json_are_never_shared() -> None:
    shared = _SharedLists()
    one = shared.share([1])

    for value in ([True], [1.0], ["1"], [1, 2], [None]):
        kept = shared.share(value)
        assert kept is value
        assert json.dumps(kept) == json.dumps(value)
    assert json.dumps(one) == "[1]"
