"""Position-delete compaction in the Airflow layer: the one-task operator and the mapped form.

The engine entry point is patched by dotted path where the Airflow layer's behaviour is under test (the
arguments it builds, the commit id); everything else runs the real engine against the real SQLite
catalog of ``sqlite_table`` with position delete files committed on it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec import compat
from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.position_deletes import (
    PositionDeletePlanOperator,
    PositionDeleteRewriteOperator,
    RewritePositionDeletesOperator,
)
from tests.helpers import commit_position_deletes, data_files, files_under, live_checksum
from tests.unit.support import TABLE

REWRITE = "airflow_provider_iceberg_exec.engine.ops.position_deletes.rewrite_position_deletes"
RUN_ID = "manual__2024-01-01T00:00:00+00:00"


def _context(task_id: str = "posdel", try_number: int = 1) -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id=RUN_ID, task_id=task_id, map_index=-1, try_number=try_number)
    return {"ti": ti, "run_id": RUN_ID, "outlet_events": OutletEventAccessors()}


@pytest.fixture
def table_with_deletes(sqlite_table):
    """``ns.events`` with six one-row position delete files on one data file."""
    target = data_files(sqlite_table)[0].file_path
    for row in range(6):
        commit_position_deletes(sqlite_table, target, [row])
    return sqlite_table


def test_template_fields_and_init_only_assigns():
    assert set(RewritePositionDeletesOperator.template_fields) == {
        "table",
        "where",
        "options",
        "branch",
        "memory_limit",
        "iceberg_exec_conn_id",
        "commit_id",
    }
    op = RewritePositionDeletesOperator(task_id="p", table="{{ t }}", where="{{ w }}", options="{{ o }}")
    assert (op.table, op.where, op.options) == ("{{ t }}", "{{ w }}", "{{ o }}")
    assert set(PositionDeletePlanOperator.template_fields) == {
        "table",
        "where",
        "options",
        "branch",
        "iceberg_exec_conn_id",
    }


def test_passes_the_rendered_arguments_and_a_commit_id_from_the_run(sqlite_table, monkeypatch):
    calls: list[dict] = []

    def rewrite_position_deletes(table, **kwargs):
        calls.append(kwargs)
        return {
            "schema": "iceberg-exec/rewrite-position-deletes-result@1",
            "table": TABLE,
            "rewritten_delete_files_count": 6,
            "added_delete_files_count": 1,
            "rewritten_bytes_count": 600,
            "added_bytes_count": 100,
            "dangling_records": 0,
            "snapshot_ids": [7],
            "already_committed": False,
        }

    monkeypatch.setattr(REWRITE, rewrite_position_deletes)
    op = RewritePositionDeletesOperator(
        task_id="posdel",
        table="{{ params.table }}",
        options={"min-input-files": "{{ params.n }}", "rewrite-all": None},
        memory_limit="64MiB",
    )
    context = {**_context(), "params": {"table": TABLE, "n": 2}}
    op.render_template_fields(context)
    out = op.execute(context)
    (kwargs,) = calls
    assert kwargs["options"] == {"min-input-files": "2"}
    assert kwargs["commit_id"] == f"airflow:maint:{RUN_ID}:posdel"
    assert kwargs["limits"].memory_limit_bytes == 64 * 1024**2
    assert out["snapshot_ids"] == [7]
    (event,) = context["outlet_events"][AssetAlias(name="iceberg-exec-commits")].asset_alias_events
    assert event.extra["snapshot_ids"] == compat.alias_event_extra({"snapshot_ids": [7]})["snapshot_ids"]


def test_one_task_rewrites_and_a_retry_reports_the_landed_commit(table_with_deletes):
    before = live_checksum(table_with_deletes)
    op = RewritePositionDeletesOperator(task_id="posdel", table=TABLE, memory_limit="64MiB")
    first = op.execute(_context())
    again = op.execute(_context(try_number=2))
    assert first["rewritten_delete_files_count"] == 6
    assert first["added_delete_files_count"] == 1
    assert again["already_committed"] is True
    assert again["snapshot_ids"] == first["snapshot_ids"]
    assert live_checksum(table_with_deletes) == before
    assert json.loads(json.dumps(first)) == first


def test_mapped_form_plans_rewrites_and_commits(table_with_deletes):
    before = live_checksum(table_with_deletes)
    specs = PositionDeletePlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    assert len(specs) == 1
    results = [
        PositionDeleteRewriteOperator(task_id="rewrite", task_spec=s, memory_limit="64MiB").execute(
            _context("rewrite")
        )
        for s in specs
    ]
    out = CommitOperator(task_id="commit", results=results, planned=specs).execute(_context("commit"))
    assert out["schema"] == "iceberg-exec/rewrite-position-deletes-result@1"
    assert out["rewritten_delete_files_count"] == 6
    assert live_checksum(table_with_deletes) == before


def test_a_run_whose_groups_all_failed_commits_nothing(table_with_deletes):
    specs = PositionDeletePlanOperator(task_id="plan", table=TABLE).execute(_context("plan"))
    head = table_with_deletes.current_snapshot()
    with pytest.raises(AirflowFailException, match="every planned task failed"):
        CommitOperator(task_id="commit", results=[], planned=specs).execute(_context("commit"))
    table_with_deletes.refresh()
    assert table_with_deletes.current_snapshot() == head


def test_nothing_to_do_is_an_empty_plan(sqlite_table):
    assert PositionDeletePlanOperator(task_id="plan", table=TABLE).execute(_context("plan")) == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"options": {"delete-file-threshold": "1"}}, "ConfigurationError"),
        ({"where": "no_such_column = 1"}, "ConfigurationError"),
        ({"table": "ns.missing"}, "TableNotFoundError"),
    ],
    ids=["option", "where", "table"],
)
def test_bad_input_fails_with_one_line_and_leaves_the_table(table_with_deletes, kwargs, error):
    table = table_with_deletes
    head, files = table.current_snapshot(), files_under(table)
    op = RewritePositionDeletesOperator(
        task_id="posdel", **{"table": TABLE, "memory_limit": "64MiB", **kwargs}
    )
    with pytest.raises(AirflowFailException) as raised:
        op.execute(_context())
    assert str(raised.value).startswith(error)
    assert "\n" not in str(raised.value)
    table.refresh()
    assert table.current_snapshot() == head
    assert files_under(table) == files
