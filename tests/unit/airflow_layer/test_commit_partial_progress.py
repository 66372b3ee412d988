"""The commit given the plan: failed mapped tasks under partial progress, and without it.

``decide_commit`` is pure (planned tasks + delivered results -> commit or a reason not to); the operator
tests run it against a real SQLite catalog with the engine's committers patched by dotted path, and
real files on disk for what the delivered tasks "wrote", so that deletions are observed, not assumed.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.engine.ops.results import PlannedTask, decide_commit, planned_tasks
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.compaction import CompactionPlanOperator
from tests.unit.airflow_layer.support import ENGINE_COMPACTION, TABLE

COMMIT = f"{ENGINE_COMPACTION}.commit_compaction"
PLAN = f"{ENGINE_COMPACTION}.plan_compaction"
COW_COMMIT = "airflow_provider_iceberg_exec.engine.ops.cow.commit_cow_rewrite"
PARTIAL = {"partial-progress.enabled": "true"}


def _data_file(path: str) -> dict:
    return {
        "spec-id": 0,
        "content": "data",
        "file-path": path,
        "file-format": "parquet",
        "partition": [],
        "file-size-in-bytes": 1000,
        "record-count": 10,
    }


def _spec(group_id: int, n_files: int, batch: int = 0, options: dict | None = None) -> dict:
    return {
        "schema": "iceberg-exec/rewrite-task@1",
        "table": TABLE,
        "branch": "main",
        "group_id": group_id,
        "commit_batch": batch,
        "base_snapshot_id": 1,
        "options": options or {},
        "data_files": [
            {"data-file": _data_file(f"file:///w/g{group_id}/in-{i}.parquet"), "delete-files": []}
            for i in range(n_files)
        ],
    }


def _result(spec: dict, added: list[str] | None = None) -> dict:
    return {
        "schema": "iceberg-exec/rewrite-result@1",
        "table": spec["table"],
        "branch": "main",
        "group_id": spec["group_id"],
        "commit_batch": spec["commit_batch"],
        "base_snapshot_id": 1,
        "options": spec["options"],
        "rewritten_data_files": [f["data-file"] for f in spec["data_files"]],
        "added_data_files": [_data_file(p) for p in added or []],
        "removed_delete_files": [],
    }


def _cow_result(task_id: int, added: list[str]) -> dict:
    return {
        "schema": "iceberg-exec/cow-result@1",
        "table": TABLE,
        "branch": "main",
        "operation": "delete",
        "where": "id = 1",
        "set": None,
        "base_snapshot_id": 1,
        "isolation_level": "serializable",
        "task_id": task_id,
        "removed_data_files": [_data_file(f"file:///w/cow-in-{task_id}.parquet")],
        "added_data_files": [_data_file(p) for p in added],
        "removed_delete_files": [],
    }


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


# ---------------------------------------------------------------- decide_commit (pure)


def test_without_the_plan_whatever_arrived_is_committed():
    """Backward compatible: a commit not given the plan cannot tell a failed task from none planned."""
    decision = decide_commit(None, [_result(_spec(0, 2))])
    assert decision.error is None
    assert decision.missing == ()


def test_every_planned_group_delivered_commits_with_no_failure():
    specs = [_spec(0, 2), _spec(1, 3)]
    decision = decide_commit(planned_tasks(specs), [_result(s) for s in specs])
    assert (decision.error, decision.missing, decision.failed_data_files_count) == (None, (), 0)


def test_partial_progress_commits_the_rest_and_counts_the_failed_groups_files():
    specs = [_spec(0, 2, options=PARTIAL), _spec(1, 3, options=PARTIAL), _spec(2, 4, options=PARTIAL)]
    decision = decide_commit(planned_tasks(specs), [_result(specs[0]), _result(specs[2])])
    assert decision.error is None
    assert [t.task_id for t in decision.missing] == ["1"]
    assert decision.failed_data_files_count == 3


def test_without_partial_progress_a_failed_group_fails_the_commit_naming_it():
    specs = [_spec(0, 2), _spec(1, 3), _spec(2, 4)]
    decision = decide_commit(planned_tasks(specs), [_result(specs[0])])
    assert decision.error is not None
    assert "\n" not in decision.error
    assert "2 of 3 file groups failed (1, 2; 7 data files)" in decision.error
    assert "partial-progress.enabled is false" in decision.error


def test_partial_progress_disabled_explicitly_is_the_same_as_the_default():
    specs = [_spec(0, 1, options={"partial-progress.enabled": "false"}), _spec(1, 1)]
    assert decide_commit(planned_tasks(specs), [_result(specs[0])]).error is not None


def test_every_group_failed_fails_even_under_partial_progress():
    """The trigger rule lets the commit run (the plan succeeded); the commit must then fail the run."""
    specs = [_spec(0, 2, options=PARTIAL), _spec(1, 3, options=PARTIAL)]
    decision = decide_commit(planned_tasks(specs), [])
    assert decision.error is not None
    assert decision.error.startswith("every planned task failed (2: 0, 1)")
    assert decision.failed_data_files_count == 5


def test_an_empty_plan_with_no_result_commits_nothing_without_error():
    assert decide_commit(planned_tasks([]), []).error is None


def test_a_missing_copy_on_write_result_always_fails():
    """A partial delete is never acceptable: copy-on-write results are all or nothing."""
    planned = [PlannedTask("0", 1), PlannedTask("1", 1)]
    decision = decide_commit(planned, [_cow_result(0, [])])
    assert decision.error is not None
    assert "iceberg-exec/cow-result@1 results are committed all or nothing" in decision.error
    assert [t.task_id for t in decision.missing] == ["1"]


def test_results_of_tasks_not_in_the_plan_are_refused():
    decision = decide_commit(planned_tasks([_spec(0, 1)]), [_result(_spec(0, 1)), _result(_spec(7, 1))])
    assert decision.error is not None
    assert "results of tasks 7 are not in the plan" in decision.error


def test_a_commit_batch_that_lost_every_group_counts_against_max_failed_commits():
    """Spark counts a commit batch that never happened as a failed commit."""
    options = {**PARTIAL, "partial-progress.max-failed-commits": "0"}
    specs = [_spec(0, 1, batch=0, options=options), _spec(1, 1, batch=1, options=options)]
    specs.append(_spec(2, 1, batch=1, options=options))
    half_a_batch = decide_commit(planned_tasks(specs), [_result(specs[0]), _result(specs[1])])
    assert half_a_batch.error is None  # batch 1 still commits group 1
    whole_batch = decide_commit(planned_tasks(specs), [_result(specs[0])])
    assert whole_batch.error is not None
    assert "partial-progress.max-failed-commits=0" in whole_batch.error


def test_planned_tasks_read_ids_and_counts_of_staged_references_without_reading_the_files():
    refs = [
        {"schema": "iceberg-exec/payload-ref@1", "uri": "file:///s/a.json", "group_id": "4",
         "commit_batch": 2, "file_count": 9, "data_files_count": 7},
        {"schema": "iceberg-exec/payload-ref@1", "uri": "file:///s/b.json", "task_id": 3, "file_count": 5},
    ]  # fmt: skip
    assert planned_tasks(refs) == [
        PlannedTask("4", 7, 2, "file:///s/a.json"),
        PlannedTask("3", 5, None, "file:///s/b.json"),  # an older reference: its file count
    ]


def test_references_without_ids_can_only_be_compared_by_count():
    planned = [PlannedTask(None, 1), PlannedTask(None, 1)]
    assert decide_commit(planned, [_result(_spec(0, 1)), _result(_spec(1, 1))]).error is None
    short = decide_commit(planned, [_result(_spec(0, 1))])
    assert short.error is not None
    assert "1 of 2 planned tasks delivered no result" in short.error


def test_many_failed_groups_are_named_up_to_ten():
    specs = [_spec(i, 1) for i in range(15)]
    decision = decide_commit(planned_tasks(specs), [_result(specs[0])])
    assert decision.error is not None
    assert "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (+4 more)" in decision.error


# ---------------------------------------------------------------- the operator


def test_partial_progress_commits_the_delivered_groups_and_reports_the_failed_files(
    sqlite_table, monkeypatch, tmp_path, caplog
):
    fake = _recording_commit()
    monkeypatch.setattr(COMMIT, fake)
    specs = [_spec(0, 2, options=PARTIAL), _spec(1, 3, options=PARTIAL), _spec(2, 4, options=PARTIAL)]
    results = [_result(specs[0], [_written(tmp_path, "a")]), _result(specs[2], [_written(tmp_path, "c")])]
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
    specs = [_spec(0, 2, options=PARTIAL), _spec(1, 3, options=PARTIAL)]
    for try_number in (1, 2):
        CommitOperator(task_id="commit", results=[_result(specs[0])], planned=specs).execute(
            _context(try_number)
        )
    assert fake.calls[0] == fake.calls[1]


def test_without_partial_progress_the_commit_fails_and_deletes_what_the_others_wrote(
    sqlite_table, monkeypatch, tmp_path
):
    monkeypatch.setattr(COMMIT, _must_not_commit)
    specs = [_spec(0, 2), _spec(1, 3), _spec(2, 4)]
    written = [_written(tmp_path, "a0"), _written(tmp_path, "a1"), _written(tmp_path, "c0")]
    results = [_result(specs[0], written[:2]), _result(specs[2], written[2:])]
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
    monkeypatch.setattr(PLAN, lambda table, **kw: {"tasks": [_spec(0, 2), _spec(1, 2)]})
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
    monkeypatch.setattr(PLAN, lambda table, **kw: {"tasks": [_spec(0, 2), _spec(1, 3)]})
    refs = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=1).execute(_context())
    assert [(r["group_id"], r["data_files_count"]) for r in refs] == [(0, 2), (1, 3)]
    assert [t.task_id for t in planned_tasks(refs) or []] == ["0", "1"]


def test_a_staged_spec_of_a_failed_group_is_removed_after_a_partial_commit(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _recording_commit())
    specs = [_spec(0, 2, options=PARTIAL), _spec(1, 2, options=PARTIAL)]
    monkeypatch.setattr(PLAN, lambda table, **kw: {"tasks": specs})
    refs = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=1).execute(_context())
    CommitOperator(task_id="commit", results=[_result(specs[0])], planned=refs).execute(_context())
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
        CommitOperator(task_id="commit", results=[_cow_result(0, [written])], planned=planned).execute(
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
    specs = [_spec(0, 1), _spec(1, 1)]
    written = _written(tmp_path, "live")
    with pytest.raises(AirflowFailException, match="already landed as snapshots"):
        CommitOperator(task_id="commit", results=[_result(specs[0], [written])], planned=specs).execute(
            _context()
        )
    assert (_data_dir(tmp_path) / "live").exists()
