"""engine/commit/cleanup.py: the one safe delete, against a real SQLite-catalog table on local files.

A named file is deleted only when it lies under the table's own locations and the current metadata does
not reference it; everything else is kept and reported, and a table that cannot be read keeps all."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_iceberg_exec.engine.commit.cleanup import (
    CleanupReport,
    delete_unreferenced,
    discard_payloads,
    referenced_paths,
)
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def table(catalog):
    """``ns.t`` with two appends: two live data files, two snapshots."""
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    table.append(pa.table({"id": [3]}, schema=SCHEMA))
    return table


def _live_files(table) -> list[str]:
    return sorted(task.file.file_path for task in table.scan().plan_files())


def _written(table, relative: str) -> str:
    """A real file under the table's location, referenced by nothing; returns its URI."""
    path = Path(table.location().removeprefix("file://")) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return f"file://{path}"


def _exists(uri: str) -> bool:
    return Path(uri.removeprefix("file://")).exists()


def test_an_unreferenced_file_under_the_table_is_deleted(table) -> None:
    stray = _written(table, "data/stray.parquet")
    report = delete_unreferenced(table, [stray, stray], what="uncommitted output")
    assert report == CleanupReport(deleted=(stray,))
    assert not _exists(stray)


def test_live_data_files_and_metadata_files_are_kept_as_referenced(table) -> None:
    live = _live_files(table)
    metadata = [table.metadata_location, table.current_snapshot().manifest_list]
    report = delete_unreferenced(table, [*live, *metadata], what="uncommitted output")
    assert report.deleted == ()
    assert sorted(report.referenced) == sorted([*live, *metadata])
    assert all(_exists(uri) for uri in [*live, *metadata])


def test_a_file_only_an_older_snapshot_references_is_kept(table) -> None:
    old = _live_files(table)
    table.overwrite(pa.table({"id": [9]}, schema=SCHEMA))
    assert not set(old) & set(_live_files(table))
    report = delete_unreferenced(table, old, what="uncommitted output")
    assert sorted(report.referenced) == old
    assert all(_exists(uri) for uri in old)


def test_a_reference_in_another_scheme_still_protects_the_file(table) -> None:
    """Paths compare without scheme and authority: erring towards "referenced" only spares a file."""
    live = _live_files(table)[0]
    as_s3 = "s3://bucket" + live.removeprefix("file://")
    assert delete_unreferenced(table, [as_s3], what="x").referenced == (as_s3,)


def test_files_outside_the_table_locations_are_never_deleted(table, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere.parquet"
    elsewhere.write_bytes(b"PAR1")
    sibling = _written(table, "data/x.parquet").replace("/t/data/", "/t-other/data/")
    Path(sibling.removeprefix("file://")).parent.mkdir(parents=True)
    Path(sibling.removeprefix("file://")).write_bytes(b"PAR1")
    escaping = _written(table, "data/y.parquet").replace("/data/y.parquet", "/data/../../escape.parquet")
    candidates = [f"file://{elsewhere}", sibling, escaping]
    report = delete_unreferenced(table, candidates, what="uncommitted output")
    assert report.outside == tuple(candidates)
    assert report.deleted == ()
    assert elsewhere.exists()
    assert _exists(sibling)


def test_gone_files_are_counted_missing_and_failing_deletes_failed(table) -> None:
    gone = table.location() + "/data/gone.parquet"
    stuck = _written(table, "data/stuck.parquet")

    def remove(uri: str) -> None:
        if uri == stuck:
            raise PermissionError("read-only")
        table.io.delete(uri)

    report = delete_unreferenced(table, [gone, stuck], what="uncommitted output", remove=remove)
    assert report.missing == (gone,)
    assert report.failed == (f"{stuck}: read-only",)
    assert _exists(stuck)
    assert "1 already gone, 1 failed" in report.describe()


def test_a_table_that_cannot_be_read_keeps_every_candidate_as_unproven(table, catalog, caplog) -> None:
    stray = _written(table, "data/stray.parquet")
    catalog.drop_table("ns.t")
    with caplog.at_level(logging.WARNING):
        report = delete_unreferenced(table, [stray], what="uncommitted output")
    assert report == CleanupReport(unproven=(stray,))
    assert _exists(stray)
    assert "cannot prove 1 file(s) unreferenced" in caplog.text


def test_narrower_roots_keep_what_lies_outside_them(table) -> None:
    staged = _written(table, f"{STAGING_DIR}/plan-0.json")
    data = _written(table, "data/stray.parquet")
    report = discard_payloads(table, [staged, data])
    assert report.deleted == (staged,)
    assert report.outside == (data,)
    assert _exists(data)


def test_roots_outside_the_table_allow_nothing(table, tmp_path) -> None:
    stray = _written(table, "data/stray.parquet")
    report = delete_unreferenced(table, [stray], what="x", roots=[f"{tmp_path}/not-the-table/"])
    assert report.outside == (stray,)
    assert _exists(stray)


def test_no_candidate_reads_nothing(table) -> None:
    assert delete_unreferenced(table, ["", None], what="x") == CleanupReport()  # type: ignore[list-item]
    assert referenced_paths(table.io, table.metadata, table.metadata_location, []) == set()
