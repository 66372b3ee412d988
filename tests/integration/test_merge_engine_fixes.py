"""Two MERGE engine fixes found while building its operators.

- A MERGE retried with the commit id of a commit that landed reports that commit and does nothing else.
  Planning again would merge the source into the merged table: its inserted rows would now match (a
  second write; inserted duplicate keys even fail the cardinality check) and the retry's files would leak.
- New rows of a partitioned table whose Arrow types differ by source (a source written as PyIceberg
  scans, ``large_string``; rows of target files, ``string``) are staged together.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.ops.merge import merge
from tests.helpers import files_under, live_checksum, row_digest

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


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_new_rows_of_other_arrow_string_types_are_staged_together(tmp_path: Path, mode: str) -> None:
    catalog = SqlCatalog("it", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    table = make_fragmented_table(catalog, "ns.events", num_files=3, rows_per_file=100)
    before = table.scan().to_arrow()
    moved = before.filter(pc.less(before.column("id"), 10))
    moved = moved.set_column(moved.schema.get_field_index("region"), "region", pa.array(["moon"] * 10))
    inserted = before.slice(0, 4).set_column(0, "id", pa.array([900, 901, 902, 903], pa.int64()))
    source = pa.concat_tables([moved, inserted])
    large = pa.schema(
        [f.with_type(pa.large_string()) if pa.types.is_string(f.type) else f for f in source.schema]
    )
    pq.write_table(source.cast(large), tmp_path / "s.parquet")
    by_id = {r["id"]: r for r in before.to_pylist()}
    by_id.update({r["id"]: r for r in source.to_pylist()})
    expected = (len(by_id), sum(row_digest(r) for r in by_id.values()) & ((1 << 64) - 1))

    result = merge(
        table,
        on=["id"],
        source_files=[str(tmp_path / "s.parquet")],
        when_matched=["UPDATE SET *"],  # a new region: the updated rows change partition
        when_not_matched=["INSERT *"],
        mode=mode,
    )

    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (10, 4)
    assert live_checksum(table) == expected
