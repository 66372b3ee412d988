"""StagedParquet: small row groups whatever the batch size, part files rolled by column chunks, every
row read back by DataFusion from the directory, and nothing left after remove(). StagedArrow: every row
read back in order, in Arrow's own stream format."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

from airflow_provider_iceberg_exec.engine.io.staging import (
    StagedArrow,
    StagedParquet,
    register_staged,
    remove_staged,
)


def _batch(start: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(start, start + rows), pa.int64()), "tag": pa.array(["x" * 20] * rows)}
    )


def test_row_groups_stay_small_parts_roll_and_datafusion_reads_every_row(tmp_path: Path) -> None:
    stage = StagedParquet(str(tmp_path / "stage"), row_group_bytes=64 * 1024, chunks_per_part=40)
    for start in range(0, 200_000, 50_000):
        stage.write(_batch(start, 50_000))  # each batch ~1.5 MB: many row groups
    assert stage.close()

    parts = sorted(os.listdir(tmp_path / "stage"))
    assert len(parts) > 1
    for part in parts:
        metadata = pq.read_metadata(tmp_path / "stage" / part)
        assert metadata.num_row_groups * metadata.num_columns <= 40 + 2 * metadata.num_columns
        for index in range(metadata.num_row_groups):
            assert metadata.row_group(index).total_byte_size <= 2 * 64 * 1024
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path / "stage"))
    (row,) = ctx.sql("SELECT count(*) AS n, sum(id) AS s FROM t").to_pylist()
    assert row == {"n": 200_000, "s": sum(range(200_000))}

    stage.remove()
    assert not (tmp_path / "stage").exists()


def test_an_empty_stage_reports_nothing_written(tmp_path: Path) -> None:
    stage = StagedParquet(str(tmp_path / "empty"))
    assert not stage.close()
    stage.remove()
    assert not (tmp_path / "empty").exists()


def test_a_staged_directory_registers_as_one_table_with_the_schema_of_its_parts(tmp_path: Path) -> None:
    stage = StagedParquet(str(tmp_path / "stage"), row_group_bytes=1024, chunks_per_part=4)
    for start in range(0, 3000, 1000):
        stage.write(_batch(start, 1000))
    assert stage.close()
    assert stage.rows == 3000
    ctx = SessionContext()
    register_staged(ctx, "staged", str(tmp_path / "stage"))
    assert ctx.table("staged").schema().names == ["id", "tag"]
    assert ctx.sql("SELECT max(id) AS m FROM staged").to_pylist() == [{"m": 2999}]


def test_remove_staged_removes_a_file_or_a_directory_and_ignores_what_is_absent(tmp_path: Path) -> None:
    single = tmp_path / "one.parquet"
    single.write_bytes(b"PAR1")
    remove_staged(str(single))
    assert not single.exists()
    remove_staged(str(tmp_path / "never-written"))
    remove_staged(None)


def test_an_arrow_stage_reads_back_every_row_in_order_in_batches_of_about_its_size(tmp_path: Path) -> None:
    path = str(tmp_path / "stage.arrows")
    stage = StagedArrow(path, batch_bytes=64 * 1024)
    written = [_batch(start, rows) for start, rows in ((0, 10), (10, 50_000), (50_010, 7), (50_017, 3_000))]
    written.append(written[1].slice(100, 20))  # a slice: only its own rows are written
    for batch in written:
        stage.write(batch)
    assert stage.close()
    assert stage.rows == sum(b.num_rows for b in written)

    read = list(stage.batches())
    assert pa.Table.from_batches(read).equals(pa.Table.from_batches(written))
    assert len(read) == 3  # what was buffered when a batch filled, then the rest at close
    with pa.OSFile(path) as source:  # Arrow's own stream format: any reader reads it
        assert pa.ipc.open_stream(source).read_all().num_rows == stage.rows

    stage.remove()
    assert not os.path.exists(path)
    assert list(stage.batches()) == []


def test_an_empty_arrow_stage_reports_nothing_written(tmp_path: Path) -> None:
    stage = StagedArrow(str(tmp_path / "empty.arrows"))
    assert not stage.close()
    assert list(stage.batches()) == []
    stage.remove()
