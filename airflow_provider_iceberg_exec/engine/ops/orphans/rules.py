"""The rules of Java's ``remove_orphan_files`` that the scan and the delete both apply.

``gc.enabled=false`` refuses both steps; files younger than ``older_than`` (default 3 days, never less
than 24 hours ago unless forced) are never orphans; ``prefix_mismatch_mode`` says what to do with a file
referenced only under another scheme or authority.
"""

from __future__ import annotations

import datetime
import enum
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.reachable import gc_enabled

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = [
    "DEFAULT_ORPHAN_AGE",
    "GC_MESSAGE",
    "MIN_ORPHAN_AGE",
    "PrefixMismatchMode",
    "check_gc_enabled",
]

#: Java's default ``older_than``: files younger than this are never orphans
DEFAULT_ORPHAN_AGE = datetime.timedelta(days=3)
#: the procedure's floor on ``older_than`` (``RemoveOrphanFilesProcedure.validateInterval``)
MIN_ORPHAN_AGE = datetime.timedelta(hours=24)

GC_MESSAGE = "Cannot delete orphan files: GC is disabled (deleting files may corrupt other tables)"


class PrefixMismatchMode(str, enum.Enum):
    """What to do with a listed file whose path is referenced under another scheme or authority."""

    ERROR = "ERROR"
    IGNORE = "IGNORE"
    DELETE = "DELETE"

    @classmethod
    def parse(cls, value: str | PrefixMismatchMode) -> PrefixMismatchMode:
        """Parse a mode, case-insensitively.

        >>> PrefixMismatchMode.parse("delete")
        <PrefixMismatchMode.DELETE: 'DELETE'>
        """
        try:
            return cls(str(value.value if isinstance(value, PrefixMismatchMode) else value).strip().upper())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(f"invalid prefix_mismatch_mode {value!r}; use one of {valid}") from None


def check_gc_enabled(table: Table) -> None:
    """Refuse a table whose (current, as last refreshed) properties set ``gc.enabled=false``.

    :raises ConfigurationError: with Java's message.
    """
    if not gc_enabled(table.metadata.properties):
        raise ConfigurationError(GC_MESSAGE)
