"""Operators of the iceberg-exec provider.

Import the operators from their modules (``airflow_provider_iceberg_exec.operators.compaction``,
``.commit``, ``.convert``, ``.cow``, ``.merge``, ``.resolve``, ``.position_deletes``, ``.maintenance``,
``.manifests``);
:func:`table_asset` builds a table's asset for scheduling downstream DAGs.
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.operators._common import table_asset, table_asset_uri

__all__ = ["table_asset", "table_asset_uri"]
