"""A daily CDC batch merged into an Iceberg table, then compacted when the table needs it.

``land_cdc_batch`` (stands for the upstream job that lands the day's change records as Parquet; here it
makes a small batch from the table itself: ``U`` updates, ``D`` deletes, ``I`` inserts, in an ``op``
column next to the table's columns, and returns the file URIs) >> ``merge`` (MERGE INTO on ``id``::

    WHEN MATCHED AND s.op = 'D' THEN DELETE
    WHEN MATCHED THEN UPDATE SET *            -- every table column from s; the extra op column is ignored
    WHEN NOT MATCHED AND s.op != 'D' THEN INSERT *

in the table's write mode, one snapshot; a retry reports the commit that landed) >> ``health`` (the
table-health sensor, poking for a few minutes and skipping compaction when the table stays healthy) >>
``compaction`` (plan, mapped rewrites in the ``[iceberg_exec] pool``, one commit).

A key changed twice in one batch fails the merge (Spark's cardinality check) with the table unchanged:
the upstream job must keep the last change per key. The table comes from ``ICEBERG_EXEC_EXAMPLE_TABLE``
(default ``demo.events``, the demo's table, keyed by ``id``), the catalog from the
``iceberg_exec_default`` connection.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.operators.merge import MergeOperator
from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.task_groups import compaction_task_group

TABLE = os.environ.get("ICEBERG_EXEC_EXAMPLE_TABLE", "demo.events")
MEMORY_LIMIT = "512MiB"


@task
def land_cdc_batch(run_id: str | None = None) -> list[str]:
    """Write the day's change records as Parquet under the table's ``landing/`` folder; return the URIs.

    A real DAG reads what its source system exported; this one derives a batch from the table: the
    first rows read get an update or a delete, and a few new ids are inserted.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook

    table = IcebergExecHook().load_table(TABLE)
    rows = table.scan(limit=30).to_arrow()
    ids = rows.column("id")
    top = pc.max(table.scan(selected_fields=("id",)).to_arrow().column("id")).as_py() or 0
    new = rows.slice(0, 5).set_column(0, "id", pa.array(range(top + 1, top + 6), ids.type))
    ops = ["D" if n % 3 == 0 else "U" for n in range(rows.num_rows)] + ["I"] * new.num_rows
    batch = pa.concat_tables([rows, new])
    payload = batch.schema.get_field_index("payload")
    batch = batch.set_column(payload, "payload", pa.array([f"cdc-{op}" for op in ops], pa.string()))
    batch = batch.append_column("op", pa.array(ops))
    uri = f"{table.location()}/landing/cdc-{(run_id or 'manual').replace(':', '_').replace('+', '_')}.parquet"
    with table.io.new_output(uri).create(overwrite=True) as stream:
        pq.write_table(batch, stream)
    return [uri]


with DAG(
    dag_id="iceberg_exec_cdc_merge",
    description="Merge a daily CDC batch (Parquet) into an Iceberg table, then compact when needed",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "data-platform"},
    tags=["iceberg", "merge", "cdc"],
    doc_md=__doc__,
) as dag:
    batch = land_cdc_batch(run_id="{{ run_id }}")
    merge = MergeOperator(
        task_id="merge",
        table=TABLE,
        on="id",
        source_files=batch,
        when_matched=["AND s.op = 'D' THEN DELETE", "UPDATE SET *"],
        when_not_matched=["AND s.op != 'D' THEN INSERT *"],
        memory_limit=MEMORY_LIMIT,
        pool_slots=settings.pool_slots_for(MEMORY_LIMIT),
        retries=2,
    )
    health = IcebergTableHealthSensor(
        task_id="health",
        table=TABLE,
        min_small_files=10,
        min_delete_files=20,
        mode="reschedule",
        poke_interval=timedelta(minutes=1),
        timeout=timedelta(minutes=5),
        soft_fail=True,
    )
    compaction = compaction_task_group(
        table=TABLE,
        options={"min-input-files": "2", "delete-file-threshold": "1"},
        memory_limit=MEMORY_LIMIT,
        max_active_rewrites=4,
    )
    merge >> health >> compaction

if __name__ == "__main__":
    dag.test()
