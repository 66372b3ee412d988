"""The health signal of a manifest rewrite: many small data manifests, counted from the manifest list."""

from __future__ import annotations

import asyncio
import json

from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.triggers.health import (
    SMALL_MANIFESTS_REASON,
    IcebergTableHealthTrigger,
    health_reasons,
    manifest_health,
    table_health,
)
from tests.unit.support import TABLE


def test_table_health_counts_the_data_manifests_and_the_small_ones(sqlite_table):
    metrics = table_health(sqlite_table)

    assert metrics["data_manifests"] == 12
    assert metrics["small_manifests"] == 12
    assert metrics["small_manifest_size_bytes"] == int(8 * 1024**2 * 0.75)
    assert 0 < metrics["data_manifest_bytes"] < 12 * metrics["small_manifest_size_bytes"]
    assert json.loads(json.dumps(metrics)) == metrics


def test_a_manifest_at_or_over_the_small_size_is_not_small(sqlite_table):
    manifests = sqlite_table.current_snapshot().manifests(sqlite_table.io)
    smallest = min(m.manifest_length for m in manifests)

    metrics = manifest_health(sqlite_table, manifests, small_manifest_size_bytes=smallest)

    assert metrics["small_manifests"] == 0
    assert metrics["data_manifests"] == 12


def test_the_reason_names_small_data_manifests_only_when_a_threshold_is_set():
    assert health_reasons({"small_manifests": 30}, {"min_small_manifests": 30}) == [
        f"30 {SMALL_MANIFESTS_REASON} >= 30"
    ]
    assert health_reasons({"small_manifests": 30}, {"min_small_manifests": None}) == []
    assert health_reasons({"small_manifests": 29}, {"min_small_manifests": 30}) == []


def test_the_sensor_fires_on_small_manifests_and_not_after_they_are_rewritten(sqlite_table):
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

    sensor = IcebergTableHealthSensor(
        task_id="h", table=TABLE, min_small_files=None, min_small_manifests="{{ n }}", deferrable=False
    )
    sensor.render_template_fields({"n": 10})
    fired = sensor.poke({})
    assert fired.is_done
    assert fired.xcom_value["reasons"] == [f"12 {SMALL_MANIFESTS_REASON} >= 10"]

    rewrite_manifests(sqlite_table, commit_id="h-1")

    assert not sensor.poke({}).is_done


def test_the_trigger_carries_the_threshold_and_fires_on_it(sqlite_table):
    trigger = IcebergTableHealthTrigger(
        table=TABLE, thresholds={"min_small_manifests": 12}, poke_interval=0.05
    )
    assert trigger.serialize()[1]["thresholds"] == {"min_small_manifests": 12}

    async def first():
        async for event in trigger.run():
            return event
        return None

    event = asyncio.run(asyncio.wait_for(first(), timeout=30))
    assert event.payload["status"] == "success"
    assert event.payload["reasons"] == [f"12 {SMALL_MANIFESTS_REASON} >= 12"]
