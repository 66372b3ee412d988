"""airflow_provider_iceberg_exec/__init__.py and engine/io/session.py: PyArrow runs on jemalloc, unless
the user chose an allocator."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa

CHILD = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.io.session import track_resources

    before = pa.array(range(1 << 20))  # a buffer of the allocator the process started with
    print(pa.default_memory_pool().backend_name)
    with track_resources(ResourceLimits(spill_dir=sys.argv[1])):
        during = pa.array(range(1 << 20))
        print(pa.default_memory_pool().backend_name)
    del before, during  # each buffer goes back to the pool that made it
    print(pa.default_memory_pool().backend_name, pa.total_allocated_bytes())
    """
)


def _jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def _run(tmp_path: Path, pool: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "spill")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout.split()


def test_an_execution_switches_to_jemalloc_and_stays_on_it(tmp_path: Path) -> None:
    started, during, after, allocated = _run(tmp_path, None)
    lean = "jemalloc" if _jemalloc() else started  # a PyArrow built without jemalloc keeps its own
    assert (during, after) == (lean, lean)
    assert allocated == "0"  # the buffer made before the switch was freed by its own pool


def test_the_users_choice_of_allocator_stands(tmp_path: Path) -> None:
    """ARROW_DEFAULT_MEMORY_POOL is Arrow's own setting: an execution leaves it as the user set it."""
    assert _run(tmp_path, "system")[:3] == ["system"] * 3
    assert _run(tmp_path, "mimalloc")[:3] == ["mimalloc"] * 3


FIRST = "import airflow_provider_iceberg_exec, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def test_the_provider_imported_before_pyarrow_makes_jemalloc_its_allocator_from_the_start() -> None:
    """Arrow reads ARROW_DEFAULT_MEMORY_POOL once, when PyArrow starts: the package sets it first."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True, check=True, env=env)
    if sys.platform.startswith("linux") and _jemalloc():
        assert out.stdout.strip() == "jemalloc"
    chosen = subprocess.run(
        [sys.executable, "-c", FIRST],
        capture_output=True,
        text=True,
        check=True,
        env={**env, "ARROW_DEFAULT_MEMORY_POOL": "system"},
    )
    assert chosen.stdout.strip() == "system"
