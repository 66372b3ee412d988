"""engine/meta/table_metadata.py: v3 metadata JSON (which PyIceberg 0.12 refuses to write) round-trips,
next-row-id and the snapshots' row-id fields included; v1/v2 metadata is written as PyIceberg writes it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.metadata import TableMetadataUtil, new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.meta.table_metadata import table_metadata_json, write_table_metadata

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _metadata(version: str):  # type: ignore[no-untyped-def]
    return new_table_metadata(
        SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///w/t", {"format-version": version}
    )


def test_v3_metadata_round_trips_with_next_row_id_and_snapshot_row_ids() -> None:
    snapshot = Snapshot(
        snapshot_id=5,
        sequence_number=1,
        timestamp_ms=1,
        manifest_list="file:///w/t/metadata/snap-5.avro",
        summary=Summary(operation=Operation.APPEND),
        schema_id=0,
        first_row_id=0,
        added_rows=375,
    )
    metadata = _metadata("3").model_copy(
        update={
            "next_row_id": 375,
            "snapshots": [snapshot],
            "current_snapshot_id": 5,
            "last_sequence_number": 1,
        }
    )
    with pytest.raises(NotImplementedError):
        metadata.model_dump_json()  # PyIceberg's own serialiser refuses v3

    text = table_metadata_json(metadata)

    raw = json.loads(text)
    assert raw["format-version"] == 3
    assert raw["next-row-id"] == 375
    assert (raw["snapshots"][0]["first-row-id"], raw["snapshots"][0]["added-rows"]) == (0, 375)
    parsed = TableMetadataUtil.parse_raw(text)
    assert parsed.next_row_id == 375
    assert (parsed.snapshots[0].first_row_id, parsed.snapshots[0].added_rows) == (0, 375)
    again = table_metadata_json(parsed)
    assert TableMetadataUtil.parse_raw(again) == parsed
    assert json.loads(again) == {**raw, "refs": {"main": {"snapshot-id": 5, "type": "branch"}}}


def test_v3_metadata_without_next_row_id_is_refused() -> None:
    with pytest.raises(ValueError, match="next-row-id"):
        table_metadata_json(_metadata("3"))


def test_v2_metadata_is_written_as_pyiceberg_writes_it(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    metadata = _metadata("2")
    ours, theirs = str(tmp_path / "ours.metadata.json"), str(tmp_path / "theirs.metadata.json")

    write_table_metadata(metadata, io.new_output(ours))
    ToOutputFile.table_metadata(metadata, io.new_output(theirs))

    assert Path(ours).read_bytes() == Path(theirs).read_bytes()


def test_a_gz_metadata_name_is_gzip_compressed(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    path = str(tmp_path / "00001-x.gz.metadata.json")
    metadata = _metadata("3").model_copy(update={"next_row_id": 0})

    write_table_metadata(metadata, io.new_output(path))

    assert json.loads(gzip.decompress(Path(path).read_bytes()))["next-row-id"] == 0
    assert table_metadata_json(FromInputFile.table_metadata(io.new_input(path))) == table_metadata_json(
        metadata
    )
