"""engine/io/catalog.py: the table's dotted name, as documents, logs and errors carry it."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.io.catalog import table_name

SCHEMA = pa.schema([("id", pa.int64())])


def test_table_name_is_namespace_dot_table(catalog: SqlCatalog) -> None:
    catalog.create_namespace("outer.inner")
    flat = catalog.create_table("ns.events", schema=SCHEMA)
    nested = catalog.create_table("outer.inner.events", schema=SCHEMA)

    assert table_name(flat) == "ns.events"
    assert table_name(nested) == "outer.inner.events"
