"""Snapshot expiry with file cleanup against a real SQLite catalog and real files."""

from __future__ import annotations

import datetime
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.cli import main
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots
from tests.helpers import commit_delete_files, live_checksum
from tests.integration.maintenance_support import (
    create_table,
    limits,
    local,
    referenced_uris,
    rows,
    set_partition_statistics,
    set_statistics,
    write_dv_like,
    write_equality_deletes,
    write_position_deletes,
)

pytestmark = pytest.mark.integration


def _future() -> datetime.datetime:
    """An ``older_than`` after every commit of the test: every unprotected snapshot is old enough."""
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)


def _expire(table: Table, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("older_than", _future())
    return expire_snapshots(table, limits=limits(tmp_path), **kwargs)


def _exists(uri: str) -> bool:
    return os.path.exists(local(uri))


def _snapshot_files(table: Table) -> set[str]:
    """What expiry may delete: everything referenced except metadata files."""
    return {u for u in referenced_uris(table) if not u.endswith(".metadata.json")}


def _manifests(table: Table) -> set[str]:
    return {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}


@pytest.fixture
def history(catalog: SqlCatalog) -> Table:
    """main: S1 append A, S2 append B, S3 delete A's rows (drops A), S4 append C."""
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    table.append(rows(5, 5, "b"))
    table.delete("id < 5")
    table.append(rows(10, 5, "c"))
    return table


def test_expires_old_snapshots_and_deletes_the_files_only_they_reached(
    history: Table, tmp_path: Path
) -> None:
    table = history
    rows_before = live_checksum(table)
    before_files, before_manifests = _snapshot_files(table), _manifests(table)
    first = table.metadata.snapshots[0]
    file_a = next(
        e.data_file.file_path for m in first.manifests(table.io) for e in m.fetch_manifest_entry(table.io)
    )

    result = _expire(table, tmp_path)

    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [table.metadata.current_snapshot_id]
    assert result["expired_snapshot_count"] == 3
    after_files = _snapshot_files(table)
    gone = before_files - after_files
    assert file_a in gone
    assert not any(_exists(u) for u in gone)
    assert all(_exists(u) for u in after_files)
    assert result["deleted_data_files_count"] == 1
    assert result["deleted_manifest_lists_count"] == 3
    assert result["deleted_manifest_files_count"] == len(before_manifests - _manifests(table))
    assert result["deleted_position_delete_files_count"] == 0
    assert result["failed_delete_count"] == 0
    assert live_checksum(table) == rows_before
    # Metadata files are not expiry's to delete.
    assert all(_exists(e.metadata_file) for e in table.metadata.metadata_log)


def test_files_reachable_through_a_tag_or_branch_are_kept(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    s1 = table.metadata.current_snapshot_id
    assert s1 is not None
    table.manage_snapshots().create_tag(s1, "release").commit()
    table.delete("id < 5")
    s2 = table.metadata.current_snapshot_id
    assert s2 is not None
    table.manage_snapshots().create_branch(s2, "audit").commit()
    table.append(rows(100, 5, "d"), branch="audit")
    table.append(rows(10, 5, "c"))
    tagged_file = next(t.file.file_path for t in table.scan(snapshot_id=s1).plan_files())
    branch_files = {t.file.file_path for t in table.scan().use_ref("audit").plan_files()}
    main_rows = live_checksum(table)
    before = _snapshot_files(table)

    result = _expire(table, tmp_path)

    table.refresh()
    assert result["expired_snapshot_ids"] == [s2]
    assert result["removed_refs"] == []
    assert set(table.metadata.refs) == {"main", "release", "audit"}
    assert _exists(tagged_file)
    assert all(_exists(f) for f in branch_files)
    assert all(_exists(u) for u in _snapshot_files(table))
    assert not any(_exists(u) for u in before - _snapshot_files(table))
    assert result["deleted_data_files_count"] == 0
    assert live_checksum(table) == main_rows


def test_a_ref_past_its_max_age_expires_with_its_files(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    s1 = table.metadata.current_snapshot_id
    assert s1 is not None
    table.manage_snapshots().create_tag(s1, "short-lived", max_ref_age_ms=1).commit()
    table.delete("id < 5")
    table.append(rows(10, 5, "c"))
    tagged_file = next(t.file.file_path for t in table.scan(snapshot_id=s1).plan_files())
    time.sleep(0.01)

    result = _expire(table, tmp_path)

    assert result["removed_refs"] == ["short-lived"]
    assert s1 in result["expired_snapshot_ids"]
    assert not _exists(tagged_file)
    assert result["deleted_data_files_count"] == 1


def test_delete_files_of_an_expired_branch_are_deleted_and_counted(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    s1 = table.metadata.current_snapshot_id
    assert s1 is not None
    table.manage_snapshots().create_branch(s1, "scratch").commit()
    data_file = next(t.file.file_path for t in table.scan().plan_files())
    deletes = [
        write_position_deletes(table, data_file, [0], "a"),
        write_equality_deletes(table, [1], "a"),
        write_dv_like(table, "a"),
    ]
    commit_delete_files(table, deletes, branch="scratch")
    # PyIceberg drops a branch's retention when it advances it: set the max ref age on the head.
    head = table.metadata.refs["scratch"].snapshot_id
    table.manage_snapshots().create_branch(head, "scratch", max_ref_age_ms=1).commit()
    table.append(rows(5, 5, "a"))
    main_rows = live_checksum(table)
    time.sleep(0.01)

    result = _expire(table, tmp_path)

    assert result["removed_refs"] == ["scratch"]
    assert result["deleted_position_delete_files_count"] == 2  # the Parquet one and the DV's Puffin file
    assert result["deleted_equality_delete_files_count"] == 1
    assert result["deleted_data_files_count"] == 0
    assert result["deleted_manifest_lists_count"] == 2  # the branch's snapshot and main's first
    assert not any(_exists(d.file_path) for d in deletes)
    assert _exists(data_file)
    assert live_checksum(table) == main_rows


def test_statistics_files_of_expired_snapshots_are_deleted(history: Table, tmp_path: Path) -> None:
    table = history
    first = table.metadata.snapshots[0].snapshot_id
    current = table.metadata.current_snapshot_id
    assert current is not None
    old_stats = [set_statistics(table, first), set_partition_statistics(table, first)]
    kept_stats = [set_statistics(table, current), set_partition_statistics(table, current)]

    result = _expire(table, tmp_path)

    table.refresh()
    assert result["deleted_statistics_files_count"] == 2
    assert not any(_exists(u) for u in old_stats)
    assert all(_exists(u) for u in kept_stats)
    assert [s.statistics_path for s in table.metadata.statistics] == kept_stats[:1]
    assert [s.statistics_path for s in table.metadata.partition_statistics] == kept_stats[1:]


def test_cleanup_in_several_hash_buckets_deletes_the_same_files(
    history: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_iceberg_exec.engine.ops import expire as expire_module

    monkeypatch.setattr(expire_module, "bucket_count", lambda rows, row_bytes, limits: 3)
    before = _snapshot_files(history)
    result = _expire(history, tmp_path)
    gone = before - _snapshot_files(history)
    assert not any(_exists(u) for u in gone)
    assert result["deleted_data_files_count"] == 1
    assert result["deleted_manifest_lists_count"] == 3


def test_retain_last_keeps_the_newest_ancestors(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    for i in range(5):
        table.append(rows(i * 5, 5, "a"))
    ids = [s.snapshot_id for s in table.metadata.snapshots]

    result = _expire(table, tmp_path, retain_last=3)

    table.refresh()
    assert result["expired_snapshot_ids"] == sorted(ids[:2])
    assert [s.snapshot_id for s in table.metadata.snapshots] == ids[2:]
    assert result["deleted_data_files_count"] == 0
    assert result["deleted_manifest_lists_count"] == 2


def test_defaults_come_from_the_table_properties(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    for i in range(4):
        table.append(rows(i * 5, 5, "a"))
    # Java's default: snapshots younger than 5 days stay.
    assert expire_snapshots(table, limits=limits(tmp_path))["expired_snapshot_count"] == 0
    with table.transaction() as tx:
        tx.set_properties(
            {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "2"}
        )
    time.sleep(0.01)

    result = expire_snapshots(table, limits=limits(tmp_path))

    assert result["expired_snapshot_count"] == 2
    assert result["retain_last"] == 2
    assert len(table.refresh().metadata.snapshots) == 2


def test_snapshot_ids_expire_regardless_of_age(history: Table, tmp_path: Path) -> None:
    table = history
    second = table.metadata.snapshots[1].snapshot_id

    result = expire_snapshots(table, snapshot_ids=[second], limits=limits(tmp_path))

    assert result["expired_snapshot_ids"] == [second]
    assert second not in {s.snapshot_id for s in table.refresh().metadata.snapshots}


def test_refuses_to_expire_a_snapshot_a_ref_holds(history: Table, tmp_path: Path) -> None:
    table = history
    first = table.metadata.snapshots[0].snapshot_id
    table.manage_snapshots().create_tag(first, "keep").commit()
    location = table.metadata_location
    with pytest.raises(
        ConfigurationError, match=rf"Cannot expire {first}. Still referenced by refs: \['keep'\]"
    ):
        _expire(table, tmp_path, snapshot_ids=[first])
    with pytest.raises(ConfigurationError, match="not in the table"):
        _expire(table, tmp_path, snapshot_ids=[12345])
    with pytest.raises(ConfigurationError, match="at least 1"):
        _expire(table, tmp_path, retain_last=0)
    assert table.refresh().metadata_location == location


def test_refuses_when_gc_is_disabled(history: Table, tmp_path: Path) -> None:
    table = history
    with table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    location, files = table.metadata_location, _snapshot_files(table)
    with pytest.raises(ConfigurationError, match=r"^Cannot expire snapshots: GC is disabled"):
        _expire(table, tmp_path)
    assert table.refresh().metadata_location == location
    assert all(_exists(u) for u in files)


def test_cleanup_off_changes_the_metadata_only(history: Table, tmp_path: Path) -> None:
    table = history
    files = _snapshot_files(table)

    result = _expire(table, tmp_path, cleanup=False)

    assert result["expired_snapshot_count"] == 3
    assert len(table.refresh().metadata.snapshots) == 1
    assert all(_exists(u) for u in files)
    assert result["deleted_data_files_count"] == result["deleted_manifest_lists_count"] == 0


def test_dry_run_reports_and_changes_nothing(history: Table, tmp_path: Path) -> None:
    table = history
    location, files = table.metadata_location, _snapshot_files(table)

    dry = _expire(table, tmp_path, dry_run=True)

    assert table.refresh().metadata_location == location
    assert all(_exists(u) for u in files)
    real = _expire(table, tmp_path)
    for key in ("expired_snapshot_ids", "deleted_data_files_count", "deleted_manifest_files_count"):
        assert dry[key] == real[key], key
    assert dry["deleted_manifest_lists_count"] == real["deleted_manifest_lists_count"] == 3


def test_nothing_to_expire_commits_nothing(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    location = table.metadata_location
    result = _expire(table, tmp_path)
    assert result["expired_snapshot_count"] == 0
    assert table.refresh().metadata_location == location
    empty = create_table(catalog, "ns.empty")
    assert _expire(empty, tmp_path)["expired_snapshot_ids"] == []


# -- the command line ---------------------------------------------------------------------------------


@pytest.fixture
def cli_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Table:
    uri, warehouse = f"sqlite:///{tmp_path}/cli.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    catalog.create_namespace("ns")
    table = create_table(catalog)
    for i in range(3):
        table.append(rows(i * 5, 5, "a"))
    return table


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_expire_snapshots(cli_table: Table, tmp_path: Path) -> None:
    when = _future().isoformat()
    code, out = _run(
        "--catalog", "it", "expire-snapshots", "ns.t", "--older-than", when, "--retain-last", "2", "--dry-run"
    )
    assert code == 0, out
    assert "expired_snapshot_count: 1" in out
    assert "(dry run)" in out
    code, out = _run(
        "--catalog",
        "it",
        "expire-snapshots",
        "ns.t",
        "--older-than",
        when,
        "--spill-dir",
        str(tmp_path),
        "--json",
    )
    assert code == 0, out
    result = json.loads(out)
    assert result["schema"] == "iceberg-exec/expire-snapshots-result@1"
    assert result["expired_snapshot_count"] == 2
    assert len(cli_table.refresh().metadata.snapshots) == 1


def test_cli_bad_input_exits_2_and_changes_nothing(
    cli_table: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    location = cli_table.metadata_location
    assert _run("--catalog", "it", "expire-snapshots", "ns.t", "--older-than", "yesterday")[0] == 2
    assert _run("--catalog", "it", "expire-snapshots", "ns.t", "--retain-last", "0")[0] == 2
    with cli_table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    location = cli_table.refresh().metadata_location
    assert _run("--catalog", "it", "expire-snapshots", "ns.t", "--older-than", _future().isoformat())[0] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "iceberg-exec: error: Cannot expire snapshots: GC is disabled "
        "(deleting files may corrupt other tables)"
    )
    assert all(line.startswith("iceberg-exec: error: ") for line in err)
    assert cli_table.refresh().metadata_location == location
