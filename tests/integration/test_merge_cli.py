"""``iceberg-exec merge`` and ``upsert`` against a real SQLite catalog configured the PyIceberg way.

The expected rows come from a small reference model of the clauses in plain Python; the table is read
back by PyIceberg's scan (``tests.helpers.live_checksum``), not by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from tests.helpers import files_under, live_checksum, row_digest
from tests.integration.test_cli import configured, run  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration

_MASK = (1 << 64) - 1
_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64())])


def _checksum(rows: list[dict[str, Any]]) -> tuple[int, int]:
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & _MASK
    return len(rows), total


def _accounts(catalog: SqlCatalog, name: str = "ns.accounts", *, appends: int = 3) -> Table:
    """``appends`` appends of 20 rows each, ids 0..20*appends-1 (one data file per append)."""
    table = catalog.create_table(name, schema=_SCHEMA)
    for number in range(appends):
        ids = range(number * 20, (number + 1) * 20)
        table.append(
            pa.table(
                {"id": list(ids), "name": [f"n{i}" for i in ids], "amount": [i * 10 for i in ids]}, _SCHEMA
            )
        )
    return table


def _cdc_batch(path: Path, rows: list[tuple[int | None, str, int, str]]) -> str:
    """A CDC batch: the table's columns plus ``op`` ('I', 'U' or 'D')."""
    pq.write_table(
        pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "name": [r[1] for r in rows],
                "amount": pa.array([r[2] for r in rows], pa.int64()),
                "op": [r[3] for r in rows],
            }
        ),
        path,
    )
    return str(path)


def _reference_cdc(before: list[dict[str, Any]], batch: list[tuple[int | None, str, int, str]]) -> list:
    """WHEN MATCHED AND s.op = 'D' THEN DELETE, WHEN MATCHED THEN UPDATE SET *, WHEN NOT MATCHED AND
    s.op != 'D' THEN INSERT *; a NULL key never matches."""
    by_id = {r["id"]: dict(r) for r in before}
    inserted = []
    for key, name, amount, op in batch:
        if key is not None and key in by_id:
            if op == "D":
                del by_id[key]
            else:
                by_id[key] = {"id": key, "name": name, "amount": amount}
        elif op != "D":
            inserted.append({"id": key, "name": name, "amount": amount})
    return [*by_id.values(), *inserted]


_BATCH = [
    (3, "three", 33, "U"),
    (25, "x", 0, "D"),
    (41, "forty-one", 4141, "U"),
    (100, "hundred", 1000, "I"),
    (101, "gone-before-landing", 0, "D"),  # not matched, a delete: not inserted
    (None, "null-key", 7, "I"),  # a NULL key matches nothing: inserted
]
_CLAUSES = (
    "--when-matched",
    "AND s.op = 'D' THEN DELETE",
    "--when-matched",
    "UPDATE SET *",
    "--when-not-matched",
    "AND s.op != 'D' THEN INSERT *",
)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_merge_applies_a_cdc_batch(
    configured: SqlCatalog,  # noqa: F811
    tmp_path: Path,
    mode: str,
) -> None:
    table = _accounts(configured)
    expected = _checksum(_reference_cdc(table.scan().to_arrow().to_pylist(), _BATCH))
    source = _cdc_batch(tmp_path / "batch.parquet", _BATCH)

    code, out = run(
        "--catalog", "it", "merge", "ns.accounts", "--source", source, "--on", "id", *_CLAUSES,
        "--mode", mode, "--spill-dir", str(tmp_path / "spill"), "--commit-id", f"cdc-{mode}",
    )  # fmt: skip

    assert code == 0, out
    assert f"mode: {mode}" in out
    assert "num_target_rows_updated: 2" in out
    assert "num_target_rows_deleted: 1" in out
    assert "num_target_rows_inserted: 2" in out
    assert live_checksum(table) == expected
    operation = table.refresh().current_snapshot().summary.operation.value
    assert operation == "overwrite"
    assert f"({operation})" in out
    # The same commit id again: nothing is committed twice.
    snapshot_id = table.current_snapshot().snapshot_id
    code, out = run(
        "--catalog", "it", "merge", "ns.accounts", "--source", source, "--on", "id", *_CLAUSES,
        "--mode", mode, "--commit-id", f"cdc-{mode}", "--json",
    )  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["already_committed"] is True
    assert table.refresh().current_snapshot().snapshot_id == snapshot_id
    assert live_checksum(table) == expected


def test_upsert_updates_and_inserts_as_json(configured: SqlCatalog, tmp_path: Path) -> None:  # noqa: F811
    table = _accounts(configured)
    before = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    changes = [{"id": 5, "name": "five", "amount": 5}, {"id": 70, "name": "seventy", "amount": 7}]
    source = tmp_path / "upsert.parquet"
    pq.write_table(pa.Table.from_pylist(changes, _SCHEMA), source)
    expected = _checksum(list({**before, **{r["id"]: r for r in changes}}.values()))

    code, out = run(
        "--catalog", "it", "upsert", "ns.accounts", "--source", str(source), "--on", "id",
        "--mode", "merge-on-read", "--memory-limit", "64MiB", "--json",
    )  # fmt: skip

    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/merge-result@1"
    assert (result["rows_updated"], result["rows_inserted"]) == (1, 1)
    assert result["mode"] == "merge-on-read"
    assert result["added_delete_files_count"] == 1
    assert live_checksum(table) == expected


def test_a_duplicate_source_key_fails_with_the_cardinality_message(
    configured: SqlCatalog,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = _accounts(configured)
    before, snapshot_id, files = (
        live_checksum(table),
        table.current_snapshot().snapshot_id,
        files_under(table),
    )
    source = _cdc_batch(tmp_path / "dup.parquet", [(7, "a", 1, "U"), (7, "b", 2, "U"), (90, "c", 3, "I")])

    code, _ = run("--catalog", "it", "merge", "ns.accounts", "--source", source, "--on", "id", *_CLAUSES)

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "matched a single row from the target table with multiple rows of the source table" in err
    assert table.refresh().current_snapshot().snapshot_id == snapshot_id
    assert files_under(table) == files
    assert live_checksum(table) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--on", "nope", "--when-matched", "UPDATE SET *"], "join column 'nope' is not a top-level column"),
        (["--on", "id", "--when-matched", "UPSERT EVERYTHING"], "cannot parse"),
        (["--on", "id,", "--when-not-matched", "INSERT *"], "is not COL[,COL...]"),
        (["--on", "id", "--when-not-matched", "INSERT *", "--source-table", "ns.x"], "one of them"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    configured: SqlCatalog,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    table = _accounts(configured, appends=1)
    snapshot_id, files = table.current_snapshot().snapshot_id, files_under(table)
    source = _cdc_batch(tmp_path / "s.parquet", [(1, "a", 1, "U")])

    code, _ = run("--catalog", "it", "merge", "ns.accounts", "--source", source, *argv)

    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1
    assert message in err
    assert table.refresh().current_snapshot().snapshot_id == snapshot_id
    assert files_under(table) == files
