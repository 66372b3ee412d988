"""Bounded memory (issue 2, section 2): one rewrite task over a table of a few hundred MB, run in a fresh
process under a 128 MiB limit, peaks within the limit plus 350 MiB of resident memory, as a user would
measure it: the high-water mark of the whole process's RSS, interpreter and libraries included
(``VmHWM``; ``ru_maxrss`` is inherited from the parent across fork and exec, so it reports the pytest
process when that is larger).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction
from tests.helpers import data_files
from tests.integration.compaction_support import MiB, letters

pytestmark = pytest.mark.integration

MEMORY_LIMIT = 128 * MiB
OVERHEAD = 350 * MiB
ROWS = 4_000_000
FILES = 8

_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pyiceberg.catalog.sql import SqlCatalog
    from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

    uri, warehouse, task_path, spill_dir, memory = sys.argv[1:6]
    table = SqlCatalog("memory", uri=uri, warehouse=warehouse).load_table("ns.big")
    with open(task_path) as f:
        task = json.load(f)
    result = execute_rewrite_task(
        table, task, ResourceLimits(memory_limit_bytes=int(memory), spill_dir=spill_dir)
    )
    # VmHWM: the peak RSS of this process image. ru_maxrss would also do, were it not carried over
    # from the parent through fork and exec (the pytest process is often larger than the limit).
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    print(json.dumps({
        "max_rss_bytes": hwm,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "added_records": result["added_records"],
        "rewritten_records": result["rewritten_records"],
        "spilled_bytes": result["spilled_bytes"],
    }))
    """
)


@pytest.fixture(scope="module")
def big_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Table, dict[str, str]]]:
    """About 260 MB of Parquet in 8 files: random longs, doubles and 48-letter strings (4M rows)."""
    folder = tmp_path_factory.mktemp("big")
    properties = {"uri": f"sqlite:///{folder}/catalog.db", "warehouse": f"file://{folder}/warehouse"}
    catalog = SqlCatalog("memory", **properties)
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "value", DoubleType(), required=False),
        NestedField(3, "payload", StringType(), required=False),
    )
    table = catalog.create_table(
        "ns.big", schema=schema, properties={"write.parquet.compression-codec": "snappy"}
    )
    rng = np.random.default_rng(17)
    per_file = ROWS // FILES
    for _ in range(FILES):
        table.append(
            pa.table(
                {
                    "id": pa.array(rng.integers(0, 2**62, per_file), pa.int64()),
                    "value": pa.array(rng.random(per_file), pa.float64()),
                    "payload": letters(rng, per_file, 48),
                },
                schema=schema.as_arrow(),
            )
        )
    yield table, {**properties, "folder": str(folder)}
    catalog.engine.dispose()


def _run_child(properties: dict[str, str], task: dict[str, Any], spill_dir: Path) -> dict[str, Any]:
    task_path = spill_dir.parent / "task.json"
    task_path.write_text(json.dumps(task))
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            properties["uri"],
            properties["warehouse"],
            str(task_path),
            str(spill_dir),
            str(MEMORY_LIMIT),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("strategy", ["binpack", "sort"])
def test_rewrite_task_peak_rss_stays_within_the_limit_plus_overhead(
    big_table: tuple[Table, dict[str, str]], tmp_path: Path, strategy: str
) -> None:
    table, properties = big_table
    input_bytes = sum(f.file_size_in_bytes for f in data_files(table))
    assert input_bytes >= 200 * MiB  # several times the limit
    plan = plan_compaction(
        table,
        strategy=strategy,
        sort_order="payload ASC" if strategy == "sort" else None,
        options={"min-input-files": "2", "target-file-size-bytes": str(128 * MiB)},
    )
    (task,) = plan["tasks"]
    assert len(task["data_files"]) == FILES

    measured = _run_child(properties, task, tmp_path / "spill")

    assert measured["added_records"] == measured["rewritten_records"] == ROWS
    if strategy == "sort":
        assert measured["spilled_bytes"] > 0  # the sort did not fit: the bound holds while spilling
    peak_mib = measured["max_rss_bytes"] / MiB
    print(f"{strategy}: peak RSS {peak_mib:.0f} MiB for {input_bytes / MiB:.0f} MiB of input")
    assert measured["max_rss_bytes"] <= MEMORY_LIMIT + OVERHEAD, (
        f"{strategy}: peak RSS {peak_mib:.0f} MiB > {(MEMORY_LIMIT + OVERHEAD) // MiB} MiB "
        f"for {input_bytes / MiB:.0f} MiB of input"
    )
