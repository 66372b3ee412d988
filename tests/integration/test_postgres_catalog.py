"""PostgreSQL as the SQL catalog's database, with two real processes committing to one table at once.

PyIceberg's SQL catalog commits by compare-and-swap of the metadata location in ``iceberg_tables``; on a
lost swap PyIceberg retries, and the engine re-validates from the planning snapshot on every attempt.
The processes are spawned (not forked) and meet at events, so their commits really overlap.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from airflow_provider_iceberg_exec.demo import _demo_batch, make_fragmented_table
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog
from tests.helpers import data_files, live_checksum, row_digest
from tests.integration.services import PostgresServer
from tests.integration.workers import append_batches, child_outcome, compact_at_barrier, start_child

pytestmark = pytest.mark.integration

_MASK = (1 << 64) - 1
_WAIT_SECONDS = 90.0


@pytest.fixture
def pg_config(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[CatalogConfig]:
    """A SQL catalog in a fresh PostgreSQL database, with a local warehouse."""
    database = postgres_server.create_database()
    try:
        yield CatalogConfig(
            "pg",
            {
                "type": "sql",
                "uri": postgres_server.url(database),
                "warehouse": f"file://{tmp_path}/warehouse",
            },
        )
    finally:
        postgres_server.drop_database(database)


@pytest.fixture
def pg_table(pg_config: CatalogConfig) -> Iterator[Any]:
    catalog = load_catalog(pg_config)
    table = make_fragmented_table(catalog, "ns.events", num_files=4, rows_per_file=300)
    with table.transaction() as transaction:
        # Enough retries that a compaction outlasts a stream of appends on the 2-core CI machine.
        transaction.set_properties({"commit.retry.num-retries": "20", "commit.retry.min-wait-ms": "20"})
    yield table
    catalog.engine.dispose()  # type: ignore[attr-defined]


def _wait(event: Any, what: str) -> None:
    if not event.wait(_WAIT_SECONDS):
        raise AssertionError(f"{what} did not happen within {_WAIT_SECONDS:.0f} s")


def test_catalog_rows_live_in_postgres(pg_config: CatalogConfig, pg_table: Any) -> None:
    """The table's current metadata location is the row PostgreSQL holds, not a local file's."""
    dsn = pg_config.properties["uri"].replace("postgresql+psycopg2://", "postgresql://")
    with contextlib.closing(psycopg2.connect(dsn)) as connection, connection.cursor() as cursor:
        cursor.execute(
            "select metadata_location from iceberg_tables where catalog_name = %s and table_name = %s",
            ("pg", "events"),
        )
        assert cursor.fetchall() == [(pg_table.metadata_location,)]


def test_two_processes_rewriting_the_same_files_one_lands_one_fails_cleanly(
    pg_config: CatalogConfig, pg_table: Any, tmp_path: Path
) -> None:
    """Both plan on the same snapshot and commit together: one replace lands, the other is refused with
    CommitValidationError (its files are gone from the table), its output removed, every row kept."""
    before = live_checksum(pg_table)
    base_files = {f.file_path for f in data_files(pg_table)}
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    workers = []
    for number in range(2):
        planned = context.Event()
        child = start_child(
            compact_at_barrier,
            "pg",
            dict(pg_config.properties),
            "ns.events",
            str(tmp_path / f"spill-{number}"),
            planned,
            go,
        )
        workers.append((child, planned))
    for _child, planned in workers:
        _wait(planned, "a rewrite")
    go.set()
    outcomes = [child_outcome(*child) for child, _planned in workers]

    landed = [value for status, value in outcomes if status == "ok"]
    failed = [value for status, value in outcomes if status == "error"]
    assert len(landed) == 1, outcomes
    assert len(failed) == 1, outcomes
    name, message, _trace = failed[0]
    assert name == "CommitValidationError", message
    assert "Missing required files to delete" in message

    winner = landed[0]
    live = {f.file_path for f in data_files(pg_table)}
    assert live == set(winner["added_paths"])
    assert not live & base_files
    replaces = [s for s in pg_table.snapshots() if s.summary and s.summary.operation.value == "replace"]
    assert [s.snapshot_id for s in replaces] == winner["snapshot_ids"]
    # The loser removed what it wrote: only the winner's outputs exist besides the original files.
    on_disk = {
        f"file://{os.path.join(root, name)}"
        for root, _dirs, names in os.walk(tmp_path / "warehouse")
        for name in names
        if name.endswith(".parquet")
    }
    assert on_disk == base_files | set(winner["added_paths"])
    assert live_checksum(pg_table) == before


def test_appends_and_a_compaction_in_two_processes_keep_every_row(
    pg_config: CatalogConfig, pg_table: Any, tmp_path: Path
) -> None:
    """A compaction commits while another process keeps appending: the retries re-validate, both land."""
    count, total = live_checksum(pg_table)
    batches, rows_per_batch, first_id = 6, 100, 1_000_000
    for number in range(batches):
        for row in _demo_batch(first_id + number * rows_per_batch, rows_per_batch, seed=0).to_pylist():
            count, total = count + 1, (total + row_digest(row)) & _MASK

    context = multiprocessing.get_context("spawn")
    planned, appended_once = context.Event(), context.Event()
    compactor = start_child(
        compact_at_barrier,
        "pg",
        dict(pg_config.properties),
        "ns.events",
        str(tmp_path / "spill"),
        planned,
        appended_once,
    )
    appender = start_child(
        append_batches,
        "pg",
        dict(pg_config.properties),
        "ns.events",
        batches,
        rows_per_batch,
        first_id,
        planned,
        appended_once,
    )
    compacted, appended = child_outcome(*compactor), child_outcome(*appender)

    assert compacted[0] == "ok", compacted
    assert appended[0] == "ok", appended
    summary, append_snapshots = compacted[1], appended[1]
    assert live_checksum(pg_table) == (count, total)
    (replace_id,) = summary["snapshot_ids"]
    replace = pg_table.snapshot_by_id(replace_id)
    assert replace.parent_snapshot_id != summary["base_snapshot_id"]  # appends landed in between
    ancestors = set()
    snapshot = pg_table.current_snapshot()
    while snapshot is not None:
        ancestors.add(snapshot.snapshot_id)
        snapshot = (
            pg_table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        )
    assert set(append_snapshots) | {replace_id} <= ancestors
