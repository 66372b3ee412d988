"""Wait until maintenance of an Iceberg table (compaction, a manifest rewrite) is worth running."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.compat import conf
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.sensors._base import IcebergSensorBase

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.triggers.health import IcebergTableHealthTrigger

__all__ = ["IcebergTableHealthSensor"]


def _optional_int(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    return int(value)


class IcebergTableHealthSensor(IcebergSensorBase):
    """Wait until a table needs compaction: small files, delete files or files per partition over limits;
    or a manifest rewrite: many small data manifests (``min_small_manifests``).

    Reads only manifests (metadata). Any threshold reached satisfies it; ``None`` disables a threshold.
    Returns (XCom) the metrics and the reasons. Use ``soft_fail=True`` with a ``timeout`` to skip the
    maintenance of a healthy table.

    :param table: ``"namespace.table"`` (templated).
    :param branch: the branch (templated).
    :param min_small_files: small data files at which compaction is worth it (templated).
    :param min_small_file_bytes: bytes in small data files at which it is worth it (templated).
    :param min_delete_files: delete files at which it is worth it (templated).
    :param max_files_per_partition: more data files than this in one partition makes it worth it
        (templated).
    :param min_small_manifests: small data manifests (below 75% of ``commit.manifest.target-size-bytes``)
        at which a manifest rewrite is worth it; the reason then names "small data manifests"; counted from
        the manifest list alone (templated).
    :param small_file_size_bytes: a data file below this size is small; default 75% of the table's
        ``write.target-file-size-bytes`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = (
        "table",
        "branch",
        "min_small_files",
        "min_small_file_bytes",
        "min_delete_files",
        "max_files_per_partition",
        "min_small_manifests",
        "small_file_size_bytes",
        "iceberg_exec_conn_id",
    )

    def __init__(
        self,
        *,
        table: str,
        branch: str = "main",
        min_small_files: int | str | None = 10,
        min_small_file_bytes: int | str | None = None,
        min_delete_files: int | str | None = None,
        max_files_per_partition: int | str | None = None,
        min_small_manifests: int | str | None = None,
        small_file_size_bytes: int | str | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.branch = branch
        self.min_small_files = min_small_files
        self.min_small_file_bytes = min_small_file_bytes
        self.min_delete_files = min_delete_files
        self.max_files_per_partition = max_files_per_partition
        self.min_small_manifests = min_small_manifests
        self.small_file_size_bytes = small_file_size_bytes
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.deferrable = deferrable

    def _thresholds(self) -> dict[str, int | None]:
        return {
            "min_small_files": _optional_int(self.min_small_files),
            "min_small_file_bytes": _optional_int(self.min_small_file_bytes),
            "min_delete_files": _optional_int(self.min_delete_files),
            "max_files_per_partition": _optional_int(self.max_files_per_partition),
            "min_small_manifests": _optional_int(self.min_small_manifests),
        }

    def check(self, table: Table) -> dict[str, Any] | None:
        """The metrics and reasons when maintenance is worth running, else ``None`` (logged)."""
        from airflow_provider_iceberg_exec.triggers.health import health_reasons, table_health

        metrics = table_health(
            table, branch=self.branch, small_file_size_bytes=_optional_int(self.small_file_size_bytes)
        )
        reasons = health_reasons(metrics, self._thresholds())
        if not reasons:
            self.log.info("Table %s healthy for now: %s", self.table, metrics)
            return None
        self.log.info("Maintenance worth running on %s: %s", self.table, "; ".join(reasons))
        return {**metrics, "reasons": reasons}

    def trigger(self) -> IcebergTableHealthTrigger:
        """The trigger polling the same condition."""
        from airflow_provider_iceberg_exec.triggers.health import IcebergTableHealthTrigger

        return IcebergTableHealthTrigger(
            table=self.table,
            branch=self.branch,
            thresholds=self._thresholds(),
            small_file_size_bytes=_optional_int(self.small_file_size_bytes),
            iceberg_exec_conn_id=self.iceberg_exec_conn_id,
            poke_interval=float(self.poke_interval),
        )
