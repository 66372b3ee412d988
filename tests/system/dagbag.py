"""Airflow's DagBag across the supported range (it moved to ``airflow.dag_processing`` in Airflow 3.2), and
the registration ``dag.test()`` needs for a DAG built in a test."""

from __future__ import annotations

import os
from typing import Any


def dagbag_api() -> tuple[Any, Any]:
    """``(DagBag, sync_bag_to_db)`` of the installed Airflow."""
    try:
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag, sync_bag_to_db
    return DagBag, sync_bag_to_db


def register(dag: Any) -> None:
    """Write the DAG to the metadata DB as the DAG processor would (dag.test() needs a DAG version)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    dagbag, sync_bag_to_db = dagbag_api()
    DagBundlesManager().sync_bundles_to_db()  # the bundle row the DAG refers to
    bag = dagbag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
