"""The commit operator given the plan: failed mapped tasks under partial progress, and without it.

The tests run it against a real SQLite catalog with the engine's committers patched by dotted path, and
real files on disk for what the delivered tasks "wrote", so that deletions are observed, not assumed.
The pure rule (``decide_commit``) is tested in tests/unit/engine/ops/test_results.py.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine.ops.results import planned_tasks
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.compaction import CompactionPlanOperator
from tests.unit.support import (
    ENGINE_COMPACTION,
    PARTIAL,
    TABLE,
    cow_result,
    plan_of,
    rewrite_result,
    rewrite_spec,
)

COMMIT = f"{ENGINE_COMPACTION}.commit_compaction"
PLAN = f"{ENGINE_COMPACTION}.plan_compaction"
COW_COMMIT = "airflow_provider_iceberg_exec.engine.ops.cow.commit_cow_rewrite"


def _data_dir(tmp_path):
    """The table's data directory: cleanup deletes nothing outside the table's locations."""
    return tmp_path / "warehouse" / "ns" / "events" / "data"


def _written(tmp_path, name: str) -> str:
    """A real file standing for what a rewrite wrote; returns its ``file://`` location."""
    path = _data_dir(tmp_path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return f"file://{path}"


def _context(try_number: int = 1) -> dict:
    ti = SimpleNamespace(
        dag_id="maint", run_id="manual__1", task_id="commit", map_index=-1, try_number=try_number
    )
    return {"ti": ti, "run_id": ti.run_id, "outlet_events": OutletEventAccessors()}


def _recording_commit():
    calls: list[dict] = []

    def commit_compaction(table, results, *, commit_id, failed_data_files_count=0):
        calls.append(
            {
                "groups": [r["group_id"] for r in results],
                "commit_id": commit_id,
                "failed": failed_data_files_count,
            }
        )
        return {
            "schema": "iceberg-exec/compaction-result@1",
            "table": TABLE,
            "rewritten_data_files_count": sum(len(r["rewritten_data_files"]) for r in results),
            "added_data_files_count": sum(len(r["added_data_files"]) for r in results),
            "rewritten_bytes_count": 0,
            "failed_data_files_count": failed_data_files_count,
            "removed_delete_files_count": 0,
            "snapshot_ids": [99],
            "already_committed": False,
            "peak_rss_bytes": 0,
            "spilled_bytes": 0,
        }

    commit_compaction.calls = calls  # type: ignore[attr-defined]
    return commit_compaction


def _must_not_commit(*args, **kwargs):
    raise AssertionError("nothing may be committed")


def test_partial_progress_commits_the_delivered_groups_and_reports_the_failed_files(
    sqlite_table, monkeypatch, tmp_path, caplog
):
    fake = _recording_commit()
    monkeypatch.setattr(COMMIT, fake)
    specs = [
        rewrite_spec(0, 2, options=PARTIAL),
        rewrite_spec(1, 3, options=PARTIAL),
        rewrite_spec(2, 4, options=PARTIAL),
    ]
    results = [
        rewrite_result(specs[0], [_written(tmp_path, "a")]),
        rewrite_result(specs[2], [_written(tmp_path, "c")]),
    ]
    out = CommitOperator(task_id="commit", results=results, planned=specs).execute(_context())
    assert fake.calls == [
        {"groups": [0, 2], "commit_id": "airflow:maint:manual__1:commit", "failed": 3},
    ]
    assert out["failed_data_files_count"] == 3
    assert json.loads(json.dumps(out)) == out
    assert "1 of 3 file groups failed and are left as they are (3 data files): 1" in caplog.text
    assert (_data_dir(tmp_path) / "a").exists()


def test_a_retried_partial_commit_uses_the_same_commit_id_and_failure_count(sqlite_table, monkeypatch):
    """Idempotency: the engine skips the batches that landed under the same commit id."""
    fake = _recording_commit()
    monkeypatch.setattr(COMMIT, fake)
    specs = [rewrite_spec(0, 2, options=PARTIAL), rewrite_spec(1, 3, options=PARTIAL)]
    for try_number in (1, 2):
        CommitOperator(task_id="commit", results=[rewrite_result(specs[0])], planned=specs).execute(
            _context(try_number)
        )
    assert fake.calls[0] == fake.calls[1]


def test_without_partial_progress_the_commit_fails_and_deletes_what_the_others_wrote(
    sqlite_table, monkeypatch, tmp_path
):
    monkeypatch.setattr(COMMIT, _must_not_commit)
    specs = [rewrite_spec(0, 2), rewrite_spec(1, 3), rewrite_spec(2, 4)]
    written = [_written(tmp_path, "a0"), _written(tmp_path, "a1"), _written(tmp_path, "c0")]
    results = [rewrite_result(specs[0], written[:2]), rewrite_result(specs[2], written[2:])]
    head = sqlite_table.current_snapshot().snapshot_id
    with pytest.raises(AirflowFailException) as raised:
        CommitOperator(task_id="commit", results=results, planned=specs).execute(_context())
    message = str(raised.value)
    assert "\n" not in message
    assert "1 of 3 file groups failed (1; 3 data files)" in message
    assert "the table is unchanged and the 3 files the other tasks wrote were deleted" in message
    assert not any((_data_dir(tmp_path) / name).exists() for name in ("a0", "a1", "c0"))
    assert sqlite_table.refresh().current_snapshot().snapshot_id == head


def test_every_rewrite_failed_fails_the_commit_and_removes_the_staged_specs(
    sqlite_table, monkeypatch, tmp_path
):
    """The plan succeeded, so the trigger rule runs the commit; it must fail the run, leaving nothing."""
    monkeypatch.setattr(COMMIT, _must_not_commit)
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([rewrite_spec(0, 2), rewrite_spec(1, 2)]))
    planned = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=1).execute(
        _context()
    )
    staged = [ref["uri"].removeprefix("file://") for ref in planned]
    assert all(os.path.exists(p) for p in staged)
    failed = r"^IncompleteRunError: every planned task failed \(2: 0, 1\)"
    with pytest.raises(AirflowFailException, match=failed):
        CommitOperator(task_id="commit", results=[], planned=planned, table=TABLE).execute(_context())
    assert not any(os.path.exists(p) for p in staged)


