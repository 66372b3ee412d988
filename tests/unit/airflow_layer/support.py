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
