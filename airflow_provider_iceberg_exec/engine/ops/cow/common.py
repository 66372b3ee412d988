"""What the steps of a copy-on-write share: the operations' names and the keys every result carries."""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

__all__ = ["COMMON_KEYS", "COW_OPERATIONS", "parse_operation"]

#: the operations, in the CLI's and the task documents' spelling
COW_OPERATIONS = ("delete", "update", "overwrite")
#: the keys a task passes on to its result; results to commit together agree on them (one plan)
COMMON_KEYS = ("table", "branch", "operation", "where", "set", "base_snapshot_id", "isolation_level")


def parse_operation(text: str) -> str:
    """The operation ``text`` names, normalised; one of :data:`COW_OPERATIONS`."""
    kind = str(text).strip().lower()
    if kind not in COW_OPERATIONS:
        raise ConfigurationError(f"unknown operation {text!r}; use one of {', '.join(COW_OPERATIONS)}")
    return kind
