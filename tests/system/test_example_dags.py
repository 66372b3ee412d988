"""The example DAGs: DagBag loads them, and each runs with dag.test() against the real engine.

Airflow's metadata DB is SQLite in the session's Airflow home (``airflow db migrate`` once); the Iceberg
catalog is a real SQLite catalog with the demo's fragmented table; the engine is the real one.
"""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.helpers import live_checksum
from tests.system.conftest import DAGS_FOLDER, TABLE
from tests.system.dagbag import dagbag_api

pytestmark = pytest.mark.system


def _load_dag(name: str):
    path = DAGS_FOLDER / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"dags_examples_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.dag


def _data_files(table) -> int:
    table.refresh()
    return len(list(table.scan().plan_files()))


def _ti_states(dag_run) -> dict[str, str]:
    return {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in dag_run.get_task_instances()}


def _asset_events(uri: str) -> int:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(
            select(func.count(AssetEvent.id))
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
        )


def _rendered(ti) -> dict:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    return RenderedTaskInstanceFields.get_templated_fields(ti) or {}


def test_dagbag_loads_every_example_without_import_errors(airflow_db):
    dagbag, _ = dagbag_api()
    bag = dagbag(dag_folder=str(DAGS_FOLDER))
    assert bag.import_errors == {}
    assert {
        "iceberg_exec_backfill",
        "iceberg_exec_on_demand",
        "iceberg_exec_resolve_equality_deletes",
        "iceberg_exec_scheduled_maintenance",
    } <= set(bag.dag_ids)
    assert len(bag.dag_ids) == len(list(DAGS_FOLDER.glob("example_*.py")))


def test_on_demand_dag_compacts_the_table_with_params(airflow_db, demo_table):
    before_files, before_rows = _data_files(demo_table), live_checksum(demo_table)
    events_before = _asset_events("iceberg://demo/demo/events")
    dag = _load_dag("example_iceberg_on_demand")
    run = dag.test(
        run_conf={
            "table": TABLE,
            "target_file_size_bytes": 1 << 20,
            "min_input_files": 2,
            "memory_limit": "128MiB",
        }
    )
    assert str(run.state) == "success", _ti_states(run)
    assert _ti_states(run)["compaction.rewrite[0]"] == "success"
    assert _data_files(demo_table) < before_files
    assert live_checksum(demo_table) == before_rows
    assert demo_table.current_snapshot().summary.operation.value == "replace"
    assert _asset_events("iceberg://demo/demo/events") == events_before + 1


def test_on_demand_dag_passes_large_payloads_through_xcom_by_reference(airflow_db, demo_table, monkeypatch):
    """Past [iceberg_exec] payload_file_threshold, specs and results travel as files; the commit cleans up."""
    from pathlib import Path

    from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR

    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__PAYLOAD_FILE_THRESHOLD", "5")
    before_rows = live_checksum(demo_table)
    run = _load_dag("example_iceberg_on_demand").test(run_conf={"table": TABLE, "min_input_files": 2})
    assert str(run.state) == "success", _ti_states(run)
    plan = next(ti for ti in run.get_task_instances() if ti.task_id == "compaction.plan")
    specs = plan.xcom_pull(task_ids="compaction.plan")
    assert specs
    assert all(spec["schema"] == "iceberg-exec/payload-ref@1" for spec in specs)
    staging = Path(demo_table.location().removeprefix("file://")) / STAGING_DIR
    assert list(staging.glob("*.json")) == []
    assert live_checksum(demo_table) == before_rows


def test_on_demand_dag_with_nothing_to_do_succeeds_and_skips_the_commit(airflow_db, demo_table):
    """An empty plan maps no rewrite (skipped); all_done_min_one_success then skips the commit too."""
    before = demo_table.current_snapshot().snapshot_id
    dag = _load_dag("example_iceberg_on_demand")
    run = dag.test(run_conf={"table": TABLE, "where": "id < 0"})
    states = _ti_states(run)
    assert str(run.state) == "success", states
    assert states["compaction.rewrite[-1]"] == "skipped"
    assert states["compaction.commit[-1]"] == "skipped"
    demo_table.refresh()
    assert demo_table.current_snapshot().snapshot_id == before


def test_scheduled_maintenance_dag_senses_then_compacts(airflow_db, demo_table):
    before_rows = live_checksum(demo_table)
    dag = _load_dag("example_iceberg_scheduled_maintenance")
    run = dag.test()
    states = _ti_states(run)
    assert str(run.state) == "success", states
    assert states["health[-1]"] == "success"
    assert states["compaction.commit[-1]"] == "success"
    # twelve appends left twelve small manifests: the branch also chose the manifest rewrite
    assert states["rewrite_manifests[-1]"] == "success"
    assert states["expire_snapshots[-1]"] == "success"
    assert demo_table.refresh().current_snapshot().summary.operation.value == "replace"
    assert live_checksum(demo_table) == before_rows


