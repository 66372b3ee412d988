"""On-demand compaction: trigger it from the UI, the REST API or the CLI with the table and options.

::

    airflow dags trigger iceberg_exec_on_demand --conf '{"table": "demo.events", "min_input_files": 2}'

Params: ``table``, ``where`` (a PyIceberg row filter), ``strategy`` (``binpack`` or ``sort``), ``sort_order``,
``target_file_size_bytes``, ``min_input_files``, ``memory_limit``. The catalog comes from the
``iceberg_exec_default`` connection, e.g. for the README's demo (SQLite catalog, local warehouse)::

    export AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT='{"conn_type": "iceberg_exec",
        "host": "sqlite:////abs/demo-warehouse/catalog.db", "schema": "file:///abs/demo-warehouse/warehouse",
        "extra": {"catalog_name": "demo"}}'

The commit task's XCom is the result (files rewritten and added, bytes, snapshot ids).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_provider_iceberg_exec.task_groups import compaction_task_group

with DAG(
    dag_id="iceberg_exec_on_demand",
    description="Compact an Iceberg table on demand",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "table": Param(
            "demo.events", type="string", pattern=r"^[^.\s]+(\.[^.\s]+)+$", description="namespace.table"
        ),
        "where": Param(
            None, type=["null", "string"], description="PyIceberg row filter of the rows to compact"
        ),
        "strategy": Param("binpack", type="string", enum=["binpack", "sort"]),
        "sort_order": Param(None, type=["null", "string"], description="e.g. 'id DESC NULLS LAST'"),
        "target_file_size_bytes": Param(None, type=["null", "integer"], minimum=1),
        "min_input_files": Param(None, type=["null", "integer"], minimum=1),
        "memory_limit": Param("256MiB", type="string", pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B?|B)?\s*$"),
    },
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance", "on-demand"],
    doc_md=__doc__,
) as dag:
    compaction_task_group(
        table="{{ params.table }}",
        where="{{ params.where or '' }}",
        strategy="{{ params.strategy }}",
        sort_order="{{ params.sort_order or '' }}",
        options={
            "target-file-size-bytes": "{{ params.target_file_size_bytes or '' }}",
            "min-input-files": "{{ params.min_input_files or '' }}",
        },
        memory_limit="{{ params.memory_limit }}",
    )

if __name__ == "__main__":
    dag.test()
