"""MERGE's ON matched by the engine's one key join (engine/deletes/matches.py ``match_keys``): in memory,
and in buckets by key hash on disk when the source keys do not fit, the live rows PyIceberg reads after
the merge are those of a plain-Python model of Spark's MERGE (NULL never matches in ``=``, a target row
matched by two source rows fails, keys compared exactly column by column, the target spread over
several files)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.deletes import keysets, matches
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.merge import merge
from tests.helpers import live_checksum, row_digest
from tests.integration.maintenance_support import limits

_MASK = (1 << 64) - 1
Row = dict[str, Any]
SCHEMA = Schema(
    NestedField(1, "region", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
    NestedField(4, "v", StringType(), required=False),
)
ARROW = pa.schema([("region", pa.string()), ("n", pa.int64()), ("score", pa.float64()), ("v", pa.string())])


def _checksum(rows: Sequence[Row]) -> tuple[int, int]:
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & _MASK
    return len(rows), total


def _model_upsert(target: list[Row], source: list[Row], on: Sequence[str]) -> list[Row]:
    """Spark's ``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` with ``t.c = s.c`` for
    every ``on`` column: a NULL in any key column matches nothing; two source rows for one target row
    fail."""

    def key(row: Row) -> tuple[Any, ...] | None:
        values = tuple(row[c] for c in on)
        return None if any(v is None for v in values) else values

    by_key: dict[tuple[Any, ...], list[int]] = {}
    for index, row in enumerate(source):
        k = key(row)
        if k is not None:
            by_key.setdefault(k, []).append(index)
    out, used = [], set()
    for row in target:
        k = key(row)
        hits = by_key.get(k, []) if k is not None else []
        if len(hits) > 1:
            raise AssertionError("cardinality")
        used.update(hits)
        out.append(dict(source[hits[0]]) if hits else dict(row))
    out.extend(dict(row) for index, row in enumerate(source) if index not in used)
    return out


def _target(catalog: Catalog, rows: list[Row], files: int) -> Any:
    table = catalog.create_table("ns.keys", schema=SCHEMA, properties={"format-version": "2"})
    step = -(-len(rows) // files)
    for start in range(0, len(rows), step):
        table.append(pa.Table.from_pylist(rows[start : start + step], schema=ARROW))
    return table


def _rows(count: int, tag: str, offset: int = 0) -> list[Row]:
    regions = ["eu", "us", None, "ap"]
    return [
        {
            "region": regions[(i + offset) % 4],
            "n": None if (i + offset) % 11 == 0 else (i + offset) // 2,
            "score": float((i + offset) % 7),
            "v": f"{tag}{i}",
        }
        for i in range(count)
    ]


def _source(tmp_path: Path, rows: list[Row]) -> str:
    path = tmp_path / "source.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW), path)
    return str(path)


@pytest.fixture(params=["in-memory", "buckets"])
def budget(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The key join with the source keys in memory, or split into buckets by hash (a budget of 4 KiB of
    source keys: many buckets, and buckets matched a slice at a time)."""
    if request.param == "buckets":
        monkeypatch.setattr(matches, "_keys_budget", lambda limits: 4096)
        # candidates compared a few at a time: a probe batch is halved again and again
        monkeypatch.setattr(keysets.KeySet, "MAX_CANDIDATES", 64)
    return str(request.param)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_multi_column_keys_with_nulls_over_several_files_match_the_model(
    catalog: Catalog, tmp_path: Path, mode: str, budget: str
) -> None:
    target = _rows(3000, "t")
    table = _target(catalog, target, files=4)
    # half the source's keys meet a target row (in every file), half are new; NULLs on both sides
    source = [row for row in _rows(1600, "s", offset=1500) if row["n"] is None or row["n"] % 2 == 0]
    source += [{"region": None, "n": None, "score": 1.0, "v": "all-null"}]
    expected = _model_upsert(target, source, ["region", "n"])

    merge(
        table,
        on=["region", "n"],
        source_files=[_source(tmp_path, source)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode=mode,
        limits=limits(tmp_path),
    )

    if mode == "merge-on-read":  # PyIceberg's scan reads the position deletes this mode wrote
        assert table.refresh().current_snapshot().summary.operation.value == "overwrite"
    assert live_checksum(table) == _checksum(expected)


def test_a_target_row_matched_by_two_source_rows_in_other_files_fails(
    catalog: Catalog, tmp_path: Path, budget: str
) -> None:
    target = _rows(2000, "t")
    table = _target(catalog, target, files=3)
    before = (table.current_snapshot().snapshot_id, live_checksum(table))
    source = _rows(400, "s", offset=1200)
    twice = next(r for r in reversed(source) if r["region"] is not None and r["n"] is not None)
    source.append(dict(twice, v="again"))  # a key of the last target file, twice
    with pytest.raises(AssertionError, match="cardinality"):
        _model_upsert(target, source, ["region", "n"])

    with pytest.raises(ConfigurationError, match="matched a single row from the target table with multiple"):
        merge(
            table,
            on=["region", "n"],
            source_files=[_source(tmp_path, source)],
            when_matched=["UPDATE SET *"],
            limits=limits(tmp_path),
        )

    table.refresh()
    assert (table.current_snapshot().snapshot_id, live_checksum(table)) == before


def test_duplicate_source_keys_all_delete_and_none_is_inserted(
    catalog: Catalog, tmp_path: Path, budget: str
) -> None:
    """An unconditional DELETE skips the cardinality check: every copy of a key pairs with its target
    row, and a source row paired with any target row is not NOT MATCHED."""
    target = _rows(1000, "t")
    table = _target(catalog, target, files=2)
    source = [dict(row, v=f"copy{c}") for row in _rows(50, "s", offset=600) for c in range(30)]
    keys = {(r["region"], r["n"]) for r in source if r["region"] is not None and r["n"] is not None}
    expected = [r for r in target if (r["region"], r["n"]) not in keys]

    merge(
        table,
        on=["region", "n"],
        source_files=[_source(tmp_path, source)],
        when_matched=["DELETE"],
        limits=limits(tmp_path),
    )

    assert live_checksum(table) == _checksum(expected)


def test_a_double_key_still_matches_through_the_spilling_join(catalog: Catalog, tmp_path: Path) -> None:
    """The bucket transform does not hash doubles: their ON goes to DataFusion's join, NULLs unmatched."""
    target = _rows(500, "t")
    table = _target(catalog, target, files=2)
    source = [
        {"region": "x", "n": 1, "score": 3.0, "v": "three"},
        {"region": "x", "n": 1, "score": None, "v": "null"},
    ]
    merge(
        table,
        on=["score", "n"],
        source_files=[_source(tmp_path, source)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        limits=limits(tmp_path),
    )
    assert live_checksum(table) == _checksum(_model_upsert(target, source, ["score", "n"]))
