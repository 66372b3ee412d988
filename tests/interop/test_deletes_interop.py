"""Deletes written by Java Iceberg 1.10 (Spark merge-on-read, Java API equality deletes), applied by our
engine: our reader sees exactly the rows Spark sees, and after our compaction Spark still sees them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries
from airflow_provider_iceberg_exec.engine.meta.scan import scan_data_files
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from tests.interop.fixtures import JavaTables
from tests.interop.tables import (
    V2_EQUALITY_DELETES,
    V2_POSITION_DELETES,
    V2_SPEC_EVOLVED_DELETES,
    V3_DELETION_VECTORS,
    V3_UPGRADED_MIXED_DELETES,
)

pytestmark = pytest.mark.spark

WITH_DELETES = [
    V2_POSITION_DELETES,
    V3_DELETION_VECTORS,
    V2_EQUALITY_DELETES,
    V2_SPEC_EVOLVED_DELETES,
    V3_UPGRADED_MIXED_DELETES,
]
V2_KINDS = [V2_POSITION_DELETES, V2_EQUALITY_DELETES, V2_SPEC_EVOLVED_DELETES]


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _our_ids(table: Table, tmp_path: Path) -> tuple[int, ...]:
    """The ``id`` of every live row, read by the engine with every delete file applied."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    scanned = scan_data_files(table, snapshot, AlwaysTrue())
    spill = tmp_path / "read-spill"
    spill.mkdir(exist_ok=True)
    ids: list[int] = []
    batches = iter_live_group_batches(
        table.io, table.metadata, scanned, limits=_limits(tmp_path), spill_dir=str(spill), stats=DeleteStats()
    )
    for batch in batches:
        ids.extend(batch.column("id").to_pylist())
    return tuple(sorted(ids))


def _live_delete_count(table: Table) -> int:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return sum(
        len(read_manifest_entries(table.io, m)) for m in snapshot.manifests(table.io) if m.content == 1
    )


@pytest.mark.parametrize("kind", WITH_DELETES)
def test_engine_reads_the_rows_spark_reads(
    kind: str, java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Position deletes, DVs (superseding partition-scoped position deletes), equality deletes."""
    table = catalog.register_table(f"ns.{kind}", java_table(kind))

    assert _our_ids(table, tmp_path) == java_table.info(kind).expected_ids


@pytest.mark.parametrize("kind", V2_KINDS)
def test_compaction_keeps_what_spark_sees_and_drops_the_deletes(
    kind: str,
    java_table: JavaTables,
    spark_rows_checksum: Callable[[str], tuple[int, int]],
    catalog: SqlCatalog,
    tmp_path: Path,
) -> None:
    built = java_table.fresh(kind)
    before = spark_rows_checksum(built.metadata_location)
    table = catalog.register_table("ns.t", built.metadata_location)

    result = compact(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    table.refresh()
    assert spark_rows_checksum(table.metadata_location) == before
    assert result["removed_delete_files_count"] > 0
    assert _live_delete_count(table) == 0


def test_pyiceberg_reads_the_table_once_equality_deletes_are_resolved(
    java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path
) -> None:
    built = java_table.fresh(V2_EQUALITY_DELETES)
    table = catalog.register_table("ns.t", built.metadata_location)
    with pytest.raises(ValueError, match="equality deletes"):
        table.scan().to_arrow()

    compact(table, options={"rewrite-all": "true"}, limits=_limits(tmp_path))

    table.refresh()
    assert tuple(sorted(table.scan().to_arrow().column("id").to_pylist())) == built.expected_ids