def test_staged_specs_carry_the_ids_and_data_file_counts_the_commit_reads(sqlite_table, monkeypatch):
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([rewrite_spec(0, 2), rewrite_spec(1, 3)]))
    refs = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=1).execute(_context())
    assert [(r["group_id"], r["data_files_count"]) for r in refs] == [(0, 2), (1, 3)]
    assert [t.task_id for t in planned_tasks(refs) or []] == ["0", "1"]


def test_a_staged_spec_of_a_failed_group_is_removed_after_a_partial_commit(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _recording_commit())
    specs = [rewrite_spec(0, 2, options=PARTIAL), rewrite_spec(1, 2, options=PARTIAL)]
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of(specs))
    refs = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=1).execute(_context())
    CommitOperator(task_id="commit", results=[rewrite_result(specs[0])], planned=refs).execute(_context())
    assert not any(os.path.exists(r["uri"].removeprefix("file://")) for r in refs)


def test_an_empty_plan_is_still_an_empty_commit(monkeypatch):
    monkeypatch.setattr(COMMIT, _must_not_commit)
    out = CommitOperator(task_id="commit", results=[], planned=[], table=TABLE).execute(_context())
    assert out["snapshot_ids"] == []


def test_a_missing_copy_on_write_result_fails_and_deletes_the_written_files(
    sqlite_table, monkeypatch, tmp_path
):
    monkeypatch.setattr(COW_COMMIT, _must_not_commit)
    planned = [
        {"schema": "iceberg-exec/cow-task@1", "table": TABLE, "task_id": i, "data_files": [{}]}
        for i in (0, 1)
    ]
    written = _written(tmp_path, "cow-out")
    with pytest.raises(AirflowFailException, match="a partial delete or update is never committed"):
        CommitOperator(task_id="commit", results=[cow_result(0, [written])], planned=planned).execute(
            _context()
        )
    assert not (_data_dir(tmp_path) / "cow-out").exists()


def test_nothing_is_deleted_when_the_commit_id_already_landed(sqlite_table, monkeypatch, tmp_path):
    """Clearing a rewrite after the commit landed must never delete files that are live in the table."""
    import pyarrow as pa

    from airflow_provider_iceberg_exec.engine.commit.snapshots import COMMIT_ID_PROPERTY

    monkeypatch.setattr(COMMIT, _must_not_commit)
    sqlite_table.append(
        pa.table(
            {"id": [1], "event_date": [None], "payload": ["x"]}, schema=sqlite_table.schema().as_arrow()
        ),
        snapshot_properties={COMMIT_ID_PROPERTY: "airflow:maint:manual__1:commit"},
    )
    specs = [rewrite_spec(0, 1), rewrite_spec(1, 1)]
    written = _written(tmp_path, "live")
    with pytest.raises(AirflowFailException, match="already landed as snapshots"):
        CommitOperator(
            task_id="commit", results=[rewrite_result(specs[0], [written])], planned=specs
        ).execute(_context())
    assert (_data_dir(tmp_path) / "live").exists()
