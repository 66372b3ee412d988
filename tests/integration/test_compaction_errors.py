"""Bad input (issue 2, section 7): each is a clear one-line error of the right engine type, and the table
stays exactly as it was (same current snapshot, same live files, no new files on disk).
"""

from __future__ import annotations

import datetime
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

from airflow_provider_iceberg_exec.engine.config import (
    MIN_MEMORY_LIMIT_BYTES,
    CompactionOptions,
    ResourceLimits,
)
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    DataFileReadError,
    ResourceLimitError,
    TableNotFoundError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import compact, execute_rewrite_task, plan_compaction
from tests.helpers import files_under, live_checksum, local_path, table_state
from tests.integration.compaction_support import letters, limits

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "payload", StringType(), required=False),
)


def _rows(rng: np.random.Generator, start: int, count: int, region: str, width: int = 40) -> pa.Table:
    base = datetime.datetime(2026, 1, 1)
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + count), pa.int64()),
            "region": pa.array([region] * count, pa.string()),
            "ts": pa.array(
                np.datetime64(base, "us") + np.arange(count).astype("timedelta64[s]"), pa.timestamp("us")
            ),
            "payload": letters(rng, count, width),
        },
        schema=SCHEMA.as_arrow(),
    )


def _create_events(catalog: SqlCatalog) -> Table:
    """Two partitions, three files each, about 20 KiB per file."""
    rng = np.random.default_rng(5)
    table = catalog.create_table(
        "ns.events",
        schema=SCHEMA,
        partition_spec=PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
        ),
    )
    for number, region in enumerate(("eu", "eu", "eu", "us", "us", "us")):
        table.append(_rows(rng, number * 500, 500, region))
    return table


@pytest.fixture
def table(catalog: SqlCatalog) -> Table:
    return _create_events(catalog)


@pytest.fixture(scope="module")
def shared_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Table]:
    """One table for the tests that must leave it untouched (each checks that it does)."""
    folder = tmp_path_factory.mktemp("shared")
    catalog = SqlCatalog(
        "shared", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}/warehouse"
    )
    catalog.create_namespace("ns")
    yield _create_events(catalog)
    catalog.engine.dispose()


class _Unchanged:
    """Remembers the table's state and the files under its location, to compare after a failure."""

    def __init__(self, table: Table, *, rows: bool = True) -> None:
        self.table = table
        self.state = table_state(table)
        self.files = files_under(table, "")
        self.checksum = live_checksum(table) if rows else None

    def check(self) -> None:
        assert table_state(self.table) == self.state
        assert files_under(self.table, "") == self.files
        if self.checksum is not None:
            assert live_checksum(self.table) == self.checksum


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert text, repr(text)
    assert "\n" not in text, repr(text)
    return text


# -- catalog, namespace, table ------------------------------------------------------------------------


def test_unknown_catalog_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_catalog(CatalogConfig("nowhere", {}))
    assert "nowhere" in _one_line(raised.value)


@pytest.mark.parametrize("name", ["nope.events", "ns.nope", "ns.deeper.nope"])
def test_unknown_namespace_or_table_is_table_not_found(catalog: SqlCatalog, name: str) -> None:
    table = _create_events(catalog)
    unchanged = _Unchanged(table)
    with pytest.raises(TableNotFoundError) as raised:
        load_table(catalog, name)
    assert name in _one_line(raised.value)
    unchanged.check()


def test_unqualified_table_name_is_a_configuration_error(catalog: SqlCatalog) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_table(catalog, "events")
    _one_line(raised.value)


# -- plan-time input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"where": "id >"}, "cannot parse where"),
        ({"where": "region = 'eu' and"}, "cannot parse where"),
        ({"where": "nope = 1"}, "does not fit the table schema"),
        ({"strategy": "sort", "sort_order": "id SIDEWAYS"}, "sort column 'id SIDEWAYS'"),
        ({"strategy": "sort", "sort_order": "nope ASC"}, "sort column 'nope'"),
        ({"strategy": "sort", "sort_order": "bogus(id) ASC"}, "unknown transform"),
        ({"strategy": "sort", "sort_order": "zorder(id, nope)"}, "z-order column 'nope'"),
        ({"strategy": "sort", "sort_order": "zorder(id), ts"}, "a z-order is a sort order of its own"),
        (
            {"strategy": "sort", "sort_order": "zorder(id)", "options": {"max-output-size": "0"}},
            "max-output-size",
        ),
        ({"strategy": "sort", "sort_order": " , "}, "empty"),
        ({"strategy": "sort"}, "has none"),
        ({"strategy": "zorder"}, "only binpack or sort"),
        ({"sort_order": "id ASC"}, "needs strategy 'sort'"),
        ({"options": {"target-file-size": "1"}}, "Cannot use options ['target-file-size']"),
        ({"options": {"target-file-size-bytes": "0"}}, "target-file-size-bytes must be > 0"),
        ({"options": {"target-file-size-bytes": "-1"}}, "target-file-size-bytes must be > 0"),
        ({"options": {"min-input-files": "many"}}, "expected an integer"),
        ({"options": {"rewrite-job-order": "random"}}, "use one of"),
        ({"options": {"output-spec-id": "7"}}, "output-spec-id 7"),
    ],
)
def test_bad_plan_input_is_refused_before_any_work(
    shared_table: Table, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    table = shared_table
    unchanged = _Unchanged(table)

    with pytest.raises(ConfigurationError) as raised:
        compact(table, limits=limits(tmp_path), **kwargs)

    assert message in _one_line(raised.value)
    unchanged.check()


def test_unknown_option_error_lists_the_valid_options(shared_table: Table) -> None:
    table = shared_table
    with pytest.raises(ConfigurationError) as raised:
        plan_compaction(table, options={"min-input-file": "2", "partial-progress.enabled": "true"})
    text = _one_line(raised.value)
    assert "['min-input-file']" in text
    assert text.endswith("valid options: " + ", ".join(sorted(CompactionOptions.NAMES)))


def test_target_size_property_of_zero_is_refused(catalog: SqlCatalog, table: Table) -> None:
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "0"})
    unchanged = _Unchanged(table)
    with pytest.raises(ConfigurationError, match="must be > 0"):
        plan_compaction(table)
    unchanged.check()


