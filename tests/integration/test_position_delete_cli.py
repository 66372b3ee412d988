"""``iceberg-exec rewrite-position-deletes`` against a real SQLite catalog configured the PyIceberg way."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.helpers import commit_position_deletes, data_files, live_checksum
from tests.integration.test_cli import configured, run

pytestmark = pytest.mark.integration

__all__ = ["configured"]


def _with_deletes(catalog: SqlCatalog) -> None:
    table = catalog.create_table(
        "ns.posdel",
        schema=pa.schema([("id", pa.int64()), ("name", pa.string())]),
        properties={"format-version": "2"},
    )
    table.append(pa.table({"id": list(range(30)), "name": [f"n{i}" for i in range(30)]}))
    (data_file,) = data_files(table)
    for row in range(6):
        commit_position_deletes(table, data_file.file_path, [row])


def test_rewrite_position_deletes_keeps_every_row(configured: SqlCatalog, tmp_path: Path) -> None:
    _with_deletes(configured)
    table = configured.load_table("ns.posdel")
    before = live_checksum(table)
    args = ("--catalog", "it", "rewrite-position-deletes", "ns.posdel", "--spill-dir", str(tmp_path / "s"))
    code, out = run(*args, "--commit-id", "cli-1", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/rewrite-position-deletes-result@1"
    assert result["rewritten_delete_files_count"] == 6
    assert result["added_delete_files_count"] == 1
    assert live_checksum(table) == before
    # The same commit id again: already committed, nothing new.
    code, out = run(*args, "--commit-id", "cli-1")
    assert code == 0
    assert "(already committed)" in out
    # Nothing left to rewrite by the default options.
    code, out = run(*args)
    assert code == 0
    assert "nothing to do" in out


def test_bad_input_is_one_line_exit_2(
    configured: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _with_deletes(configured)
    head = configured.load_table("ns.posdel").current_snapshot()
    code, _ = run("--catalog", "it", "rewrite-position-deletes", "ns.posdel", "--option", "nope=1")
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "valid options: max-concurrent-file-group-rewrites" in err
    code, _ = run("--catalog", "it", "rewrite-position-deletes", "ns.posdel", "--where", "id >")
    assert code == 2
    assert configured.load_table("ns.posdel").current_snapshot() == head
