"""Apache Airflow provider that maintains Apache Iceberg tables with bounded-memory DataFusion runs.

Importing the package imports nothing heavy: the engine lives in :mod:`airflow_provider_iceberg_exec.engine`.
"""

from __future__ import annotations

__version__ = "0.1.0"
