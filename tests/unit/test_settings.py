"""settings.py reads [iceberg_exec] lazily: a change of config is seen by the next call."""

from __future__ import annotations

import pytest

from airflow_provider_iceberg_exec import settings


def test_defaults_come_from_the_declared_config_section():
    assert settings.default_memory_limit() == "256MiB"
    assert settings.default_pool() == "default_pool"
    assert settings.slots_per_gib() == 4.0
    assert settings.payload_file_threshold() == 1000
    assert settings.spill_dir() is None


def test_config_is_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__MEMORY_LIMIT", "1GiB")
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SPILL_DIR", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__POOL", "iceberg_exec")
    limits = settings.resource_limits()
    assert limits.memory_limit_bytes == 1024**3
    assert limits.spill_dir == str(tmp_path)
    assert settings.default_pool() == "iceberg_exec"
    assert settings.default_pool_slots() == 4


@pytest.mark.parametrize(
    ("memory_limit", "per_gib", "slots"),
    [
        ("256MiB", 4, 1),
        ("1GiB", 4, 4),
        ("1.5GiB", 4, 6),
        ("100MiB", 1, 1),
        (3 * 1024**3, 2, 6),
        ("1GiB", 0.5, 1),
    ],
)
def test_pool_slots_are_ceil_of_gib_times_slots_per_gib(memory_limit, per_gib, slots):
    assert settings.pool_slots_for(memory_limit, per_gib=per_gib) == slots


def test_task_memory_limit_overrides_the_default():
    assert settings.resource_limits("512MiB").memory_limit_bytes == 512 * 1024**2
    assert settings.resource_limits(" ").memory_limit_bytes == 256 * 1024**2


def test_bad_memory_limit_is_a_configuration_error():
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        settings.resource_limits("lots")
    with pytest.raises(ConfigurationError):
        settings.resource_limits("1MiB")  # below the engine's floor


def test_non_positive_slots_per_gib_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SLOTS_PER_GIB", "0")
    with pytest.raises(ValueError, match="slots_per_gib"):
        settings.slots_per_gib()
