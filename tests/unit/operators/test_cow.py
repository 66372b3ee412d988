"""The copy-on-write operators, with the engine patched by dotted path; and once with the real engine.

What is under test is the Airflow layer: rendering, the arguments it builds, payload staging, error
mapping, and that the shared CommitOperator commits a copy-on-write result through the engine's
``commit_cow_rewrite``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.payloads import is_payload_ref
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.cow import CowPlanOperator, CowRewriteOperator
from tests.unit.support import TABLE

ENGINE_COW = "airflow_provider_iceberg_exec.engine.ops.cow"
PLAN = f"{ENGINE_COW}.plan_cow_rewrite"
EXECUTE = f"{ENGINE_COW}.execute_cow_task"
COMMIT = f"{ENGINE_COW}.commit_cow_rewrite"
COW_RESULT = "iceberg-exec/cow-result@1"


def _data_file(path: str, size: int = 1000) -> dict:
    return {
        "spec-id": 0,
        "content": "data",
        "file-path": path,
        "file-format": "parquet",
        "partition": [],
        "file-size-in-bytes": size,
        "record-count": 10,
    }


def _task(task_id: int, n_files: int) -> dict:
    return {
        "schema": "iceberg-exec/cow-task@1",
        "table": TABLE,
        "branch": "main",
        "operation": "delete",
        "where": "id = 42",
        "set": None,
        "base_snapshot_id": 1,
        "schema_id": 0,
        "isolation_level": "serializable",
        "output_spec_id": 0,
        "task_id": task_id,
        "data_files": [
            {
                "data-file": _data_file(f"file:///w/t{task_id}/in-{i}.parquet"),
                "data-sequence-number": 1,
                "all-rows-match": False,
            }
            for i in range(n_files)
        ],
        "source_files": [],
    }


def _plan(tasks: list[dict]) -> dict:
    return {
        "schema": "iceberg-exec/cow-plan@1",
        "table": TABLE,
        "branch": "main",
        "operation": "delete",
        "where": "id = 42",
        "set": None,
        "base_snapshot_id": 1,
        "isolation_level": "serializable",
        "tasks": tasks,
        "candidate_data_files_count": sum(len(t["data_files"]) for t in tasks),
        "dropped_without_reading_count": 0,
        "source_files_count": 0,
    }


def _fake_execute(n_out: int = 1):
    calls: list[tuple] = []

    def execute_cow_task(table, task, limits):
        calls.append((table, task, limits))
        return {
            "schema": COW_RESULT,
            **{k: task[k] for k in ("table", "branch", "operation", "where", "set", "base_snapshot_id")},
            "isolation_level": task["isolation_level"],
            "task_id": task["task_id"],
            "removed_data_files": [f["data-file"] for f in task["data_files"]],
            "added_data_files": [
                _data_file(f"file:///w/out-{task['task_id']}-{i}.parquet") for i in range(n_out)
            ],
            "deleted_rows": 1,
            "updated_rows": 0,
            "inserted_rows": 0,
            "rewritten_rows": 9,
            "untouched_data_files_count": 0,
            "dropped_without_reading_count": 0,
            "read_bytes": 1000,
            "written_bytes": 900,
            "peak_rss_bytes": 123,
            "spilled_bytes": 0,
        }

    execute_cow_task.calls = calls  # type: ignore[attr-defined]
    return execute_cow_task


def _fake_commit(already: bool = False):
    calls: list[tuple] = []

    def commit_cow_rewrite(table, results, *, commit_id):
        calls.append((table, list(results), commit_id))
        return {
            "schema": "iceberg-exec/cow-commit-result@1",
            "table": TABLE,
            "operation": "delete",
            "snapshot_operation": "overwrite",
            "snapshot_ids": [] if already else [77],
            "already_committed": already,
            "deleted_data_files_count": sum(len(r["removed_data_files"]) for r in results),
            "added_data_files_count": sum(len(r["added_data_files"]) for r in results),
            "deleted_rows": sum(r["deleted_rows"] for r in results),
            "peak_rss_bytes": 0,
            "spilled_bytes": 0,
        }

    commit_cow_rewrite.calls = calls  # type: ignore[attr-defined]
    return commit_cow_rewrite


def _context(task_id: str = "commit", map_index: int = -1) -> dict:
    ti = SimpleNamespace(
        dag_id="erasure",
        run_id="manual__2024-01-01T00:00:00+00:00",
        task_id=task_id,
        map_index=map_index,
        try_number=1,
    )
    return {"ti": ti, "run_id": ti.run_id, "outlet_events": OutletEventAccessors()}


# ---------------------------------------------------------------- plan


def test_plan_passes_rendered_arguments_to_the_engine(sqlite_table, monkeypatch):
    seen = {}

    def plan_cow_rewrite(table, **kwargs):
        seen.update(kwargs, table=table.name())
        return _plan([_task(0, 2)])

    monkeypatch.setattr(PLAN, plan_cow_rewrite)
    op = CowPlanOperator(
        task_id="plan",
        table="{{ params.table }}",
        operation="{{ params.op }}",
        where="{{ params.column }} = '{{ params.value }}'",
        set_columns={"payload": "{{ params.expr }}", "unused": ""},
        source_files='["s3://b/a.parquet", "s3://b/b.parquet"]',
        isolation_level="{{ params.isolation or '' }}",
    )
    context = {
        **_context("plan"),
        "params": {
            "table": TABLE,
            "op": "update",
            "column": "id",
            "value": 42,
            "expr": "upper(payload)",
            "isolation": None,
        },
    }
    op.render_template_fields(context)
    out = op.execute(context)
    assert out == [_task(0, 2)]
    assert json.loads(json.dumps(out)) == out
    assert seen == {
        "table": ("ns", "events"),
        "operation": "update",
        "where": "id = '42'",
        "set_columns": {"payload": "upper(payload)"},
        "source_files": ["s3://b/a.parquet", "s3://b/b.parquet"],
        "branch": "main",
        "isolation_level": None,
        "task_size_bytes": 1 << 30,
    }


def test_plan_with_nothing_to_do_is_success_with_an_empty_list(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(PLAN, lambda table, **kw: _plan([]))
    assert CowPlanOperator(task_id="plan", table=TABLE, where="id = 1").execute(_context("plan")) == []
    assert "Nothing to delete" in capsys.readouterr().out


def test_large_plan_is_staged_as_one_file_per_task(sqlite_table, monkeypatch):
    monkeypatch.setattr(PLAN, lambda table, **kw: _plan([_task(0, 6), _task(1, 6)]))
    out = CowPlanOperator(task_id="plan", table=TABLE, where="id = 1", payload_file_threshold=10).execute(
        _context("plan")
    )
    assert [is_payload_ref(ref) for ref in out] == [True, True]
    assert all(ref["uri"].startswith(sqlite_table.location()) for ref in out)


def test_bad_input_fails_the_plan_without_retry(sqlite_table, monkeypatch):
    def plan_cow_rewrite(table, **kwargs):
        raise errors.ConfigurationError("cannot parse where 'id >'")

    monkeypatch.setattr(PLAN, plan_cow_rewrite)
    with pytest.raises(AirflowFailException, match=r"^ConfigurationError: cannot parse where"):
        CowPlanOperator(task_id="plan", table=TABLE, where="id >").execute(_context("plan"))


def test_source_files_accept_one_path_a_list_or_a_json_array():
    from airflow_provider_iceberg_exec.operators.cow import _source_files

    assert _source_files("s3://b/x.parquet") == ["s3://b/x.parquet"]
    assert _source_files(["a", " ", "b"]) == ["a", "b"]
    assert _source_files('["a"]') == ["a"]
    assert _source_files(None) == _source_files("None") == []
    with pytest.raises(errors.ConfigurationError, match="not a JSON array"):
        _source_files("[a")


# ---------------------------------------------------------------- rewrite


def test_rewrite_runs_one_task_within_the_rendered_memory_limit(sqlite_table, monkeypatch):
    fake = _fake_execute()
    monkeypatch.setattr(EXECUTE, fake)
    op = CowRewriteOperator(task_id="rewrite", task_spec=_task(3, 4), memory_limit="{{ params.mem }}")
    context = {**_context("rewrite", map_index=3), "params": {"mem": "64MiB"}}
    op.render_template_fields(context)
    result = op.execute(context)
    ((table, task, limits),) = fake.calls
    assert table.name() == ("ns", "events")
    assert task["task_id"] == 3
    assert isinstance(limits, ResourceLimits)
    assert limits.memory_limit_bytes == 64 * 1024**2
    assert result["schema"] == COW_RESULT
    assert json.loads(json.dumps(result)) == result


def test_rewrite_resolves_a_staged_spec_and_records_it_for_cleanup(sqlite_table, monkeypatch):
    monkeypatch.setattr(PLAN, lambda table, **kw: _plan([_task(0, 20)]))
    (ref,) = CowPlanOperator(task_id="plan", table=TABLE, where="id = 1", payload_file_threshold=5).execute(
        _context("plan")
    )
    fake = _fake_execute()
    monkeypatch.setattr(EXECUTE, fake)
    result = CowRewriteOperator(task_id="rewrite", task_spec=ref).execute(_context("rewrite", 0))
    assert len(fake.calls[0][1]["data_files"]) == 20
    assert result["staged_inputs"] == [ref["uri"]]


def test_rewrite_refuses_a_spec_that_is_not_an_object(sqlite_table):
    op = CowRewriteOperator(task_id="rewrite", task_spec=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(AirflowFailException, match="DataFileCodecError"):
        op.execute(_context("rewrite", 0))


def test_a_null_into_a_required_column_fails_the_rewrite_without_retry(sqlite_table, monkeypatch):
    def execute_cow_task(table, task, limits):
        raise errors.ConfigurationError("set id = NULL: gives null for required column id")

    monkeypatch.setattr(EXECUTE, execute_cow_task)
    with pytest.raises(AirflowFailException, match="required column id"):
        CowRewriteOperator(task_id="rewrite", task_spec=_task(0, 1)).execute(_context("rewrite", 0))


# ---------------------------------------------------------------- commit (the shared operator)


def test_the_shared_commit_operator_commits_cow_results_once(sqlite_table, monkeypatch):
    fake = _fake_commit()
    monkeypatch.setattr(COMMIT, fake)
    execute = _fake_execute()
    results = [execute(None, _task(0, 2), None), None, execute(None, _task(1, 1), None)]
    context = _context()
    out = CommitOperator(task_id="commit", results=results).execute(context)
    ((_table, committed, commit_id),) = fake.calls
    assert [r["task_id"] for r in committed] == [0, 1]
    assert commit_id == "airflow:erasure:manual__2024-01-01T00:00:00+00:00:commit"
    assert out["deleted_data_files_count"] == 3
    assert out["snapshot_ids"] == [77]
    (event,) = context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events
    assert event.dest_asset_key.uri == "iceberg://demo/ns/events"


def test_a_conflicting_concurrent_write_fails_the_commit_without_retry(sqlite_table, monkeypatch):
    def commit_cow_rewrite(table, results, *, commit_id):
        raise errors.CommitValidationError(
            "Found conflicting files that can contain records matching id = 42"
        )

    monkeypatch.setattr(COMMIT, commit_cow_rewrite)
    with pytest.raises(AirflowFailException, match="CommitValidationError"):
        CommitOperator(task_id="commit", results=[_fake_execute()(None, _task(0, 1), None)]).execute(
            _context()
        )


# ---------------------------------------------------------------- the real engine


def test_plan_rewrite_commit_with_the_real_engine(sqlite_table, monkeypatch, tmp_path):
    """The three operators with nothing patched: a delete by id lands as one snapshot."""
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SPILL_DIR", str(tmp_path / "spill"))
    before = sqlite_table.scan().to_arrow().num_rows
    specs = CowPlanOperator(task_id="plan", table=TABLE, where="id < 15").execute(_context("plan"))
    results = [
        CowRewriteOperator(task_id="rewrite", task_spec=spec, memory_limit="64MiB").execute(
            _context("rewrite", i)
        )
        for i, spec in enumerate(specs)
    ]
    out = CommitOperator(task_id="commit", results=results).execute(_context())
    sqlite_table.refresh()
    assert sqlite_table.scan().to_arrow().num_rows == before - 15
    assert out["deleted_rows"] == 15
    assert out["dropped_without_reading_count"] == 1  # ids 0-9: the first file, by its metrics
    assert out["snapshot_ids"] == [sqlite_table.metadata.current_snapshot_id]


@pytest.mark.parametrize(
    ("operator", "fields"),
    [
        (CowPlanOperator, {"table", "operation", "where", "set_columns", "source_files", "isolation_level"}),
        (CowRewriteOperator, {"task_spec", "table", "memory_limit"}),
    ],
)
def test_template_fields(operator, fields):
    assert fields <= set(operator.template_fields)
    assert "iceberg_exec_conn_id" in operator.template_fields


def test_init_only_assigns_template_fields():
    """validate-operators-init: un-rendered Jinja is stored as given, never parsed in __init__."""
    op = CowPlanOperator(
        task_id="p", table="{{ t }}", where="{{ w }}", set_columns="{{ s }}", source_files="{{ f }}"
    )
    assert (op.table, op.where, op.set_columns, op.source_files) == (
        "{{ t }}",
        "{{ w }}",
        "{{ s }}",
        "{{ f }}",
    )
