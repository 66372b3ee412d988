"""Dictionary encoding of rewritten files: a column whose distinct values overflow the dictionary page is
written plain from the start instead of building a dictionary and falling back; every other column keeps
its dictionary. Rows and statistics are unchanged either way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.io.write import dictionary_columns
from tests.helpers import data_files, live_checksum, local_path
from tests.integration.compaction_support import run_compact

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def _encodings(path: str) -> dict[str, set[str]]:
    """Each leaf column's encodings over every row group of the Parquet file."""
    metadata = pq.read_metadata(local_path(path))
    found: dict[str, set[str]] = {}
    for index in range(metadata.num_row_groups):
        row_group = metadata.row_group(index)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            found.setdefault(chunk.path_in_schema, set()).update(chunk.encodings)
    return found


@pytest.mark.parametrize("rows", [100_000, 131_072, 300_000])
def test_rising_ids_and_timestamps_are_probed_as_their_shuffled_selves(rows: int) -> None:
    """Columns that rise strictly (ids, ingestion timestamps) skip Arrow's hash table in the probe; every
    column gets the encoding it gets in any order, on both sides of the page limit (131,072 ids: 1 MiB)."""
    rising = pa.table(
        {
            "id": pa.array(np.arange(rows), pa.int64()),
            "ts": pa.array(np.arange(rows) * 1_000_000 + 1_700_000_000_000_000, pa.timestamp("us", tz="UTC")),
            "day": pa.array((np.arange(rows) // 5000).astype(np.int32), pa.int32()).cast(pa.date32()),
            "amount": pa.array(np.arange(rows, dtype=np.int32)).cast(pa.decimal128(18, 2)),
        }
    )
    shuffled = rising.take(np.random.default_rng(5).permutation(rows))

    assert dictionary_columns(rising, 1 * MiB) == dictionary_columns(shuffled, 1 * MiB)
    assert dictionary_columns(rising, 1 * MiB, 4 * rows) == dictionary_columns(shuffled, 1 * MiB, 4 * rows)


def test_high_cardinality_columns_are_probed_plain_and_others_keep_the_dictionary() -> None:
    rng = np.random.default_rng(3)
    rows = 300_000
    row_group = pa.table(
        {
            "id": pa.array(rng.integers(0, 2**62, rows), pa.int64()),
            "category": pa.array(rng.integers(0, 10, rows), pa.int64()),
            # 50,000 distinct users in random order: a dictionary of 400 KB, under a 1 MiB page.
            "user": pa.array(rng.integers(0, 50_000, rows), pa.int64()),
            "token": pa.array([f"token-{v}" for v in rng.integers(0, 2**62, rows)], pa.string()),
            "tags": pa.array([["a", "b"]] * rows, pa.list_(pa.string())),
            "flag": pa.array([True] * rows, pa.bool_()),
        }
    )

    chosen = dictionary_columns(row_group, 1 * MiB)

    assert isinstance(chosen, list)
    assert sorted(chosen) == ["category", "flag", "tags.list.element", "user"]
    assert dictionary_columns(row_group.select(["category", "user", "tags"]), 1 * MiB) is True
    # A row group smaller than the page limit can never overflow its dictionary.
    assert dictionary_columns(row_group.slice(0, 1000), 1 * MiB) is True


def test_compaction_writes_overflowing_columns_plain_and_keeps_rows(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    rng = np.random.default_rng(11)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "tags", ListType(element_id=4, element_type=StringType()), required=False),
    )
    table = catalog.create_table(
        "ns.encoding",
        schema=schema,
        # A small dictionary page, so the probe decides within the test's few rows.
        properties={"write.parquet.dict-size-bytes": str(64 * 1024)},
    )
    for _ in range(4):
        rows = 50_000
        table.append(
            pa.table(
                {
                    "id": pa.array(rng.integers(0, 2**62, rows), pa.int64()),
                    "region": pa.array(rng.choice(["eu", "us", "ap"], rows), pa.string()),
                    "tags": pa.array([["x"]] * rows, pa.list_(pa.string())),
                },
                schema=table.schema().as_arrow(),
            )
        )
    before = live_checksum(table)

    result = run_compact(table, tmp_path)
    table.refresh()

    assert result["added_data_files_count"] == 1
    assert live_checksum(table) == before
    (output,) = data_files(table)
    encodings = _encodings(output.file_path)
    assert not encodings["id"] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert "RLE_DICTIONARY" in encodings["region"]
    assert "RLE_DICTIONARY" in encodings["tags.list.element"]


def test_a_column_still_growing_is_judged_at_the_size_of_the_later_row_groups() -> None:
    """The first row group is smaller than the later ones: 100,000 distinct ids (800 KB) fit a 1 MiB
    dictionary page here but not in a row group four times as large, where the writer would fall back."""
    rows = 100_000
    first = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "category": pa.array([i % 7 for i in range(rows)], pa.int64()),
        }
    )

    assert dictionary_columns(first, 1 * MiB) is True
    assert dictionary_columns(first, 1 * MiB, row_group_rows=4 * rows) == ["category"]
