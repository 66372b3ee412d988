"""engine/io/write.py: batches written as Iceberg data files of a real table (field ids, metrics,
partition values), split by partition, rolled at the target size, and nothing left after abort()."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.io.write import PartitionSplitter, RollingDataFileWriter

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "day", DateType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))


@pytest.fixture
def table(catalog):
    return catalog.create_table("ns.t", schema=SCHEMA, partition_spec=SPEC)


def _batch(ids: range, day: date | None) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(list(ids), pa.int64()),
            "day": pa.array([day] * len(ids), pa.date32()),
            "payload": pa.array([f"row-{i}-" + "x" * 40 for i in ids]),
        }
    )


def _writer(table, target: int) -> RollingDataFileWriter:
    return RollingDataFileWriter(
        io=table.io,
        location_provider=table.location_provider(),
        schema=table.schema(),
        spec=table.spec(),
        properties=table.properties,
        target_file_size_bytes=target,
        buffer_bytes=16 * 1024,
        file_prefix="7",
    )


def _write_all(writer: RollingDataFileWriter, table, batches: list[pa.RecordBatch]) -> None:
    splitter = PartitionSplitter(table.spec(), table.schema())
    for batch in batches:
        for key, run in splitter.split(batch):
            writer.write(key, run)


def test_rows_are_split_by_partition_and_written_with_metrics_and_field_ids(table) -> None:
    mixed = pa.concat_batches([_batch(range(5), date(2024, 1, 1)), _batch(range(5, 8), date(2024, 1, 2))])
    writer = _writer(table, target=512 * 1024**2)
    _write_all(writer, table, [mixed])
    files = writer.close()
    assert sorted((f.partition[0], f.record_count) for f in files) == [
        (date(2024, 1, 1).toordinal() - date(1970, 1, 1).toordinal(), 5),
        (date(2024, 1, 2).toordinal() - date(1970, 1, 1).toordinal(), 3),
    ]
    for data_file in files:
        path = data_file.file_path.removeprefix("file://")
        assert Path(path).name.startswith("7-")
        assert "/day=2024-01-0" in data_file.file_path
        assert data_file.file_size_in_bytes == Path(path).stat().st_size
        assert data_file.null_value_counts[1] == 0
        assert data_file.value_counts[1] == data_file.record_count
        arrow_schema = pq.read_schema(path)
        assert [f.metadata[b"PARQUET:field_id"] for f in arrow_schema] == [b"1", b"2", b"3"]
    assert writer.rows_written == 8


def test_files_roll_at_the_target_size_and_keep_every_row(table) -> None:
    writer = _writer(table, target=64 * 1024)
    _write_all(writer, table, [_batch(range(i, i + 2000), date(2024, 1, 1)) for i in range(0, 20_000, 2000)])
    files = writer.close()
    assert len(files) > 1
    assert sum(f.record_count for f in files) == 20_000
    assert len({f.file_path for f in files}) == len(files)
    paths = [f.file_path.removeprefix("file://") for f in files]
    # partitioning=None: the file alone (PyArrow 23 adds the day=... of its path as a column)
    ids = pa.concat_tables([pq.read_table(path, partitioning=None) for path in paths]).column("id")
    assert sorted(ids.to_pylist()) == list(range(20_000))


def test_two_lanes_writers_encode_at_once(table, monkeypatch) -> None:
    """Two lanes' writers on two threads encode their row groups at the same time (an encode writes its
    pages into the file, slow into fresh page-cache pages: lanes taking turns to encode used 1.5 of two
    cores at 10x), and every row is written."""
    from airflow_provider_iceberg_exec.engine.io import write

    encoding: list[int] = []
    most = [0]
    original = write.RollingDataFileWriter._encode

    def encode(self: RollingDataFileWriter, current: object) -> None:
        encoding.append(1)
        most[0] = max(most[0], len(encoding))
        time.sleep(0.01)  # long enough for the other thread to arrive
        encoding.pop()
        original(self, current)

    monkeypatch.setattr(write.RollingDataFileWriter, "_encode", encode)
    writers = [_writer(table, target=64 * 1024) for _ in range(2)]
    batches = [_batch(range(i, i + 500), date(2024, 1, 1)) for i in range(0, 10_000, 500)]
    with ThreadPoolExecutor(2) as pool:
        files = list(pool.map(lambda w: (_write_all(w, table, batches), w.close())[1], writers))
    assert most[0] == 2
    assert sum(f.record_count for lane in files for f in lane) == 20_000


def test_abort_removes_every_file_written_finished_or_not(table) -> None:
    writer = _writer(table, target=64 * 1024)
    _write_all(writer, table, [_batch(range(i, i + 2000), date(2024, 1, 1)) for i in range(0, 20_000, 2000)])
    finished = [f.file_path for f in writer.data_files]
    assert finished
    writer.abort()
    assert writer.data_files == []
    assert not any(Path(p.removeprefix("file://")).exists() for p in finished)
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    assert not [p for p in data_dir.rglob("*") if p.is_file()]


def test_a_null_partition_value_is_its_own_partition(table) -> None:
    writer = _writer(table, target=512 * 1024**2)
    _write_all(
        writer, table, [pa.concat_batches([_batch(range(3), None), _batch(range(3, 4), date(2024, 1, 1))])]
    )
    assert sorted((f.partition[0] is None, f.record_count) for f in writer.close()) == [(False, 1), (True, 3)]
