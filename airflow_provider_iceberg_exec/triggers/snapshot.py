"""Wait for a new snapshot on a branch: the check, and the trigger that polls it off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig

__all__ = ["IcebergSnapshotTrigger", "find_new_snapshot", "validate_table_name"]


def validate_table_name(table: str) -> None:
    """Refuse a table name that is not ``"namespace.table"`` (untemplated values only).

    :raises ValueError: for an empty part or a missing namespace.
    """
    parts = table.split(".")
    if len(parts) < 2 or any(not part.strip() for part in parts):
        raise ValueError(f"table {table!r} must be fully qualified as 'namespace.table'")


def find_new_snapshot(
    table: Table,
    *,
    branch: str = "main",
    since_snapshot_id: int | None = None,
    since_timestamp_ms: int | None = None,
) -> dict[str, Any] | None:
    """The head of ``branch`` when it is new, else ``None``.

    New means: a head exists, it is not ``since_snapshot_id``, and it is younger than
    ``since_timestamp_ms``; with neither given, any head is new.

    :returns: ``{"table", "branch", "snapshot_id", "timestamp_ms", "operation", "previous_snapshot_id"}``.
    """
    head = table.snapshot_by_name(branch)
    if head is None:
        return None
    if since_snapshot_id is not None and head.snapshot_id == since_snapshot_id:
        return None
    if since_timestamp_ms is not None and head.timestamp_ms <= since_timestamp_ms:
        return None
    operation = head.summary.operation.value if head.summary is not None else None
    return {
        "table": ".".join(table.name()),
        "branch": branch,
        "snapshot_id": head.snapshot_id,
        "timestamp_ms": head.timestamp_ms,
        "operation": operation,
        "previous_snapshot_id": since_snapshot_id,
    }


class _CatalogPoller:
    """Loads the catalog once per trigger run and the table on every poll (in a worker thread)."""

    def __init__(self, config: CatalogConfig) -> None:
        self._config = config
        self._catalog: Catalog | None = None

    def load_table(self, name: str) -> Table:
        from airflow_provider_iceberg_exec.engine.io.catalog import load_catalog, load_table

        if self._catalog is None:
            self._catalog = load_catalog(self._config)
        return load_table(self._catalog, name)


async def catalog_poller(conn_id: str) -> _CatalogPoller:
    """Fetch the connection without blocking the event loop and map it to a catalog config."""
    from airflow.sdk import BaseHook

    from airflow_provider_iceberg_exec.compat import amask_secret
    from airflow_provider_iceberg_exec.hooks.iceberg_exec import (
        catalog_config_from_connection,
        connection_secrets,
    )

    conn = await BaseHook.aget_connection(conn_id)
    config = catalog_config_from_connection(conn)
    for secret in connection_secrets(conn, config):
        await amask_secret(secret)
    return _CatalogPoller(config)


class IcebergSnapshotTrigger(BaseTrigger):
    """Fire when a new snapshot lands on a branch (see :func:`find_new_snapshot` for "new").

    PyIceberg is synchronous, so every catalog call runs in ``asyncio.to_thread``. A table that does not
    exist (yet) is logged and polled again; any other error ends the trigger with an ``error`` event.

    :param table: ``"namespace.table"``.
    :param branch: the branch (default ``main``).
    :param since_snapshot_id: fire on a head other than this snapshot.
    :param since_timestamp_ms: fire on a head younger than this (epoch milliseconds).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection.
    :param poke_interval: seconds between polls.
    """

    def __init__(
        self,
        *,
        table: str,
        branch: str = "main",
        since_snapshot_id: int | None = None,
        since_timestamp_ms: int | None = None,
        iceberg_exec_conn_id: str = "iceberg_exec_default",
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__()
        validate_table_name(table)
        self.table = table
        self.branch = branch
        self.since_snapshot_id = since_snapshot_id
        self.since_timestamp_ms = since_timestamp_ms
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and keyword arguments that rebuild this trigger."""
        return (
            "airflow_provider_iceberg_exec.triggers.snapshot.IcebergSnapshotTrigger",
            {
                "table": self.table,
                "branch": self.branch,
                "since_snapshot_id": self.since_snapshot_id,
                "since_timestamp_ms": self.since_timestamp_ms,
                "iceberg_exec_conn_id": self.iceberg_exec_conn_id,
                "poke_interval": self.poke_interval,
            },
        )

    def _poll(self, poller: _CatalogPoller) -> dict[str, Any] | None:
        return find_new_snapshot(
            poller.load_table(self.table),
            branch=self.branch,
            since_snapshot_id=self.since_snapshot_id,
            since_timestamp_ms=self.since_timestamp_ms,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until a new snapshot appears; yield one event."""
        from airflow_provider_iceberg_exec.engine.errors import TableNotFoundError
        from airflow_provider_iceberg_exec.operators._common import one_line

        try:
            poller = await catalog_poller(self.iceberg_exec_conn_id)
        except Exception as err:  # a trigger reports, it must not crash the triggerer loop
            yield TriggerEvent({"status": "error", "table": self.table, "message": one_line(err)})
            return
        while True:
            try:
                found = await asyncio.to_thread(self._poll, poller)
            except TableNotFoundError:
                self.log.info("Table %s not found yet; polling again in %s s", self.table, self.poke_interval)
                found = None
            except Exception as err:  # a trigger reports, it must not crash the triggerer loop
                yield TriggerEvent({"status": "error", "table": self.table, "message": one_line(err)})
                return
            if found is not None:
                self.log.info("New snapshot %s on %s of %s", found["snapshot_id"], self.branch, self.table)
                yield TriggerEvent({"status": "success", **found})
                return
            self.log.debug("No new snapshot on %s of %s; polling again", self.branch, self.table)
            await asyncio.sleep(self.poke_interval)
