"""Progress reported by the long operations on real tables: monotone, reaching the plan's totals."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.progress import Progress, listening
from tests.helpers import data_files, live_checksum
from tests.integration.compaction_support import run_compact

pytestmark = pytest.mark.integration


def assert_monotone(events: list[Progress]) -> None:
    for field in ("files_done", "bytes_done", "rows", "elapsed_seconds"):
        values = [getattr(e, field) for e in events]
        assert values == sorted(values), field


def test_a_compaction_reports_monotone_progress_reaching_the_plan_totals(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = make_fragmented_table(catalog, "ns.events", num_files=12, rows_per_file=500)
    before = live_checksum(table)
    inputs = data_files(table)
    events: list[Progress] = []

    with listening(events.append):
        result = run_compact(table, tmp_path, {"target-file-size-bytes": str(1 << 20)})

    assert live_checksum(table) == before
    assert result["rewritten_data_files_count"] == len(inputs) == 36
    assert {e.operation for e in events} == {"compaction"}
    assert events[0].phase == "start"
    assert events[-1].phase == "done"
    assert_monotone(events)
    last = events[-1]
    # one tracker for the whole run: the plan's totals, every file and byte read, every row written
    assert {(e.files_total, e.bytes_total) for e in events} == {
        (len(inputs), sum(f.file_size_in_bytes for f in inputs))
    }
    assert (last.files_done, last.bytes_done, last.rows) == (last.files_total, last.bytes_total, before[0])
    assert last.rss_bytes > 0  # sampled by the execution's resource tracking
    # a file done is reported as it is done, not all at the end
    assert len({e.files_done for e in events}) > len(inputs) // 2
