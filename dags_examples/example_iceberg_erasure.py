"""Right to erasure, on demand: delete one user's rows from a table and report what changed.

``airflow dags trigger iceberg_exec_erasure --conf '{"user_id": "4242", "request_id": "DSR-17"}'``

Params: ``table``, ``user_column`` (default ``user_id``), ``user_id``, ``request_id`` (carried into the
report), ``memory_limit``. The catalog comes from the ``iceberg_exec_default`` connection, e.g. for the
README's demo (SQLite catalog, local warehouse)::

    export AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT='{"conn_type": "iceberg_exec",
        "host": "sqlite:////abs/demo-warehouse/catalog.db", "schema": "file:///abs/demo-warehouse/warehouse",
        "extra": {"catalog_name": "demo"}}'

Tasks: ``plan`` (metadata only: the data files that may hold the user's rows) -> ``rewrite`` (mapped, one
bounded copy-on-write rewrite per group of files; files without the user's rows are left untouched) ->
``commit`` (one ``overwrite`` or ``delete`` snapshot, validated with the predicate and the table's
``write.delete.isolation-level``; its commit id derives from the DAG run, so a retry never deletes twice;
if any rewrite failed it deletes what the others wrote and fails: never a partial erasure)
-> ``report`` (rows and files removed, the snapshot).

The deleted rows still exist in the data files of older snapshots until those snapshots expire and the
files are removed: schedule snapshot expiry (and orphan removal) within the erasure deadline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.cow import CowPlanOperator, CowRewriteOperator
from airflow_provider_iceberg_exec.task_groups import COMMIT_TRIGGER_RULE

with DAG(
    dag_id="iceberg_exec_erasure",
    description="Delete one user's rows from an Iceberg table (right to erasure)",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "table": Param(
            "demo.events", type="string", pattern=r"^[^.\s]+(\.[^.\s]+)+$", description="namespace.table"
        ),
        "user_column": Param("user_id", type="string", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"),
        "user_id": Param(
            "42", type="string", pattern=r"^[A-Za-z0-9_.@+-]+$", description="the user whose rows to delete"
        ),
        "request_id": Param("manual", type="string", description="the erasure request, for the report"),
        "memory_limit": Param("256MiB", type="string", pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B?|B)?\s*$"),
    },
    default_args={"owner": "data-platform"},
    tags=["iceberg", "maintenance", "on-demand", "privacy"],
    doc_md=__doc__,
) as dag:
    plan = CowPlanOperator(
        task_id="plan",
        table="{{ params.table }}",
        operation="delete",
        # A quoted literal binds to the column's type (long, string, ...); the Param pattern keeps quotes out.
        where="{{ params.user_column }} = '{{ params.user_id }}'",
    )
    rewrite = CowRewriteOperator.partial(
        task_id="rewrite",
        table="{{ params.table }}",
        memory_limit="{{ params.memory_limit }}",
        # A templated memory limit: the pool and its slots come from the [iceberg_exec] config.
        pool=settings.default_pool(),
        pool_slots=settings.default_pool_slots(),
    ).expand(task_spec=plan.output)
    commit = CommitOperator(
        task_id="commit",
        results=rewrite.output,
        # The plan too: when a rewrite fails, the commit deletes what the others wrote and fails (a
        # partial delete is never committed); an empty plan skips it, and the report says "nothing".
        planned=plan.output,
        table="{{ params.table }}",
        trigger_rule=COMMIT_TRIGGER_RULE,
    )
    plan >> commit

    @task(trigger_rule="none_failed")
    def report(result: dict[str, Any] | None, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Summarise the erasure for the requester's audit trail."""
        import logging

        params = params or {}
        result = result or {}
        summary = {
            "request_id": params.get("request_id"),
            "table": params.get("table"),
            "user": f"{params.get('user_column')} = {params.get('user_id')}",
            "deleted_rows": int(result.get("deleted_rows") or 0),
            "data_files_removed": int(result.get("deleted_data_files_count") or 0),
            "data_files_added": int(result.get("added_data_files_count") or 0),
            "snapshot_ids": list(result.get("snapshot_ids") or []),
            "already_committed": bool(result.get("already_committed")),
        }
        logging.getLogger("airflow.task").info(
            "Erasure %s: %s rows of %s deleted from %s (%s files removed, %s added), snapshots %s",
            summary["request_id"],
            summary["deleted_rows"],
            summary["user"],
            summary["table"],
            summary["data_files_removed"],
            summary["data_files_added"],
            summary["snapshot_ids"] or "none (no row matched)",
        )
        return summary

    report(commit.output)

if __name__ == "__main__":
    dag.test()
