"""Progress reported by the long operations on real tables: monotone, reaching the plan's totals."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.merge import upsert
from airflow_provider_iceberg_exec.engine.progress import Progress, listening
from tests.helpers import data_files, live_checksum
from tests.integration.compaction_support import limits, run_compact

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


@pytest.mark.parametrize("operation", ["delete", "update"])
def test_a_copy_on_write_reports_every_candidate_file(
    catalog: SqlCatalog, tmp_path: Path, operation: str
) -> None:
    table = make_fragmented_table(catalog, "ns.events", num_files=6, rows_per_file=400)
    rows, _ = live_checksum(table)
    events: list[Progress] = []
    with listening(events.append):
        result = cow_rewrite(
            table,
            operation=operation,
            where="user_id < 50000",
            set_columns={"score": "0.0"} if operation == "update" else None,
            limits=limits(tmp_path),
        )
    assert result["snapshot_ids"]
    assert {e.operation for e in events} == {operation}
    assert_monotone(events)
    last = events[-1]
    assert last.phase == "done"
    assert (last.files_done, last.bytes_done) == (last.files_total, last.bytes_total)
    assert last.files_total == 18  # every file holds some matching rows: all are candidates
    # rows written: what stays (delete) or every row (update)
    kept = live_checksum(table)[0]
    assert last.rows == kept
    assert (kept == rows) is (operation == "update")


def test_a_merge_reports_its_target_files_and_rows(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_fragmented_table(catalog, "ns.events", num_files=4, rows_per_file=300, partitioned=False)
    changes = catalog.create_table("ns.changes", schema=table.schema())
    source = table.scan(row_filter="id < 100").to_arrow()
    changes.append(source)
    targets = data_files(table)
    events: list[Progress] = []
    with listening(events.append):
        result = upsert(table, join_cols=["id"], source_table="ns.changes", limits=limits(tmp_path))
    assert result["rows_updated"] == 100
    assert {e.operation for e in events} == {"merge"}
    assert_monotone(events)
    assert "match" in {e.phase for e in events}
    last = events[-1]
    assert (last.phase, last.files_total, last.files_done) == ("done", len(targets), len(targets))
    assert last.bytes_done == last.bytes_total == sum(f.file_size_in_bytes for f in targets)
    assert last.rows >= 100  # the live rows of the target files the source matched
