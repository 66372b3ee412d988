"""Scheduled maintenance: when the table needs it, compact it with one bounded rewrite per file group and
rewrite its manifests; then expire old snapshots and look for orphan files.

``health`` (a table-health sensor: small files, delete files or small manifests over a threshold; skipped
when the table stays healthy) >> ``choose`` (a branch on the sensor's reasons) >> ``compaction.plan`` >>
``compaction.rewrite`` (mapped, in the ``[iceberg_exec] pool``) >> ``compaction.commit`` (one ``replace``
snapshot; emits the table's asset) >> ``rewrite_manifests`` (Spark's ``rewrite_manifests``: when the
manifests are many and small, fewer partition-clustered ones, no data change) >> ``expire_snapshots``
(Java's rules; deletes the files only expired snapshots reached) >> ``orphan_scan`` (writes the orphan list
under the table's staging directory) >> ``orphan_delete`` (a dry run unless the ``remove_orphans`` Param is
true). ``choose`` runs compaction for the file reasons and the manifest rewrite for the manifest reason
(after compaction when both fire). Expiry and the orphan steps also run when the health sensor skipped
the rest.

The table comes from ``ICEBERG_EXEC_EXAMPLE_TABLE`` (default ``demo.events``), the catalog from the
``iceberg_exec_default`` connection.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.operators.maintenance import (
    ExpireSnapshotsOperator,
    OrphanDeleteOperator,
    OrphanScanOperator,
)
from airflow_provider_iceberg_exec.operators.manifests import IcebergRewriteManifestsOperator
from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.task_groups import compaction_task_group
from airflow_provider_iceberg_exec.triggers.health import SMALL_MANIFESTS_REASON

TABLE = os.environ.get("ICEBERG_EXEC_EXAMPLE_TABLE", "demo.events")
MEMORY_LIMIT = "512MiB"


@task.branch(task_id="choose")
def choose(health: dict[str, Any]) -> list[str]:
    """Compaction for the file reasons, the manifest rewrite for the manifest reason (both when both)."""
    reasons = health.get("reasons", [])
    manifests = [reason for reason in reasons if SMALL_MANIFESTS_REASON in reason]
    chosen = ["compaction.plan"] if len(manifests) < len(reasons) else []
    return [*chosen, "rewrite_manifests"] if manifests else chosen


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
        min_small_manifests=10,
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
    rewrite_manifests = IcebergRewriteManifestsOperator(
        task_id="rewrite_manifests",
        table=TABLE,
        # after compaction when both were chosen, alone when only this one was
        trigger_rule="none_failed_min_one_success",
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
    chosen = choose(health.output)
    chosen >> [compaction, rewrite_manifests]
    compaction >> rewrite_manifests >> expire >> orphan_scan >> orphan_delete

if __name__ == "__main__":
    dag.test()
