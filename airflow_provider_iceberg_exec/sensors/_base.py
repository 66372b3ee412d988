"""The deferrable-sensor skeleton shared by the iceberg-exec sensors."""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import TriggerFailedError, engine_errors

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger
    from pyiceberg.table import Table

__all__ = ["IcebergSensorBase"]


class IcebergSensorBase(BaseSensorOperator):
    """Pokes a table check; with ``deferrable=True`` pokes once, then defers to the check's trigger.

    Subclasses implement :meth:`check` (the sync check on a loaded table) and :meth:`trigger`.
    """

    table: str
    iceberg_exec_conn_id: str
    deferrable: bool

    @cached_property
    def hook(self) -> IcebergExecHook:
        """The catalog hook, built after the templates are rendered."""
        return IcebergExecHook(iceberg_exec_conn_id=self.iceberg_exec_conn_id)

    def check(self, table: Table) -> dict[str, Any] | None:
        """The event payload when the condition holds, else ``None``."""
        raise NotImplementedError

    def trigger(self) -> BaseTrigger:
        """The trigger that polls the same condition."""
        raise NotImplementedError

    def poke(self, context: Context) -> PokeReturnValue:
        """Check once; a table that does not exist (yet) is "not yet"."""
        from airflow_provider_iceberg_exec.engine.errors import TableNotFoundError

        with engine_errors():
            try:
                table = self.hook.load_table(self.table)
            except TableNotFoundError:
                self.log.info("Table %s not found yet", self.table)
                return PokeReturnValue(is_done=False)
            found = self.check(table)
        return PokeReturnValue(is_done=found is not None, xcom_value=found)

    def execute(self, context: Context) -> Any:
        """Poke (or reschedule) until done; when deferrable, poke once and then defer."""
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.log.info("Deferring: %s polls every %s s", type(self.trigger()).__name__, self.poke_interval)
        self.defer(
            trigger=self.trigger(),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )
        return None  # not reached: defer() raises TaskDeferred

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: return its payload, or fail with its message."""
        if not isinstance(event, dict) or event.get("status") != "success":
            message = event.get("message") if isinstance(event, dict) else repr(event)
            with engine_errors():
                raise TriggerFailedError(f"{self.task_id}: trigger failed on {self.table}: {message}")
        payload = {k: v for k, v in event.items() if k != "status"}
        self.log.info("Condition met on %s: %s", self.table, payload)
        return payload
