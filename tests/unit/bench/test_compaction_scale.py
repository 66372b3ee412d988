"""``bench/compaction.py --scale``: which table sizes a run measures."""

from __future__ import annotations

import pytest

from tests.unit.bench.bench_scripts import load

scale = load("compaction_scale")


@pytest.mark.parametrize(
    ("text", "expected"), [("1,5,10", [1, 5, 10]), ("10, 1,5,5", [1, 5, 10]), ("3", [3])]
)
def test_multiples_are_sorted_whole_numbers(text: str, expected: list[int]) -> None:
    assert scale.multiples(text) == expected


@pytest.mark.parametrize("text", ["1,x", "0,5", "", "1.5"])
def test_anything_else_is_a_one_line_error(text: str) -> None:
    with pytest.raises(SystemExit, match="--scale takes whole multiples"):
        scale.multiples(text)
