"""Wait until maintenance is worth running: the table-health metrics, the verdict, and the trigger.

The metrics say when compaction is worth it (small files, delete files, files per partition) and when a
manifest rewrite is (many small data manifests, read from the head's manifest list alone).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_iceberg_exec.triggers.snapshot import catalog_poller, validate_table_name

if TYPE_CHECKING:
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SMALL_MANIFESTS_REASON",
    "IcebergTableHealthTrigger",
    "health_reasons",
    "manifest_health",
    "table_health",
]

_DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
_TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
_DEFAULT_MANIFEST_TARGET_SIZE = 8 * 1024 * 1024
_MANIFEST_TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"

#: the reason :func:`health_reasons` gives for many small manifests starts with this (after the count)
SMALL_MANIFESTS_REASON = "small data manifests"

#: the thresholds a health check uses unless told otherwise (``None`` disables one)
DEFAULT_THRESHOLDS: dict[str, int | None] = {
    "min_small_files": 10,
    "min_small_file_bytes": None,
    "min_delete_files": None,
    "max_files_per_partition": None,
    "min_small_manifests": None,
}


def table_health(
    table: Table, *, branch: str = "main", small_file_size_bytes: int | None = None
) -> dict[str, Any]:
    """Count the live files of the head of ``branch`` from its manifests (metadata only, no data read).

    :param table: the table.
    :param branch: the branch.
    :param small_file_size_bytes: a data file below this is small; default 75% of the table's
        ``write.target-file-size-bytes`` (Spark's ``min-file-size-bytes`` default).
    :returns: ``{"table", "branch", "snapshot_id", "small_file_size_bytes", "data_files", "data_bytes",
        "small_files", "small_file_bytes", "delete_files", "partitions", "max_files_per_partition"}`` and
        the keys of :func:`manifest_health`.
    """
    from pyiceberg.manifest import DataFileContent

    if small_file_size_bytes is None:
        target = int(table.properties.get(_TARGET_FILE_SIZE_PROPERTY, _DEFAULT_TARGET_FILE_SIZE))
        small_file_size_bytes = int(target * 0.75)
    head = table.snapshot_by_name(branch)
    metrics: dict[str, Any] = {
        "table": ".".join(table.name()),
        "branch": branch,
        "snapshot_id": head.snapshot_id if head is not None else None,
        "small_file_size_bytes": small_file_size_bytes,
        "data_files": 0,
        "data_bytes": 0,
        "small_files": 0,
        "small_file_bytes": 0,
        "delete_files": 0,
        "partitions": 0,
        "max_files_per_partition": 0,
    }
    manifests = head.manifests(table.io) if head is not None else []
    metrics.update(manifest_health(table, manifests))
    if head is None:
        return metrics
    per_partition: Counter[tuple[int, str]] = Counter()
    for manifest in manifests:
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            if data_file.content != DataFileContent.DATA:
                metrics["delete_files"] += 1
                continue
            size = int(data_file.file_size_in_bytes)
            metrics["data_files"] += 1
            metrics["data_bytes"] += size
            if size < small_file_size_bytes:
                metrics["small_files"] += 1
                metrics["small_file_bytes"] += size
            per_partition[(manifest.partition_spec_id, repr(data_file.partition))] += 1
    metrics["partitions"] = len(per_partition)
    metrics["max_files_per_partition"] = max(per_partition.values(), default=0)
    return metrics


def manifest_health(
    table: Table, manifests: Sequence[ManifestFile], *, small_manifest_size_bytes: int | None = None
) -> dict[str, Any]:
    """Count the head's data manifests and the small ones, from its manifest list alone (no manifest read).

    :param table: the table (for ``commit.manifest.target-size-bytes``).
    :param manifests: the manifest-list entries of the head.
    :param small_manifest_size_bytes: a data manifest below this is small; default 75% of the table's
        ``commit.manifest.target-size-bytes`` (8 MiB), the size a manifest rewrite aims at.
    :returns: ``{"small_manifest_size_bytes", "data_manifests", "small_manifests", "data_manifest_bytes"}``.
    """
    from pyiceberg.manifest import ManifestContent

    if small_manifest_size_bytes is None:
        target = int(table.properties.get(_MANIFEST_TARGET_SIZE_PROPERTY, _DEFAULT_MANIFEST_TARGET_SIZE))
        small_manifest_size_bytes = int(target * 0.75)
    data = [m for m in manifests if m.content == ManifestContent.DATA]
    return {
        "small_manifest_size_bytes": small_manifest_size_bytes,
        "data_manifests": len(data),
        "small_manifests": sum(1 for m in data if int(m.manifest_length) < small_manifest_size_bytes),
        "data_manifest_bytes": sum(int(m.manifest_length) for m in data),
    }


def health_reasons(metrics: Mapping[str, Any], thresholds: Mapping[str, int | None]) -> list[str]:
    """Why maintenance is worth running, one reason per threshold reached; empty when none is.

    >>> health_reasons({"small_files": 12, "delete_files": 0}, {"min_small_files": 10})
    ['12 small files >= 10']
    >>> health_reasons({"small_manifests": 40}, {"min_small_manifests": 25})
    ['40 small data manifests >= 25']
    >>> health_reasons({"small_files": 3}, {"min_small_files": 10, "min_delete_files": None})
    []
    """
    checks = (
        ("min_small_files", "small_files", "{value} small files >= {limit}"),
        ("min_small_file_bytes", "small_file_bytes", "{value} bytes in small files >= {limit}"),
        ("min_delete_files", "delete_files", "{value} delete files >= {limit}"),
        ("min_small_manifests", "small_manifests", "{value} " + SMALL_MANIFESTS_REASON + " >= {limit}"),
    )
    reasons = [
        text.format(value=metrics.get(key, 0), limit=thresholds[name])
        for name, key, text in checks
        if thresholds.get(name) is not None and int(metrics.get(key, 0)) >= int(thresholds[name] or 0)
    ]
    limit = thresholds.get("max_files_per_partition")
    if limit is not None and int(metrics.get("max_files_per_partition", 0)) > int(limit):
        reasons.append(f"{metrics['max_files_per_partition']} files in one partition > {limit}")
    return reasons


def check_health(
    table: Table,
    *,
    branch: str,
    small_file_size_bytes: int | None,
    thresholds: Mapping[str, int | None],
) -> dict[str, Any] | None:
    """The metrics and reasons when compaction is worth running, else ``None``."""
    metrics = table_health(table, branch=branch, small_file_size_bytes=small_file_size_bytes)
    reasons = health_reasons(metrics, thresholds)
    return {**metrics, "reasons": reasons} if reasons else None


class IcebergTableHealthTrigger(BaseTrigger):
    """Fire when a table's health metrics reach a threshold (see :func:`health_reasons`).

    Catalog and manifest reads run in ``asyncio.to_thread``; a missing table keeps polling.

    :param table: ``"namespace.table"``.
    :param branch: the branch.
    :param thresholds: ``min_small_files``, ``min_small_file_bytes``, ``min_delete_files``,
        ``max_files_per_partition``, ``min_small_manifests`` (``None`` disables one).
    :param small_file_size_bytes: see :func:`table_health`.
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection.
    :param poke_interval: seconds between polls.
    """

    def __init__(
        self,
        *,
        table: str,
        branch: str = "main",
        thresholds: Mapping[str, int | None] | None = None,
        small_file_size_bytes: int | None = None,
        iceberg_exec_conn_id: str = "iceberg_exec_default",
        poke_interval: float = 300.0,
    ) -> None:
        super().__init__()
        validate_table_name(table)
        self.table = table
        self.branch = branch
        self.thresholds = dict(DEFAULT_THRESHOLDS if thresholds is None else thresholds)
        self.small_file_size_bytes = small_file_size_bytes
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and keyword arguments that rebuild this trigger."""
        return (
            "airflow_provider_iceberg_exec.triggers.health.IcebergTableHealthTrigger",
            {
                "table": self.table,
                "branch": self.branch,
                "thresholds": dict(self.thresholds),
                "small_file_size_bytes": self.small_file_size_bytes,
                "iceberg_exec_conn_id": self.iceberg_exec_conn_id,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until a threshold is reached; yield one event with the metrics and reasons."""
        from airflow_provider_iceberg_exec.engine.errors import TableNotFoundError
        from airflow_provider_iceberg_exec.operators._common import one_line

        try:
            poller = await catalog_poller(self.iceberg_exec_conn_id)
        except Exception as err:  # a trigger reports, it must not crash the triggerer loop
            yield TriggerEvent({"status": "error", "table": self.table, "message": one_line(err)})
            return
        while True:
            try:
                found = await asyncio.to_thread(
                    lambda: check_health(
                        poller.load_table(self.table),
                        branch=self.branch,
                        small_file_size_bytes=self.small_file_size_bytes,
                        thresholds=self.thresholds,
                    )
                )
            except TableNotFoundError:
                self.log.info("Table %s not found yet; polling again in %s s", self.table, self.poke_interval)
                found = None
            except Exception as err:  # a trigger reports, it must not crash the triggerer loop
                yield TriggerEvent({"status": "error", "table": self.table, "message": one_line(err)})
                return
            if found is not None:
                self.log.info("Maintenance worth running on %s: %s", self.table, "; ".join(found["reasons"]))
                yield TriggerEvent({"status": "success", **found})
                return
            await asyncio.sleep(self.poke_interval)
