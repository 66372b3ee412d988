"""Shared fixtures: an isolated PyIceberg configuration and a real SQLite-backed SQL catalog."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Airflow reads its configuration once per process, at its first import: give the test process its own
# Airflow home (SQLite metadata DB, the example DAGs folder) before anything imports airflow.
if not os.environ.get("_ICEBERG_EXEC_TEST_AIRFLOW_HOME"):
    _home = tempfile.mkdtemp(prefix="iceberg-exec-airflow-")
    atexit.register(shutil.rmtree, _home, True)  # removed with the process that made it
    os.environ["_ICEBERG_EXEC_TEST_AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parents[1] / "dags_examples")

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.compat_subset import mark_compat

_TESTS = Path(__file__).resolve().parent
_PACKAGE = _TESTS.parent / "airflow_provider_iceberg_exec"

#: tests/<directory> -> the marker of its tests (pyproject's ``markers`` say what each one selects)
DIRECTORY_MARKERS = {
    "unit": "unit",
    "integration": "integration",
    "property": "integration",
    "system": "system",
    "faults": "faults",
    "interop": "spark",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its directory, and the package's doctests as ``unit``, so ``-m`` selects by kind;
    then the compatibility subset (``compat``, tests/compat_subset.py)."""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(_PACKAGE):
            item.add_marker("unit")
        elif path.is_relative_to(_TESTS) and len(parts := path.relative_to(_TESTS).parts) > 1:
            marker = DIRECTORY_MARKERS.get(parts[0])
            if marker is not None:
                item.add_marker(marker)
    mark_compat(items, _TESTS, _PACKAGE)


@pytest.fixture(autouse=True)
def _isolate_pyiceberg_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Never read the developer's ~/.pyiceberg.yaml or PYICEBERG_* variables."""
    home = tmp_path_factory.mktemp("pyiceberg-home")
    monkeypatch.setenv("PYICEBERG_HOME", str(home))
    for name in list(os.environ):
        if name.startswith("PYICEBERG_CATALOG__"):
            monkeypatch.delenv(name)


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SqlCatalog]:
    """A real SQL catalog on SQLite with a local warehouse and a namespace ``ns``."""
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    cat.create_namespace("ns")
    yield cat
    cat.engine.dispose()
