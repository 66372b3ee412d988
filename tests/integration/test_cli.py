"""The ``iceberg-exec`` command line against a real SQLite catalog configured the PyIceberg way."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.cli import main
from airflow_provider_iceberg_exec.demo import make_fragmented_table
from tests.helpers import data_files, live_checksum

pytestmark = pytest.mark.integration


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """A catalog named ``it``, configured for the CLI through PYICEBERG_CATALOG__IT__* variables."""
    uri, warehouse = f"sqlite:///{tmp_path}/cli.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    make_fragmented_table(catalog, "ns.events", num_files=6, rows_per_file=300)
    return catalog


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_compact_rewrites_and_keeps_every_row(configured: SqlCatalog, tmp_path: Path) -> None:
    table = configured.load_table("ns.events")
    before = live_checksum(table)
    files_before = len(data_files(table))
    code, out = run(
        "--catalog",
        "it",
        "compact",
        "ns.events",
        "--option",
        "min-input-files=2",
        "--spill-dir",
        str(tmp_path / "spill"),
        "--json",
    )
    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/compaction-result@1"
    assert result["rewritten_data_files_count"] == files_before
    assert result["added_data_files_count"] == len(data_files(table)) < files_before
    assert live_checksum(table) == before
    assert table.current_snapshot().summary.operation.value == "replace"


def test_plan_execute_commit_steps_exchange_json_and_commit_is_idempotent(
    configured: SqlCatalog, tmp_path: Path
) -> None:
    table = configured.load_table("ns.events")
    before = live_checksum(table)
    plan, results = tmp_path / "plan.json", tmp_path / "results.json"
    assert (
        run("--catalog", "it", "plan", "ns.events", "--option", "min-input-files=2", "-o", str(plan))[0] == 0
    )
    assert json.loads(plan.read_text())["tasks"]
    assert (
        run("--catalog", "it", "execute", str(plan), "-o", str(results), "--spill-dir", str(tmp_path))[0] == 0
    )
    code, out = run("--catalog", "it", "commit", str(results), "--commit-id", "c-1", "--json")
    assert code == 0, out
    first = json.loads(out)
    assert first["already_committed"] is False
    code, out = run("--catalog", "it", "commit", str(results), "--commit-id", "c-1", "--json")
    second = json.loads(out)
    assert second["already_committed"] is True
    assert second["snapshot_ids"] == first["snapshot_ids"]
    assert live_checksum(table) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--catalog", "nope", "compact", "ns.events"], "catalog 'nope' is not configured"),
        (["--catalog", "it", "compact", "ns.missing"], "table 'ns.missing' not found"),
        (["--catalog", "it", "compact", "missing.events"], "not found"),
        (["--catalog", "it", "compact", "ns.events", "--where", "id >"], "cannot parse where"),
        (["--catalog", "it", "compact", "ns.events", "--where", "nope = 1"], "does not fit the table schema"),
        (
            ["--catalog", "it", "compact", "ns.events", "--option", "bogus=1"],
            "valid options: delete-file-threshold",
        ),
        (["--catalog", "it", "compact", "ns.events", "--option", "target-file-size-bytes=0"], "must be > 0"),
        (["--catalog", "it", "compact", "ns.events", "--strategy", "zorder"], "only binpack or sort"),
        (
            ["--catalog", "it", "compact", "ns.events", "--strategy", "sort", "--sort-order", "nope ASC"],
            "not in",
        ),
        (["--catalog", "it", "compact", "ns.events", "--memory-limit", "1MiB"], "below the floor"),
        (["--catalog", "it", "compact", "ns.events", "--spill-dir", "/proc/nope"], "not writable"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_the_table(
    configured: SqlCatalog, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    table = configured.load_table("ns.events")
    snapshot = table.current_snapshot().snapshot_id
    code, _ = run(*argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
