"""The engine: Iceberg maintenance as bounded DataFusion/PyArrow executions, with no Airflow import.

Usable from a script, the CLI or any orchestrator (here on a throwaway SQLite catalog):

>>> import tempfile, pyarrow as pa
>>> from airflow_provider_iceberg_exec.engine import (
...     CatalogConfig, ResourceLimits, compact, load_catalog, load_table,
... )
>>> workdir = tempfile.TemporaryDirectory()
>>> catalog = load_catalog(CatalogConfig("prod", {
...     "type": "sql", "uri": f"sqlite:///{workdir.name}/c.db", "warehouse": f"file://{workdir.name}"}))
>>> catalog.create_namespace("db")
>>> events = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64())]))
>>> for i in range(3):
...     events.append(pa.table({"id": [i]}))
>>> table = load_table(catalog, "db.events")
>>> result = compact(table, options={"min-input-files": "2"}, limits=ResourceLimits())
>>> result["rewritten_data_files_count"], result["added_data_files_count"]
(3, 1)
>>> catalog.engine.dispose(); workdir.cleanup()
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it. Imported on first use, so that importing the package (or
#: engine.errors / engine.config from the Airflow layer) does not load PyIceberg, PyArrow or DataFusion.
_EXPORTS: dict[str, str] = {
    "CatalogConfig": "io.catalog",
    "load_catalog": "io.catalog",
    "load_table": "io.catalog",
    "CommitOutcome": "commit.snapshots",
    "IsolationLevel": "commit.snapshots",
    "commit_overwrite": "commit.snapshots",
    "commit_rewrite": "commit.snapshots",
    "commit_compaction": "ops.compaction",
    "compact": "ops.compaction",
    "execute_rewrite_task": "ops.compaction",
    "plan_compaction": "ops.compaction",
    "CompactionOptions": "config",
    "ResourceLimits": "config",
    "parse_byte_size": "config",
    "commit_cow_rewrite": "ops.cow",
    "cow_rewrite": "ops.cow",
    "execute_cow_task": "ops.cow",
    "plan_cow_rewrite": "ops.cow",
    "CommitConflictError": "errors",
    "CommitStateUnknownError": "errors",
    "CommitValidationError": "errors",
    "ConfigurationError": "errors",
    "DataFileCodecError": "errors",
    "DataFileReadError": "errors",
    "IcebergExecError": "errors",
    "IncompleteListingError": "errors",
    "ResourceLimitError": "errors",
    "TableNotFoundError": "errors",
    "expire_snapshots": "ops.expire",
    "plan_expiry": "ops.expire",
    "PrefixMismatchMode": "ops.orphans",
    "delete_orphan_files": "ops.orphans",
    "read_orphan_scan_result": "ops.orphans",
    "remove_orphan_files": "ops.orphans",
    "scan_orphan_files": "ops.orphans",
    "resolve_equality_deletes": "ops.resolve",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
