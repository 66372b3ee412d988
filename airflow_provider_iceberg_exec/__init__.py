"""Apache Airflow provider that maintains Apache Iceberg tables with bounded-memory DataFusion runs.

Importing the package imports nothing heavy: the engine lives in :mod:`airflow_provider_iceberg_exec.engine`.
"""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# PyArrow on jemalloc, unless the user chose an allocator: Arrow reads this variable once, when PyArrow is
# imported, so it is set only where the provider comes first (on Linux, whose wheels have jemalloc).
# mimalloc, PyArrow's default, kept what a stream freed: 200M rows of merge-on-read peaked at 385 MiB against
# 317 at 20M, on jemalloc 305 against 291 (docs/engine.md, "PyArrow runs on jemalloc"). PyArrow started
# first keeps its own: switching the pool then (pyarrow.set_memory_pool) moves only its Python calls, and two
# allocators held more than either (341-358 MiB at 20M rows).
if sys.platform.startswith("linux") and "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
