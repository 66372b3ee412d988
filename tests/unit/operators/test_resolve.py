"""Equality-delete resolution in the Airflow layer: the single-task operator and the plan's resolution mode.

The engine entry points are patched by dotted path where the Airflow layer's behaviour is under test
(rendering, the arguments it builds, commit ids, pools, assets); bad input runs the real engine against a
real SQLite catalog whose table has an equality delete, and must leave that table exactly as it was.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec import compat
from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.operators.compaction import CompactionPlanOperator
from airflow_provider_iceberg_exec.operators.convert import ConvertEqualityDeletesOperator
from airflow_provider_iceberg_exec.operators.position_deletes import RewritePositionDeletesOperator
from airflow_provider_iceberg_exec.operators.resolve import ResolveEqualityDeletesOperator
from tests.helpers import files_under
from tests.unit.support import ENGINE_COMPACTION, TABLE, plan_of

RESOLVE = "airflow_provider_iceberg_exec.engine.ops.resolve.resolve_equality_deletes"
PLAN = f"{ENGINE_COMPACTION}.plan_compaction"
RUN_ID = "manual__2024-01-01T00:00:00+00:00"


def _context(task_id: str = "resolve", try_number: int = 1) -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id=RUN_ID, task_id=task_id, map_index=-1, try_number=try_number)
    return {"ti": ti, "run_id": RUN_ID, "outlet_events": OutletEventAccessors()}


def _result(snapshot_ids: list[int], *, already: bool = False) -> dict:
    return {
        "schema": "iceberg-exec/compaction-result@1",
        "table": TABLE,
        "rewritten_data_files_count": 2,
        "added_data_files_count": 1,
        "rewritten_bytes_count": 2000,
        "failed_data_files_count": 0,
        "removed_delete_files_count": 1,
        "snapshot_ids": snapshot_ids,
        "already_committed": already,
        "peak_rss_bytes": 1,
        "spilled_bytes": 0,
    }


def _fake_resolve(result: dict):
    calls: list[tuple] = []

    def resolve_equality_deletes(table, **kwargs):
        calls.append((table, kwargs))
        return result

    resolve_equality_deletes.calls = calls  # type: ignore[attr-defined]
    return resolve_equality_deletes


def _state(table) -> tuple:
    """Snapshot and metadata file: what "unchanged" compares (PyIceberg cannot plan this table)."""
    table.refresh()
    return table.current_snapshot().snapshot_id, table.metadata_location


def _data_file_paths(table) -> set[str]:
    table.refresh()
    return set(table.inspect.data_files().column("file_path").to_pylist())


@pytest.fixture
def table_with_equality_deletes(sqlite_table):
    """``ns.events`` with one committed equality delete on ``id`` (ids 3 and 15)."""
    from tests.helpers import commit_delete_files
    from tests.integration.maintenance_support import write_equality_deletes

    commit_delete_files(sqlite_table, [write_equality_deletes(sqlite_table, [3, 15], category="")])
    return sqlite_table


# ---------------------------------------------------------------- the single-task operator


def test_template_fields():
    assert set(ResolveEqualityDeletesOperator.template_fields) == {
        "table",
        "where",
        "options",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    }


def test_init_only_assigns_template_fields():
    """validate-operators-init: un-rendered Jinja is stored as given, never parsed in __init__."""
    op = ResolveEqualityDeletesOperator(
        task_id="r",
        table="{{ params.t }}",
        where="{{ params.w }}",
        memory_limit="{{ params.m }}",
        options="{{ o }}",
    )
    assert (op.table, op.where, op.memory_limit, op.options) == (
        "{{ params.t }}",
        "{{ params.w }}",
        "{{ params.m }}",
        "{{ o }}",
    )


def test_resolves_with_the_rendered_arguments_and_a_commit_id_from_the_run(sqlite_table, monkeypatch):
    fake = _fake_resolve(_result([7]))
    monkeypatch.setattr(RESOLVE, fake)
    op = ResolveEqualityDeletesOperator(
        task_id="resolve",
        table="{{ params.table }}",
        where="{{ params.where or '' }}",
        options={"target-file-size-bytes": "{{ params.size or '' }}", "min-input-files": None},
        memory_limit="{{ params.mem }}",
    )
    context = {**_context(), "params": {"table": TABLE, "where": None, "size": 1024, "mem": "64MiB"}}
    op.render_template_fields(context)
    out = op.execute(context)

    ((table, kwargs),) = fake.calls
    assert table.name() == ("ns", "events")
    assert kwargs["where"] is None
    assert kwargs["options"] == {"target-file-size-bytes": "1024"}
    assert kwargs["branch"] == "main"
    assert kwargs["limits"].memory_limit_bytes == 64 * 1024**2
    assert kwargs["commit_id"] == f"airflow:maint:{RUN_ID}:resolve"
    assert out == _result([7])
    assert json.loads(json.dumps(out)) == out
    (event,) = context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events
    assert event.dest_asset_key.uri == "iceberg://demo/ns/events"
    assert event.extra["snapshot_ids"] == compat.alias_event_extra({"snapshot_ids": [7]})["snapshot_ids"]


def test_commit_id_is_the_same_on_every_try_so_a_retry_finds_a_landed_commit(sqlite_table, monkeypatch):
    fake = _fake_resolve(_result([], already=True))
    monkeypatch.setattr(RESOLVE, fake)
    for try_number in (1, 2):
        out = ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE).execute(
            _context(try_number=try_number)
        )
        assert out["already_committed"] is True
    assert len({kwargs["commit_id"] for _, kwargs in fake.calls}) == 1


def test_an_explicit_commit_id_overrides_the_derived_one(sqlite_table, monkeypatch):
    fake = _fake_resolve(_result([7]))
    monkeypatch.setattr(RESOLVE, fake)
    ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE, commit_id="nightly-1").execute(_context())
    assert fake.calls[0][1]["commit_id"] == "nightly-1"


def test_nothing_to_resolve_is_success_without_an_asset_event(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(RESOLVE, _fake_resolve(_result([])))
    context = _context()
    out = ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE).execute(context)
    assert out["snapshot_ids"] == []
    assert "Nothing to resolve" in capsys.readouterr().out
    assert context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events == []


def test_commit_id_cannot_be_derived_outside_a_run(sqlite_table, monkeypatch):
    monkeypatch.setattr(RESOLVE, _fake_resolve(_result([])))
    with pytest.raises(AirflowFailException, match="commit id"):
        ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE).execute({})


def test_pool_and_slots_default_from_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__POOL", "iceberg_exec")
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__MEMORY_LIMIT", "2GiB")
    op = ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE)
    assert (op.pool, op.pool_slots) == ("iceberg_exec", 8)
    explicit = ResolveEqualityDeletesOperator(task_id="r2", table=TABLE, pool="p", pool_slots=2)
    assert (explicit.pool, explicit.pool_slots) == ("p", 2)


def test_warns_when_its_memory_limit_needs_more_slots(sqlite_table, monkeypatch, capsys):
    monkeypatch.setattr(RESOLVE, _fake_resolve(_result([])))
    ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE, memory_limit="2GiB", pool_slots=1).execute(
        _context()
    )
    assert "would take 8 slots" in capsys.readouterr().out


def test_outlets_carry_the_asset_alias_unless_disabled():
    assert ResolveEqualityDeletesOperator(task_id="r", table=TABLE).outlets == [
        AssetAlias(name="iceberg-exec-commits")
    ]
    assert ResolveEqualityDeletesOperator(task_id="r", table=TABLE, asset_alias=None).outlets == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"where": "no_such_column = 1"}, "ConfigurationError"),
        ({"options": {"target-file-size-bytes": "lots"}}, "ConfigurationError"),
        ({"options": "{not json"}, "ConfigurationError"),
        ({"memory_limit": "plenty"}, "ConfigurationError"),
        ({"table": "ns.missing"}, "TableNotFoundError"),
    ],
    ids=["where", "option", "options-json", "memory-limit", "table"],
)
def test_bad_input_fails_with_one_line_and_leaves_the_table_unchanged(
    table_with_equality_deletes, tmp_path, kwargs, error
):
    """The real engine: the task fails without retry, and no snapshot or file is added."""
    table = table_with_equality_deletes
    before, files_before = _state(table), files_under(table)
    op = ResolveEqualityDeletesOperator(
        task_id="resolve", **{"table": TABLE, "memory_limit": "64MiB", **kwargs}
    )
    with pytest.raises(AirflowFailException) as raised:
        op.execute(_context())
    assert str(raised.value).startswith(error)
    assert "\n" not in str(raised.value)
    assert _state(table) == before
    assert files_under(table) == files_before


# ---------------------------------------------------------------- the mapped path: the plan's resolution mode


def _recording_plan(seen: dict):
    def plan_compaction(table, **kwargs):
        seen.update(kwargs)
        return plan_of([])

    return plan_compaction


def test_plan_resolution_mode_selects_files_with_equality_deletes_and_rewrites_them_all(
    sqlite_table, monkeypatch, capsys
):
    seen: dict = {}
    monkeypatch.setattr(PLAN, _recording_plan(seen))
    op = CompactionPlanOperator(
        task_id="plan",
        table=TABLE,
        options={"target-file-size-bytes": "1024", "rewrite-all": "false"},
        only_files_with_equality_deletes=True,
    )
    assert op.execute(_context("plan")) == []
    assert seen["only_files_with_equality_deletes"] is True
    assert seen["options"] == {"target-file-size-bytes": "1024", "rewrite-all": "true"}
    assert "no data file has equality deletes" in capsys.readouterr().out


def test_plan_compacts_by_default(sqlite_table, monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(PLAN, _recording_plan(seen))
    CompactionPlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    assert seen["only_files_with_equality_deletes"] is False
    assert seen["options"] == {}


def test_plan_resolution_mode_with_the_real_engine_plans_only_the_files_deletes_apply_to(
    table_with_equality_deletes,
):
    """Twelve files, one equality delete (older than all of them): every file, in spec form, for mapping."""
    specs = CompactionPlanOperator(
        task_id="plan", table=TABLE, only_files_with_equality_deletes=True
    ).execute(_context("plan"))
    planned = {e["data-file"]["file-path"] for spec in specs for e in spec["data_files"]}
    assert planned == _data_file_paths(table_with_equality_deletes)
    assert len(planned) == 12
    # Each file carries the one equality delete (the commit drops it once nothing references it).
    deletes = [
        d["content-file"]["file-path"]
        for spec in specs
        for e in spec["data_files"]
        for d in e["delete-files"]
    ]
    assert len(deletes) == 12
    assert len(set(deletes)) == 1
    assert json.loads(json.dumps(specs)) == specs


@pytest.mark.parametrize(
    "cls",
    [ResolveEqualityDeletesOperator, ConvertEqualityDeletesOperator, RewritePositionDeletesOperator],
    ids=lambda cls: cls.__name__,
)
def test_one_task_operators_refuse_compaction_only_arguments(cls):
    """They share compaction's one-task flow, not its arguments: a strategy would be silently ignored."""
    with pytest.raises(TypeError, match="strategy"):
        cls(task_id="one", table=TABLE, strategy="sort")
    assert "strategy" not in cls.template_fields
