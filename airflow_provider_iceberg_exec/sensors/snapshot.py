"""Wait for a new snapshot on a branch of an Iceberg table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.compat import conf
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.sensors._base import IcebergSensorBase

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.triggers.snapshot import IcebergSnapshotTrigger

__all__ = ["IcebergSnapshotSensor", "to_epoch_ms"]


def to_epoch_ms(value: Any) -> int | None:
    """A rendered time as epoch milliseconds: ``None``/``""``, an int (ms), a datetime or an ISO string.

    :raises ConfigurationError: for text that is neither an integer nor an ISO-8601 time.
    """
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    if isinstance(value, bool):
        raise ConfigurationError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return int(aware.timestamp() * 1000)
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    import pendulum

    try:
        parsed = pendulum.parse(text)
    except (ValueError, pendulum.parsing.exceptions.ParserError) as err:
        raise ConfigurationError(f"not a time: {text!r}; use an ISO-8601 time or epoch milliseconds") from err
    if not isinstance(parsed, dt.datetime):
        raise ConfigurationError(f"not a point in time: {text!r}")
    return int(parsed.timestamp() * 1000)


def _to_snapshot_id(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    return int(value)


class IcebergSnapshotSensor(IcebergSensorBase):
    """Wait for a new snapshot on ``branch`` since ``since_snapshot_id`` and/or ``since`` (a time).

    With neither, any snapshot on the branch satisfies it. Returns (XCom) ``{"table", "branch",
    "snapshot_id", "timestamp_ms", "operation", "previous_snapshot_id"}``. A table that does not exist
    yet keeps the sensor waiting.

    :param table: ``"namespace.table"`` (templated).
    :param branch: the branch (templated).
    :param since_snapshot_id: wait for a head other than this snapshot (templated).
    :param since: wait for a head younger than this: a datetime, an ISO-8601 string or epoch
        milliseconds, e.g. ``"{{ data_interval_start }}"`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("table", "branch", "since_snapshot_id", "since", "iceberg_exec_conn_id")

    def __init__(
        self,
        *,
        table: str,
        branch: str = "main",
        since_snapshot_id: int | str | None = None,
        since: Any = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.branch = branch
        self.since_snapshot_id = since_snapshot_id
        self.since = since
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.deferrable = deferrable

    def check(self, table: Table) -> dict[str, Any] | None:
        """The new head of the branch, or ``None``."""
        from airflow_provider_iceberg_exec.triggers.snapshot import find_new_snapshot

        return find_new_snapshot(
            table,
            branch=self.branch,
            since_snapshot_id=_to_snapshot_id(self.since_snapshot_id),
            since_timestamp_ms=to_epoch_ms(self.since),
        )

    def trigger(self) -> IcebergSnapshotTrigger:
        """The trigger polling the same condition."""
        from airflow_provider_iceberg_exec.triggers.snapshot import IcebergSnapshotTrigger

        return IcebergSnapshotTrigger(
            table=self.table,
            branch=self.branch,
            since_snapshot_id=_to_snapshot_id(self.since_snapshot_id),
            since_timestamp_ms=to_epoch_ms(self.since),
            iceberg_exec_conn_id=self.iceberg_exec_conn_id,
            poke_interval=float(self.poke_interval),
        )
