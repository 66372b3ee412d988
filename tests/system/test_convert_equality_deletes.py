"""The conversion operators' execute() with the real engine against a real SQLite catalog.

The demo table with partition-scoped equality deletes and newer rows for deleted keys, as a Flink upsert
sink leaves it (tests/system/equality_support.py computes the expected rows from what PyIceberg read
before the deletes); after the conversion PyIceberg itself reads the table, and no data file changed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.convert import (
    ConvertEqualityDeletesOperator,
    ConvertEqualityDeletesPlanOperator,
    ConvertEqualityDeletesTaskOperator,
)
from tests.helpers import files_under, live_checksum
from tests.system.conftest import TABLE
from tests.system.equality_support import add_flink_style_equality_deletes, data_files_by_region

pytestmark = pytest.mark.system


def _context(task_id: str, run_id: str = "manual__1") -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id=run_id, task_id=task_id, map_index=-1)
    return {"ti": ti, "run_id": run_id, "outlet_events": OutletEventAccessors()}


def _equality_deletes(table) -> int:
    table.refresh()
    return sum(1 for d in table.inspect.delete_files().to_pylist() if d["content"] == 2)


def test_converts_in_one_task_without_touching_data_files(demo_table):
    expected = add_flink_style_equality_deletes(demo_table)
    data_before = data_files_by_region(demo_table)
    op = ConvertEqualityDeletesOperator(task_id="convert", table=TABLE, memory_limit="128MiB")

    result = op.execute(_context("convert"))

    assert result["converted_equality_delete_files_count"] == 2
    assert result["added_position_delete_files_count"] > 0
    assert _equality_deletes(demo_table) == 0
    assert data_files_by_region(demo_table) == data_before
    assert live_checksum(demo_table) == expected  # PyIceberg reads it now

    retry = op.execute(_context("convert"))
    assert retry["already_committed"] is True
    assert retry["snapshot_ids"] == result["snapshot_ids"]


def test_mapped_form_plan_tasks_commit(demo_table, tmp_path):
    expected = add_flink_style_equality_deletes(demo_table)
    plan = ConvertEqualityDeletesPlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    assert len(plan) == 2  # one task per partition with equality deletes (eu, us)

    results = [
        ConvertEqualityDeletesTaskOperator(task_id="convert", task_spec=spec, memory_limit="128MiB").execute(
            _context("convert")
        )
        for spec in plan
    ]
    commit = CommitOperator(task_id="commit", results=results, planned=plan, table=TABLE)
    result = commit.execute(_context("commit"))

    assert result["converted_equality_delete_files_count"] == 2
    assert _equality_deletes(demo_table) == 0
    assert live_checksum(demo_table) == expected


def test_a_missing_task_result_commits_nothing(demo_table):
    add_flink_style_equality_deletes(demo_table)
    plan = ConvertEqualityDeletesPlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    first = ConvertEqualityDeletesTaskOperator(task_id="convert", task_spec=plan[0]).execute(
        _context("convert")
    )
    snapshot_id = demo_table.refresh().current_snapshot().snapshot_id

    with pytest.raises(AirflowFailException, match=r"committed all or nothing"):
        CommitOperator(task_id="commit", results=[first], planned=plan, table=TABLE).execute(
            _context("commit")
        )

    assert demo_table.refresh().current_snapshot().snapshot_id == snapshot_id
    for added in first["added_delete_files"]:  # the delivered task's files were removed
        assert not demo_table.io.new_input(added["file-path"]).exists()


def test_a_bad_option_fails_the_task_and_leaves_the_table_unchanged(demo_table):
    add_flink_style_equality_deletes(demo_table)
    snapshot_id, files = demo_table.current_snapshot().snapshot_id, files_under(demo_table)
    op = ConvertEqualityDeletesOperator(task_id="convert", table=TABLE, options={"rewrite-all": "true"})

    with pytest.raises(AirflowFailException, match=r"^ConfigurationError: unknown option") as raised:
        op.execute(_context("convert"))

    assert "\n" not in str(raised.value)
    assert demo_table.refresh().current_snapshot().snapshot_id == snapshot_id
    assert files_under(demo_table) == files
