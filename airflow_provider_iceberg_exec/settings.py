"""Deployment defaults from the ``[iceberg_exec]`` Airflow config section, read lazily.

Every value is read when a function is called (at task run time, or when a DAG file builds an operator),
never at import time, so that tests and deployments can change the config through
``AIRFLOW__ICEBERG_EXEC__*`` environment variables. The section and its defaults are declared in
:func:`airflow_provider_iceberg_exec.get_provider_info.get_provider_info`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.sizes import parse_byte_size

if TYPE_CHECKING:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

__all__ = [
    "SECTION",
    "default_memory_limit",
    "default_pool",
    "default_pool_slots",
    "payload_file_threshold",
    "pool_slots_for",
    "resource_limits",
    "slots_per_gib",
    "spill_dir",
]

SECTION = "iceberg_exec"
_GIB = 1024**3
_DEFAULT_MEMORY_LIMIT = "256MiB"
_DEFAULT_POOL = "default_pool"
_DEFAULT_SLOTS_PER_GIB = 4.0
_DEFAULT_PAYLOAD_FILE_THRESHOLD = 1000


def _conf_get(key: str, fallback: str) -> str:
    from airflow_provider_iceberg_exec.compat import conf

    value = conf.get(SECTION, key, fallback=fallback)
    return fallback if value is None else str(value)


def default_memory_limit() -> str:
    """``[iceberg_exec] memory_limit``: the memory limit of a task that sets none (``256MiB``)."""
    return _conf_get("memory_limit", _DEFAULT_MEMORY_LIMIT).strip() or _DEFAULT_MEMORY_LIMIT


def spill_dir() -> str | None:
    """``[iceberg_exec] spill_dir``, or ``None`` for the engine's default under the temporary directory."""
    return _conf_get("spill_dir", "").strip() or None


def default_pool() -> str:
    """``[iceberg_exec] pool``: the Airflow pool of the heavy tasks (``default_pool``)."""
    return _conf_get("pool", _DEFAULT_POOL).strip() or _DEFAULT_POOL


def slots_per_gib() -> float:
    """``[iceberg_exec] slots_per_gib``: pool slots per GiB of memory limit (``4``).

    :raises ValueError: when the value is not a positive number.
    """
    value = float(_conf_get("slots_per_gib", str(_DEFAULT_SLOTS_PER_GIB)))
    if not value > 0:
        raise ValueError(f"[{SECTION}] slots_per_gib must be > 0, got {value}")
    return value


def payload_file_threshold() -> int:
    """``[iceberg_exec] payload_file_threshold``: above this many files a payload goes to a file."""
    return int(_conf_get("payload_file_threshold", str(_DEFAULT_PAYLOAD_FILE_THRESHOLD)))


def pool_slots_for(memory_limit: str | int, *, per_gib: float | None = None) -> int:
    """Pool slots for a task with ``memory_limit``: ``ceil(GiB * slots_per_gib)``, at least 1.

    Use it at DAG-definition time when a task's memory limit is a literal:

    >>> from airflow_provider_iceberg_exec.operators.compaction import CompactionRewriteOperator
    >>> rewrite = CompactionRewriteOperator.partial(
    ...     task_id="rewrite", memory_limit="2GiB", pool_slots=pool_slots_for("2GiB", per_gib=1)
    ... )
    >>> rewrite.kwargs["pool_slots"], pool_slots_for("300MiB", per_gib=1)
    (2, 1)

    Called while DAG files are parsed, so it imports nothing heavy.

    :param memory_limit: bytes, or a size such as ``"2GiB"``
        (:func:`~airflow_provider_iceberg_exec.sizes.parse_byte_size`).
    :param per_gib: slots per GiB; defaults to ``[iceberg_exec] slots_per_gib``.
    :raises ConfigurationError: (a ``ValueError``) when ``memory_limit`` is not a size.
    """
    per = slots_per_gib() if per_gib is None else per_gib
    return max(1, math.ceil(parse_byte_size(memory_limit) / _GIB * per))


def default_pool_slots() -> int:
    """Pool slots of a task that sets neither ``pool_slots`` nor a literal memory limit."""
    return pool_slots_for(default_memory_limit())


def resource_limits(memory_limit: str | int | None = None) -> ResourceLimits:
    """The engine's :class:`ResourceLimits` for one task, from its (rendered) memory limit and the config.

    :param memory_limit: the task's limit; ``None`` or ``""`` means ``[iceberg_exec] memory_limit``.
    :raises ConfigurationError: when the limit is not a size or is below the engine's floor.
    """
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

    if memory_limit is None or (isinstance(memory_limit, str) and not memory_limit.strip()):
        memory_limit = default_memory_limit()
    limit = parse_byte_size(memory_limit)
    directory = spill_dir()
    if directory is None:
        return ResourceLimits(memory_limit_bytes=limit)
    return ResourceLimits(memory_limit_bytes=limit, spill_dir=directory)
