"""The operators' execute() with the real engine against a real SQLite catalog (no Airflow DB needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR, is_payload_ref
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.compaction import (
    CompactionOperator,
    CompactionPlanOperator,
    CompactionRewriteOperator,
)
from tests.helpers import live_checksum
from tests.system.conftest import TABLE

pytestmark = pytest.mark.system

OPTIONS = {"min-input-files": "2", "target-file-size-bytes": str(1 << 20)}


def _context(task_id: str, map_index: int = -1, run_id: str = "manual__1") -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id=run_id, task_id=task_id, map_index=map_index)
    return {"ti": ti, "run_id": run_id, "outlet_events": OutletEventAccessors()}


def _through_xcom(value):
    return json.loads(json.dumps(value))


def _run_three_tasks(threshold: int | None = None) -> tuple[list[dict], list[dict]]:
    specs = _through_xcom(
        CompactionPlanOperator(
            task_id="plan", table=TABLE, options=OPTIONS, payload_file_threshold=threshold
        ).execute(_context("plan"))
    )
    results = [
        _through_xcom(
            CompactionRewriteOperator(
                task_id="rewrite", task_spec=spec, memory_limit="64MiB", payload_file_threshold=threshold
            ).execute(_context("rewrite", index))
        )
        for index, spec in enumerate(specs)
    ]
    return specs, results


def _staged_files(table) -> list:
    from pathlib import Path

    staging = Path(table.location().removeprefix("file://")) / STAGING_DIR
    return sorted(staging.glob("*.json")) if staging.exists() else []


def test_plan_rewrite_commit_compacts_and_keeps_every_row(demo_table):
    before_files, before_rows = len(list(demo_table.scan().plan_files())), live_checksum(demo_table)
    specs, results = _run_three_tasks()
    assert len(specs) == 3  # one group per region partition
    out = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    assert out["rewritten_data_files_count"] == before_files
    assert out["added_data_files_count"] == len(list(demo_table.refresh().scan().plan_files()))
    assert live_checksum(demo_table) == before_rows


def test_payloads_past_the_threshold_travel_by_reference_and_are_cleaned_up(demo_table):
    before_rows = live_checksum(demo_table)
    specs, results = _run_three_tasks(threshold=5)
    assert all(is_payload_ref(doc) for doc in specs + results)
    assert len(_staged_files(demo_table)) == 6
    out = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    assert out["snapshot_ids"]
    assert _staged_files(demo_table) == []
    assert live_checksum(demo_table) == before_rows


def test_a_retry_of_a_landed_commit_reports_it_and_succeeds(demo_table):
    _, results = _run_three_tasks()
    first = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    retry = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    assert retry["already_committed"] is True
    assert retry["snapshot_ids"] == first["snapshot_ids"]
    assert len(demo_table.refresh().metadata.snapshots) == 12 + 1


def test_a_retry_after_cleanup_of_staged_payloads_finds_the_landed_commit(demo_table):
    _, results = _run_three_tasks(threshold=5)
    first = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    retry = CommitOperator(task_id="commit", results=results).execute(_context("commit"))
    assert retry["already_committed"] is True
    assert retry["snapshot_ids"] == first["snapshot_ids"]


def test_commit_of_a_stale_plan_fails_without_retry(demo_table):
    """Another compaction replaced the planned files meanwhile: validation fails, re-plan (no retry)."""
    _, stale = _run_three_tasks()
    _, fresh = _run_three_tasks()
    CommitOperator(task_id="commit", results=fresh).execute(_context("commit", run_id="manual__other"))
    with pytest.raises(AirflowFailException, match="CommitValidationError"):
        CommitOperator(task_id="commit", results=stale).execute(_context("commit"))


def test_single_task_compaction_with_the_real_engine(demo_table):
    before_rows = live_checksum(demo_table)
    out = CompactionOperator(task_id="compact", table=TABLE, options=OPTIONS, memory_limit="64MiB").execute(
        _context("compact")
    )
    assert out["snapshot_ids"]
    assert live_checksum(demo_table) == before_rows
    retry = CompactionOperator(task_id="compact", table=TABLE, options=OPTIONS, memory_limit="64MiB").execute(
        _context("compact")
    )
    assert retry["snapshot_ids"] == [] or retry["already_committed"]


def test_a_rewrite_task_logs_its_progress_from_start_to_done(demo_table, capfd):
    """The task log of a rewrite (Airflow's task logger) shows the engine's progress, start to done."""
    spec = _through_xcom(
        CompactionPlanOperator(task_id="plan", table=TABLE, options=OPTIONS).execute(_context("plan"))
    )[0]
    files = len(spec["data_files"])
    capfd.readouterr()
    CompactionRewriteOperator(task_id="rewrite", task_spec=spec, memory_limit="64MiB").execute(
        _context("rewrite", 0)
    )
    logged = capfd.readouterr()
    lines = [line for line in (logged.out + logged.err).splitlines() if "progress: compaction" in line]
    assert f"progress: compaction {spec['group_id']}: 0/{files} files" in lines[0]
    assert f"{files}/{files} files" in lines[-1]
    assert "(100%)" in lines[-1]
    assert " rows, spilled " in lines[-1]
    assert "RSS " in lines[-1]
    assert all("CompactionRewriteOperator" in line for line in lines)  # the task's own logger
