"""Scale-out on Airflow's CeleryExecutor: the mapped compaction over two workers that share no local disk.

A Redis broker, a PostgreSQL metadata DB (also the Celery result backend and the Iceberg SQL catalog),
the S3 server holding the table and the staged payloads, and two ``airflow celery worker`` processes
with their own Airflow homes and spill directories (tests/system/celery_stack.py). The DAG
(tests/system/celery_dag.py) plans 40 small files into 6 groups, rewrites them in a pool of 3 slots
(the two workers could run 4 at once) and commits once. Checked afterwards, from the metadata DB and
from the table: the rewrites ran on both workers, never more at once than the pool's slots, all in the
pool; one ``replace`` snapshot joined them; the plan's XCom carried only S3 references; the live rows
are unchanged (PyIceberg's scan) and the file count dropped.

Needs ``redis-server`` and the Celery provider: skipped without them, failed when
``ICEBERG_EXEC_REQUIRE_CELERY=1`` (``.ci/run`` sets it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR
from tests.helpers import live_checksum
from tests.integration.services import (
    PostgresServer,
    SeaweedFS,
    ServiceError,
    postgres_server,
    seaweedfs_server,
)
from tests.system import celery_dag
from tests.system.celery_stack import CeleryAirflow, airflow_env, start_celery_airflow, start_redis

# the test starts its own Airflow, broker and workers and migrates a PostgreSQL metadata DB: more than
# the default 600 s on a loaded machine
pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

__all__ = ["postgres_server", "seaweedfs_server"]

REQUIRE_ENV = "ICEBERG_EXEC_REQUIRE_CELERY"
NUM_FILES = 40
MAX_GROUP_FILES = 7  # 40 files -> 6 groups (5 of 7 files, one of 5)
POOL_SLOTS = 3
RUN_ID = "celery_system_test"


def _require_celery() -> None:
    """Skip when redis-server or the Celery provider is missing, or fail when they are required."""
    missing = [] if shutil.which("redis-server") else ["redis-server (apt-get install -y redis-server)"]
    missing += [
        f"the Python package {module} (the project's test extra)"
        for module in ("celery", "redis", "airflow.providers.celery")
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return
    reason = "the CeleryExecutor system test needs " + ", ".join(missing)
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(reason)


def _connection(server: SeaweedFS, catalog_uri: str, warehouse: str) -> str:
    """The ``iceberg_exec`` connection: SQL catalog in PostgreSQL, warehouse on the S3 server."""
    extra = {
        "catalog_type": "sql",
        "catalog_name": "celery",
        "s3_endpoint": server.endpoint,
        "s3_region": server.region,
        "s3_access_key_id": server.access_key,
        "s3_secret_access_key": server.secret_key,
        "s3_path_style_access": True,
    }
    return json.dumps({"conn_type": "iceberg_exec", "host": catalog_uri, "schema": warehouse, "extra": extra})


@pytest.fixture(scope="module", autouse=True)
def _celery_available() -> None:
    _require_celery()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("celery-airflow")


@pytest.fixture(scope="module")
def table_and_connection(postgres_server: PostgresServer, seaweedfs_server: SeaweedFS) -> tuple[Any, str]:
    """A fragmented, unpartitioned ``celery.events`` of 40 files on S3, and the connection to it."""
    from airflow_provider_iceberg_exec.demo import make_fragmented_table
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    catalog_uri = postgres_server.url(postgres_server.create_database("catalog"))
    warehouse = seaweedfs_server.warehouse()
    properties = {"type": "sql", "uri": catalog_uri, "warehouse": warehouse, **seaweedfs_server.properties()}
    catalog = load_catalog(CatalogConfig("celery", properties))
    table = make_fragmented_table(
        catalog, celery_dag.TABLE, num_files=NUM_FILES, rows_per_file=50, partitioned=False
    )
    return table, _connection(seaweedfs_server, catalog_uri, warehouse)


@pytest.fixture(scope="module")
def stack(
    workdir: Path, table_and_connection: tuple[Any, str], postgres_server: PostgresServer
) -> Iterator[CeleryAirflow]:
    (workdir / "dags").mkdir()
    shutil.copy(Path(celery_dag.__file__), workdir / "dags" / "iceberg_exec_celery.py")
    database = postgres_server.create_database("airflow")
    with contextlib.ExitStack() as services:
        try:
            broker_url = services.enter_context(start_redis(workdir))
        except ServiceError as err:
            pytest.fail(str(err), pytrace=False)
        env = airflow_env(
            workdir,
            postgres=postgres_server,
            database=database,
            broker_url=broker_url,
            connection=table_and_connection[1],
        )
        running = services.enter_context(
            start_celery_airflow(
                workdir, env, postgres=postgres_server, database=database, pools={celery_dag.POOL: POOL_SLOTS}
            )
        )
        running.wait_for("the Execution API", running.execution_api_answers, timeout=180)
        running.wait_for(
            "the DAG processor to serialize the DAG",
            lambda: running.query("select 1 from serialized_dag where dag_id = %s", celery_dag.DAG_ID),
            timeout=180,
        )
        yield running


def _max_concurrent(intervals: list[tuple[datetime, datetime]]) -> int:
    """The largest number of intervals open at one instant (an end at t closes before a start at t)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _run_state(stack: CeleryAirflow) -> str | None:
    rows = stack.query(
        "select state from dag_run where dag_id = %s and run_id = %s", celery_dag.DAG_ID, RUN_ID
    )
    return rows[0][0] if rows and rows[0][0] in ("success", "failed") else None


