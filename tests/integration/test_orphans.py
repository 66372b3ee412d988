"""Orphan-file scan and removal against a real SQLite catalog and real files, aged with ``os.utime``."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    DataFileCodecError,
    IncompleteListingError,
)
from airflow_provider_iceberg_exec.engine.meta import reachable
from airflow_provider_iceberg_exec.engine.ops.orphans import (
    delete_orphan_files,
    read_orphan_scan_result,
    remove_orphan_files,
    scan_orphan_files,
)
from airflow_provider_iceberg_exec.engine.ops.orphans import listing as orphans_listing
from airflow_provider_iceberg_exec.engine.ops.orphans import scan as orphans_scan
from tests.helpers import commit_delete_files
from tests.integration.maintenance_support import (
    age,
    append_data_file,
    create_table,
    files_on_disk,
    limits,
    local,
    orphan_list,
    plant,
    referenced_uris,
    rows,
    set_partition_statistics,
    set_statistics,
    write_dv_like,
    write_equality_deletes,
    write_position_deletes,
)

pytestmark = pytest.mark.integration


class Rich:
    """A table referencing files of every kind, with planted orphans, hidden and young files."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.root = local(table.location())
        self.planted: set[str] = set()
        self.hidden: set[str] = set()
        self.young: set[str] = set()

    def scan(self, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
        return scan_orphan_files(self.table, limits=limits(tmp_path), **kwargs)


@pytest.fixture
def rich(catalog: SqlCatalog) -> Rich:
    # ``_cat`` is a partition field starting with "_": its directories are not hidden (Java's exception).
    table = create_table(catalog, partition_name="_cat", **{"write.metadata.previous-versions-max": "4"})
    table.append(rows(0, 10, "a"))
    table.append(rows(10, 10, "b"))
    first, second = (s.snapshot_id for s in table.metadata.snapshots)
    table.manage_snapshots().create_tag(first, "t1").commit()
    table.manage_snapshots().create_branch(second, "b1").commit()
    table.append(rows(20, 5, "c"), branch="b1")  # a file only the branch reaches
    table.delete("category = 'a'")  # file a is now only reachable from old snapshots and the tag
    b_file = next(t.file.file_path for t in table.scan().plan_files() if "_cat=b" in t.file.file_path)
    commit_delete_files(
        table,
        [
            write_position_deletes(table, b_file, [0], "b"),
            write_equality_deletes(table, [11], "b"),
            write_dv_like(table, "b"),
        ],
    )
    current = table.metadata.current_snapshot_id
    assert current is not None
    set_statistics(table, current)
    set_partition_statistics(table, current)
    state = Rich(table)
    root = state.root
    state.planted = {
        plant(f"{root}/data/_cat=a/orphan-1.parquet"),
        plant(f"{root}/data/orphan-2.parquet", b"x" * 100),
        plant(f"{root}/metadata/orphan-3.avro"),
        plant(f"{root}/data/_cat=zz/deep/orphan-4.parquet"),
    }
    state.hidden = {
        plant(f"{root}/data/_temporary/0/h1.parquet"),
        plant(f"{root}/data/.h2.parquet.crc"),
        plant(f"{root}/data/_cat=a/_SUCCESS"),
        plant(f"{root}/.staging/_cat=a/h3.parquet"),
    }
    age(files_on_disk(root))
    state.young = {plant(f"{root}/data/young.parquet")}
    # Metadata files that fell off the metadata log are untracked: Java deletes them as orphans.
    table.refresh()
    tracked = {local(table.metadata_location)} | {local(e.metadata_file) for e in table.metadata.metadata_log}
    dropped = {p for p in files_on_disk(f"{root}/metadata") if p.endswith(".metadata.json")} - tracked
    assert dropped, "the fixture should have metadata files beyond previous-versions-max"
    state.planted |= dropped
    return state


def _uris(paths: set[str]) -> set[str]:
    return {f"file://{p}" for p in paths}


def test_scan_finds_exactly_the_planted_orphans(rich: Rich, tmp_path: Path) -> None:
    before = files_on_disk(rich.root)

    result = rich.scan(tmp_path)

    found = orphan_list(result)
    assert set(found) == _uris(rich.planted)
    assert len(found) == len(set(found)) == result["orphan_file_count"]
    assert result["orphan_bytes_count"] == sum(os.path.getsize(p) for p in rich.planted)
    assert set(result["orphan_sample"]) <= set(found)
    assert len(result["orphan_sample"]) == min(20, len(found))
    # The oracle: every visible old file minus what PyIceberg's own readers say is referenced.
    visible_old = before - rich.hidden - rich.young
    assert set(found) == _uris(visible_old) - referenced_uris(rich.table)
    # Nothing was deleted; the result document sits beside the list.
    assert before <= files_on_disk(rich.root)
    assert read_orphan_scan_result(rich.table.io, result["orphan_list_uri"]) == result
    assert result["orphan_list_uri"].startswith(
        f"{rich.table.location()}/metadata/iceberg-exec-staging/orphans-"
    )
    assert result["dry_run"] is True
    assert result["listed_file_count"] == len(before - rich.hidden)


def test_scan_reads_references_of_every_kind(rich: Rich, tmp_path: Path) -> None:
    """Files referenced only by an old snapshot, the tag, the branch, deletes, DV, statistics survive."""
    result = rich.scan(tmp_path)
    referenced = referenced_uris(rich.table)
    kinds = {
        "tag/old-snapshot data": [u for u in referenced if "_cat=a" in u and u.endswith(".parquet")],
        "branch data": [u for u in referenced if "_cat=c" in u],
        "position deletes": [u for u in referenced if "/pos-" in u],
        "equality deletes": [u for u in referenced if "/eq-" in u],
        "dv": [u for u in referenced if u.endswith(".puffin")],
        "statistics": [u for u in referenced if u.endswith(".stats")],
        "partition statistics": [u for u in referenced if "partition-stats" in u],
        "metadata log": [u for u in referenced if u.endswith(".metadata.json")],
        "manifest list": [u for u in referenced if "/snap-" in u],
    }
    found = set(orphan_list(result))
    for kind, uris in kinds.items():
        assert uris, kind
        assert not found & set(uris), kind
    assert result["referenced_file_count"] >= len(referenced)


def test_delete_removes_exactly_the_orphans(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    before = files_on_disk(rich.root)

    deleted = delete_orphan_files(rich.table, result)

    assert deleted["schema"] == "iceberg-exec/orphan-delete-result@1"
    assert deleted["deleted_file_count"] == len(rich.planted)
    assert deleted["deleted_bytes_count"] == result["orphan_bytes_count"]
    assert files_on_disk(rich.root) == before - rich.planted
    assert all(os.path.exists(local(u)) for u in referenced_uris(rich.table))
    # A second scan finds nothing old left.
    assert rich.scan(tmp_path)["orphan_file_count"] == 0


def test_delete_dry_run_deletes_nothing(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    before = files_on_disk(rich.root)

    deleted = delete_orphan_files(rich.table, result, dry_run=True)

    assert deleted["dry_run"] is True
    assert deleted["deleted_file_count"] == len(rich.planted)
    assert files_on_disk(rich.root) == before


def test_file_committed_between_scan_and_delete_survives(rich: Rich, tmp_path: Path) -> None:
    late = plant(f"{rich.root}/data/_cat=a/late.parquet")
    age([late])
    result = rich.scan(tmp_path)
    assert f"file://{late}" in orphan_list(result)
    append_data_file(rich.table, f"file://{late}")

    deleted = delete_orphan_files(rich.table, result, batch_size=2)

    assert os.path.exists(late)
    assert deleted["skipped_referenced_count"] == 1
    assert deleted["skipped_referenced_sample"] == [f"file://{late}"]
    assert deleted["deleted_file_count"] == len(rich.planted)
    assert not any(os.path.exists(p) for p in rich.planted)


def test_younger_files_survive_scan_and_delete(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    assert not set(orphan_list(result)) & _uris(rich.young)
    touched = sorted(rich.planted)[0]
    os.utime(touched)  # modified after the scan: no longer old enough

    deleted = delete_orphan_files(rich.table, result)

    assert os.path.exists(touched)
    assert all(os.path.exists(p) for p in rich.young)
    assert deleted["skipped_younger_count"] == 1
    assert deleted["deleted_file_count"] == len(rich.planted) - 1


def test_hidden_paths_are_not_listed(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path, older_than="1d")
    assert not set(orphan_list(result)) & _uris(rich.hidden)
    assert all(os.path.exists(p) for p in rich.hidden)
    assert f"file://{rich.root}/data/_cat=a/orphan-1.parquet" in orphan_list(result)


def test_older_than_limits_the_orphans(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path, older_than="30d")
    assert result["orphan_file_count"] == 0
    when = time.time() - 5 * 86400
    result = rich.scan(tmp_path, older_than=int(when * 1000))
    assert set(orphan_list(result)) == _uris(rich.planted)


def test_refuses_recent_older_than_unless_forced(rich: Rich, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="interval less than 24 hours"):
        rich.scan(tmp_path, older_than="1h")
    age(rich.young, 2 * 3600)
    result = rich.scan(tmp_path, older_than="1h", force=True)
    assert _uris(rich.young) <= set(orphan_list(result))


def test_refuses_when_gc_is_disabled(rich: Rich, tmp_path: Path) -> None:
    with rich.table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    with pytest.raises(ConfigurationError, match=r"^Cannot delete orphan files: GC is disabled \(deleting"):
        rich.scan(tmp_path)


def test_delete_refuses_when_gc_was_disabled_after_the_scan(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    with rich.table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    with pytest.raises(ConfigurationError, match="GC is disabled"):
        delete_orphan_files(rich.table, result)
    assert all(os.path.exists(p) for p in rich.planted)


def test_aborts_when_a_referenced_file_is_missing(rich: Rich, tmp_path: Path) -> None:
    victim = local(next(u for u in referenced_uris(rich.table) if "/pos-" in u))
    os.remove(victim)
    with pytest.raises(IncompleteListingError, match="missing from the listing"):
        rich.scan(tmp_path)


def test_aborts_when_the_listing_is_partial(
    rich: Rich, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walk = orphans_listing._walk

    def truncated(*args: Any) -> Any:
        yield from (entry for entry in walk(*args) if "_cat=b" not in entry[0])

    monkeypatch.setattr(orphans_listing, "_walk", truncated)
    with pytest.raises(IncompleteListingError, match="listing looks partial"):
        rich.scan(tmp_path)


def test_aborts_when_a_reference_category_is_empty(
    rich: Rich, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reachable, "iter_live_content_files", lambda io, manifest: iter(()))
    with pytest.raises(IncompleteListingError, match="no data reference"):
        rich.scan(tmp_path)


def test_delete_refuses_paths_outside_the_scanned_locations(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    outside = plant(str(tmp_path / "elsewhere" / "precious.parquet"))
    age([outside])
    tampered = tmp_path / "tampered.txt"
    tampered.write_text("\n".join([*orphan_list(result), f"file://{outside}"]) + "\n")
    with pytest.raises(ConfigurationError, match="outside the scanned locations"):
        delete_orphan_files(rich.table, {**result, "orphan_list_uri": str(tampered)})
    assert os.path.exists(outside)
    assert all(os.path.exists(p) for p in rich.planted)


def test_delete_rejects_a_result_of_another_table(rich: Rich, catalog: SqlCatalog, tmp_path: Path) -> None:
    result = rich.scan(tmp_path)
    other = create_table(catalog, "ns.other")
    with pytest.raises(ConfigurationError, match=r"is for table 'ns\.t'"):
        delete_orphan_files(other, result)
    with pytest.raises(DataFileCodecError):
        delete_orphan_files(rich.table, {"schema": "iceberg-exec/compaction-result@1"})


def test_remove_orphan_files_scans_then_deletes_like_spark(rich: Rich, tmp_path: Path) -> None:
    dry = remove_orphan_files(rich.table, dry_run=True, limits=limits(tmp_path))
    assert dry["orphan_file_count"] == len(rich.planted)
    assert all(os.path.exists(p) for p in rich.planted)

    done = remove_orphan_files(rich.table, limits=limits(tmp_path))

    assert done["dry_run"] is False
    assert done["delete"]["deleted_file_count"] == len(rich.planted)
    assert not any(os.path.exists(p) for p in rich.planted)


def test_orphan_list_can_go_to_a_given_path(rich: Rich, tmp_path: Path) -> None:
    target = tmp_path / "out" / "orphans.txt"
    result = rich.scan(tmp_path, orphan_list_uri=str(target))
    assert set(target.read_text().split()) == _uris(rich.planted)
    assert json.loads((tmp_path / "out" / "orphans.json").read_text()) == result
    assert read_orphan_scan_result(rich.table.io, str(target))["orphan_file_count"] == len(rich.planted)


def test_location_limits_the_listing(rich: Rich, tmp_path: Path) -> None:
    result = rich.scan(tmp_path, location=f"{rich.table.location()}/data/")
    assert set(orphan_list(result)) == _uris({p for p in rich.planted if "/data/" in p})
    assert result["locations"] == [f"{rich.table.location()}/data"]


# -- prefix mismatch ----------------------------------------------------------------------------------


@pytest.fixture
def mismatched(catalog: SqlCatalog) -> tuple[Table, str]:
    """A table whose metadata references an existing file under another scheme and authority."""
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    path = plant(f"{local(table.location())}/data/elsewhere.parquet")
    append_data_file(table, f"hdfs://nn1{path}")
    age(files_on_disk(local(table.location())))
    return table, path


def test_prefix_mismatch_error_is_the_default(mismatched: tuple[Table, str], tmp_path: Path) -> None:
    table, _path = mismatched
    with pytest.raises(
        ConfigurationError, match=r"Unable to determine whether certain files are orphan"
    ) as err:
        scan_orphan_files(table, limits=limits(tmp_path))
    assert "(hdfs, file)" in str(err.value)
    assert "(nn1, )" in str(err.value)


def test_prefix_mismatch_ignore_keeps_the_file(mismatched: tuple[Table, str], tmp_path: Path) -> None:
    table, path = mismatched
    result = scan_orphan_files(table, prefix_mismatch_mode="ignore", limits=limits(tmp_path))
    assert f"file://{path}" not in orphan_list(result)
    assert result["prefix_mismatch_file_count"] == 1


def test_prefix_mismatch_delete_calls_the_file_an_orphan(
    mismatched: tuple[Table, str], tmp_path: Path
) -> None:
    table, path = mismatched
    result = scan_orphan_files(table, prefix_mismatch_mode="DELETE", limits=limits(tmp_path))
    assert orphan_list(result) == [f"file://{path}"]


def test_equal_schemes_and_authorities_resolve_the_mismatch(
    mismatched: tuple[Table, str], tmp_path: Path
) -> None:
    table, _path = mismatched
    result = scan_orphan_files(
        table, equal_schemes={"hdfs": "file"}, equal_authorities={"nn1": ""}, limits=limits(tmp_path)
    )
    assert result["orphan_file_count"] == 0
    assert result["prefix_mismatch_file_count"] == 0


def test_bad_prefix_mismatch_mode_is_refused(mismatched: tuple[Table, str], tmp_path: Path) -> None:
    table, _path = mismatched
    with pytest.raises(ConfigurationError, match="use one of ERROR, IGNORE, DELETE"):
        scan_orphan_files(table, prefix_mismatch_mode="NONE", limits=limits(tmp_path))


# -- more locations and file systems ------------------------------------------------------------------


def test_write_data_path_outside_the_table_location_is_scanned(catalog: SqlCatalog, tmp_path: Path) -> None:
    elsewhere = tmp_path / "external-data"
    table = create_table(catalog, **{"write.data.path": f"file://{elsewhere}"})
    table.append(rows(0, 5, "a"))
    assert any(str(elsewhere) in t.file.file_path for t in table.scan().plan_files())
    orphan = plant(str(elsewhere / "stray.parquet"))
    age(files_on_disk(str(elsewhere)) | files_on_disk(local(table.location())))

    result = scan_orphan_files(table, limits=limits(tmp_path))

    assert orphan_list(result) == [f"file://{orphan}"]
    assert result["locations"] == [table.location(), f"file://{elsewhere}"]


def test_fsspec_file_io_lists_and_deletes_in_bulk(tmp_path: Path) -> None:
    catalog = SqlCatalog(
        "fs",
        uri=f"sqlite:///{tmp_path}/fs.db",
        warehouse=f"file://{tmp_path}/wh",
        **{"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
    )
    catalog.create_namespace("ns")
    table = create_table(catalog)
    table.append(rows(0, 5, "a"))
    table.append(rows(5, 5, "a"))
    assert type(table.io).__name__ == "FsspecFileIO"
    planted = {plant(f"{local(table.location())}/data/o-{i}.parquet") for i in range(3)}
    age(files_on_disk(local(table.location())))

    result = scan_orphan_files(table, limits=limits(tmp_path))
    assert set(orphan_list(result)) == _uris(planted)
    deleted = delete_orphan_files(table, result)

    assert deleted["deleted_file_count"] == 3
    assert not any(os.path.exists(p) for p in planted)
    catalog.engine.dispose()


def test_empty_table_has_no_orphans_but_its_strays(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = create_table(catalog)
    stray = plant(f"{local(table.location())}/data/stray.parquet")
    age(files_on_disk(local(table.location())))
    result = scan_orphan_files(table, limits=limits(tmp_path))
    assert orphan_list(result) == [f"file://{stray}"]


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
    table.append(rows(0, 5, "a"))
    return table


def _run(*argv: str) -> tuple[int, str]:
    from airflow_provider_iceberg_exec.cli import main

    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_orphan_scan_then_delete(cli_table: Table, tmp_path: Path) -> None:
    root = local(cli_table.location())
    orphan = plant(f"{root}/data/stray.parquet")
    age(files_on_disk(root))
    spill = ["--spill-dir", str(tmp_path / "spill")]

    code, out = _run(
        "--catalog", "it", "orphan-scan", "ns.t", "--older-than", "2d", "--dry-run", *spill, "--json"
    )

    assert code == 0, out
    result = json.loads(out)
    assert result["orphan_sample"] == [f"file://{orphan}"]
    assert os.path.exists(orphan)
    # The orphan list alone is enough: its result document sits beside it.
    code, out = _run("--catalog", "it", "orphan-delete", local(result["orphan_list_uri"]), "--dry-run")
    assert code == 0, out
    assert "deleted_file_count: 1" in out
    assert "(dry run)" in out
    assert os.path.exists(orphan)
    code, out = _run("--catalog", "it", "orphan-delete", result["result_uri"], "--json")
    assert code == 0, out
    assert json.loads(out)["deleted_file_count"] == 1
    assert not os.path.exists(orphan)


def test_cli_orphan_scan_with_delete_removes_like_spark(cli_table: Table, tmp_path: Path) -> None:
    root = local(cli_table.location())
    orphan = plant(f"{root}/data/stray.parquet")
    age(files_on_disk(root))
    code, out = _run("--catalog", "it", "orphan-scan", "ns.t", "--delete", "--spill-dir", str(tmp_path))
    assert code == 0, out
    assert "orphan_file_count: 1" in out
    assert "deleted_file_count: 1" in out
    assert not os.path.exists(orphan)


def test_cli_bad_input_exits_2_and_changes_nothing(
    cli_table: Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = local(cli_table.location())
    orphan = plant(f"{root}/data/stray.parquet")
    age(files_on_disk(root))
    before = files_on_disk(root)
    for argv in (
        ("orphan-scan", "ns.t", "--older-than", "soon"),
        ("orphan-scan", "ns.t", "--older-than", "3h", "--delete"),
        ("orphan-scan", "ns.t", "--prefix-mismatch-mode", "NONE"),
        ("orphan-scan", "ns.t", "--equal-schemes", "s3a"),
        ("orphan-scan", "ns.nope"),
        ("orphan-delete", str(tmp_path / "missing.txt")),
    ):
        assert _run("--catalog", "it", *argv)[0] == 2, argv
    with cli_table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    assert _run("--catalog", "it", "orphan-scan", "ns.t", "--delete")[0] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 7
    assert all(line.startswith("iceberg-exec: error: ") for line in err)
    assert err[-1].endswith(
        "Cannot delete orphan files: GC is disabled (deleting files may corrupt other tables)"
    )
    assert before <= files_on_disk(root)
    assert not os.path.exists(f"{root}/metadata/iceberg-exec-staging")  # no list written either
    assert os.path.exists(orphan)


def test_scan_in_several_hash_buckets_finds_the_same_orphans(
    rich: Rich, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the memory limit the joins run bucket by bucket; the answer must not change."""
    monkeypatch.setattr(orphans_scan, "bucket_count", lambda rows, row_bytes, limits: 3)
    result = rich.scan(tmp_path)
    assert sorted(orphan_list(result)) == sorted(_uris(rich.planted))
