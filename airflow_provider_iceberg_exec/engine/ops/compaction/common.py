"""What the compaction steps share: the strategy and the table's dotted name."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import Strategy
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def strategy_of(text: str) -> Strategy:
    try:
        return Strategy(text.lower())
    except ValueError:
        raise ConfigurationError(
            f"unsupported strategy {text!r}; only binpack or sort is supported"
        ) from None


def table_name(table: Table) -> str:
    return ".".join(table.name())
