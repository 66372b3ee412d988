"""The DAG of the CeleryExecutor system test (``test_celery_executor.py``), copied into its DAGs folder.

The mapped compaction (plan >> rewrite.expand >> commit) of ``celery.events`` in pool
``iceberg_exec_celery``, with every payload of more than one file staged on the table's object store
(``payload_file_threshold=1``), so XCom only carries references. The run's conf gives the options.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_iceberg_exec.task_groups import compaction_task_group

DAG_ID = "iceberg_exec_celery"
TABLE = "celery.events"
POOL = "iceberg_exec_celery"

with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    compaction_task_group(
        table=TABLE,
        options={
            "min-input-files": "2",
            "max-file-group-input-files": "{{ dag_run.conf['max_group_files'] }}",
        },
        memory_limit="128MiB",  # one slot of the pool each (settings.pool_slots_for)
        pool=POOL,
        payload_file_threshold=1,
    )
