"""The PostgreSQL catalog fails between the metadata-file write and the catalog's pointer swap.

PyIceberg's SQL catalog commits in two steps (``SqlCatalog.commit_table``): it writes the new metadata
file, then swaps the table's pointer with ``UPDATE iceberg_tables SET metadata_location = new WHERE
metadata_location = old`` and ``COMMIT``. The faults hit the second step, at three points:

- ``restart-before-swap``: the server restarts (``pg_ctl restart``) as the UPDATE is about to be sent;
  the UPDATE meets a dead connection, nothing changes on the server;
- ``terminate-before-commit``: the UPDATE ran, then the backend is killed (``pg_terminate_backend``)
  before the COMMIT; the server rolls the transaction back;
- ``reply-lost-after-commit``: the COMMIT reaches the server and commits, and the connection dies before
  the client reads the reply (a TCP proxy, tests/faults/pgproxy.py, swallows it).

In every case the client cannot know whether the commit landed. The faults are injected with SQLAlchemy
event hooks on the catalog's own engine (or the proxy); the commit is the engine's ``commit_compaction``
(what the Airflow commit task runs) or the whole ``compact()``, everything else is real. Table state is
read by a fresh PyIceberg catalog.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from sqlalchemy import event

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.commit.snapshots import landed_snapshots
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    compact,
    execute_rewrite_task,
    plan_compaction,
)
from tests.faults.pgproxy import commit_reply_dropper
from tests.helpers import data_files, files_under, live_checksum, local_path, table_state
from tests.integration.services import PostgresServer, _as_postgres, _postgres_bindir

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FAULTS = ["restart-before-swap", "terminate-before-commit", "reply-lost-after-commit"]
_LANDS = {"reply-lost-after-commit"}
_OPTIONS = {"min-input-files": "2"}


def _is_pointer_swap(statement: str) -> bool:
    return statement.lstrip().upper().startswith("UPDATE ICEBERG_TABLES")


def _restart(server: PostgresServer) -> None:
    """``pg_ctl restart`` (fast): every open connection dies; same port, options and data."""
    command = [
        str(_postgres_bindir() / "pg_ctl"),
        f"--pgdata={server.data_dir}",
        f"--log={server.log_path}",
        "--mode=fast",
        "--wait",
        "--timeout=60",
        "restart",
    ]
    done = subprocess.run(_as_postgres(command), capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")


def _terminate(server: PostgresServer, pid: int) -> None:
    """Kill one backend and wait (bounded) until it is gone."""
    with (
        contextlib.closing(
            psycopg2.connect(host=server.host, port=server.port, user=server.user, dbname="postgres")
        ) as admin,
        admin.cursor() as cursor,
    ):
        admin.autocommit = True
        cursor.execute("select pg_terminate_backend(%s, 10000)", (pid,))
        assert cursor.fetchone() == (True,)


@dataclass
class Faulted:
    """A commit that ran into a catalog fault, and what the test needs to check it."""

    fault: str
    config: CatalogConfig  # a catalog reaching the server directly (not through the proxy)
    state: tuple[int | None, list[str]]
    checksum: tuple[int, int]
    results: list[dict[str, Any]]
    commit_id: str
    error: BaseException
    pointer_swaps: int  # UPDATE iceberg_tables statements the faulted commit sent

    def fresh_table(self) -> Any:
        """The table through a new catalog (a new engine, no hooks): what any other reader sees."""
        return load_table(load_catalog(self.config), "ns.events")


def _through_proxy(
    direct: CatalogConfig, postgres: PostgresServer, port: int, database: str
) -> CatalogConfig:
    """The catalog config whose database connection goes through the reply-dropping proxy."""
    uri = f"postgresql+psycopg2://{postgres.user}@127.0.0.1:{port}/{database}?sslmode=disable"
    return CatalogConfig("pg", {**direct.properties, "uri": uri})


def _rewrite_every_group(table: Any, limits: ResourceLimits) -> list[Any]:
    """What the Airflow rewrite tasks deliver: every planned group rewritten, nothing committed."""
    plan = plan_compaction(table, options=_OPTIONS)
    return [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]


@contextlib.contextmanager
def _faulted_commit(
    postgres: PostgresServer, tmp_path: Path, fault: str, *, through_compact: bool = False
) -> Iterator[Faulted]:
    """Build a table, then commit its compaction with ``fault`` injected at the pointer swap.

    The commit is ``commit_compaction`` of results rewritten beforehand (what the Airflow commit task
    runs), or with ``through_compact`` the whole ``compact()`` (plan, rewrite and commit in one call;
    ``results`` is then empty).
    """
    database = postgres.create_database("faults")
    direct = CatalogConfig(
        "pg",
        {"type": "sql", "uri": postgres.url(database), "warehouse": f"file://{tmp_path}/warehouse"},
    )
    try:
        with commit_reply_dropper(postgres.host, postgres.port) as proxy:
            proxied = _through_proxy(direct, postgres, proxy.port, database)
            catalog = load_catalog(proxied if fault == "reply-lost-after-commit" else direct)
            table = make_fragmented_table(catalog, "ns.events", num_files=4, rows_per_file=300)
            state, checksum = table_state(table), live_checksum(table)
            limits = ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path / "spill"))
            results = [] if through_compact else _rewrite_every_group(table, limits)
            commit_id = f"faults-{uuid.uuid4().hex}"

            swaps: list[str] = []
            engine = catalog.engine  # type: ignore[attr-defined]

            def before_cursor_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
                if not _is_pointer_swap(statement):
                    return
                swaps.append(statement)
                if fault == "restart-before-swap" and len(swaps) == 1:
                    _restart(postgres)
                if fault == "terminate-before-commit":
                    conn.info["swapped"] = True

            def commit(conn: Any) -> None:
                if fault == "terminate-before-commit" and conn.info.pop("swapped", False) and len(swaps) == 1:
                    _terminate(postgres, conn.connection.dbapi_connection.info.backend_pid)

            event.listen(engine, "before_cursor_execute", before_cursor_execute)
            event.listen(engine, "commit", commit)
            proxy.arm()  # only the proxied catalog goes through it
            error: BaseException | None = None
            try:
                if through_compact:
                    compact(table, options=_OPTIONS, limits=limits, commit_id=commit_id)
                else:
                    commit_compaction(table, results, commit_id=commit_id)
            except Exception as err:
                error = err
            finally:
                event.remove(engine, "before_cursor_execute", before_cursor_execute)
                event.remove(engine, "commit", commit)
            engine.dispose()
            assert error is not None, f"the commit succeeded despite {fault}"
            if fault == "reply-lost-after-commit":
                assert proxy.reply_swallowed.is_set(), "the proxy never swallowed a COMMIT reply"
            yield Faulted(fault, direct, state, checksum, results, commit_id, error, len(swaps))
    finally:
        postgres.drop_database(database)


@pytest.mark.parametrize("fault", FAULTS)
def test_catalog_fault_at_the_pointer_swap_is_not_retried_blindly_and_the_next_run_reconciles(
    postgres_server: PostgresServer, tmp_path: Path, fault: str
) -> None:
    """The faulted commit swaps the pointer once and stops; the rewrite outputs are kept; the table is
    either exactly as before or holds exactly the one snapshot; the next run with the same commit id
    commits once or reports the landed snapshot (``already_committed``).

    Why: after a lost connection the catalog may or may not hold the new pointer. Sending the swap
    again could not double-apply (it compares the old location), but deleting the outputs could corrupt
    a table whose commit did land, and a new commit id would commit the same rewrite twice. The commit
    id is the only way to reconcile.
    """
    with _faulted_commit(postgres_server, tmp_path, fault) as faulted:
        assert faulted.pointer_swaps == 1, "the commit sent the pointer swap again after the fault"
        added = [f["file-path"] for r in faulted.results for f in r["added_data_files"]]
        assert all(os.path.exists(local_path(p)) for p in added), "the rewrite's outputs were deleted"

        table = faulted.fresh_table()
        landed = landed_snapshots(table.metadata, faulted.commit_id)
        assert live_checksum(table) == faulted.checksum
        if fault in _LANDS:
            assert len(landed) == 1  # the server committed it; only the reply was lost
            assert {f.file_path for f in data_files(table)} == set(added)
        else:
            assert landed == []
            assert table_state(table) == faulted.state
        snapshots_before_retry = len(table.metadata.snapshots)

        outcome = commit_compaction(table, faulted.results, commit_id=faulted.commit_id)

        table = faulted.fresh_table()
        landed_after = landed_snapshots(table.metadata, faulted.commit_id)
        assert len(landed_after) == 1
        assert outcome["snapshot_ids"] == [landed_after[0].snapshot_id]
        assert outcome["already_committed"] is (fault in _LANDS)
        expected_snapshots = snapshots_before_retry + (0 if fault in _LANDS else 1)
        assert len(table.metadata.snapshots) == expected_snapshots
        assert {f.file_path for f in data_files(table)} == set(added)
        assert live_checksum(table) == faulted.checksum


@pytest.mark.parametrize("fault", FAULTS)
def test_compact_after_a_catalog_fault_keeps_a_landed_commit_readable_and_its_rerun_reconciles(
    postgres_server: PostgresServer, tmp_path: Path, fault: str
) -> None:
    """``compact()`` meets the fault: after it, every file the table references exists (it cleans up only
    what the catalog does not reference), what did not land is gone, and its rerun with the same
    commit id reports the landed snapshot or commits once.

    Why: ``compact()`` removes its outputs when the commit fails with anything but
    CommitStateUnknownError; whatever the error, only the
    reference check right before the deletion stands between a landed commit and deleted live files.
    """
    with _faulted_commit(postgres_server, tmp_path, fault, through_compact=True) as faulted:
        assert faulted.pointer_swaps == 1
        table = faulted.fresh_table()
        live = {f.file_path for f in data_files(table)}
        assert all(os.path.exists(local_path(p)) for p in live), "a file the table references is gone"
        assert live_checksum(table) == faulted.checksum  # PyIceberg reads every live file
        on_disk = {f"file://{p}" for p in files_under(table)}
        landed = landed_snapshots(table.metadata, faulted.commit_id)
        if fault in _LANDS:
            assert len(landed) == 1
            assert len(live) == 3 < len(faulted.state[1])
        else:
            assert landed == []
            assert table_state(table) == faulted.state
        # The inputs stay until snapshot expiry. After an unknown commit state nothing is deleted (the
        # files may be live, as Java's producers assume): the outputs that did not land are left to the
        # orphan scan. After any other failure exactly the live outputs are left.
        assert set(faulted.state[1]) | live <= on_disk
        if not isinstance(faulted.error, errors.CommitStateUnknownError):
            assert on_disk == set(faulted.state[1]) | live, "compact() left unreferenced outputs behind"

        outcome = compact(
            table,
            options=_OPTIONS,
            limits=ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(tmp_path / "spill")),
            commit_id=faulted.commit_id,
        )

        table = faulted.fresh_table()
        landed_after = landed_snapshots(table.metadata, faulted.commit_id)
        assert len(landed_after) == 1
        assert outcome["already_committed"] is (fault in _LANDS)
        assert outcome["snapshot_ids"] == [landed_after[0].snapshot_id]
        assert len(data_files(table)) == 3
        assert live_checksum(table) == faulted.checksum


@pytest.mark.parametrize("fault", FAULTS)
def test_catalog_fault_at_the_pointer_swap_is_reported_as_commit_state_unknown(
    postgres_server: PostgresServer, tmp_path: Path, fault: str
) -> None:
    """A lost catalog connection during the swap is CommitStateUnknownError (or a clean conflict), in one
    line: the Airflow layer then fails the commit task without a blind retry and says to check the
    table for the commit id.

    Why: Java's JdbcTableOperations turns connection errors at this point into
    CommitStateUnknownException; an unmapped driver error is retried by Airflow like any error and its
    message carries the SQL statement and parameters.
    """
    with _faulted_commit(postgres_server, tmp_path, fault) as faulted:
        error = faulted.error
        assert isinstance(error, (errors.CommitStateUnknownError, errors.CommitConflictError)), repr(error)
        assert "\n" not in str(error).strip()
        if fault in _LANDS:
            assert isinstance(error, errors.CommitStateUnknownError)
