"""The MERGE operators with the real engine against the demo table (12 appends over three ``region``
partitions, ids 0..3599): the one-task upsert fed by an upstream task's XCom in a real dag.test(), the
mapped form with its commit (and a retried commit), and a failing merge.

The expected rows are computed here from what PyIceberg read before the merge; after it PyIceberg
reads the table again (``tests.helpers.live_checksum``), never the code under test.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.merge import (
    MergeOperator,
    MergePlanOperator,
    MergeTaskOperator,
)
from tests.helpers import files_under, live_checksum, row_digest, table_state
from tests.system.conftest import TABLE
from tests.system.dagbag import register

pytestmark = pytest.mark.system

_MASK = (1 << 64) - 1
_CDC_CLAUSES = {
    "when_matched": ["AND s.op = 'D' THEN DELETE", "UPDATE SET *"],
    "when_not_matched": ["AND s.op != 'D' THEN INSERT *"],
}


def _checksum(rows: list[dict[str, Any]]) -> tuple[int, int]:
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & _MASK
    return len(rows), total


def _context(task_id: str, run_id: str = "manual__1", map_index: int = -1) -> dict:
    ti = SimpleNamespace(dag_id="merge", run_id=run_id, task_id=task_id, map_index=map_index)
    return {"ti": ti, "run_id": run_id, "outlet_events": OutletEventAccessors()}


def _cdc_batch(table, path: Path) -> tuple[str, tuple[int, int]]:
    """A CDC batch over every partition: updates ('U'), deletes ('D') of existing ids, new ids ('I');
    written as Parquet with the table's columns plus ``op``; and the expected live rows' checksum."""
    before = table.refresh().scan().to_arrow()
    ids = before.column("id").to_pylist()
    updated = {i for i in ids if i % 97 == 0}
    deleted = {i for i in ids if i % 89 == 0} - updated
    changed = before.filter(pc.is_in(before.column("id"), pa.array(sorted(updated | deleted), pa.int64())))
    payload = [
        f"updated-{i}" if i in updated else p
        for i, p in zip(changed["id"].to_pylist(), changed["payload"].to_pylist(), strict=True)
    ]
    changed = changed.set_column(changed.schema.get_field_index("payload"), "payload", pa.array(payload))
    new = before.slice(0, 5).set_column(0, "id", pa.array([9000 + n for n in range(5)], pa.int64()))
    batch = pa.concat_tables([changed, new])
    ops = ["U" if i in updated else "D" if i in deleted else "I" for i in batch["id"].to_pylist()]
    pq.write_table(batch.append_column("op", pa.array(ops)), path)
    by_id = {r["id"]: r for r in before.to_pylist() if r["id"] not in deleted}
    by_id.update({r["id"]: r for r in batch.to_pylist() if r["id"] not in deleted})
    return str(path), _checksum(list(by_id.values()))


def test_upsert_operator_takes_the_source_from_an_upstream_tasks_xcom(airflow_db, demo_table, tmp_path):
    """A real dag.test(): the upstream task stages a Parquet batch and returns its URIs."""
    from airflow.sdk import DAG, task

    from airflow_provider_iceberg_exec.operators.merge import UpsertOperator

    before = demo_table.scan().to_arrow()
    changes = before.filter(pc.less(before.column("id"), 40))
    changes = changes.set_column(changes.schema.get_field_index("payload"), "payload", pa.array(["new"] * 40))
    inserts = before.slice(0, 3).set_column(0, "id", pa.array([7000, 7001, 7002], pa.int64()))
    by_id = {r["id"]: r for r in before.to_pylist()}
    by_id.update({r["id"]: r for r in pa.concat_tables([changes, inserts]).to_pylist()})
    expected = _checksum(list(by_id.values()))
    staged = tmp_path / "batch.parquet"

    with DAG(dag_id="merge_upsert_xcom", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task
        def land_batch() -> list[str]:
            pq.write_table(pa.concat_tables([changes, inserts]), staged)
            return [f"file://{staged}"]

        UpsertOperator(
            task_id="upsert", table=TABLE, join_cols="id", source_files=land_batch(), memory_limit="128MiB"
        )
    register(dag)
    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success", states
    assert live_checksum(demo_table) == expected
    snapshot = demo_table.current_snapshot()
    assert snapshot.summary["iceberg-exec.commit-id"] == f"airflow:merge_upsert_xcom:{run.run_id}:upsert"
    assert snapshot.summary.operation.value == "overwrite"


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_mapped_form_plans_several_tasks_and_commits_them_once(demo_table, tmp_path, mode):
    source, expected = _cdc_batch(demo_table, tmp_path / "cdc.parquet")
    sizes = [task.file.file_size_in_bytes for task in demo_table.scan().plan_files()]
    plan = MergePlanOperator(
        task_id="plan",
        table=TABLE,
        on="id",
        source_files=[source],
        mode=mode,
        task_size_bytes=sum(sizes) // 4 + 1,
        **_CDC_CLAUSES,
    ).execute(_context("plan"))
    assert len(plan) >= 4
    inserts = [task for task in plan if task["inserts"]]
    assert len(inserts) == 1
    assert inserts[0]["data_files"] == []  # the inserts task reads only the candidates' keys

    results = [
        MergeTaskOperator(task_id="merge", task_spec=spec, memory_limit="128MiB").execute(
            _context("merge", map_index=n)
        )
        for n, spec in enumerate(plan)
    ]
    commit = CommitOperator(task_id="commit", results=results, planned=plan, table=TABLE)
    result = commit.execute(_context("commit"))

    assert result["schema"] == "iceberg-exec/merge-result@1"
    assert result["mode"] == mode
    assert result["num_target_rows_inserted"] == 5
    assert live_checksum(demo_table) == expected
    state = table_state(demo_table)

    retry = commit.execute(_context("commit"))  # the same run and task: the same commit id
    assert retry["already_committed"] is True
    assert retry["snapshot_ids"] == result["snapshot_ids"]
    assert table_state(demo_table) == state
    assert live_checksum(demo_table) == expected


def test_a_missing_merge_task_commits_nothing(demo_table, tmp_path):
    source, _ = _cdc_batch(demo_table, tmp_path / "cdc.parquet")
    sizes = [task.file.file_size_in_bytes for task in demo_table.scan().plan_files()]
    plan = MergePlanOperator(
        task_id="plan", table=TABLE, on=["id"], source_files=source, task_size_bytes=sum(sizes) // 3 + 1,
        **_CDC_CLAUSES,
    ).execute(_context("plan"))  # fmt: skip
    before, rows, files = table_state(demo_table), live_checksum(demo_table), files_under(demo_table)
    delivered = [
        MergeTaskOperator(task_id="merge", task_spec=spec).execute(_context("merge", map_index=n))
        for n, spec in enumerate(plan[:-1])
    ]

    with pytest.raises(AirflowFailException, match=r"committed all or nothing"):
        CommitOperator(task_id="commit", results=delivered, planned=plan, table=TABLE).execute(
            _context("commit")
        )
    with pytest.raises(AirflowFailException, match=r"task\(s\) but .* result\(s\) were given"):
        CommitOperator(task_id="commit", results=delivered, table=TABLE).execute(_context("commit"))

    assert table_state(demo_table) == before
    assert files_under(demo_table) == files
    assert live_checksum(demo_table) == rows


def test_a_duplicate_source_key_fails_the_task_with_one_line_and_changes_nothing(demo_table, tmp_path):
    before = demo_table.scan().to_arrow()
    twice = before.filter(pc.equal(before.column("id"), 17))
    pq.write_table(pa.concat_tables([twice, twice]), tmp_path / "dup.parquet")
    state, rows, files = table_state(demo_table), live_checksum(demo_table), files_under(demo_table)
    op = MergeOperator(
        task_id="merge",
        table=TABLE,
        on="id",
        source_files=[str(tmp_path / "dup.parquet")],
        when_matched="UPDATE SET *",
        when_not_matched="INSERT *",
    )

    with pytest.raises(AirflowFailException, match=r"^ConfigurationError: The ON search condition") as raised:
        op.execute(_context("merge"))

    assert "\n" not in str(raised.value)
    assert "multiple rows of the source table" in str(raised.value)
    assert table_state(demo_table) == state
    assert files_under(demo_table) == files
    assert live_checksum(demo_table) == rows
