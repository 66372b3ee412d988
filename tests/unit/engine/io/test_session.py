"""engine/io/session.py: every bounded execution runs its process on small pages."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import ctypes, sys
    import pyarrow as pa
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.io.session import track_resources

    prctl = ctypes.CDLL(None).prctl
    prctl(41, 0, 0, 0, 0)  # a new task process: the flag is inherited, and this test's may have it set
    pa.array(range(1 << 20))  # the allocator's arenas exist before the execution starts
    print(prctl(42, 0, 0, 0, 0))  # PR_GET_THP_DISABLE
    with track_resources(ResourceLimits(spill_dir=sys.argv[1])) as (spill_dir, stats):
        print(prctl(42, 0, 0, 0, 0))
        pa.array(range(1 << 20))
    print(prctl(42, 0, 0, 0, 0))
    """
)


def _kernel_takes_the_flag() -> bool:
    probe = "import ctypes; print(ctypes.CDLL(None).prctl(41, 1, 0, 0, 0))"  # PR_SET_THP_DISABLE
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "0"


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _kernel_takes_the_flag(),
    reason="a Linux kernel that lets a process turn transparent huge pages off",
)


def test_an_execution_turns_huge_pages_off_for_its_process(tmp_path: Path) -> None:
    """In a process of its own, as an Airflow task runs: huge pages are on until the first execution and
    stay off after it (the allocator keeps its arenas for the next)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "spill")], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["0", "1", "1"]


def test_small_pages_says_whether_they_are_off() -> None:
    child = "from airflow_provider_iceberg_exec.engine.io.session import small_pages; print(small_pages())"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
