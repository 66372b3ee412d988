"""A MERGE retried with the commit id of a commit that landed reports that commit and does nothing else.

Planning again would merge the source into the merged table: its inserted rows would now match (a
second write; inserted duplicate keys even fail the cardinality check) and the retry's files would leak.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.ops.merge import merge
from tests.helpers import files_under, live_checksum

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_retry_after_the_commit_landed_reports_it_and_writes_nothing(tmp_path: Path, mode: str) -> None:
    catalog = SqlCatalog("it", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    # Key 5 twice: matches no target row, so Spark inserts both; matched again they would fail.
    pq.write_table(pa.table({"id": [2, 5, 5], "v": ["B", "x", "y"]}), tmp_path / "s.parquet")
    arguments = {
        "on": ["id"],
        "source_files": [str(tmp_path / "s.parquet")],
        "when_matched": ["UPDATE SET *"],
        "when_not_matched": ["INSERT *"],
        "mode": mode,
        "commit_id": "run-1",
    }
    first = merge(table, **arguments)
    after, files = live_checksum(table), files_under(table)

    retry = merge(table, **arguments)

    assert first["already_committed"] is False
    assert retry["already_committed"] is True
    assert retry["snapshot_ids"] == first["snapshot_ids"]
    assert retry["snapshot_operation"] == first["snapshot_operation"]
    assert table.refresh().current_snapshot().snapshot_id == first["snapshot_ids"][0]
    assert live_checksum(table) == after == (4, after[1])
    assert files_under(table) == files
