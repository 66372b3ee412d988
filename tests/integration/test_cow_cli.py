"""``iceberg-exec delete | update | overwrite`` against a real SQLite catalog configured the PyIceberg way."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.cli import main
from tests.integration.test_cow import digest, live, make_table, rows, unmatched

pytestmark = pytest.mark.integration


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Table:
    """Table ``ns.t`` (partitioned by region) of a catalog ``it`` set up through PYICEBERG_CATALOG__IT__*."""
    uri, warehouse = f"sqlite:///{tmp_path}/cli.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    catalog.create_namespace("ns")
    return make_table(catalog, partitioned=True, files=2)


def run(tmp_path: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    command, table, *rest = argv
    code = main(["--catalog", "it", command, table, "--spill-dir", str(tmp_path / "spill"), *rest], out=out)
    return code, out.getvalue()


def test_delete_prints_the_result_and_commits_a_snapshot(configured: Table, tmp_path: Path) -> None:
    expected = unmatched(live(configured), lambda t: pc.less(t["user_id"], 300))

    code, out = run(tmp_path, "delete", "ns.t", "--where", "user_id < 300", "--json", "--commit-id", "cli-1")

    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/cow-commit-result@1"
    assert result["deleted_rows"] > 0
    assert result["snapshot_operation"] == "overwrite"
    assert digest(live(configured)) == digest(expected)
    again_code, again = run(tmp_path, "delete", "ns.t", "--where", "user_id < 300", "--commit-id", "cli-1")
    assert again_code == 0
    assert "no row matched" in again  # re-planned on the new snapshot: nothing left to delete


def test_update_takes_repeated_set_options(configured: Table, tmp_path: Path) -> None:
    before = live(configured)
    match = pc.fill_null(pc.equal(before["region"], "us"), False)
    expected = before.set_column(5, "name", pc.if_else(match, pa.scalar("x"), before["name"]))
    expected = expected.set_column(
        1, "user_id", pc.if_else(match, pc.add(before["user_id"], 1), before["user_id"])
    )

    code, out = run(
        tmp_path,
        "update",
        "ns.t",
        "--where",
        "region = 'us'",
        "--set",
        "name='x'",
        "--set",
        "user_id=user_id + 1",
    )

    assert code == 0, out
    assert f"updated_rows: {pc.sum(match).as_py()}" in out
    assert digest(live(configured)) == digest(expected)


def test_overwrite_loads_parquet_files(configured: Table, tmp_path: Path) -> None:
    loaded = [rows(5000 + 10 * i, 10, region="eu") for i in range(2)]
    paths = []
    for i, data in enumerate(loaded):
        pq.write_table(data, tmp_path / f"load-{i}.parquet")
        paths.append(str(tmp_path / f"load-{i}.parquet"))
    expected = pa.concat_tables([unmatched(live(configured), lambda t: pc.equal(t["region"], "eu")), *loaded])

    code, out = run(tmp_path, "overwrite", "ns.t", "--where", "region = 'eu'", "--from", *paths, "--json")

    assert code == 0, out
    assert json.loads(out)["inserted_rows"] == 20
    assert digest(live(configured)) == digest(expected)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("delete", "ns.t"), "a predicate is required"),
        (("delete", "ns.t", "--where", "user_id <"), "cannot parse where"),
        (("delete", "ns.t", "--where", "nope = 1"), "does not fit the table schema"),
        (("update", "ns.t", "--where", "id = 1", "--set", "name"), "is not COLUMN=SQL_EXPRESSION"),
        (("update", "ns.t", "--where", "id = 1", "--set", "id=NULL"), "gives null for required column id"),
        (
            ("overwrite", "ns.t", "--where", "id = 1", "--from", "/nowhere.parquet"),
            "cannot read Parquet file",
        ),
        (("delete", "ns.t", "--where", "id = 1", "--isolation-level", "x"), "unknown isolation level"),
        (("delete", "ns.nope", "--where", "id = 1"), "ns.nope"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_the_table_unchanged(
    configured: Table, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    location = configured.metadata_location
    code, out = run(tmp_path, *argv)
    err = capsys.readouterr().err
    assert code == 2
    assert out == ""
    assert err.startswith("iceberg-exec: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1
    configured.refresh()
    assert configured.metadata_location == location
