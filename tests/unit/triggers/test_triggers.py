"""The triggers against a real SQLite catalog: serialize, run(), and the checks they poll."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_iceberg_exec.triggers.health import (
    IcebergTableHealthTrigger,
    health_reasons,
    table_health,
)
from airflow_provider_iceberg_exec.triggers.snapshot import IcebergSnapshotTrigger, find_new_snapshot
from tests.unit.support import TABLE, append_rows

SNAPSHOT_TRIGGER = "airflow_provider_iceberg_exec.triggers.snapshot.IcebergSnapshotTrigger"
HEALTH_TRIGGER = "airflow_provider_iceberg_exec.triggers.health.IcebergTableHealthTrigger"


async def _first_event(trigger, timeout: float = 20.0):
    async def first():
        async for event in trigger.run():
            return event
        return None

    return await asyncio.wait_for(first(), timeout)


# ---------------------------------------------------------------- serialize


def test_snapshot_trigger_serialize_round_trips_exactly():
    trigger = IcebergSnapshotTrigger(
        table=TABLE,
        branch="b",
        since_snapshot_id=5,
        since_timestamp_ms=7,
        iceberg_exec_conn_id="c",
        poke_interval=3.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == SNAPSHOT_TRIGGER
    assert kwargs == {
        "table": TABLE,
        "branch": "b",
        "since_snapshot_id": 5,
        "since_timestamp_ms": 7,
        "iceberg_exec_conn_id": "c",
        "poke_interval": 3.0,
    }
    assert IcebergSnapshotTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs


def test_health_trigger_serialize_round_trips_exactly():
    trigger = IcebergTableHealthTrigger(
        table=TABLE, thresholds={"min_small_files": 3, "min_delete_files": None}
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == HEALTH_TRIGGER
    assert IcebergTableHealthTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs


@pytest.mark.parametrize("name", ["events", "ns.", ".t", ""])
def test_triggers_validate_the_table_name(name):
    with pytest.raises(ValueError, match=r"namespace\.table"):
        IcebergSnapshotTrigger(table=name)
    with pytest.raises(ValueError, match=r"namespace\.table"):
        IcebergTableHealthTrigger(table=name)


# ---------------------------------------------------------------- trigger run()


def test_snapshot_trigger_fires_once_a_new_snapshot_lands(sqlite_table):
    head = sqlite_table.current_snapshot().snapshot_id
    trigger = IcebergSnapshotTrigger(table=TABLE, since_snapshot_id=head, poke_interval=0.05)

    async def scenario():
        waiter = asyncio.ensure_future(_first_event(trigger))
        await asyncio.sleep(0.3)
        assert not waiter.done(), "fired without a new snapshot"
        await asyncio.to_thread(append_rows, sqlite_table)
        return await waiter

    event = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert event.payload["previous_snapshot_id"] == head
    assert event.payload["snapshot_id"] == sqlite_table.refresh().current_snapshot().snapshot_id
    assert event.payload["table"] == TABLE


def test_snapshot_trigger_keeps_polling_while_the_table_does_not_exist(sqlite_table, tmp_path):
    """Raising would make the triggerer restart the trigger in a loop; a missing table is "not yet"."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "demo", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    trigger = IcebergSnapshotTrigger(table="ns.later", poke_interval=0.05)

    def create_later():
        table = catalog.create_table("ns.later", schema=sqlite_table.schema())
        append_rows(table)

    async def scenario():
        waiter = asyncio.ensure_future(_first_event(trigger))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await asyncio.to_thread(create_later)
        return await waiter

    assert asyncio.run(scenario()).payload["status"] == "success"


def test_trigger_reports_a_bad_connection_as_an_error_event(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT",
        json.dumps({"conn_type": "iceberg_exec", "host": "http://x", "extra": {"py-io-impl": "evil"}}),
    )
    event = asyncio.run(_first_event(IcebergSnapshotTrigger(table=TABLE, poke_interval=0.05)))
    assert event.payload["status"] == "error"
    assert "not allowed" in event.payload["message"]


def test_health_trigger_fires_when_small_files_reach_the_threshold(sqlite_table):
    trigger = IcebergTableHealthTrigger(table=TABLE, thresholds={"min_small_files": 12}, poke_interval=0.05)
    event = asyncio.run(_first_event(trigger))
    assert event.payload["status"] == "success"
    assert event.payload["small_files"] == 12
    assert event.payload["reasons"] == ["12 small files >= 12"]


def test_health_trigger_waits_while_the_table_is_healthy(sqlite_table):
    trigger = IcebergTableHealthTrigger(table=TABLE, thresholds={"min_small_files": 100}, poke_interval=0.05)
    with pytest.raises(TimeoutError):
        asyncio.run(_first_event(trigger, timeout=0.5))


# ---------------------------------------------------------------- checks


def test_table_health_counts_files_from_the_manifests(sqlite_table):
    metrics = table_health(sqlite_table)
    assert metrics["data_files"] == 12
    assert metrics["small_files"] == 12
    assert metrics["delete_files"] == 0
    assert metrics["partitions"] == 1
    assert metrics["max_files_per_partition"] == 12
    assert metrics["small_file_size_bytes"] == int(512 * 1024**2 * 0.75)
    assert json.loads(json.dumps(metrics)) == metrics


def test_table_health_of_a_table_without_snapshot_is_empty(sqlite_table, tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "demo", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    empty = catalog.create_table("ns.empty", schema=sqlite_table.schema())
    assert table_health(empty)["data_files"] == 0
    assert find_new_snapshot(empty) is None


def test_health_reasons_cover_every_threshold():
    metrics = {"small_files": 5, "small_file_bytes": 500, "delete_files": 2, "max_files_per_partition": 9}
    thresholds = {
        "min_small_files": 5,
        "min_small_file_bytes": 400,
        "min_delete_files": 2,
        "max_files_per_partition": 8,
    }
    assert len(health_reasons(metrics, thresholds)) == 4
    assert health_reasons(metrics, {"max_files_per_partition": 9}) == []


def test_find_new_snapshot_since_a_time(sqlite_table):
    head = sqlite_table.current_snapshot()
    assert find_new_snapshot(sqlite_table, since_timestamp_ms=head.timestamp_ms) is None
    assert (
        find_new_snapshot(sqlite_table, since_timestamp_ms=head.timestamp_ms - 1)["snapshot_id"]
        == head.snapshot_id
    )
    assert find_new_snapshot(sqlite_table, branch="nope") is None
