"""The sensors against a real SQLite catalog: poke, deferral, completion, and the ``since`` argument."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_provider_iceberg_exec.compat import TaskDeferred
from airflow_provider_iceberg_exec.sensors.health import IcebergTableHealthSensor
from airflow_provider_iceberg_exec.sensors.snapshot import IcebergSnapshotSensor, to_epoch_ms
from airflow_provider_iceberg_exec.triggers.health import IcebergTableHealthTrigger
from airflow_provider_iceberg_exec.triggers.snapshot import IcebergSnapshotTrigger
from tests.unit.support import TABLE, append_rows


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        (1700000000000, 1700000000000),
        ("1700000000000", 1700000000000),
        ("2023-11-14T22:13:20+00:00", 1700000000000),
        ("2023-11-14T22:13:20Z", 1700000000000),
    ],
)
def test_since_accepts_epoch_ms_and_iso_times(value, expected):
    assert to_epoch_ms(value) == expected


def test_since_refuses_text_that_is_not_a_time():
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        to_epoch_ms("yesterday-ish")


# ---------------------------------------------------------------- sensors


def test_snapshot_sensor_pokes_without_deferral(sqlite_table):
    head = sqlite_table.current_snapshot().snapshot_id
    sensor = IcebergSnapshotSensor(task_id="s", table=TABLE, since_snapshot_id=str(head), deferrable=False)
    first = sensor.poke({})
    assert isinstance(first, PokeReturnValue)
    assert not first.is_done
    append_rows(sqlite_table)
    result = sensor.poke({})
    assert result.is_done
    assert result.xcom_value["previous_snapshot_id"] == head


def test_snapshot_sensor_renders_since_from_the_data_interval(sqlite_table):
    sensor = IcebergSnapshotSensor(task_id="s", table="{{ params.t }}", since="{{ start }}")
    sensor.render_template_fields({"params": {"t": TABLE}, "start": "2000-01-01T00:00:00+00:00"})
    assert sensor.table == TABLE
    assert sensor.poke({}).is_done


def test_sensor_treats_a_missing_table_as_not_yet(sqlite_table):
    assert not IcebergSnapshotSensor(task_id="s", table="ns.nope").poke({}).is_done
    assert not IcebergTableHealthSensor(task_id="h", table="ns.nope").poke({}).is_done


def test_deferrable_sensor_defers_to_its_trigger(sqlite_table):
    head = sqlite_table.current_snapshot().snapshot_id
    sensor = IcebergSnapshotSensor(
        task_id="s", table=TABLE, since_snapshot_id=head, deferrable=True, poke_interval=7, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, IcebergSnapshotTrigger)
    assert trigger.serialize()[1]["since_snapshot_id"] == head
    assert trigger.poke_interval == 7
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=60)


def test_deferrable_sensor_does_not_defer_when_already_done(sqlite_table):
    sensor = IcebergTableHealthSensor(task_id="h", table=TABLE, min_small_files=5, deferrable=True)
    result = sensor.execute({})
    assert result["small_files"] == 12


def test_deferrable_health_sensor_defers_with_its_thresholds(sqlite_table):
    sensor = IcebergTableHealthSensor(
        task_id="h", table=TABLE, min_small_files="{{ n }}", max_files_per_partition=50, deferrable=True
    )
    sensor.render_template_fields({"n": 100})
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert isinstance(deferred.value.trigger, IcebergTableHealthTrigger)
    assert deferred.value.trigger.thresholds == {
        "min_small_files": 100,
        "min_small_file_bytes": None,
        "min_delete_files": None,
        "max_files_per_partition": 50,
        "min_small_manifests": None,
    }


def test_health_sensor_pokes_without_deferral(sqlite_table):
    sensor = IcebergTableHealthSensor(task_id="h", table=TABLE, min_small_files=13, deferrable=False)
    assert not sensor.poke({}).is_done
    append_rows(sqlite_table)
    assert sensor.poke({}).xcom_value["reasons"] == ["13 small files >= 13"]


def test_execute_complete_returns_the_event_or_fails_with_its_message():
    sensor = IcebergSnapshotSensor(task_id="s", table=TABLE)
    assert sensor.execute_complete({}, {"status": "success", "snapshot_id": 3}) == {"snapshot_id": 3}
    with pytest.raises(AirflowException, match="boom"):
        sensor.execute_complete({}, {"status": "error", "message": "boom"})


def test_sensors_are_not_deferrable_unless_configured():
    assert IcebergSnapshotSensor(task_id="s", table=TABLE).deferrable is False
    assert IcebergTableHealthSensor(task_id="h", table=TABLE).deferrable is False
