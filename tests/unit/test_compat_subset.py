"""The compatibility subset's list (tests/compat_subset.py) names tests that exist: a renamed or removed
test must not drop out of what the oldest-versions stage of `.ci/run` proves without anyone noticing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.compat_subset import ALL, COMPAT

_TESTS = Path(__file__).resolve().parents[1]


def _test_functions(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("module", sorted(COMPAT))
def test_every_listed_test_is_defined_in_its_module(module: str) -> None:
    path = _TESTS / module
    assert path.is_file(), f"{module} is listed but does not exist"
    defined = _test_functions(path)
    assert defined, f"{module} defines no test"
    assert (COMPAT[module] or set()) - defined == set()


def test_no_spark_celery_browser_or_fault_test_is_listed() -> None:
    """They need what the oldest stage does not start (Java, Redis, Chromium) or take long (faults)."""
    excluded = ("interop/", "faults/", "system/test_celery", "system/test_connection_form")
    assert [module for module in COMPAT if any(part in module for part in excluded)] == []


def test_a_listed_module_selects_all_or_some_tests() -> None:
    """``ALL`` marks a whole module; an empty set of names would list the module and select nothing."""
    assert all(names is ALL or names for names in COMPAT.values())
