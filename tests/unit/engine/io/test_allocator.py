"""airflow_provider_iceberg_exec/__init__.py: PyArrow runs on jemalloc where the provider is imported first,
on the allocator the user chose where they chose one, and on one allocator only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

FIRST = "import airflow_provider_iceberg_exec, pyarrow as pa; print(pa.default_memory_pool().backend_name)"

#: PyArrow started before the provider: an execution leaves its allocator as it is
PYARROW_FIRST = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.io.session import track_resources

    print(pa.default_memory_pool().backend_name)
    with track_resources(ResourceLimits(spill_dir=sys.argv[1])):
        print(pa.default_memory_pool().backend_name, pa.array(range(1 << 20)).buffers()[1].size > 0)
    """
)


def _jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def _run(*args: str, pool: str | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    out = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, check=True, env=env)
    return out.stdout.split()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _jemalloc(), reason="Linux, and a PyArrow with jemalloc"
)
def test_the_provider_imported_before_pyarrow_makes_jemalloc_its_allocator() -> None:
    """The code before this fails it: PyArrow's default there is mimalloc."""
    assert _run(FIRST) == ["jemalloc"]


def test_the_users_choice_of_allocator_stands() -> None:
    """ARROW_DEFAULT_MEMORY_POOL is Arrow's own setting: the provider leaves it as the user set it."""
    assert _run(FIRST, pool="system") == ["system"]
    assert _run(FIRST, pool="mimalloc") == ["mimalloc"]


def test_pyarrow_started_first_keeps_its_allocator_through_an_execution(tmp_path: Path) -> None:
    """Switching the pool then would move PyArrow's Python calls only: two allocators, each holding pages."""
    started, during, allocated = _run(PYARROW_FIRST, str(tmp_path / "spill"))
    assert during == started
    assert allocated == "True"
