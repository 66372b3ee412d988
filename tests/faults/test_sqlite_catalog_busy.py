"""The SQLite catalog is busy: another connection holds ``BEGIN EXCLUSIVE`` on it during a commit.

SQLite serialises writers with file locks; PyIceberg's SQL catalog opens it with the driver's default
busy timeout (5 s), so a writer waits that long for a lock and then fails with "database is locked".
The lock is taken by a second, real sqlite3 connection on the catalog file:

- ``released-in-time``: taken as the catalog's pointer swap (``UPDATE iceberg_tables``) is about to run
  and released 1 s later, well within the busy timeout: the commit waits and lands;
- ``held-at-pointer-swap``: taken at the same point and held until the commit gave up;
- ``held-for-whole-commit``: taken before the commit starts and held until it gave up.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.commit.snapshots import landed_snapshots
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    execute_rewrite_task,
    plan_compaction,
)
from tests.helpers import data_files, live_checksum, table_state

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
_RELEASE_AFTER_SECONDS = 1.0


class ExclusiveLock:
    """``BEGIN EXCLUSIVE`` on the catalog file from a connection of its own (any thread may release)."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.held = False

    def take(self) -> None:
        self._connection.execute("BEGIN EXCLUSIVE")
        self.held = True

    def release(self) -> None:
        if self.held:
            self._connection.execute("ROLLBACK")
            self.held = False

    def close(self) -> None:
        self.release()
        self._connection.close()


@dataclass
class Prepared:
    config: CatalogConfig
    db_path: Path
    table: Any
    state: tuple[int | None, list[str]]
    checksum: tuple[int, int]
    results: list[dict[str, Any]]
    commit_id: str

    def fresh_table(self) -> Any:
        return load_table(load_catalog(self.config), "ns.events")


def _prepare(workdir: Path) -> Prepared:
    """A fragmented table in a SQLite catalog, planned and rewritten: only the commit is left."""
    db_path = workdir / "catalog.db"
    config = CatalogConfig(
        "busy", {"type": "sql", "uri": f"sqlite:///{db_path}", "warehouse": f"file://{workdir}/warehouse"}
    )
    table = make_fragmented_table(load_catalog(config), "ns.events", num_files=4, rows_per_file=300)
    state, checksum = table_state(table), live_checksum(table)
    plan = plan_compaction(table, options={"min-input-files": "2"})
    limits = ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(workdir / "spill"))
    results = [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]
    return Prepared(config, db_path, table, state, checksum, results, f"busy-{uuid.uuid4().hex}")


def _commit_while_locked(prepared: Prepared, mode: str) -> tuple[dict[str, Any] | None, BaseException | None]:
    """Commit with the catalog locked as ``mode`` says; the lock is always released afterwards."""
    lock = ExclusiveLock(prepared.db_path)
    engine = prepared.table.catalog.engine
    timers: list[threading.Timer] = []
    taken: list[bool] = []  # the lock is taken once

    def before_cursor_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE ICEBERG_TABLES") and not taken:
            taken.append(True)
            lock.take()
            if mode == "released-in-time":
                timers.append(threading.Timer(_RELEASE_AFTER_SECONDS, lock.release))
                timers[0].start()

    hook: Callable[..., None] = before_cursor_execute
    event.listen(engine, "before_cursor_execute", hook)
    try:
        if mode == "held-for-whole-commit":
            taken.append(True)
            lock.take()
        try:
            return commit_compaction(prepared.table, prepared.results, commit_id=prepared.commit_id), None
        except Exception as err:
            return None, err
    finally:
        event.remove(engine, "before_cursor_execute", hook)
        for timer in timers:
            timer.join()
        lock.close()


def _integrity(db_path: Path) -> str:
    with sqlite3.connect(db_path) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


def test_lock_released_within_the_busy_timeout_the_commit_waits_and_lands(tmp_path: Path) -> None:
    """Another writer holds the catalog for 1 s at the pointer swap: the commit waits and lands once.

    Why: a short lock (another process committing, a backup) is normal on a shared SQLite catalog; it
    must cost a wait, not a failed run, and must not produce a second snapshot or lose rows.
    """
    prepared = _prepare(tmp_path)
    outcome, error = _commit_while_locked(prepared, "released-in-time")
    assert error is None, repr(error)
    assert outcome is not None
    assert outcome["already_committed"] is False
    table = prepared.fresh_table()
    landed = landed_snapshots(table.metadata, prepared.commit_id)
    assert [s.snapshot_id for s in landed] == outcome["snapshot_ids"]
    assert len(data_files(table)) == 3
    assert live_checksum(table) == prepared.checksum
    assert _integrity(prepared.db_path) == "ok"


@dataclass
class Busy:
    mode: str
    prepared: Prepared
    error: BaseException


@pytest.fixture(scope="module", params=["held-at-pointer-swap", "held-for-whole-commit"])
def busy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Busy:
    """A commit that gave up on a catalog locked longer than the busy timeout (run once per mode)."""
    mode = str(request.param)
    prepared = _prepare(tmp_path_factory.mktemp(f"sqlite-{mode}"))
    outcome, error = _commit_while_locked(prepared, mode)
    assert error is not None, f"the commit landed although the catalog was locked: {outcome}"
    return Busy(mode, prepared, error)


def test_lock_held_past_the_busy_timeout_leaves_the_table_unchanged_and_a_retry_lands(busy: Busy) -> None:
    """The commit gives up; the catalog file is intact, the table as before; the retry commits once.

    Why: "database is locked" means the catalog statement did not run, so nothing may have changed and
    nothing the rewrite wrote may be gone; the commit task's retry (same results, same commit id) must
    then land exactly one ``replace`` snapshot with every row.
    """
    prepared = busy.prepared
    assert "database is locked" in str(busy.error)
    assert _integrity(prepared.db_path) == "ok"
    table = prepared.fresh_table()
    assert table_state(table) == prepared.state
    assert live_checksum(table) == prepared.checksum
    assert landed_snapshots(table.metadata, prepared.commit_id) == []

    outcome = commit_compaction(table, prepared.results, commit_id=prepared.commit_id)

    assert outcome["already_committed"] is False
    table = prepared.fresh_table()
    assert [s.snapshot_id for s in landed_snapshots(table.metadata, prepared.commit_id)] == outcome[
        "snapshot_ids"
    ]
    assert len(data_files(table)) == 3
    assert live_checksum(table) == prepared.checksum


def test_lock_held_past_the_busy_timeout_is_a_clean_commit_conflict(busy: Busy) -> None:
    """The error is the engine's CommitConflictError ("retry later"), in one line.

    Why: a locked catalog is a transient conflict with another writer, known not to have committed; the
    Airflow layer retries CommitConflictError with backoff and shows its one line, while a raw driver
    error carries the SQL statement, its parameters and a link across several lines.
    """
    assert isinstance(busy.error, errors.CommitConflictError), repr(busy.error)
    assert "\n" not in str(busy.error).strip()
