"""The engine must stay free of Airflow, and the package import must stay cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import airflow_provider_iceberg_exec.engine as engine


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_engine_imports_with_airflow_unavailable() -> None:
    """With ``airflow`` made unimportable, every engine module (found by walking the package, so a new
    module is checked without touching this test) and the CLI import, and a plan object builds."""
    result = _run(
        "import importlib, pkgutil, sys; sys.modules['airflow'] = None\n"
        "import airflow_provider_iceberg_exec.engine as e\n"
        "names = [m.name for m in pkgutil.walk_packages(e.__path__, e.__name__ + '.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "import airflow_provider_iceberg_exec.cli\n"
        "e.ResourceLimits(); e.CompactionOptions.from_options({})\n"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules if sys.modules[m])\n"
        "print(len(names))\n"
    )
    assert result.returncode == 0, result.stderr
    engine_files = [p for p in Path(engine.__file__).parent.rglob("*.py") if "__pycache__" not in p.parts]
    assert int(result.stdout) == len(engine_files) - 1, "a module of the engine was not imported"


def test_airflow_made_unimportable_really_fails_an_airflow_import() -> None:
    """The probe above proves something only if its trick makes ``import airflow`` raise."""
    result = _run("import sys; sys.modules['airflow'] = None\nimport airflow.sdk\n")
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr


def test_package_import_loads_no_heavy_library() -> None:
    """Importing the package (as the DAG parser does) loads none of pyarrow, datafusion or pyiceberg."""
    result = _run(
        "import sys, airflow_provider_iceberg_exec\n"
        "heavy = [m for m in ('pyarrow', 'datafusion', 'pyiceberg') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    assert result.returncode == 0, result.stderr


def test_exported_members_are_the_public_names() -> None:
    """``__all__`` is sorted and every name in it resolves to an object of the named module."""
    assert engine.__all__ == sorted(engine.__all__)
    for name in engine.__all__:
        assert getattr(engine, name).__name__ == name


def test_importing_the_engine_package_loads_no_heavy_library() -> None:
    """The Airflow layer imports engine.errors and engine.config at parse time: that must stay cheap."""
    result = _run(
        "import sys\n"
        "import airflow_provider_iceberg_exec.engine\n"
        "from airflow_provider_iceberg_exec.engine import ConfigurationError, ResourceLimits\n"
        "heavy = [m for m in ('pyarrow', 'datafusion', 'pyiceberg') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    assert result.returncode == 0, result.stderr
