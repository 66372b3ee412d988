"""What the compaction steps share: the strategy a plan or task names."""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.config import Strategy
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError


def strategy_of(text: str) -> Strategy:
    """The :class:`Strategy` ``text`` names, in any case."""
    try:
        return Strategy(text.lower())
    except ValueError:
        raise ConfigurationError(
            f"unsupported strategy {text!r}; only binpack or sort is supported"
        ) from None
