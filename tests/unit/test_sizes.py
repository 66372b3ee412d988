"""One byte-size grammar: the engine and the Airflow settings accept and refuse the same strings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_provider_iceberg_exec import engine, settings
from airflow_provider_iceberg_exec.engine import config
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.sizes import parse_byte_size

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4

ACCEPTED = [
    ("33554432", 32 * MiB),
    ("  67108864  ", 64 * MiB),
    ("268435456B", 256 * MiB),
    ("256MiB", 256 * MiB),
    ("256MB", 256 * MiB),
    ("256M", 256 * MiB),
    ("256Mi", 256 * MiB),
    ("256 mib", 256 * MiB),
    ("65536K", 64 * MiB),
    ("65536Ki", 64 * MiB),
    ("65536kb", 64 * MiB),
    ("65536KIB", 64 * MiB),
    ("1GiB", GiB),
    ("1.5g", GiB + GiB // 2),
    ("2 GB", 2 * GiB),
    ("1T", TiB),
    ("0.25TiB", TiB // 4),
]

REFUSED = [
    "",
    "   ",
    "lots",
    "256iB",
    "256 iB",
    "256KiBB",
    "256Bi",
    "256P",
    "256PiB",
    "-1GiB",
    "+1GiB",
    "1e9",
    "1,000",
    "1_000",
    ".5G",
    "5.G",
    "0x100",
    "1 G B",
    "GiB",
    "١٠٢٤",  # non-ASCII digits
]


@pytest.mark.parametrize(("text", "size"), ACCEPTED)
def test_every_entry_point_reads_a_size_alike(text, size):
    """The engine's parser (the CLI's --memory-limit) and the settings give the same number of bytes."""
    assert parse_byte_size(text) == size
    assert engine.parse_byte_size(text) == size
    assert config.ResourceLimits(memory_limit_bytes=config.parse_byte_size(text)).memory_limit_bytes == size
    assert settings.resource_limits(text).memory_limit_bytes == size
    assert settings.pool_slots_for(text, per_gib=GiB) == max(1, size)


@pytest.mark.parametrize("text", REFUSED)
def test_every_entry_point_refuses_a_non_size_with_one_line_naming_it(text):
    """The same strings are refused everywhere, with the value and the accepted forms on one line."""
    calls = [
        lambda: parse_byte_size(text),
        lambda: engine.parse_byte_size(text),
        lambda: config.parse_byte_size(text),
        lambda: settings.pool_slots_for(text, per_gib=1),
    ]
    if text.strip():  # an empty limit means the configured default
        calls.append(lambda: settings.resource_limits(text))
    for call in calls:
        with pytest.raises(ConfigurationError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"not a byte size: {text!r}; use an integer count of bytes")
        assert "\n" not in message


def test_an_int_is_a_count_of_bytes():
    assert parse_byte_size(3 * GiB) == 3 * GiB
    assert settings.pool_slots_for(3 * GiB, per_gib=2) == 6


def test_a_fraction_of_a_byte_is_dropped_and_big_sizes_are_exact():
    assert parse_byte_size("1.5") == 1
    assert parse_byte_size("9007199254740993") == 2**53 + 1  # no float rounding


def test_a_refused_size_is_a_value_error_for_callers_of_pool_slots_for():
    with pytest.raises(ValueError, match="not a byte size"):
        settings.pool_slots_for("256iB")


def test_a_size_parses_without_importing_the_engine():
    """DAG files call pool_slots_for while they are parsed: that must load no engine module."""
    code = (
        "import sys\n"
        "from airflow_provider_iceberg_exec import settings\n"
        "assert settings.pool_slots_for('2GiB', per_gib=4) == 8\n"
        "loaded = [m for m in sys.modules if m.startswith('airflow_provider_iceberg_exec.engine')]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
