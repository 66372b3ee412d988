"""Test helpers: an order-independent checksum of a table's live rows, read by PyIceberg's own reader
(not by the code under test)."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import math
import uuid
from typing import Any

from pyiceberg.table import Table

_MASK = (1 << 64) - 1


def _normal(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value)  # keeps -0.0 apart from 0.0
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        # A map column comes back as a list of (key, value) pairs: order does not matter for a map.
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return sorted((repr(_normal(k)), repr(_normal(v))) for k, v in value)
        return [_normal(v) for v in value]
    return value


def row_digest(row: dict[str, Any]) -> int:
    """A 64-bit digest of one row, over every column."""
    text = repr(sorted((k, repr(_normal(v))) for k, v in row.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def live_checksum(table: Table, row_filter: str | None = None) -> tuple[int, int]:
    """``(row count, order-independent checksum)`` of the live rows, read by PyIceberg's scan."""
    table.refresh()
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    count, total = 0, 0
    for batch in scan.to_arrow_batch_reader():
        for row in batch.to_pylist():
            count += 1
            total = (total + row_digest(row)) & _MASK
    return count, total


def data_files(table: Table) -> list[Any]:
    """The live data files of the current snapshot."""
    table.refresh()
    return [task.file for task in table.scan().plan_files()]
