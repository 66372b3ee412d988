"""kill -9 of a rewrite task and of the commit task in a real Airflow run, and the retries.

A real Airflow (scheduler, DAG processor, API server, LocalExecutor, SQLite metadata DB; the setup of
tests/system/test_real_airflow.py) runs the DAG of tests/faults/airflow_dag.py once. Its tasks are held
at known points by seams installed in their own processes, and the test kills them there with SIGKILL:

1. the rewrite, try 1, after it wrote its first output file and opens the second;
2. the commit, try 1, after the new metadata file was written, right before the catalog's pointer swap;
3. the commit, try 2, right after the catalog committed the swap, before the task could report it.

Airflow retries each killed try (the supervisor reports a killed process as up for retry). After kills 1
and 2 the table must be exactly as before; after kill 3 it holds the compaction once; the run ends in
success with the table compacted by one ``replace`` snapshot and every row kept: the third commit try
must find its landed commit by commit id instead of committing again.
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

from tests.faults.airflow_dag import DAG_FILE_SOURCE, DAG_ID, MARKERS_ENV, TABLE, marker_path
from tests.helpers import data_files, files_under, live_checksum, table_state
from tests.system.conftest import MIGRATED_DB, connection_json

pytestmark = pytest.mark.system

AIRFLOW = str(Path(sys.executable).parent / "airflow")
REPO = Path(__file__).resolve().parents[2]
RUN_ID = "faults_kill"
_WAIT_SECONDS = 150.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Airflow:
    """The running Airflow of this test: environment, metadata DB, logs."""

    def __init__(self, env: dict[str, str], logs: Path, markers: Path) -> None:
        self.env = env
        self.logs = logs
        self.markers = markers
        self.db = Path(env["AIRFLOW_HOME"]) / "airflow.db"

    def query(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db, timeout=30) as connection:
            return connection.execute(sql, args).fetchall()

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, check=False, timeout=180
        )
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float = _WAIT_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = probe()
            except sqlite3.OperationalError:  # the metadata DB is busy
                value = None
            if value:
                return value
            time.sleep(0.25)
        tails = {p.name: p.read_text(errors="replace")[-3000:] for p in sorted(self.logs.glob("*.log"))}
        states = self.task_instances()
        raise AssertionError(
            f"timed out waiting for {what}; tasks {states}; logs:\n{json.dumps(tails, indent=1)}"
        )

    def task_instances(self) -> list[tuple[Any, ...]]:
        return self.query(
            "select task_id, map_index, state, try_number from task_instance where dag_id = ? and run_id = ?",
            DAG_ID,
            RUN_ID,
        )

    def run_state(self) -> str | None:
        rows = self.query("select state from dag_run where dag_id = ? and run_id = ?", DAG_ID, RUN_ID)
        return str(rows[0][0]) if rows else None

    def dag_serialized(self) -> bool:
        errors = self.query("select filename, stacktrace from import_error")
        assert not errors, f"the faults DAG does not import: {errors}"
        return bool(self.query("select dag_id from serialized_dag where dag_id = ?", DAG_ID))

    def held(self, task_id: str, try_number: int) -> int | None:
        """The pid of the task try held at its seam, once it is there."""
        path = marker_path(str(self.markers), task_id, try_number)
        return int(Path(path).read_text()) if os.path.exists(path) else None


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def table(workdir: Path) -> Any:
    from airflow_provider_iceberg_exec.demo import demo_catalog_properties, make_fragmented_table
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(str(workdir))))
    # unpartitioned: one file group, rewritten into two output files
    return make_fragmented_table(catalog, TABLE, num_files=8, rows_per_file=300, partitioned=False)


@pytest.fixture
def airflow(airflow_db: str, table: Any, workdir: Path) -> Iterator[Airflow]:
    """Scheduler, DAG processor and API server on this test's DAG folder, each in its own process group."""
    home, logs, dags, markers = (workdir / name for name in ("airflow-home", "logs", "dags", "markers"))
    for directory in (home, logs, dags, markers):
        directory.mkdir()
    (dags / "faults_kill_dag.py").write_text(DAG_FILE_SOURCE)
    shutil.copy(Path(airflow_db) / MIGRATED_DB, home / "airflow.db")  # migrated once per session
    port = str(_free_port())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": port,
        "AIRFLOW__API_AUTH__JWT_SECRET": "iceberg-exec-faults-test-secret-0123456789",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__ICEBERG_EXEC__SPILL_DIR": str(workdir / "spill"),
        "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT": connection_json(workdir),
        MARKERS_ENV: str(markers),
    }
    env.pop("_ICEBERG_EXEC_TEST_AIRFLOW_HOME", None)
    running = Airflow(env, logs, markers)
    commands = {
        "api-server": [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", port, "--workers", "1"],
        "scheduler": [AIRFLOW, "scheduler"],
        "dag-processor": [AIRFLOW, "dag-processor"],
    }
    processes: list[subprocess.Popen[bytes]] = []
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
        running.wait_for("the DAG processor to serialize the faults DAG", running.dag_serialized, timeout=180)
        yield running
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 8  # one grace period for all three, then SIGKILL
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def _kill(pid: int) -> None:
    """SIGKILL the held task process and wait (bounded) until it is gone."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # a zombie until its parent (the task supervisor) reaps it
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return
        except (OSError, IndexError):
            return
        time.sleep(0.05)
    raise AssertionError(f"task process {pid} survived SIGKILL")


def test_kill_9_of_the_rewrite_and_the_commit_then_the_retries_compact_once(
    airflow: Airflow, table: Any
) -> None:
    """Every kill leaves the table intact (unchanged, or compacted once); the retried run ends compacted.

    Why: workers die (OOM killer, node loss, a deploy) at any point, and SIGKILL gives the task no chance
    to clean up. A killed rewrite leaves at most unreferenced files; a commit killed before its pointer
    swap changes nothing; a commit killed after the swap has committed, and its retry must find that
    commit by its commit id (stable across tries) instead of committing the rewrite a second time.
    """
    from airflow_provider_iceberg_exec.engine.commit.snapshots import landed_snapshots

    before_state, before_rows = table_state(table), live_checksum(table)
    before_snapshots = len(table.metadata.snapshots)
    before_files = files_under(table)
    before_metadata = files_under(table, "metadata")
    commit_id = f"airflow:{DAG_ID}:{RUN_ID}:commit"
    airflow.cli("dags", "trigger", DAG_ID, "--run-id", RUN_ID)

    # 1. The rewrite, holding its first output file, opening the second.
    pid = airflow.wait_for("the rewrite held at its second output", lambda: airflow.held("rewrite", 1))
    written = files_under(table) - before_files
    assert len(written) == 1, written  # its first output is on disk, unreferenced
    _kill(pid)
    assert table_state(table) == before_state
    assert live_checksum(table) == before_rows

    # 2. The commit, its metadata file written, before the pointer swap.
    pid = airflow.wait_for("the commit held before the pointer swap", lambda: airflow.held("commit", 1))
    new_metadata = {
        p for p in files_under(table, "metadata") - before_metadata if p.endswith(".metadata.json")
    }
    assert len(new_metadata) == 1, new_metadata  # written, not yet pointed to
    _kill(pid)
    assert table_state(table) == before_state
    assert live_checksum(table) == before_rows
    assert landed_snapshots(table.refresh().metadata, commit_id) == []

    # 3. The commit again, right after the catalog committed its swap.
    pid = airflow.wait_for("the commit held after the pointer swap", lambda: airflow.held("commit", 2))
    _kill(pid)
    landed = landed_snapshots(table.refresh().metadata, commit_id)
    assert len(landed) == 1, "the second commit try had not landed when it was killed"
    assert live_checksum(table) == before_rows

    state = airflow.wait_for(
        "the run to finish", lambda: (s := airflow.run_state()) in ("success", "failed") and s
    )
    tasks = {(task, index): (ti_state, tries) for task, index, ti_state, tries in airflow.task_instances()}
    assert state == "success", tasks
    assert tasks[("rewrite", 0)] == ("success", 2)
    assert tasks[("commit", -1)] == ("success", 3)

    table.refresh()
    assert landed_snapshots(table.metadata, commit_id) == landed  # the third try committed nothing
    assert len(table.metadata.snapshots) == before_snapshots + 1
    assert table.current_snapshot().snapshot_id == landed[0].snapshot_id
    assert table.current_snapshot().summary.operation.value == "replace"
    live = {f.file_path for f in data_files(table)}
    assert len(live) == 2 < len(before_state[1])
    assert not live & {f"file://{p}" for p in written}  # the killed rewrite's output stays an orphan
    assert live_checksum(table) == before_rows
    (value,) = airflow.query(
        "select value from xcom where dag_id = ? and run_id = ? and task_id = ? and key = ?",
        DAG_ID,
        RUN_ID,
        "commit",
        "return_value",
    )[0]
    result = json.loads(value)
    assert result["already_committed"] is True
    assert result["snapshot_ids"] == [landed[0].snapshot_id]
