"""A table as a Flink upsert sink leaves it: equality delete files on ``id``, then newer rows for some of
the deleted keys; and the expected live rows, computed here from the rows PyIceberg read before the
deletes (PyIceberg cannot read a table with equality deletes, so not after them)."""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from tests.helpers import commit_delete_files, row_digest
from tests.integration.maintenance_support import write_equality_deletes

_MASK = (1 << 64) - 1

#: the partitions (``region``) that get an equality delete, and every how-many-th id of each is deleted
DELETED_EVERY = {"eu": 7, "us": 11}


def _checksum(rows: list[dict[str, Any]]) -> tuple[int, int]:
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & _MASK
    return len(rows), total


def add_flink_style_equality_deletes(table: Table) -> tuple[int, int]:
    """Commit one partition-scoped equality delete on ``id`` per region of :data:`DELETED_EVERY`, then append
    newer copies of a few deleted rows (an upsert's insert, which the older delete must not remove).

    :returns: the expected ``(row count, checksum)`` of the live rows, as ``tests.helpers.live_checksum``
        computes it.
    """
    table.refresh()
    before = table.scan().to_arrow()
    rows = before.to_pylist()
    deleted: dict[str, set[int]] = {
        region: {r["id"] for r in rows if r["region"] == region} for region in DELETED_EVERY
    }
    deleted = {region: set(sorted(ids)[:: DELETED_EVERY[region]]) for region, ids in deleted.items()}
    commit_delete_files(
        table, [write_equality_deletes(table, sorted(ids), region) for region, ids in deleted.items()]
    )
    reinserted_ids = set(sorted(deleted["eu"])[:5])
    reinserted = before.filter([r["id"] in reinserted_ids for r in rows])
    table.append(reinserted)
    live = [r for r in rows if r["id"] not in deleted.get(r["region"], set())] + reinserted.to_pylist()
    return _checksum(live)


def live_delete_files(table: Table) -> int:
    """How many delete files the current snapshot references (read from the manifests, not by a scan)."""
    table.refresh()
    return table.inspect.delete_files().num_rows


def data_files_by_region(table: Table) -> dict[str, set[str]]:
    """The current data file paths of each ``region`` partition."""
    table.refresh()
    out: dict[str, set[str]] = {}
    for entry in table.inspect.data_files().select(["file_path", "partition"]).to_pylist():
        out.setdefault((entry["partition"] or {}).get("region"), set()).add(entry["file_path"])
    return out