def test_memory_limit_below_the_floor_is_refused(tmp_path: Path) -> None:
    ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(tmp_path))
    with pytest.raises(ConfigurationError) as raised:
        ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES - 1, spill_dir=str(tmp_path))
    assert "below the floor" in _one_line(raised.value)


# -- execution-time failures: nothing committed, nothing left behind -------------------------------------


def test_unwritable_spill_directory_is_refused(table: Table, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    unchanged = _Unchanged(table)

    with pytest.raises(ConfigurationError) as raised:
        compact(
            table, options={"min-input-files": "2"}, limits=limits(tmp_path, spill_dir=str(blocker / "spill"))
        )

    assert "spill directory" in _one_line(raised.value)
    unchanged.check()


#: Every file rewritten, two groups (one per partition), output rolled at 16 KiB: several files a group.
SMALL_FILES = {"rewrite-all": "true", "target-file-size-bytes": str(16 * 1024)}


def _last_file_of_last_group(table: Table) -> str:
    plan = plan_compaction(table, options=SMALL_FILES)
    assert len(plan["tasks"]) == 2
    return str(plan["tasks"][-1]["data_files"][-1]["data-file"]["file-path"])


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated"])
def test_unreadable_data_file_fails_the_job_and_removes_its_output(
    table: Table, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The last file of the last group is damaged: by then the first group and part of the second have
    written files (the target is small), and all of them must be removed."""
    caplog.set_level(logging.INFO, logger="airflow_provider_iceberg_exec.engine.io.write")
    path = local_path(_last_file_of_last_group(table))
    size = os.path.getsize(path)
    if damage == "missing":
        os.remove(path)
    elif damage == "garbage":
        Path(path).write_bytes(np.random.default_rng(1).bytes(size))
    else:
        Path(path).write_bytes(Path(path).read_bytes()[: size // 2])
    state, files = table_state(table), files_under(table, "")

    with pytest.raises(DataFileReadError) as raised:
        compact(table, options=SMALL_FILES, limits=limits(tmp_path))

    assert path in _one_line(raised.value)
    written = [r for r in caplog.records if r.getMessage().startswith("wrote ")]
    assert len(written) >= 3, "the failure came before any output: the clean-up was not exercised"
    assert table_state(table) == state
    assert files_under(table, "") == files


def test_failed_group_removes_its_partial_output(
    table: Table, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``execute_rewrite_task`` alone (the Airflow task): the failing group cleans up after itself. One
    core, so one lane writes files before it reaches the missing one (a failure in one of two lanes:
    tests/integration/test_compaction_lanes.py)."""
    caplog.set_level(logging.INFO, logger="airflow_provider_iceberg_exec.engine.io.write")
    plan = plan_compaction(table, options=SMALL_FILES)
    task = plan["tasks"][0]
    os.remove(local_path(task["data_files"][-1]["data-file"]["file-path"]))
    state, files = table_state(table), files_under(table, "")

    with pytest.raises(DataFileReadError, match="cannot be opened"):
        execute_rewrite_task(table, task, limits(tmp_path, target_partitions=1))

    assert any(r.getMessage().startswith("wrote ") for r in caplog.records)
    assert table_state(table) == state
    assert files_under(table, "") == files


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs; skipped only where mounting is not permitted."""
    mount_point = tmp_path / "tiny-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.parametrize(
    ("disk_size", "where_it_fills"),
    [("2m", "the first sorted run"), ("12m", "a later sorted run")],
)
def test_full_spill_disk_is_a_resource_limit_error(
    catalog: SqlCatalog, tmp_path: Path, tiny_disk: Path, disk_size: str, where_it_fills: str
) -> None:
    """About 18 MB of rows sorted under a 64 MiB limit: spilled as sorted runs of 4 MiB, which fill the
    disk at the first run or at a later one (while the runs before it are on the disk)."""
    subprocess.run(["mount", "-o", f"remount,size={disk_size}", str(tiny_disk)], check=True)
    rng = np.random.default_rng(9)
    table = catalog.create_table("ns.wide", schema=SCHEMA)
    for number in range(3):
        table.append(_rows(rng, number * 50_000, 50_000, "eu", width=100))
    unchanged = _Unchanged(table, rows=False)  # same snapshot, same files: the rows cannot have changed

    with pytest.raises(ResourceLimitError) as raised:
        compact(
            table,
            strategy="sort",
            sort_order="payload DESC",
            options={"min-input-files": "2"},
            limits=limits(tmp_path, spill_dir=str(tiny_disk / "spill")),
        )

    text = _one_line(raised.value)
    assert "spill disk is full" in text, where_it_fills
    unchanged.check()
    assert not [name for _d, _s, names in os.walk(tiny_disk) for name in names]