def test_scheduled_maintenance_dag_rewrites_only_the_manifests_when_only_they_are_small(
    airflow_db, demo_table
):
    """Files large enough for the sensor, manifests not: the branch skips compaction."""
    with demo_table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "1024"})  # no data file is small now
    before_rows = live_checksum(demo_table)
    data_files_before = _data_files(demo_table)
    dag = _load_dag("example_iceberg_scheduled_maintenance")
    run = dag.test()
    states = _ti_states(run)
    assert str(run.state) == "success", states
    assert states["compaction.plan[-1]"] == "skipped"
    assert states["rewrite_manifests[-1]"] == "success"
    demo_table.refresh()
    assert len(demo_table.current_snapshot().manifests(demo_table.io)) == 1
    assert demo_table.current_snapshot().summary["manifests-replaced"] == "12"
    assert _data_files(demo_table) == data_files_before
    assert live_checksum(demo_table) == before_rows


def test_backfill_dag_compacts_the_data_interval(airflow_db, demo_table):
    before_rows = live_checksum(demo_table)
    dag = _load_dag("example_iceberg_backfill")
    run = dag.test(logical_date=datetime(2026, 1, 3, tzinfo=timezone.utc))
    states = _ti_states(run)
    assert str(run.state) == "success", states
    plan = next(ti for ti in run.get_task_instances() if ti.task_id == "compaction.plan")
    assert _rendered(plan)["where"] == (
        "event_ts >= '2026-01-02T00:00:00+00:00' and event_ts < '2026-01-03T00:00:00+00:00'"
    )
    assert demo_table.refresh().current_snapshot().summary.operation.value == "replace"
    assert live_checksum(demo_table) == before_rows


def test_resolve_equality_deletes_dag_removes_them_and_keeps_the_live_rows(airflow_db, demo_table):
    """Plan (only files equality deletes apply to) >> one mapped rewrite per partition >> one commit."""
    from tests.system.equality_support import (
        add_flink_style_equality_deletes,
        data_files_by_region,
        live_delete_files,
    )

    expected = add_flink_style_equality_deletes(demo_table)
    assert live_delete_files(demo_table) == 2
    with pytest.raises(ValueError, match="equality deletes"):
        live_checksum(demo_table)  # PyIceberg cannot read the table yet
    untouched = data_files_by_region(demo_table)["apac"]
    events_before = _asset_events("iceberg://demo/demo/events")

    run = _load_dag("example_iceberg_resolve_equality_deletes").test(
        run_conf={"table": TABLE, "memory_limit": "128MiB"}
    )

    states = _ti_states(run)
    assert str(run.state) == "success", states
    assert {states["resolve.rewrite[0]"], states["resolve.rewrite[1]"]} == {"success"}  # eu and us
    assert live_delete_files(demo_table) == 0
    assert live_checksum(demo_table) == expected
    assert data_files_by_region(demo_table)["apac"] == untouched
    assert demo_table.current_snapshot().summary.operation.value == "replace"
    assert _asset_events("iceberg://demo/demo/events") == events_before + 1


def test_cdc_merge_dag_merges_the_landed_batch_then_compacts(airflow_db, demo_table):
    """The expected rows: the rows before, with the landed batch's changes applied by hand."""
    import pyarrow.parquet as pq

    from tests.helpers import local_path, row_digest

    before = {r["id"]: r for r in demo_table.scan().to_arrow().to_pylist()}
    run = _load_dag("example_iceberg_cdc_merge").test()

    states = _ti_states(run)
    assert str(run.state) == "success", states
    assert states["merge[-1]"] == "success"
    assert states["compaction.commit[-1]"] == "success"
    (landed,) = (Path(local_path(demo_table.location())) / "landing").glob("cdc-*.parquet")
    batch = pq.read_table(landed).to_pylist()
    assert {r["op"] for r in batch} == {"U", "D", "I"}
    for change in batch:
        op = change.pop("op")
        if op == "D":
            before.pop(change["id"])
        else:
            before[change["id"]] = change
    expected = (len(before), sum(row_digest(r) for r in before.values()) & ((1 << 64) - 1))
    assert live_checksum(demo_table) == expected
    assert demo_table.current_snapshot().summary.operation.value == "replace"  # compacted after the merge
