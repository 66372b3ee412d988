"""``bench/compaction.py --scale``: which table sizes a run measures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _scale() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_compaction_scale_under_test", BENCH / "compaction_scale.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


scale = _scale()


@pytest.mark.parametrize(
    ("text", "expected"), [("1,5,10", [1, 5, 10]), ("10, 1,5,5", [1, 5, 10]), ("3", [3])]
)
def test_multiples_are_sorted_whole_numbers(text: str, expected: list[int]) -> None:
    assert scale.multiples(text) == expected


@pytest.mark.parametrize("text", ["1,x", "0,5", "", "1.5"])
def test_anything_else_is_a_one_line_error(text: str) -> None:
    with pytest.raises(SystemExit, match="--scale takes whole multiples"):
        scale.multiples(text)
