"""The spill directory's disk fills up during a sort compaction that must spill.

The spill directory is a filesystem of its own, a 8 MiB tmpfs mounted for the test (we run as root in
CI; without the right to mount, the test is skipped and says why). The table holds about 40 MiB of rows
and the memory limit is the engine's floor (32 MiB), so the sort spills several times more than the disk
holds: its sorted runs (io/merge_sort.py: uncompressed Arrow IPC files in the spill directory) do not fit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import MIN_MEMORY_LIMIT_BYTES, ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ResourceLimitError
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from tests.helpers import data_files, files_under, live_checksum, local_path, table_state

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
DISK_BYTES = 8 * MiB
_FILES, _ROWS_PER_FILE = 4, 50_000
_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "payload", StringType(), required=True)
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of :data:`DISK_BYTES` mounted at ``tmp_path/spill-disk``, unmounted afterwards."""
    mountpoint = tmp_path / "spill-disk"
    mountpoint.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount binary: cannot give the spill directory a small filesystem of its own")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs for the spill directory (needs root or CAP_SYS_ADMIN): "
            + (done.stderr.strip() or f"mount exited with {done.returncode}")
        )
    try:
        yield mountpoint
    finally:
        if subprocess.run(["umount", str(mountpoint)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)


@pytest.fixture
def wide_table(tmp_path: Path) -> Iterator[Any]:
    """``_FILES`` appends of ``_ROWS_PER_FILE`` rows of ~200 bytes each (about 40 MiB decoded)."""
    catalog = SqlCatalog("spill", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.wide", schema=_SCHEMA)
    for number in range(_FILES):
        ids = range(number * _ROWS_PER_FILE, (number + 1) * _ROWS_PER_FILE)
        table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "payload": pa.array([f"row {i:012d} " * 12 for i in ids]),
                },
                schema=_SCHEMA.as_arrow(),
            )
        )
    yield table
    catalog.engine.dispose()


def _everything_under(path: Path) -> list[str]:
    return sorted(os.path.join(root, name) for root, dirs, names in os.walk(path) for name in [*dirs, *names])


def test_spill_disk_full_fails_the_sort_cleanly_and_removes_its_spill_files(
    small_disk: Path, wide_table: Any, tmp_path: Path
) -> None:
    """A sort that spills more than its disk holds fails with ResourceLimitError in one line, leaves
    the table and the warehouse as they were and the spill disk empty; with room it succeeds.

    Why: a full disk is the spill's normal way to run out; the user must get a clear "spill disk is
    full" (not a DataFusion traceback), no partial output may stay in the warehouse, and the spill and
    staging files must not stay behind to fill the disk for the next task on the worker.
    """
    table = wide_table
    state, checksum = table_state(table), live_checksum(table)
    warehouse_files = files_under(table)
    sort = {"strategy": "sort", "sort_order": "id DESC", "options": {"min-input-files": "2"}}

    with pytest.raises(ResourceLimitError) as caught:
        compact(
            table,
            **sort,  # type: ignore[arg-type]
            limits=ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(small_disk)),
        )

    message = str(caught.value)
    assert "\n" not in message.strip()
    assert message.startswith("the spill disk is full")
    assert "No space left on device" in message
    assert _everything_under(small_disk) == []
    assert table_state(table) == state
    assert files_under(table) == warehouse_files
    assert live_checksum(table) == checksum

    roomy = tmp_path / "roomy-spill"
    result = compact(
        table,
        **sort,  # type: ignore[arg-type]
        limits=ResourceLimits(memory_limit_bytes=MIN_MEMORY_LIMIT_BYTES, spill_dir=str(roomy)),
    )
    assert result["spilled_bytes"] > DISK_BYTES  # the sort needs more spill than the small disk has
    assert live_checksum(table) == checksum
    assert table.current_snapshot().summary.operation.value == "replace"
    outputs = data_files(table)
    assert len(outputs) < len(state[1])
    for data_file in outputs:
        ids = pq.read_table(local_path(data_file.file_path), columns=["id"]).column("id").to_pylist()
        assert ids == sorted(ids, reverse=True)
    assert _everything_under(roomy) == []
