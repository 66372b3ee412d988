"""``iceberg-exec rewrite-manifests`` against a real SQLite catalog configured the PyIceberg way."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.cli import main
from tests.helpers import live_checksum
from tests.integration.maintenance_support import create_table, rows

pytestmark = pytest.mark.integration


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """Catalog ``it`` with ``ns.t`` (partitioned by category, six appends), configured for the CLI."""
    uri, warehouse = f"sqlite:///{tmp_path}/cli.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    catalog.create_namespace("ns")
    table = create_table(catalog, partition_name="category")
    for i in range(6):
        table.append(rows(i * 10, 10, "ab"[i % 2]))
    return catalog


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--catalog", "it", *argv], out=out)
    return code, out.getvalue()


def _manifest_count(catalog: SqlCatalog) -> int:
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return len(snapshot.manifests(table.io))


def test_rewrite_manifests_prints_spark_s_counts_and_keeps_every_row(configured: SqlCatalog) -> None:
    before = live_checksum(configured.load_table("ns.t"))

    code, out = run("rewrite-manifests", "ns.t", "--sort-by", "category", "--commit-id", "cli-1", "--json")

    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/rewrite-manifests-result@1"
    assert (result["rewritten_manifests_count"], result["added_manifests_count"]) == (6, 1)
    assert result["sort_by"] == ["category"]
    assert _manifest_count(configured) == 1
    assert live_checksum(configured.load_table("ns.t")) == before

    code, out = run("rewrite-manifests", "ns.t", "--commit-id", "cli-1")
    assert code == 0
    assert "rewritten_manifests_count: 6" in out
    assert "(already committed)" in out


def test_nothing_to_rewrite_is_a_clean_success(configured: SqlCatalog) -> None:
    assert run("rewrite-manifests", "ns.t")[0] == 0
    code, out = run("rewrite-manifests", "ns.t", "--target-size", "8MiB")
    assert code == 0
    assert "nothing to rewrite in spec 0" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spec-id", "4"], "unknown spec id 4 for ns.t"),
        (["--sort-by", "region"], "sort_by names 'region', not partition fields"),
        (["--target-size", "lots"], "lots"),
        (["--target-size", "0"], "positive"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_the_table_unchanged(
    configured: SqlCatalog, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    location = configured.load_table("ns.t").metadata_location

    code, _ = run("rewrite-manifests", "ns.t", *argv)

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("iceberg-exec: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert configured.load_table("ns.t").metadata_location == location


def test_an_unknown_option_is_refused_by_the_parser(configured: SqlCatalog) -> None:
    with pytest.raises(SystemExit) as info:
        run("rewrite-manifests", "ns.t", "--use-caching")
    assert info.value.code == 2
