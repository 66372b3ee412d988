"""The engine: Iceberg maintenance as bounded DataFusion/PyArrow executions, with no Airflow import.

Usable from a script, the CLI or any orchestrator::

    from airflow_provider_iceberg_exec.engine import (
        CatalogConfig, ResourceLimits, compact, load_catalog, load_table,
    )

    catalog = load_catalog(CatalogConfig("prod", {"type": "sql", "uri": "..."}))
    table = load_table(catalog, "db.events")
    result = compact(table, options={"min-input-files": "2"}, limits=ResourceLimits())
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.commit import CommitOutcome, commit_rewrite
from airflow_provider_iceberg_exec.engine.compaction import (
    commit_compaction,
    compact,
    execute_rewrite_task,
    plan_compaction,
)
from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits, parse_byte_size
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
    DataFileReadError,
    IcebergExecError,
    ResourceLimitError,
    TableNotFoundError,
)

__all__ = [
    "CatalogConfig",
    "CommitConflictError",
    "CommitOutcome",
    "CommitStateUnknownError",
    "CommitValidationError",
    "CompactionOptions",
    "ConfigurationError",
    "DataFileCodecError",
    "DataFileReadError",
    "IcebergExecError",
    "ResourceLimitError",
    "ResourceLimits",
    "TableNotFoundError",
    "commit_compaction",
    "commit_rewrite",
    "compact",
    "execute_rewrite_task",
    "load_catalog",
    "load_table",
    "parse_byte_size",
    "plan_compaction",
]
