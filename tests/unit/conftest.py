"""Fixtures of the unit tests: a real SQLite Iceberg table `ns.events` and the default connection to it."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from tests.unit.support import TABLE, connection_json


@pytest.fixture
def sqlite_table(tmp_path, monkeypatch):
    """A real SQLite-catalog table ``ns.events`` with 12 small files, and the default connection to it."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "demo", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("event_date", pa.date32()), ("payload", pa.string())])
    table = catalog.create_table(TABLE, schema=schema)
    for i in range(12):
        table.append(
            pa.table(
                {
                    "id": [i * 10 + j for j in range(10)],
                    "event_date": [date(2024, 1, 1) + timedelta(days=i % 3)] * 10,
                    "payload": [f"row-{i}-{j}" for j in range(10)],
                },
                schema=schema,
            )
        )
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT", connection_json(tmp_path))
    return catalog.load_table(TABLE)
