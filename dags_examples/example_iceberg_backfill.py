"""Backfill: each run compacts only the partitions of its own data interval.

The row filter is a template over the run's data interval, so ``airflow backfill create --dag-id
iceberg_exec_backfill --from-date 2026-01-01 --to-date 2026-01-31`` compacts one day per run, each run's
rewrites in the ``[iceberg_exec] pool`` (the pool bounds the memory of every concurrent rewrite across
the backfill's runs). A file is selected when it may hold rows of the interval, so on a table not
partitioned by the time column the runs may select the same files: they run one at a time.

The filtered column is the ``time_column`` param (default ``event_ts``, a timestamp); the table comes from
``ICEBERG_EXEC_EXAMPLE_TABLE`` (default ``demo.events``).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Param

try:
    from airflow.sdk import CronDataIntervalTimetable
except ImportError:  # Airflow 3.1: the timetables are in the core
    from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_iceberg_exec.task_groups import compaction_task_group

TABLE = os.environ.get("ICEBERG_EXEC_EXAMPLE_TABLE", "demo.events")

#: the data interval as a PyIceberg row filter: [start, end)
WHERE = (
    "{{ params.time_column }} >= '{{ data_interval_start.isoformat() }}' and "
    "{{ params.time_column }} < '{{ data_interval_end.isoformat() }}'"
)

with DAG(
    dag_id="iceberg_exec_backfill",
    description="Compact the partitions of each run's data interval",
    # a data-interval timetable: each run covers [data_interval_start, data_interval_end)
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # Runs whose filters select disjoint files (a table partitioned by the time column) may run side by
    # side; here they may overlap, so one at a time: a later run re-plans after the earlier one commits.
    max_active_runs=1,
    params={"time_column": Param("event_ts", type="string", description="the filtered timestamp column")},
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance", "backfill"],
    doc_md=__doc__,
) as dag:
    compaction_task_group(
        table=TABLE,
        where=WHERE,
        options={"min-input-files": "2"},
        memory_limit="256MiB",
    )

if __name__ == "__main__":
    dag.test()
