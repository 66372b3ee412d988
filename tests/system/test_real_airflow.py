"""A real Airflow on loopback: scheduler, DAG processor and API server with the LocalExecutor.

The metadata DB is SQLite (Airflow 3 runs the LocalExecutor on SQLite, as ``airflow standalone`` does;
SQLite serialises writers, so parallelism stays small). The tests trigger the on-demand DAG with
``airflow dags trigger --conf`` and backfill the backfill DAG with ``airflow backfill create``, wait for
the runs, check the table and the pool, and stop every process they started (each in its own process
group).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import live_checksum
from tests.system.conftest import DAGS_FOLDER, MIGRATED_DB, TABLE, connection_json

pytestmark = pytest.mark.system

AIRFLOW = str(Path(sys.executable).parent / "airflow")
ON_DEMAND = "iceberg_exec_on_demand"
BACKFILL = "iceberg_exec_backfill"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _query(db: Path, sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


class Stack:
    """The running Airflow: its environment, DB, logs, and a CLI runner."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.db = Path(env["AIRFLOW_HOME"]) / "airflow.db"

    def cli(self, *args: str) -> str:
        for attempt in range(4):
            done = subprocess.run(
                [AIRFLOW, *args], env=self.env, capture_output=True, text=True, check=False, timeout=180
            )
            # Airflow's own SQLite metadata database, written by the running scheduler too, can be
            # locked for a moment: the CLI's transaction rolled back, so running it again is safe.
            if done.returncode == 0 or "database is locked" not in done.stderr or attempt == 3:
                break
            time.sleep(2)
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = probe()
            except sqlite3.OperationalError:  # the DB is busy
                value = None
            if value:
                return value
            time.sleep(1)
        tails = {p.name: p.read_text()[-3000:] for p in sorted(self.logs.glob("*.log"))}
        raise AssertionError(f"timed out waiting for {what}; logs:\n" + json.dumps(tails, indent=1))

    def runs(self, dag_id: str) -> list[tuple[str, str, str]]:
        return _query(self.db, "select run_id, run_type, state from dag_run where dag_id = ?", dag_id)

    def task_instances(self, dag_id: str, run_id: str) -> list[tuple[str, int, str, str]]:
        return _query(
            self.db,
            "select task_id, map_index, state, pool from task_instance where dag_id = ? and run_id = ?",
            dag_id,
            run_id,
        )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("real-airflow")


@pytest.fixture(scope="module")
def table(workdir):
    from airflow_provider_iceberg_exec.demo import demo_catalog_properties, make_fragmented_table
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(str(workdir))))
    # unpartitioned: one file group, so each run is three tasks (plan, one rewrite, commit)
    return make_fragmented_table(catalog, TABLE, num_files=8, rows_per_file=300, partitioned=False)