def _task_instances(stack: CeleryAirflow) -> list[tuple[Any, ...]]:
    return stack.query(
        "select task_id, map_index, state, hostname, pool, start_date, end_date from task_instance"
        " where dag_id = %s and run_id = %s order by task_id, map_index",
        celery_dag.DAG_ID,
        RUN_ID,
    )


def _plan_xcom(stack: CeleryAirflow) -> Any:
    ((value,),) = stack.query(
        "select value from xcom where dag_id = %s and run_id = %s and task_id = 'compaction.plan'"
        " and key = 'return_value'",
        celery_dag.DAG_ID,
        RUN_ID,
    )
    return json.loads(value) if isinstance(value, str) else value


def _s3_files(server: SeaweedFS, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector, FileType

    infos = server.filesystem().get_file_info(FileSelector(prefix, recursive=True, allow_not_found=True))
    return [info.path for info in infos if info.type == FileType.File]


def test_mapped_compaction_spreads_over_two_celery_workers_within_the_pool(
    stack: CeleryAirflow, table_and_connection: tuple[Any, str], seaweedfs_server: SeaweedFS
) -> None:
    table = table_and_connection[0]
    files_before = len(list(table.scan().plan_files()))
    rows_before = live_checksum(table)
    base_snapshot = table.current_snapshot().snapshot_id
    conf = json.dumps({"max_group_files": MAX_GROUP_FILES})
    stack.cli("dags", "trigger", celery_dag.DAG_ID, "--conf", conf, "--run-id", RUN_ID)
    state = stack.wait_for("the run", lambda: _run_state(stack), timeout=420)
    tasks = _task_instances(stack)
    assert state == "success", f"{tasks}\n{stack.log_tails()}"

    rewrites = [t for t in tasks if t[0] == "compaction.rewrite"]
    assert len(rewrites) == -(-NUM_FILES // MAX_GROUP_FILES) == 6
    assert {t[2] for t in rewrites} == {"success"}
    assert {t[4] for t in rewrites} == {celery_dag.POOL}
    assert {t[3] for t in rewrites} == {"w1", "w2"}, "the rewrites did not run on both workers"
    assert _max_concurrent([(t[5], t[6]) for t in rewrites]) <= POOL_SLOTS
    ((_, _, commit_state, *_),) = [t for t in tasks if t[0] == "compaction.commit"]
    assert commit_state == "success"

    # every spec went through the S3 server: XCom held references only
    planned = _plan_xcom(stack)
    assert len(planned) == len(rewrites)
    assert all(str(ref["uri"]).startswith(f"s3://{seaweedfs_server.bucket}/") for ref in planned)
    # ... and the commit deleted the staged payloads once its snapshot had landed
    staging = f"{table.location().removeprefix('s3://')}/{STAGING_DIR}"
    assert _s3_files(seaweedfs_server, staging) == []

    table.refresh()
    new = [s for s in table.snapshots() if s.parent_snapshot_id == base_snapshot]
    assert len(new) == 1, "the rewrites were not joined by a single commit"
    assert table.current_snapshot().snapshot_id == new[0].snapshot_id
    assert new[0].summary.operation.value == "replace"
    assert new[0].summary["deleted-data-files"] == str(NUM_FILES)
    files_after = len(list(table.scan().plan_files()))
    assert files_after < files_before == NUM_FILES
    assert live_checksum(table) == rows_before
