"""Scheduled maintenance: when the table needs it, compact it with one bounded rewrite per file group; then
expire old snapshots and look for orphan files.

``health`` (a table-health sensor: small files over a threshold; skipped when the table stays healthy)
>> ``compaction.plan`` >> ``compaction.rewrite`` (mapped, in the ``[iceberg_exec] pool``) >>
``compaction.commit`` (one ``replace`` snapshot; emits the table's asset) >> ``expire_snapshots`` (Java's
rules; deletes the files only expired snapshots reached) >> ``orphan_scan`` (writes the orphan list under
the table's staging directory) >> ``orphan_delete`` (a dry run unless the ``remove_orphans`` Param is
true). Expiry and the orphan steps also run when the health sensor skipped compaction.

The table comes from ``ICEBERG_EXEC_EXAMPLE_TABLE`` (default ``demo.events``), the catalog from the
``iceberg_exec_default`` connection.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.operators.maintenance import (
    ExpireSnapshotsOperator,
    OrphanDeleteOperator,
    OrphanScanOperator,
)
from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.task_groups import compaction_task_group

TABLE = os.environ.get("ICEBERG_EXEC_EXAMPLE_TABLE", "demo.events")
MEMORY_LIMIT = "512MiB"

with DAG(
    dag_id="iceberg_exec_scheduled_maintenance",
    description="Compact an Iceberg table when it has too many small files; expire snapshots; find orphans",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance"],
    params={
        "remove_orphans": Param(
            False, type="boolean", description="Delete the orphan files the scan finds (else a dry run)."
        ),
    },
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
    compaction = compaction_task_group(
        table=TABLE,
        options={"min-input-files": "2", "partial-progress.enabled": "false"},
        memory_limit=MEMORY_LIMIT,
        max_active_rewrites=4,
    )
    expire = ExpireSnapshotsOperator(
        task_id="expire_snapshots",
        table=TABLE,
        older_than="7d",
        retain_last=10,
        memory_limit=MEMORY_LIMIT,
        pool_slots=settings.pool_slots_for(MEMORY_LIMIT),
        trigger_rule="none_failed",
    )
    orphan_scan = OrphanScanOperator(
        task_id="orphan_scan",
        table=TABLE,
        older_than="3d",
        memory_limit=MEMORY_LIMIT,
        pool_slots=settings.pool_slots_for(MEMORY_LIMIT),
    )
    orphan_delete = OrphanDeleteOperator(
        task_id="orphan_delete",
        scan_result=orphan_scan.output,
        dry_run_only="{{ not params.remove_orphans }}",
    )
    health >> compaction >> expire >> orphan_scan >> orphan_delete

if __name__ == "__main__":
    dag.test()