@pytest.fixture(scope="module")
def stack(airflow_db, table, workdir) -> Iterator[Stack]:
    """Scheduler, DAG processor and API server, each in its own process group; all stopped afterwards."""
    home = workdir / "airflow-home"
    home.mkdir()
    logs = workdir / "logs"
    logs.mkdir()
    shutil.copy(Path(airflow_db) / MIGRATED_DB, home / "airflow.db")  # migrated once per session
    port = str(_free_port())
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": port,
        "AIRFLOW__API_AUTH__JWT_SECRET": "iceberg-exec-system-test-secret-0123456789",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        # no scheduled runs: only the runs the tests trigger or backfill (they would race for the table)
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__ICEBERG_EXEC__POOL": "iceberg_exec",
        "AIRFLOW__ICEBERG_EXEC__SPILL_DIR": str(workdir / "spill"),
        "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT": connection_json(workdir),
    }
    env.pop("_ICEBERG_EXEC_TEST_AIRFLOW_HOME", None)
    running = Stack(env, logs)
    running.cli("pools", "set", "iceberg_exec", "4", "bounds the memory of iceberg-exec rewrites")
    commands = {
        "api-server": [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", port, "--workers", "1"],
        "scheduler": [AIRFLOW, "scheduler"],
        "dag-processor": [AIRFLOW, "dag-processor"],
    }
    processes: list[subprocess.Popen] = []
    try:
        for name, command in commands.items():
            with open(logs / f"{name}.log", "wb") as out:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        # The DB is the session's as migrated (no DAG in it): what is serialized, its DAG processor wrote.
        running.wait_for(
            "the DAG processor to serialize the example DAGs the tests run",
            lambda: (
                {ON_DEMAND, BACKFILL}
                <= {dag_id for (dag_id,) in _query(running.db, "select dag_id from serialized_dag")}
            ),
            timeout=180,
        )
        yield running
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def _finished(
    stack: Stack, dag_id: str, run_ids: set[str] | None = None, run_type: str | None = None
) -> list[tuple[str, str, str]] | None:
    runs = [
        r
        for r in stack.runs(dag_id)
        if (run_ids is None or r[0] in run_ids) and (run_type is None or r[1] == run_type)
    ]
    if runs and all(state in ("success", "failed") for _, _, state in runs):
        return runs
    return None


def test_on_demand_dag_triggered_with_conf_compacts_the_table(stack, table):
    before_files = len(list(table.scan().plan_files()))
    before_rows = live_checksum(table)
    stack.cli("dags", "unpause", ON_DEMAND)  # the scheduled examples stay paused, as DAGs are at creation
    conf = {"table": TABLE, "target_file_size_bytes": 1 << 20, "min_input_files": 2}
    stack.cli("dags", "trigger", ON_DEMAND, "--conf", json.dumps(conf), "--run-id", "system_test")
    ((_, _, state),) = stack.wait_for(
        "the on-demand run", lambda: _finished(stack, ON_DEMAND, {"system_test"}), timeout=300
    )
    tasks = stack.task_instances(ON_DEMAND, "system_test")
    assert state == "success", tasks
    assert {(t, s) for t, _, s, _ in tasks} >= {
        ("compaction.plan", "success"),
        ("compaction.commit", "success"),
    }
    assert {p for t, _, _, p in tasks if t == "compaction.rewrite"} == {"iceberg_exec"}
    assert len(list(table.refresh().scan().plan_files())) < before_files
    assert live_checksum(table) == before_rows
    # The rewrite's own task log (what the UI shows) carries the engine's progress, start to done.
    task_logs = Path(stack.env["AIRFLOW_HOME"], "logs").glob(
        f"dag_id={ON_DEMAND}/run_id=system_test/task_id=compaction.rewrite/**/*.log"
    )
    text = "".join(p.read_text() for p in task_logs)
    assert "progress: compaction " in text
    assert f"{before_files}/{before_files} files" in text
    assert "(100%)" in text


def test_backfill_over_a_date_range_runs_every_interval_in_the_pool(stack, table):
    import pyarrow as pa

    schema = table.schema().as_arrow()
    rows = table.scan(limit=50).to_arrow().cast(schema)
    for _ in range(6):  # fragment the table again
        table.append(pa.Table.from_batches(rows.to_batches(), schema=schema))
    before_rows = live_checksum(table)
    stack.cli("dags", "unpause", BACKFILL)
    stack.cli(
        "backfill",
        "create",
        "--dag-id",
        BACKFILL,
        "--from-date",
        "2026-01-05",
        "--to-date",
        "2026-01-06",
        "--max-active-runs",
        "1",
    )
    runs = stack.wait_for(
        "the backfill runs",
        lambda: (found := _finished(stack, BACKFILL, run_type="backfill")) and len(found) >= 2 and found,
        timeout=300,
    )
    assert len(runs) == 2  # logical dates 2026-01-05 and 2026-01-06 (the session DB may hold others)
    assert {state for _, _, state in runs} == {"success"}, [
        stack.task_instances(BACKFILL, r) for r, _, _ in runs
    ]
    pools = {
        p for r, _, _ in runs for t, _, s, p in stack.task_instances(BACKFILL, r) if t == "compaction.rewrite"
    }
    assert pools <= {"iceberg_exec"}
    assert table.refresh().current_snapshot().summary.operation.value == "replace"
    assert live_checksum(table) == before_rows
