"""The operators with the engine patched by dotted path, against a real SQLite catalog.

The engine functions are replaced by fakes that honour the engine's JSON contracts; what is under test is
the Airflow layer: rendering, the spec it builds, payload staging, commit ids, assets, error mapping.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec import compat
from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.payloads import is_payload_ref
from airflow_provider_iceberg_exec.operators._common import engine_errors
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.compaction import (
    CompactionOperator,
    CompactionPlanOperator,
    CompactionRewriteOperator,
)
from airflow_provider_iceberg_exec.operators.cow import CowRewriteOperator
from airflow_provider_iceberg_exec.operators.maintenance import ExpireSnapshotsOperator, OrphanScanOperator
from tests.unit.support import ENGINE_COMPACTION, TABLE, plan_of

PLAN = f"{ENGINE_COMPACTION}.plan_compaction"
REWRITE = f"{ENGINE_COMPACTION}.execute_rewrite_task"
COMMIT = f"{ENGINE_COMPACTION}.commit_compaction"
COMPACT = f"{ENGINE_COMPACTION}.compact"


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


def _task(group_id: int, n_files: int, batch: int = 0) -> dict:
    return {
        "schema": "iceberg-exec/rewrite-task@1",
        "table": TABLE,
        "branch": "main",
        "group_id": group_id,
        "commit_batch": batch,
        "base_snapshot_id": 1,
        "base_sequence_number": 1,
        "strategy": "binpack",
        "sort_order": None,
        "options": {},
        "output_spec_id": 0,
        "data_files": [
            {
                "data-file": _data_file(f"file:///w/g{group_id}/in-{i}.parquet"),
                "data-sequence-number": 1,
                "delete-files": [],
            }
            for i in range(n_files)
        ],
    }


def _fake_rewrite(n_out: int = 1):
    calls: list[tuple] = []

    def execute_rewrite_task(table, task, limits):
        calls.append((table, task, limits))
        return {
            "schema": "iceberg-exec/rewrite-result@1",
            "table": task["table"],
            "group_id": task["group_id"],
            "commit_batch": task["commit_batch"],
            "base_snapshot_id": task["base_snapshot_id"],
            "branch": task["branch"],
            "options": task["options"],
            "rewritten_data_files": [f["data-file"] for f in task["data_files"]],
            "added_data_files": [
                _data_file(f"file:///w/out-{task['group_id']}-{i}.parquet") for i in range(n_out)
            ],
            "applied_deletes": {},
            "rewritten_bytes_count": 1000 * len(task["data_files"]),
            "added_bytes_count": 900,
            "rewritten_records": 10 * len(task["data_files"]),
            "added_records": 10 * len(task["data_files"]),
            "deleted_records": 0,
            "position_deleted_records": 0,
            "equality_deleted_records": 0,
            "peak_rss_bytes": 123,
            "spilled_bytes": 0,
            "elapsed_seconds": 0.5,
        }

    execute_rewrite_task.calls = calls  # type: ignore[attr-defined]
    return execute_rewrite_task


def _fake_commit(already: bool = False):
    calls: list[tuple] = []

    def commit_compaction(table, results, *, commit_id):
        calls.append((table, list(results), commit_id))
        return {
            "schema": "iceberg-exec/compaction-result@1",
            "table": TABLE,
            "rewritten_data_files_count": sum(len(r["rewritten_data_files"]) for r in results),
            "added_data_files_count": sum(len(r["added_data_files"]) for r in results),
            "rewritten_bytes_count": 0,
            "failed_data_files_count": 0,
            "removed_delete_files_count": 0,
            "snapshot_ids": [] if already else [99],
            "already_committed": already,
            "peak_rss_bytes": 0,
            "spilled_bytes": 0,
        }

    commit_compaction.calls = calls  # type: ignore[attr-defined]
    return commit_compaction


def _context(task_id: str = "commit", map_index: int = -1, try_number: int = 1) -> dict:
    ti = SimpleNamespace(
        dag_id="maint",
        run_id="manual__2024-01-01T00:00:00+00:00",
        task_id=task_id,
        map_index=map_index,
        try_number=try_number,
    )
    return {"ti": ti, "run_id": ti.run_id, "outlet_events": OutletEventAccessors()}


# ---------------------------------------------------------------- plan


def test_plan_returns_the_task_specs_for_mapping(sqlite_table, monkeypatch):
    tasks = [_task(0, 3), _task(1, 2)]
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of(tasks))
    out = CompactionPlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    assert out == tasks
    assert json.loads(json.dumps(out)) == out


def test_plan_passes_rendered_arguments_to_the_engine(sqlite_table, monkeypatch):
    seen = {}

    def plan_compaction(table, **kwargs):
        seen.update(kwargs, table=table.name())
        return plan_of([])

    monkeypatch.setattr(PLAN, plan_compaction)
    op = CompactionPlanOperator(
        task_id="plan",
        table="{{ params.table }}",
        where="{{ params.where or '' }}",
        options={"target-file-size-bytes": "{{ params.size }}", "min-input-files": None, "rewrite-all": True},
        strategy="{{ params.strategy }}",
        sort_order="{{ params.sort_order }}",
    )
    context = {
        **_context("plan"),
        "params": {"table": TABLE, "where": None, "size": 1024, "strategy": "sort", "sort_order": None},
    }
    op.render_template_fields(context)
    assert op.execute(context) == []
    assert seen == {
        "table": ("ns", "events"),
        "where": None,
        "options": {"target-file-size-bytes": "1024", "rewrite-all": "true"},
        "strategy": "sort",
        "sort_order": None,
        "branch": "main",
        "only_files_with_equality_deletes": False,
    }


def test_empty_plan_is_success_with_an_empty_list_and_is_logged(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([]))
    assert CompactionPlanOperator(task_id="plan", table=TABLE).execute(_context("plan")) == []
    assert "Nothing to compact" in capsys.readouterr().out


def test_large_plan_is_staged_as_one_file_per_task(sqlite_table, monkeypatch):
    tasks = [_task(0, 6), _task(1, 6)]
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of(tasks))
    out = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=10).execute(
        _context("plan")
    )
    assert [is_payload_ref(ref) for ref in out] == [True, True]
    assert all(ref["uri"].startswith(sqlite_table.location()) for ref in out)
    assert [ref["group_id"] for ref in out] == [0, 1]


# ---------------------------------------------------------------- rewrite


def test_rewrite_runs_one_group_within_the_rendered_memory_limit(sqlite_table, monkeypatch):
    fake = _fake_rewrite()
    monkeypatch.setattr(REWRITE, fake)
    op = CompactionRewriteOperator(task_id="rewrite", task_spec=_task(3, 4), memory_limit="{{ params.mem }}")
    context = {**_context("rewrite", map_index=3), "params": {"mem": "64MiB"}}
    op.render_template_fields(context)
    result = op.execute(context)
    ((table, task, limits),) = fake.calls
    assert table.name() == ("ns", "events")
    assert task["group_id"] == 3
    assert isinstance(limits, ResourceLimits)
    assert limits.memory_limit_bytes == 64 * 1024**2
    assert result["group_id"] == 3
    assert json.loads(json.dumps(result)) == result


def test_rewrite_resolves_a_staged_spec_and_records_it_for_cleanup(sqlite_table, monkeypatch):
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([_task(0, 20)]))
    (ref,) = CompactionPlanOperator(task_id="plan", table=TABLE, payload_file_threshold=5).execute(
        _context("plan")
    )
    fake = _fake_rewrite()
    monkeypatch.setattr(REWRITE, fake)
    result = CompactionRewriteOperator(task_id="rewrite", task_spec=ref).execute(_context("rewrite", 0))
    assert len(fake.calls[0][1]["data_files"]) == 20
    assert result["staged_inputs"] == [ref["uri"]]


def test_rewrite_refuses_a_spec_that_is_not_an_object(sqlite_table):
    op = CompactionRewriteOperator(task_id="rewrite", task_spec=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(AirflowFailException, match="DataFileCodecError"):
        op.execute(_context("rewrite", 0))


def test_rewrite_pool_and_slots_default_from_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__POOL", "iceberg_exec")
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__MEMORY_LIMIT", "2GiB")
    op = CompactionRewriteOperator(task_id="rewrite", task_spec={})
    assert (op.pool, op.pool_slots) == ("iceberg_exec", 8)
    explicit = CompactionRewriteOperator(task_id="r2", task_spec={}, pool="p", pool_slots=2)
    assert (explicit.pool, explicit.pool_slots) == ("p", 2)


@pytest.mark.parametrize(
    ("operator", "required"),
    [
        (CompactionRewriteOperator, {"task_spec": {}}),
        (CowRewriteOperator, {"task_spec": {}}),
        (CompactionOperator, {"table": TABLE}),
        (OrphanScanOperator, {"table": TABLE}),
        (ExpireSnapshotsOperator, {"table": TABLE}),
    ],
)
def test_partial_without_pool_arguments_takes_the_configured_pool_and_slots(operator, required, monkeypatch):
    """``.partial(task_id=...)``, as the docs write it, used to fail at DAG parse (pool_slots None < 1)."""
    import pendulum
    from airflow.sdk import DAG

    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__POOL", "iceberg_exec")
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__MEMORY_LIMIT", "2GiB")
    with DAG("partial_defaults", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        mapped = operator.partial(task_id="heavy", **required).expand(iceberg_exec_conn_id=["a", "b"])
        explicit = operator.partial(task_id="light", pool="p", pool_slots=2, **required).expand(
            iceberg_exec_conn_id=["a"]
        )
    assert (mapped.pool, mapped.pool_slots) == ("iceberg_exec", 8)
    assert (explicit.pool, explicit.pool_slots) == ("p", 2)


def test_rewrite_warns_when_its_memory_limit_needs_more_slots(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(REWRITE, _fake_rewrite())
    op = CompactionRewriteOperator(
        task_id="rewrite", task_spec=_task(0, 1), memory_limit="2GiB", pool_slots=1
    )
    op.execute(_context("rewrite", 0))
    assert "would take 8 slots" in capsys.readouterr().out


# ---------------------------------------------------------------- commit


def test_commit_commits_every_result_once_with_a_commit_id_from_dag_run_and_task(sqlite_table, monkeypatch):
    fake = _fake_commit()
    monkeypatch.setattr(COMMIT, fake)
    rewrite = _fake_rewrite()
    results = [rewrite(None, _task(0, 2), None), None, rewrite(None, _task(1, 3), None)]
    out = CommitOperator(task_id="commit", results=results).execute(_context())
    ((_table, committed, commit_id),) = fake.calls
    assert [r["group_id"] for r in committed] == [0, 1]
    assert commit_id == "airflow:maint:manual__2024-01-01T00:00:00+00:00:commit"
    assert out["snapshot_ids"] == [99]
    assert json.loads(json.dumps(out)) == out


def test_commit_id_is_the_same_on_every_try(sqlite_table, monkeypatch):
    """A retry after a commit that landed must find it: the id may not depend on the try number."""
    fake = _fake_commit()
    monkeypatch.setattr(COMMIT, fake)
    results = [_fake_rewrite()(None, _task(0, 1), None)]
    for try_number in (1, 2, 3):
        CommitOperator(task_id="commit", results=results).execute(_context(try_number=try_number))
    assert len({call[2] for call in fake.calls}) == 1


def test_commit_retry_after_landed_commit_reports_and_succeeds(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(COMMIT, _fake_commit(already=True))
    results = [_fake_rewrite()(None, _task(0, 1), None)]
    out = CommitOperator(task_id="commit", results=results).execute(_context(try_number=2))
    assert out["already_committed"] is True
    assert "Already committed" in capsys.readouterr().out


def test_commit_with_no_results_is_success_with_an_empty_result(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("nothing to commit")

    monkeypatch.setattr(COMMIT, must_not_run)
    out = CommitOperator(task_id="commit", results=[], table=TABLE).execute(_context())
    assert out["snapshot_ids"] == []
    assert out["added_data_files_count"] == 0


def test_commit_emits_the_table_asset_through_the_alias(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _fake_commit())
    op = CommitOperator(task_id="commit", results=[_fake_rewrite()(None, _task(0, 1), None)])
    assert op.outlets == [AssetAlias(name="iceberg-exec-commits")]
    context = _context()
    op.execute(context)
    (event,) = context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events
    assert event.dest_asset_key.uri == "iceberg://demo/ns/events"
    assert event.extra["snapshot_ids"] == compat.alias_event_extra({"snapshot_ids": [99]})["snapshot_ids"]


def test_commit_updates_a_declared_table_asset(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _fake_commit())
    asset = Asset(uri="iceberg://demo/ns/events")
    op = CommitOperator(
        task_id="commit",
        results=[_fake_rewrite()(None, _task(0, 1), None)],
        outlets=[asset],
        asset_alias=None,
    )
    context = _context()
    op.execute(context)
    assert op.outlets == [asset]
    assert context["outlet_events"][asset].extra["snapshot_ids"] == [99]


def test_commit_refuses_results_of_two_tables(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _fake_commit())
    other = {**_fake_rewrite()(None, _task(1, 1), None), "table": "ns.other"}
    op = CommitOperator(task_id="commit", results=[_fake_rewrite()(None, _task(0, 1), None), other])
    with pytest.raises(AirflowFailException, match="one commit commits to one table"):
        op.execute(_context())


def test_commit_refuses_results_it_cannot_commit(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMMIT, _fake_commit())
    op = CommitOperator(task_id="commit", results=[{"schema": "iceberg-exec/unknown@9", "table": TABLE}])
    with pytest.raises(AirflowFailException, match="cannot commit results of schemas"):
        op.execute(_context())


def test_commit_retries_with_exponential_backoff_by_default():
    op = CommitOperator(task_id="commit", results=[])
    assert op.retries == 3
    assert op.retry_exponential_backoff == compat.retry_exponential_backoff(2.0)  # 3.1: True


def test_commit_waits_for_a_quiet_period_then_commits(sqlite_table, monkeypatch):
    import airflow_provider_iceberg_exec.engine.ops.results as commit_module

    monkeypatch.setattr(COMMIT, _fake_commit())
    clock = {"now": sqlite_table.current_snapshot().timestamp_ms / 1000 + 5}
    sleeps: list[float] = []
    monkeypatch.setattr(commit_module.time, "time", lambda: clock["now"])

    def sleep(seconds):
        sleeps.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(commit_module.time, "sleep", sleep)
    op = CommitOperator(
        task_id="commit", results=[_fake_rewrite()(None, _task(0, 1), None)], quiet_period_seconds="{{ q }}"
    )
    op.render_template_fields({**_context(), "q": 30})
    assert op.execute(_context())["snapshot_ids"] == [99]
    assert sleeps == [pytest.approx(25)]


def test_commit_conflicts_when_the_branch_never_goes_quiet(sqlite_table, monkeypatch):
    import airflow_provider_iceberg_exec.engine.ops.results as commit_module

    monkeypatch.setattr(COMMIT, _fake_commit())
    monkeypatch.setattr(
        commit_module.time, "time", lambda: sqlite_table.current_snapshot().timestamp_ms / 1000
    )
    op = CommitOperator(
        task_id="commit",
        results=[_fake_rewrite()(None, _task(0, 1), None)],
        quiet_period_seconds=60,
        quiet_period_timeout_seconds=10,
    )
    with pytest.raises(errors.CommitConflictError, match="did not go quiet"):
        op.execute(_context())


def test_five_thousand_output_files_pass_through_xcom_by_reference(sqlite_table, monkeypatch):
    """A rewrite that writes 5,000 files returns a small reference; the commit gets all 5,000 back."""
    monkeypatch.setattr(REWRITE, _fake_rewrite(n_out=5000))
    commit = _fake_commit()
    monkeypatch.setattr(COMMIT, commit)
    xcom = CompactionRewriteOperator(task_id="rewrite", task_spec=_task(0, 3)).execute(_context("rewrite", 0))
    assert is_payload_ref(xcom)
    assert xcom["file_count"] == 5003
    serialized = json.dumps(xcom)
    assert len(serialized) < 1000
    out = CommitOperator(task_id="commit", results=[json.loads(serialized)]).execute(_context())
    ((_, committed, _),) = commit.calls
    assert len(committed[0]["added_data_files"]) == 5000
    assert out["added_data_files_count"] == 5000
    # the staged file is cleaned up once the commit has landed
    assert not sqlite_table.io.new_input(xcom["uri"]).exists()


# ---------------------------------------------------------------- single task


def test_single_task_compaction_plans_rewrites_and_commits_in_one_call(sqlite_table, monkeypatch):
    seen = {}

    def compact(table, **kwargs):
        seen.update(kwargs)
        return {**_fake_commit()(table, [], commit_id=kwargs["commit_id"]), "snapshot_ids": [5]}

    monkeypatch.setattr(COMPACT, compact)
    op = CompactionOperator(
        task_id="compact",
        table=TABLE,
        where="id > 3",
        memory_limit=64 * 1024**2,
        options='{"rewrite-all": true}',
    )
    context = _context("compact")
    out = op.execute(context)
    assert out["snapshot_ids"] == [5]
    assert seen["where"] == "id > 3"
    assert seen["options"] == {"rewrite-all": "true"}
    assert seen["limits"].memory_limit_bytes == 64 * 1024**2
    assert seen["commit_id"] == "airflow:maint:manual__2024-01-01T00:00:00+00:00:compact"
    (event,) = context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events
    assert event.dest_asset_key.uri == "iceberg://demo/ns/events"


def test_commit_id_cannot_be_derived_outside_a_run(sqlite_table, monkeypatch):
    monkeypatch.setattr(COMPACT, lambda *a, **k: {})
    with pytest.raises(AirflowFailException, match="commit id"):
        CompactionOperator(task_id="compact", table=TABLE).execute({})


# ---------------------------------------------------------------- templates and errors


@pytest.mark.parametrize(
    ("operator", "fields"),
    [
        (CompactionPlanOperator, {"table", "where", "options", "strategy", "sort_order", "branch"}),
        (CompactionRewriteOperator, {"task_spec", "table", "memory_limit"}),
        (CompactionOperator, {"table", "where", "options", "memory_limit", "commit_id"}),
        (CommitOperator, {"results", "table", "commit_id", "quiet_period_seconds"}),
    ],
)
def test_template_fields(operator, fields):
    assert fields <= set(operator.template_fields)
    assert "iceberg_exec_conn_id" in operator.template_fields


def test_init_only_assigns_template_fields():
    """validate-operators-init: un-rendered Jinja is stored as given, never parsed in __init__."""
    op = CompactionOperator(
        task_id="c", table="{{ params.t }}", memory_limit="{{ params.m }}", options="{{ o }}"
    )
    assert (op.table, op.memory_limit, op.options) == ("{{ params.t }}", "{{ params.m }}", "{{ o }}")


@pytest.mark.parametrize(
    "error",
    [
        errors.ConfigurationError("bad option\nsecond line"),
        errors.TableNotFoundError("no table"),
        errors.DataFileCodecError("bad json"),
        errors.CommitValidationError("re-plan"),
        errors.CommitStateUnknownError("unknown"),
    ],
)
def test_definitive_engine_errors_fail_without_retry_with_one_line(error):
    with pytest.raises(AirflowFailException) as raised, engine_errors():
        raise error
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith(type(error).__name__)
    assert raised.value.__cause__ is error


@pytest.mark.parametrize(
    "error", [errors.CommitConflictError("moved"), errors.ResourceLimitError("oom"), OSError("disk")]
)
def test_other_errors_propagate_so_retries_apply(error):
    with pytest.raises(type(error)), engine_errors():
        raise error


def test_unknown_table_fails_the_task_without_retry(sqlite_table, monkeypatch):
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([]))
    with pytest.raises(AirflowFailException, match="TableNotFoundError"):
        CompactionPlanOperator(task_id="plan", table="ns.missing").execute(_context("plan"))


def test_commit_conflict_from_the_engine_propagates(sqlite_table, monkeypatch):
    def conflict(*args, **kwargs):
        raise errors.CommitConflictError("base snapshot moved")

    monkeypatch.setattr(COMMIT, conflict)
    with pytest.raises(errors.CommitConflictError):
        CommitOperator(task_id="commit", results=[_fake_rewrite()(None, _task(0, 1), None)]).execute(
            _context()
        )


def test_secrets_of_the_connection_never_reach_xcom_or_rendered_fields(sqlite_table, monkeypatch, tmp_path):
    from tests.unit.support import connection_json

    secret = "s3-secret-value-0123456789"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT", connection_json(tmp_path, s3_secret_access_key=secret)
    )
    monkeypatch.setattr(PLAN, lambda table, **kw: plan_of([_task(0, 2)]))
    monkeypatch.setattr(REWRITE, _fake_rewrite())
    monkeypatch.setattr(COMMIT, _fake_commit())
    plan = CompactionPlanOperator(task_id="plan", table=TABLE)
    plan.render_template_fields(_context("plan"))
    specs = plan.execute(_context("plan"))
    result = CompactionRewriteOperator(task_id="rewrite", task_spec=specs[0]).execute(_context("rewrite", 0))
    out = CommitOperator(task_id="commit", results=[result]).execute(_context())
    rendered = {name: getattr(plan, name) for name in plan.template_fields}
    assert secret not in json.dumps([specs, result, out, rendered])
