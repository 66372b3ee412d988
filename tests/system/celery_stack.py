"""A real Airflow on the CeleryExecutor, on loopback: Redis broker, PostgreSQL metadata DB, two workers.

:func:`start_redis` runs Debian's ``redis-server`` on a free port in its own directory, with no
persistence. :func:`start_celery_airflow` runs the API server (the Execution API the workers' task
processes talk to), the scheduler, the DAG processor and two ``airflow celery worker`` processes, each
worker with its own Airflow home, spill directory and name (``[core] hostname_callable``), so nothing
but the code is shared between them on local disk: the metadata DB and the Celery results are in
PostgreSQL, the table and the staged payloads on the S3 server. Every process runs in its own process
group and is stopped, by its id, when the context exits, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.services import (
    PostgresServer,
    ServiceError,
    _die_with_parent,
    _free_ports,
    _wait_until,
)

AIRFLOW = str(Path(sys.executable).parent / "airflow")
REPO = Path(__file__).resolve().parents[2]
WORKERS = ("w1", "w2")
#: each worker runs this many tasks at once: together more than the test's pool allows
WORKER_CONCURRENCY = 2
_STOP_GRACE_SECONDS = 10.0


def _ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")


@contextlib.contextmanager
def start_redis(base_dir: Path) -> Iterator[str]:
    """Start ``redis-server`` on a free loopback port under ``base_dir``; yield its URL, stop it at the end.

    :raises ServiceError: when the binary is missing or the server does not answer in time.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError("redis-server is not installed; on Debian: apt-get install -y redis-server")
    root = Path(tempfile.mkdtemp(prefix="redis-", dir=base_dir))
    log_path = root / "redis.log"
    (port,) = _free_ports(1)
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root)]
    command += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(log_path)]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    try:
        _wait_until(lambda: _ping(port), what="redis-server", log_path=log_path, process=process)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop_groups([process])
        shutil.rmtree(root, ignore_errors=True)


def _stop_groups(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the process groups of ``processes`` (ours), SIGKILL what is left after a shared grace period.

    A group may outlive its leader (a Celery worker's pool children, a task's supervisor), so the group
    is killed after the leader exited too.
    """
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_SECONDS
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)


@dataclass
class CeleryAirflow:
    """The running stack: the shared environment, the metadata DB, the logs, a CLI runner."""

    env: dict[str, str]
    postgres: PostgresServer
    database: str
    logs: Path

    def cli(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, check=False, timeout=timeout
        )
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        return done.stdout

    def query(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        import psycopg2

        connection = psycopg2.connect(
            host=self.postgres.host, port=self.postgres.port, user=self.postgres.user, dbname=self.database
        )
        with contextlib.closing(connection), connection.cursor() as cursor:
            cursor.execute(sql, args)
            return list(cursor.fetchall())

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            time.sleep(1)
        raise AssertionError(f"timed out waiting for {what}; logs:\n{self.log_tails()}")

    def execution_api_answers(self) -> bool:
        """Whether the API server's Execution API answers its health ping (which also warms it up)."""
        url = self.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].rstrip("/") + "/health/ping"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log_tails(self) -> str:
        tails = {p.name: p.read_text(errors="replace")[-3000:] for p in sorted(self.logs.glob("*.log"))}
        return json.dumps(tails, indent=1)


def airflow_env(
    workdir: Path, *, postgres: PostgresServer, database: str, broker_url: str, connection: str
) -> dict[str, str]:
    """The environment every process of the stack shares (the workers add their own home and name)."""
    (api_port,) = _free_ports(1)
    db_url = postgres.url(database)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.pop("_ICEBERG_EXEC_TEST_AIRFLOW_HOME", None)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "AIRFLOW_HOME": str(workdir / "home"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + db_url,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__DAGS_FOLDER": str(workdir / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # schedule=None: no run but ours
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "iceberg-exec-celery-test-secret-0123456789",
            # the machine may be loaded: a task's first call to a cold API server can take longer than
            # the default 5 s, and its retries then find the task already running
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT": connection,
        }
    )
    return env


def _worker_env(env: Mapping[str, str], workdir: Path, name: str) -> dict[str, str]:
    """A worker's own Airflow home (logs, pid file), spill directory and name; the rest is shared."""
    home, spill = workdir / name / "home", workdir / name / "spill"
    home.mkdir(parents=True)
    spill.mkdir()
    return {
        **env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__ICEBERG_EXEC__SPILL_DIR": str(spill),
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.system.celery_hostname.worker_hostname",
        "ICEBERG_EXEC_TEST_WORKER_NAME": name,
    }


def _commands(env: Mapping[str, str], workdir: Path) -> dict[str, tuple[list[str], Mapping[str, str]]]:
    port = env["AIRFLOW__API__PORT"]
    commands: dict[str, tuple[list[str], Mapping[str, str]]] = {
        "api-server": ([AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", port, "--workers", "1"], env),
        "scheduler": ([AIRFLOW, "scheduler"], env),
        "dag-processor": ([AIRFLOW, "dag-processor"], env),
    }
    for name in WORKERS:
        worker = [AIRFLOW, "celery", "worker", "--celery-hostname", f"{name}@%h"]
        worker += ["--concurrency", str(WORKER_CONCURRENCY), "--skip-serve-logs"]
        worker += ["--without-mingle", "--without-gossip"]
        commands[f"worker-{name}"] = (worker, _worker_env(env, workdir, name))
    return commands


@contextlib.contextmanager
def start_celery_airflow(
    workdir: Path, env: dict[str, str], *, postgres: PostgresServer, database: str, pools: Mapping[str, int]
) -> Iterator[CeleryAirflow]:
    """Migrate the metadata DB, create ``pools``, start every process; stop them all at the end."""
    logs = workdir / "logs"
    logs.mkdir()
    Path(env["AIRFLOW_HOME"]).mkdir(exist_ok=True)
    stack = CeleryAirflow(env, postgres, database, logs)
    stack.cli("db", "migrate", timeout=600)
    for pool, slots in pools.items():
        stack.cli("pools", "set", pool, str(slots), "iceberg-exec rewrites of the Celery system test")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, (command, process_env) in _commands(env, workdir).items():
            with open(logs / f"{name}.log", "wb") as out:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=dict(process_env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                )
        yield stack
    finally:
        _stop_groups(processes)
