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


def test_the_size_table_gives_user_and_system_cpu_per_gib() -> None:
    """Each size's cell: peak RSS, time per GiB and, where the child's CPU was measured, its user and system
    CPU per GiB apart (a result without them, a profiled run's, leaves them out)."""
    cb = load("compaction")
    gib = 1024**3
    base = {"case": "binpack", "peak_rss_bytes": 400 * 1024**2, "seconds_per_gib": 5.5}
    measured = {**base, "user_cpu_seconds": 16.0, "system_cpu_seconds": 4.0}
    assert scale._size_cell(cb, measured, 2 * gib) == "400 MiB, 5.5 s/GiB, CPU 8.0 + 2.0 s/GiB"
    assert scale._size_cell(cb, {**base, "user_cpu_seconds": None, "system_cpu_seconds": None}, gib) == (
        "400 MiB, 5.5 s/GiB"
    )
