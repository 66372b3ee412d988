"""Fixtures of the system tests: one Airflow home and metadata DB per session, a fragmented SQLite table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO / "dags_examples"

TABLE = "demo.events"

#: the session's metadata DB as migrated, before any test wrote a DAG into it: a test's own Airflow starts
#: from this copy, so the DAGs it finds serialized are the ones its DAG processor wrote (the session's DB
#: holds example DAGs that test_example_dags registered under the session's settings, another pool)
MIGRATED_DB = "airflow-migrated.db"


def connection_json(workdir: Path) -> str:
    """The ``iceberg_exec`` connection of the SQLite catalog under ``workdir``."""
    return json.dumps(
        {
            "conn_type": "iceberg_exec",
            "host": f"sqlite:///{workdir}/catalog.db",
            "schema": f"file://{workdir}/warehouse",
            "extra": {"catalog_type": "sql", "catalog_name": "demo"},
        }
    )


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """``airflow db migrate`` once per session into the session's Airflow home (SQLite)."""
    home = os.environ["AIRFLOW_HOME"]
    if not Path(home, "airflow.db").exists():
        done = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ},
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if not Path(home, MIGRATED_DB).exists():  # taken before the first test that uses the DB
        shutil.copy(Path(home, "airflow.db"), Path(home, MIGRATED_DB))
    from airflow import settings

    settings.configure_orm()
    return home


@pytest.fixture
def demo_table(tmp_path, monkeypatch):
    """A fragmented, region-partitioned ``demo.events`` (the demo's builder) and the connection to it."""
    from airflow_provider_iceberg_exec.demo import demo_catalog_properties, make_fragmented_table
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(str(tmp_path))))
    table = make_fragmented_table(catalog, TABLE, num_files=12, rows_per_file=300)
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT", connection_json(tmp_path))
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SPILL_DIR", str(tmp_path / "spill"))
    return table
