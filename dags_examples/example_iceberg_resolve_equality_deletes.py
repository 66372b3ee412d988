"""Resolve equality deletes on demand: rewrite the data files a Flink job's equality deletes apply to.

::

    airflow dags trigger iceberg_exec_resolve_equality_deletes --conf '{"table": "lake.orders_cdc"}'

A Flink upsert or CDC sink writes an equality delete file with every checkpoint; readers must anti-join
every data file against them, and PyIceberg cannot read such a table at all. This DAG rewrites exactly the
data files that equality deletes apply to, with the deletes applied, and commits one ``replace`` snapshot
that drops the equality deletes which then apply to no live file. Rows the job writes meanwhile are safe:
the new files keep the planning snapshot's sequence number, so equality deletes committed after the plan
still apply to them. Give it a ``schedule`` (e.g. ``"@hourly"``) to run it with the Params' defaults.

Params: ``table``, ``where`` (a PyIceberg row filter limiting the files considered, e.g. the partitions the
job no longer writes to), ``target_file_size_bytes``, ``memory_limit`` (of each rewrite). The catalog comes
from the ``iceberg_exec_default`` connection, e.g. for the README's demo (SQLite catalog, local
warehouse)::

    export AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT='{"conn_type": "iceberg_exec",
        "host": "sqlite:////abs/demo-warehouse/catalog.db", "schema": "file:///abs/demo-warehouse/warehouse",
        "extra": {"catalog_name": "demo"}}'

Tasks: ``resolve.plan`` (metadata only: the files equality deletes apply to, grouped by partition) ->
``resolve.rewrite`` (mapped, one bounded execution per group, in the ``[iceberg_exec] pool``) ->
``resolve.commit`` (its XCom is the result: files rewritten and added, delete files removed, snapshot).
For a small table, one ``ResolveEqualityDeletesOperator`` task does the same.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_iceberg_exec.task_groups import compaction_task_group

with DAG(
    dag_id="iceberg_exec_resolve_equality_deletes",
    description="Rewrite the data files equality deletes apply to, and drop those deletes",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "table": Param(
            "demo.events", type="string", pattern=r"^[^.\s]+(\.[^.\s]+)+$", description="namespace.table"
        ),
        "where": Param(
            None, type=["null", "string"], description="PyIceberg row filter of the files to consider"
        ),
        "target_file_size_bytes": Param(None, type=["null", "integer"], minimum=1),
        "memory_limit": Param("256MiB", type="string", pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B?|B)?\s*$"),
    },
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance", "on-demand", "equality-deletes"],
    doc_md=__doc__,
) as dag:
    compaction_task_group(
        group_id="resolve",
        only_files_with_equality_deletes=True,
        table="{{ params.table }}",
        where="{{ params.where or '' }}",
        options={"target-file-size-bytes": "{{ params.target_file_size_bytes or '' }}"},
        memory_limit="{{ params.memory_limit }}",
        tooltip="Plan the files equality deletes apply to, rewrite each group (mapped), commit once",
    )

if __name__ == "__main__":
    dag.test()
