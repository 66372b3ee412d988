"""engine/meta/manifests.py: what our manifest writers write reads back entry for entry, in Avro blocks
of about 64 KiB (PyIceberg writes a block per entry), with ``equality_ids`` as the spec's list<int>."""

from __future__ import annotations

import json
from pathlib import Path

from pyiceberg.avro.file import AvroFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer, read_manifest_entries

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _write(tmp_path: Path, n: int, content: DataFileContent) -> tuple[PyArrowFileIO, object]:
    io = PyArrowFileIO()
    with new_manifest_writer(
        format_version=2,
        content=ManifestContent.DATA if content == DataFileContent.DATA else ManifestContent.DELETES,
        spec=PartitionSpec(),
        schema=SCHEMA,
        output_file=io.new_output(str(tmp_path / "m.avro")),
        snapshot_id=7,
        avro_compression="deflate",
    ) as writer:
        for i in range(n):
            data_file = DataFile.from_args(
                content=content,
                file_path=f"file:///w/data/{i:08d}.parquet",
                file_format=FileFormat.PARQUET,
                partition=Record(),
                record_count=i + 1,
                file_size_in_bytes=100 + i,
                equality_ids=[1] if content == DataFileContent.EQUALITY_DELETES else None,
            )
            data_file.spec_id = 0
            writer.add_entry(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=7,
                    sequence_number=3,
                    file_sequence_number=3,
                    data_file=data_file,
                )
            )
    return io, writer.to_manifest_file()


def _header(path: Path) -> tuple[dict[str, object], bytes]:
    """The Avro file's schema and sync marker."""
    with AvroFile[ManifestEntry](PyArrowFileIO().new_input(str(path)), None) as reader:  # type: ignore[arg-type]
        header = reader.header
    return json.loads(header.meta["avro.schema"]), header.sync


def test_entries_read_back_in_few_blocks(tmp_path: Path) -> None:
    io, manifest = _write(tmp_path, 5000, DataFileContent.DATA)

    entries = read_manifest_entries(io, manifest)  # type: ignore[arg-type]

    assert [e.data_file.file_path for e in entries] == [
        f"file:///w/data/{i:08d}.parquet" for i in range(5000)
    ]
    assert [e.data_file.record_count for e in entries][:3] == [1, 2, 3]
    _schema, sync = _header(tmp_path / "m.avro")
    blocks = (tmp_path / "m.avro").read_bytes().count(sync) - 1  # the header ends with the marker too
    assert 1 <= blocks < 50  # PyIceberg's own writer: 5000


def test_equality_ids_are_written_as_int(tmp_path: Path) -> None:
    _write(tmp_path, 1, DataFileContent.EQUALITY_DELETES)
    schema, _sync = _header(tmp_path / "m.avro")
    data_file = next(f for f in schema["fields"] if f["name"] == "data_file")["type"]  # type: ignore[index]
    equality = next(f for f in data_file["fields"] if f["name"] == "equality_ids")
    element = next(t for t in equality["type"] if t != "null")["items"]
    assert element == "int"
