"""ResolveEqualityDeletesOperator's execute() with the real engine against a real SQLite catalog.

The table is the demo's, with partition-scoped equality deletes and newer rows for deleted keys, as a
Flink upsert sink leaves it; the expected live rows are computed from what PyIceberg read before the
deletes (tests/system/equality_support.py), and PyIceberg reads the table after the resolution.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.operators.resolve import ResolveEqualityDeletesOperator
from tests.helpers import files_under, live_checksum
from tests.system.conftest import TABLE
from tests.system.equality_support import (
    add_flink_style_equality_deletes,
    data_files_by_region,
    live_delete_files,
)

pytestmark = pytest.mark.system


def _context(run_id: str = "manual__1") -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id=run_id, task_id="resolve", map_index=-1)
    return {"ti": ti, "run_id": run_id, "outlet_events": OutletEventAccessors()}


def test_resolves_the_equality_deletes_in_one_task_and_a_retry_reports_the_landed_commit(demo_table):
    expected = add_flink_style_equality_deletes(demo_table)
    untouched = data_files_by_region(demo_table)["apac"]
    op = ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE, memory_limit="128MiB")

    result = op.execute(_context())

    assert result["removed_delete_files_count"] == 2
    assert result["rewritten_data_files_count"] == 24  # every eu and us file older than the deletes
    assert live_delete_files(demo_table) == 0
    assert live_checksum(demo_table) == expected
    assert data_files_by_region(demo_table)["apac"] == untouched
    (snapshot_id,) = result["snapshot_ids"]
    assert demo_table.current_snapshot().snapshot_id == snapshot_id
    assert (
        demo_table.current_snapshot().summary["iceberg-exec.commit-id"] == "airflow:maint:manual__1:resolve"
    )

    retry = op.execute(_context())  # the same task instance again: it finds its commit and reports it

    assert retry["snapshot_ids"] == [snapshot_id]
    assert retry["already_committed"] is True
    assert retry["removed_delete_files_count"] == 2
    assert demo_table.refresh().current_snapshot().snapshot_id == snapshot_id


def test_a_bad_filter_fails_the_task_and_leaves_the_table_and_its_files_unchanged(demo_table):
    add_flink_style_equality_deletes(demo_table)
    snapshot_id, files = demo_table.current_snapshot().snapshot_id, files_under(demo_table)
    op = ResolveEqualityDeletesOperator(task_id="resolve", table=TABLE, where="region = ")

    with pytest.raises(AirflowFailException, match=r"^ConfigurationError: ") as raised:
        op.execute(_context())

    assert "\n" not in str(raised.value)
    assert demo_table.refresh().current_snapshot().snapshot_id == snapshot_id
    assert files_under(demo_table) == files
    assert live_delete_files(demo_table) == 2
