"""Constants and helpers shared by the Airflow-layer tests."""

from __future__ import annotations

import json

ENGINE_COMPACTION = "airflow_provider_iceberg_exec.engine.ops.compaction"
TABLE = "ns.events"


def connection_json(tmp_path, **extra) -> str:
    """An ``iceberg_exec`` connection (JSON) of the SQLite catalog under ``tmp_path``."""
    return json.dumps(
        {
            "conn_type": "iceberg_exec",
            "host": f"sqlite:///{tmp_path}/catalog.db",
            "schema": f"file://{tmp_path}/warehouse",
            "extra": {"catalog_name": "demo", **extra},
        }
    )


def plan_of(tasks: list[dict]) -> dict:
    """A compaction plan document holding ``tasks``, as the engine's planner returns it."""
    return {
        "schema": "iceberg-exec/compaction-plan@1",
        "table": TABLE,
        "branch": "main",
        "base_snapshot_id": 1,
        "strategy": "binpack",
        "sort_order": None,
        "where": None,
        "options": {},
        "tasks": tasks,
        "skipped": [],
        "commit_batches": [[t["group_id"] for t in tasks]] if tasks else [],
    }
