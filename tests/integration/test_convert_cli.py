"""``iceberg-exec convert-equality-deletes`` against a real SQLite catalog configured the PyIceberg way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.helpers import live_checksum
from tests.integration.test_cli import configured, run  # noqa: F401  (the fixture)
from tests.system.equality_support import add_flink_style_equality_deletes

pytestmark = pytest.mark.integration


def test_convert_equality_deletes_then_nothing_to_do(configured: SqlCatalog, tmp_path: Path) -> None:  # noqa: F811
    table = configured.load_table("ns.events")
    expected = add_flink_style_equality_deletes(table)
    spill = str(tmp_path / "spill")

    code, out = run(
        "--catalog", "it", "convert-equality-deletes", "ns.events", "--spill-dir", spill, "--json"
    )

    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/convert-result@1"
    assert result["converted_equality_delete_files_count"] == 2
    assert live_checksum(table.refresh()) == expected
    code, out = run("--catalog", "it", "convert-equality-deletes", "ns.events", "--spill-dir", spill)
    assert code == 0, out
    assert "converted_equality_delete_files_count: 0" in out


def test_bad_option_is_one_line_exit_2(
    configured: SqlCatalog,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = configured.load_table("ns.events")
    snapshot = table.current_snapshot()
    code, _ = run(
        "--catalog", "it", "convert-equality-deletes", "ns.events", "--option", "delete-granularity=row"
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "delete-granularity 'row' is not file or partition" in err
    assert len(err.splitlines()) == 1
    assert table.refresh().current_snapshot() == snapshot
