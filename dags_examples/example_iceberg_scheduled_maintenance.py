"""Scheduled maintenance: when the table needs it, compact it with one bounded rewrite per file group.

``health`` (a table-health sensor: small files over a threshold; skipped when the table stays healthy)
>> ``compaction.plan`` >> ``compaction.rewrite`` (mapped, in the ``[iceberg_exec] pool``) >>
``compaction.commit`` (one ``replace`` snapshot; emits the table's asset). Expiring snapshots and the
orphan scan will follow the commit.

The table comes from ``ICEBERG_EXEC_EXAMPLE_TABLE`` (default ``demo.events``), the catalog from the
``iceberg_exec_default`` connection.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.task_groups import compaction_task_group

TABLE = os.environ.get("ICEBERG_EXEC_EXAMPLE_TABLE", "demo.events")

with DAG(
    dag_id="iceberg_exec_scheduled_maintenance",
    description="Compact an Iceberg table when it has too many small files",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance"],
    doc_md=__doc__,
) as dag:
    health = IcebergTableHealthSensor(
        task_id="health",
        table=TABLE,
        min_small_files=10,
        min_delete_files=50,
        mode="reschedule",
        poke_interval=timedelta(minutes=10),
        timeout=timedelta(hours=6),
        soft_fail=True,
    )
    health >> compaction_task_group(
        table=TABLE,
        options={"min-input-files": "2", "partial-progress.enabled": "false"},
        memory_limit="512MiB",
        max_active_rewrites=4,
    )

if __name__ == "__main__":
    dag.test()
