"""engine/config.py: byte sizes, resource limits and compaction options fail on construction, with a
message that says what to use, before any file is read or written."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_provider_iceberg_exec.engine.config import (
    MIN_MEMORY_LIMIT_BYTES,
    CompactionOptions,
    ResourceLimits,
    RewriteJobOrder,
    parse_byte_size,
)
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1048576", 1048576),
        ("512B", 512),
        ("1K", 1024),
        ("1kib", 1024),
        ("256MiB", 256 * 1024**2),
        ("256 MB", 256 * 1024**2),
        ("1.5G", int(1.5 * 1024**3)),
        (" 2GiB ", 2 * 1024**3),
        ("1T", 1024**4),
        (7, 7),
    ],
)
def test_byte_sizes_are_binary_whatever_the_spelling(text, expected) -> None:
    assert parse_byte_size(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "-1MiB", "1 PiB", "12 apples", "1e6", "1,5G"])
def test_what_is_not_a_byte_size_is_refused_with_an_example(text) -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"not a byte size: .*; use an integer count of bytes, or a number with a unit",
    ):
        parse_byte_size(text)


def test_resource_limits_default_to_256_mib_and_size_the_writer_buffer_from_the_limit() -> None:
    limits = ResourceLimits()
    assert limits.memory_limit_bytes == 256 * 1024**2
    assert limits.writer_buffer_bytes == 32 * 1024**2
    assert limits.target_partitions >= 1
    assert ResourceLimits(memory_limit_bytes=4 * 1024**3).writer_buffer_bytes == 128 * 1024**2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory_limit_bytes": MIN_MEMORY_LIMIT_BYTES - 1}, "is below the floor of 32MiB"),
        ({"target_partitions": 0}, "target_partitions must be >= 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"memory_limit_bytes": 64 << 20, "writer_limit_bytes": 32 << 20}, "at least memory_limit_bytes"),
    ],
)
def test_resource_limits_refuse_what_cannot_run(kwargs, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ResourceLimits(**kwargs)


@pytest.mark.parametrize(
    ("memory_mib", "cores", "shares"),
    [(256, 2, 2), (256, 8, 2), (1024, 8, 2), (4096, 8, 8), (64, 2, 2), (32, 2, 1), (256, 1, 1)],
)
def test_limits_are_shared_by_the_writers_they_hold_each_with_the_floor_of_a_limit(
    memory_mib: int, cores: int, shares: int
) -> None:
    whole = ResourceLimits(memory_limit_bytes=memory_mib << 20, target_partitions=cores)
    assert whole.shares == shares
    share = whole.shared(shares)
    assert share.memory_limit_bytes == whole.memory_limit_bytes // shares >= MIN_MEMORY_LIMIT_BYTES
    assert share.target_partitions == max(1, cores // shares)
    assert share.writer_buffer_bytes == whole.writer_buffer_bytes  # the whole's row groups
    assert share.shared(1) is share
    with pytest.raises(ConfigurationError, match=f"shared by 1 to {shares} executions, not {shares + 1}"):
        whole.shared(shares + 1)


def test_the_floor_itself_is_accepted_and_limits_are_frozen() -> None:
    limits = ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.memory_limit_bytes = 1  # type: ignore[misc]


def test_option_values_are_converted_from_strings_as_on_sparks_command_line() -> None:
    options = CompactionOptions.from_options(
        {
            "min-input-files": "2",
            "rewrite-all": "TRUE",
            "delete-ratio-threshold": "0.5",
            "rewrite-job-order": "Bytes-Desc",
            "max-files-to-rewrite": 9,
            "partial-progress.enabled": True,
        }
    )
    assert options.min_input_files == 2
    assert options.rewrite_all is True
    assert options.delete_ratio_threshold == 0.5
    assert options.rewrite_job_order is RewriteJobOrder.BYTES_DESC
    assert options.max_files_to_rewrite == 9
    assert options.partial_progress_enabled is True


def test_the_table_target_file_size_sets_the_min_and_max_unless_an_option_overrides_it() -> None:
    properties = {"write.target-file-size-bytes": "1000"}
    from_table = CompactionOptions.from_options({}, properties)
    assert (
        from_table.min_file_size_bytes,
        from_table.target_file_size_bytes,
        from_table.max_file_size_bytes,
    ) == (
        750,
        1000,
        1800,
    )
    assert (
        CompactionOptions.from_options({"target-file-size-bytes": "2000"}, properties).target_file_size_bytes
        == 2000
    )


def test_max_failed_commits_defaults_to_max_commits() -> None:
    assert CompactionOptions.from_options({"partial-progress.max-commits": "4"}).max_failed_commits == 4
    options = {"partial-progress.max-commits": "4", "partial-progress.max-failed-commits": "0"}
    assert CompactionOptions.from_options(options).max_failed_commits == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min-input-files": "two"}, "invalid min-input-files: 'two'; expected an integer"),
        ({"rewrite-all": "yes"}, "invalid rewrite-all: 'yes'; expected true or false"),
        ({"delete-ratio-threshold": "half"}, "invalid delete-ratio-threshold: 'half'; expected a number"),
        ({"rewrite-job-order": "random"}, "invalid rewrite-job-order: 'random'; use one of none, bytes-asc"),
        ({"target-file-size-bytes": "0"}, "target-file-size-bytes must be > 0"),
        ({"min-file-size-bytes": "-1"}, "min-file-size-bytes must be >= 0"),
        (
            {"target-file-size-bytes": "100", "max-file-size-bytes": "99"},
            "need min-file-size-bytes <= target-file-size-bytes <= max-file-size-bytes, got 75, 100, 99",
        ),
        ({"min-input-files": "0"}, "min-input-files must be >= 1"),
        ({"max-file-group-size-bytes": "0"}, "max-file-group-size-bytes must be > 0"),
        ({"max-file-group-input-files": "0"}, "max-file-group-input-files must be >= 1"),
        ({"max-files-to-rewrite": "-1"}, "max-files-to-rewrite must be >= 0"),
        ({"delete-file-threshold": "-1"}, "delete-file-threshold must be >= 0"),
        ({"delete-ratio-threshold": "0"}, r"delete-ratio-threshold must be in \(0, 1\], got 0.0"),
        ({"delete-ratio-threshold": "1.5"}, r"delete-ratio-threshold must be in \(0, 1\]"),
        ({"delete-ratio-threshold": "nan"}, r"delete-ratio-threshold must be in \(0, 1\], got nan"),
        ({"partial-progress.max-commits": "0"}, "partial-progress.max-commits must be >= 1"),
        ({"partial-progress.max-failed-commits": "-1"}, "partial-progress.max-failed-commits must be >= 0"),
        ({"rewrite_all": "true"}, r"Cannot use options \['rewrite_all'\], they are not supported"),
    ],
)
def test_every_bad_option_is_refused_with_one_line_naming_it(options, message) -> None:
    with pytest.raises(ConfigurationError, match=message) as err:
        CompactionOptions.from_options(options)
    assert "\n" not in str(err.value)


def test_a_bad_table_target_file_size_is_refused_naming_the_property() -> None:
    with pytest.raises(ConfigurationError, match=r"invalid write\.target-file-size-bytes: 'big'"):
        CompactionOptions.from_options({}, {"write.target-file-size-bytes": "big"})


def test_options_round_trip_through_their_spark_spelling() -> None:
    options = CompactionOptions.from_options(
        {"rewrite-job-order": "files-asc", "partial-progress.max-failed-commits": "3", "rewrite-all": "true"}
    )
    spelled = options.to_options()
    assert spelled["rewrite-job-order"] == "files-asc"
    assert spelled["rewrite-all"] == "true"
    assert "max-files-to-rewrite" not in spelled  # None is left out, so that the default applies again
    assert CompactionOptions.from_options(spelled) == options
