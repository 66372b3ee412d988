"""commit/pyiceberg_producer.py's v3_metadata_writer: only the one catalog object, only while our commits
run (nested or on several threads), writes v3 metadata; afterwards the catalog is as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.commit.pyiceberg_producer import v3_metadata_writer


@pytest.fixture
def catalog(tmp_path: Path):  # type: ignore[no-untyped-def]
    catalog = SqlCatalog("w", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    yield catalog
    catalog.engine.dispose()


def _v3(table: Table) -> Table:
    from pyiceberg.table.metadata import TableMetadataUtil

    raw = json.loads(table.metadata.model_dump_json())
    raw.update({"format-version": 3, "next-row-id": 0})
    return Table(
        table.name(), TableMetadataUtil.parse_obj(raw), table.metadata_location, table.io, table.catalog
    )


def test_the_catalog_writes_v3_only_inside_and_is_restored(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _v3(catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False))))
    path = str(tmp_path / "out.metadata.json")
    with pytest.raises(NotImplementedError):
        catalog._write_metadata(table.metadata, table.io, str(tmp_path / "before.metadata.json"))

    with v3_metadata_writer(table.transaction()):
        with v3_metadata_writer(table.transaction()):
            pass
        catalog._write_metadata(table.metadata, table.io, path)  # still ours after the inner one ended
        other = SqlCatalog("x", uri=f"sqlite:///{tmp_path}/d.db", warehouse=f"file://{tmp_path}/wh2")
        with pytest.raises(NotImplementedError):  # another catalog object is untouched
            other._write_metadata(table.metadata, table.io, str(tmp_path / "other.metadata.json"))
        other.engine.dispose()

    assert json.loads(Path(path).read_text())["format-version"] == 3
    assert "_write_metadata" not in vars(catalog)
    with pytest.raises(NotImplementedError):
        catalog._write_metadata(table.metadata, table.io, str(tmp_path / "again.metadata.json"))


def test_v2_commits_leave_the_catalog_alone(catalog: SqlCatalog) -> None:
    table = catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False)))

    with v3_metadata_writer(table.transaction()):
        assert "_write_metadata" not in vars(catalog)
