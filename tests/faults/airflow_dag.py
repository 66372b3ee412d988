"""The DAG of the kill -9 test (tests/faults/test_airflow_kill.py) and the seams that hold its tasks.

The DAG is the provider's compaction, wired by hand so that the tests choose the retries:
``plan >> rewrite (mapped, 1 retry) >> commit (2 retries)``. Each task's ``on_execute_callback`` (run in
the task's own process, right before ``execute``) installs a seam for the tries the test kills:

- rewrite, try 1: held when it opens its second output file (the first is written and closed);
- commit, try 1: held right before the catalog's pointer swap (``UPDATE iceberg_tables``), after the new
  metadata file was written;
- commit, try 2: held right after the catalog committed the swap, before the task could report it.

A held task writes its pid to ``$ICEBERG_EXEC_FAULTS_MARKERS/<task>-try<n>.pid`` and sleeps until the
test kills it with ``SIGKILL``; the next try runs without a seam. The engine and the catalog run
unchanged; the seams only stop the process at a known point. The DAG file itself is written by the test
(:data:`DAG_FILE_SOURCE`), so that no DAG is parsed while pytest collects tests/.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["DAG_FILE_SOURCE", "DAG_ID", "MARKERS_ENV", "TABLE", "build_dag", "marker_path"]

DAG_ID = "iceberg_exec_faults_kill"
TABLE = "demo.events"
MARKERS_ENV = "ICEBERG_EXEC_FAULTS_MARKERS"
#: a held task gives up (and fails) after this long without being killed
HOLD_SECONDS = 150.0
#: the two inputs of the one group become two output files at this target size
TARGET_FILE_SIZE_BYTES = 64 * 1024

DAG_FILE_SOURCE = f'''"""Airflow DAG {DAG_ID}: see tests/faults/airflow_dag.py."""
from tests.faults.airflow_dag import build_dag

dag = build_dag()
'''


def marker_path(directory: str, task_id: str, try_number: int) -> str:
    return os.path.join(directory, f"{task_id}-try{try_number}.pid")


def _hold(marker: str) -> None:
    """Announce this process at ``marker`` (atomically) and wait to be killed."""
    temporary = marker + ".tmp"
    with open(temporary, "w") as out:
        out.write(str(os.getpid()))
    os.replace(temporary, marker)
    deadline = time.monotonic() + HOLD_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.2)
    raise RuntimeError(f"held at {marker} for {HOLD_SECONDS:.0f} s and never killed")


def _hold_at_second_output(marker: str) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    original = PyArrowFileIO.new_output
    outputs: list[str] = []

    def new_output(self: Any, location: str) -> Any:
        if "/data/" in location and location.endswith(".parquet"):
            outputs.append(location)
            if len(outputs) == 2:
                _hold(marker)
        return original(self, location)

    PyArrowFileIO.new_output = new_output  # type: ignore[method-assign]


def _is_pointer_swap(statement: str) -> bool:
    return statement.lstrip().upper().startswith("UPDATE ICEBERG_TABLES")


def _hold_before_pointer_swap(marker: str) -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def before_cursor_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if _is_pointer_swap(statement):
            _hold(marker)

    event.listen(Engine, "before_cursor_execute", before_cursor_execute)


def _hold_after_pointer_swap(marker: str) -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    swapped: list[bool] = []

    def before_cursor_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if _is_pointer_swap(statement):
            swapped.append(True)

    def after_commit(_session: Any) -> None:
        if swapped:
            _hold(marker)

    event.listen(Engine, "before_cursor_execute", before_cursor_execute)
    event.listen(Session, "after_commit", after_commit)


def install_seams(context: Any) -> None:
    """``on_execute_callback``: install the seam of this task and try, if the test kills it."""
    ti = context["ti"]
    directory = os.environ.get(MARKERS_ENV)
    if not directory:
        return
    marker = marker_path(directory, ti.task_id, ti.try_number)
    if ti.task_id == "rewrite" and ti.try_number == 1:
        _hold_at_second_output(marker)
    elif ti.task_id == "commit" and ti.try_number == 1:
        _hold_before_pointer_swap(marker)
    elif ti.task_id == "commit" and ti.try_number == 2:
        _hold_after_pointer_swap(marker)


def build_dag() -> Any:
    from datetime import datetime, timedelta

    from airflow.sdk import DAG

    from airflow_provider_iceberg_exec.operators.commit import CommitOperator
    from airflow_provider_iceberg_exec.operators.compaction import (
        CompactionPlanOperator,
        CompactionRewriteOperator,
    )
    from airflow_provider_iceberg_exec.task_groups import COMMIT_TRIGGER_RULE

    retry = {"retry_delay": timedelta(seconds=1), "retry_exponential_backoff": 0}
    with DAG(
        dag_id=DAG_ID,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        is_paused_upon_creation=False,
        tags=["iceberg", "faults"],
    ) as dag:
        plan = CompactionPlanOperator(
            task_id="plan",
            table=TABLE,
            options={"min-input-files": "2", "target-file-size-bytes": str(TARGET_FILE_SIZE_BYTES)},
        )
        rewrite = CompactionRewriteOperator.partial(
            task_id="rewrite",
            table=TABLE,
            memory_limit="64MiB",
            pool="default_pool",
            pool_slots=1,
            retries=1,
            on_execute_callback=install_seams,
            **retry,
        ).expand(task_spec=plan.output)
        commit = CommitOperator(
            task_id="commit",
            results=rewrite.output,
            planned=plan.output,
            table=TABLE,
            trigger_rule=COMMIT_TRIGGER_RULE,
            retries=2,
            on_execute_callback=install_seams,
            **retry,
        )
        plan >> commit
    return dag
