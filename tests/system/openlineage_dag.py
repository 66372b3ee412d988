"""Run a maintenance DAG with dag.test() in this process and write its task results to a JSON file.

Run by ``test_openlineage.py`` in a subprocess, with Airflow's OpenLineage provider configured by the
environment (``AIRFLOW__OPENLINEAGE__TRANSPORT``): the provider reads its configuration once per process,
so the test's own process, where it is off, cannot host the run.

``python -m tests.system.openlineage_dag <results.json>``: compacts ``demo.events`` in one task, then
deletes the rows of ``user_id < 50000`` by copy-on-write through plan, mapped rewrite and commit (the
table and the filter given as templates of the DAG's params).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from tests.system.dagbag import register

DAG_ID = "iceberg_exec_lineage"
TABLE = "demo.events"
DELETE_WHERE = "user_id < 50000"


def _build_dag() -> Any:
    from airflow.sdk import DAG

    from airflow_provider_iceberg_exec import settings
    from airflow_provider_iceberg_exec.operators.commit import CommitOperator
    from airflow_provider_iceberg_exec.operators.compaction import CompactionOperator
    from airflow_provider_iceberg_exec.operators.cow import CowPlanOperator, CowRewriteOperator

    # The table and the filter are templates: the facet methods must see them rendered, as execute() does.
    params = {"table": TABLE, "where": DELETE_WHERE}
    with DAG(
        dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params=params
    ) as dag:
        compact = CompactionOperator(
            task_id="compact",
            table="{{ params.table }}",
            options={"min-input-files": "2"},
            memory_limit="128MiB",
        )
        plan = CowPlanOperator(
            task_id="plan", table="{{ params.table }}", operation="delete", where="{{ params.where }}"
        )
        rewrite = CowRewriteOperator.partial(
            task_id="rewrite",
            memory_limit="128MiB",
            pool=settings.default_pool(),
            pool_slots=settings.default_pool_slots(),
        ).expand(task_spec=plan.output)
        commit = CommitOperator(
            task_id="commit", results=rewrite.output, planned=plan.output, table="{{ params.table }}"
        )
        compact >> plan >> rewrite >> commit
    return dag


def _results(run: Any) -> dict[str, Any]:
    """Every task instance's state and returned value, by ``task_id[map_index]``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: dict[str, Any] = {}
    with create_session() as session:
        for ti in run.get_task_instances(session=session):
            value = session.scalar(
                select(XComModel.value).where(
                    XComModel.dag_id == ti.dag_id,
                    XComModel.run_id == ti.run_id,
                    XComModel.task_id == ti.task_id,
                    XComModel.map_index == ti.map_index,
                    XComModel.key == "return_value",
                )
            )
            out[f"{ti.task_id}[{ti.map_index}]"] = {
                "state": str(ti.state),
                "try_number": ti.try_number,
                "value": json.loads(value) if isinstance(value, str) else value,
            }
    return out


def main(path: str) -> int:
    from airflow import settings as airflow_settings

    airflow_settings.configure_orm()
    dag = _build_dag()
    register(dag)
    run = dag.test()
    with open(path, "w") as out:
        json.dump({"state": str(run.state), "tasks": _results(run)}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
