"""Apache Airflow provider that maintains Apache Iceberg tables with bounded-memory DataFusion runs.

Importing the package imports nothing heavy: the engine lives in :mod:`airflow_provider_iceberg_exec.engine`.
"""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# PyArrow fixes its allocator from this variable when it is imported: jemalloc, unless the user chose one,
# on Linux (its wheels have it) and if PyArrow has not started (engine.io.session.lean_allocator says why,
# and switches what it can when PyArrow started first).
if sys.platform.startswith("linux") and "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
