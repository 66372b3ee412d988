"""MERGE on a format-version 3 table (real SQLite catalog, real files), both modes.

A v2 table of three appends (ids 0..29) is upgraded to v3 (as Java's ``upgradeFormatVersion(3)``).
Merge-on-read writes one DV per changed data file, merged with its old DV, which the same commit
removes; copy-on-write rewrites the files. Checked: the rows by PyIceberg's scan (an order-independent
checksum of the model's rows), and every live row's ``_row_id`` and ``_last_updated_sequence_number``
read here with the engine's v3 reader (lineage materialised, deletes applied): unchanged rows keep
both, updated rows keep their ``_row_id`` and read the commit's sequence number (Java's
``RewriteMergeIntoTableForRowLineage``), inserted rows get new ids from the snapshot's range.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector
from airflow_provider_iceberg_exec.engine.io.lineage import RowLineage
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, referenced_data_file
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id, read_manifest_list
from airflow_provider_iceberg_exec.engine.meta.scan import scan_snapshot
from airflow_provider_iceberg_exec.engine.ops.merge import merge
from tests.helpers import live_checksum, row_digest

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
)
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("category", pa.string())])
_MASK = (1 << 64) - 1
Lineage = dict[int, tuple[int | None, int | None]]


def _limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))


def _upgraded(catalog: SqlCatalog) -> Table:
    v2 = catalog.create_table("ns.v2", SCHEMA, properties={"format-version": "2"})
    for start in (0, 10, 20):
        v2.append(pa.table({"id": list(range(start, start + 10)), "category": ["c"] * 10}, schema=ARROW))
    metadata = json.loads(v2.io.new_input(v2.metadata_location).open().read())
    metadata.update({"format-version": 3, "next-row-id": 0})
    location = v2.metadata_location.replace(".metadata.json", "-v3.metadata.json")
    with v2.io.new_output(location).create() as stream:
        stream.write(json.dumps(metadata).encode())
    return catalog.register_table("ns.t", location)


def _source(tmp_path: Path, rows: dict[int, str], name: str) -> str:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"id": list(rows), "category": list(rows.values())}, schema=ARROW), path)
    return str(path)


def _lineage(table: Table) -> Lineage:
    """``id -> (_row_id, _last_updated_sequence_number)`` of every live row (the engine's v3 reader)."""
    table.refresh()
    metadata = table.metadata
    snapshot = table.current_snapshot()
    assert snapshot is not None
    found: Lineage = {}
    for scanned in scan_snapshot(table.io, metadata, snapshot).data_files:
        data_file = scanned.data_file
        dead = deleted_positions(table.io, scanned)
        start = 0
        for batch in iter_data_file_batches(
            table.io,
            data_file,
            table_schema=metadata.schema(),
            spec=metadata.specs()[data_file.spec_id],
            name_mapping=metadata.name_mapping(),
            format_version=3,
            batch_size=1000,
            lineage=RowLineage(first_row_id(data_file), scanned.data_sequence_number),
        ):
            for offset, row in enumerate(batch.to_pylist()):
                if start + offset not in dead:
                    assert row["id"] not in found
                    found[row["id"]] = (row["_row_id"], row["_last_updated_sequence_number"])
            start += batch.num_rows
    return found


def _checksum(rows: dict[int, str]) -> tuple[int, int]:
    total = 0
    for i, category in rows.items():
        total = (total + row_digest({"id": i, "category": category})) & _MASK
    return len(rows), total


def _dvs(table: Table) -> list[str | None]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        referenced_data_file(entry.data_file)
        for manifest in read_manifest_list(table.io, snapshot)
        if manifest.content == ManifestContent.DELETES
        for entry in read_manifest_entries(table.io, manifest)
        if is_deletion_vector(entry.data_file)
    ]


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_v3_merge_keeps_row_ids_and_gives_updated_rows_the_commit_s_sequence_number(
    catalog: SqlCatalog, tmp_path: Path, mode: str
) -> None:
    table = _upgraded(catalog)
    model = dict.fromkeys(range(30), "c")
    # First a delete of 1 (merge-on-read: a DV on the first file), then the upsert.
    merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, {1: "x"}, "first")],
        when_matched=["DELETE"],
        mode=mode,
        limits=_limits(tmp_path),
    )
    del model[1]
    table.refresh()
    assert live_checksum(table) == _checksum(model)
    before = _lineage(table)
    assert all(v[0] is not None and v[1] is not None for v in before.values())
    next_row_id = table.metadata.next_row_id  # type: ignore[attr-defined]

    result = merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, {2: "u", 5: "u", 12: "u", 100: "new", 101: "new"}, "upsert")],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode=mode,
        limits=_limits(tmp_path),
    )

    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (3, 2)
    model.update({2: "u", 5: "u", 12: "u", 100: "new", 101: "new"})
    assert live_checksum(table) == _checksum(model)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    after = _lineage(table)
    assert set(after) == set(model)
    for i in (2, 5, 12):
        assert after[i] == (before[i][0], snapshot.sequence_number)
    for i in set(before) - {2, 5, 12}:
        assert after[i] == before[i]
    new_ids = sorted(after[i][0] for i in (100, 101))  # type: ignore[type-var]
    assert new_ids[0] >= next_row_id  # from this snapshot's range, after every older id
    assert {after[i][1] for i in (100, 101)} == {snapshot.sequence_number}
    assert snapshot.first_row_id + snapshot.added_rows == table.metadata.next_row_id  # type: ignore[attr-defined]
    if mode == "merge-on-read":
        dvs = _dvs(table)
        assert len(dvs) == len(set(dvs)) == 2  # the first file's DV merged (1, 2, 5), the second's (12)
        assert snapshot.summary is not None
        assert (snapshot.summary["added-dvs"], snapshot.summary["removed-dvs"]) == ("2", "1")
        assert int(snapshot.summary["added-position-deletes"]) == 4  # 1, 2, 5 and 12
    else:
        assert _dvs(table) == []
