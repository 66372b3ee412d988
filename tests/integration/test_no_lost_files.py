"""Never lose a file: documents that went through XCom, files and people are validated, proven against the
table and never trusted to say what is safe to delete or commit (issue 11's three data-loss paths and the
invariants behind their fixes), through the real CLI on a real SQLite catalog."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.cli import main
from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.commit.cleanup import (
    ReferenceGuard,
    delete_unreferenced,
    discard_payloads,
)
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.payloads import offload_payload
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    execute_rewrite_task,
    plan_compaction,
)
from tests.helpers import commit_position_deletes, data_files, live_checksum, local_path, table_state

pytestmark = pytest.mark.integration


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """A catalog named ``it`` for the CLI (PYICEBERG_CATALOG__IT__*) with a fragmented table ``ns.t``."""
    uri, warehouse = f"sqlite:///{tmp_path}/c.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    make_fragmented_table(catalog, "ns.t", num_files=6, rows_per_file=300)
    return catalog


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--catalog", "it", *argv], out=out)
    return code, out.getvalue(), err.getvalue()


def every_referenced_file_exists(table: Any) -> bool:
    """Every data file of every snapshot is on disk (the table reads at every snapshot)."""
    table.refresh()
    for snapshot in table.snapshots():
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            if not os.path.exists(local_path(task.file.file_path)):
                return False
    return True


def planned_results(tmp_path: Path) -> Path:
    plan, results = tmp_path / "plan.json", tmp_path / "results.json"
    assert run("plan", "ns.t", "--option", "min-input-files=2", "-o", str(plan))[0] == 0
    assert run("execute", str(plan), "-o", str(results), "--spill-dir", str(tmp_path / "spill"))[0] == 0
    return results


def test_results_committed_again_under_another_commit_id_keep_the_files_the_first_made_live(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Data-loss path 1: the second commit fails validation, and its cleanup must not delete the files
    the first commit made live (they are "its own" only by the document's word)."""
    table = catalog.load_table("ns.t")
    before = live_checksum(table)
    results = planned_results(tmp_path)
    assert run("commit", str(results), "--commit-id", "first")[0] == 0
    state = table_state(table)

    code, _, err = run("commit", str(results), "--commit-id", "second")

    assert code == 1
    assert "CommitValidationError" in err
    assert len(err.strip().splitlines()) == 1
    assert table_state(table) == state
    assert live_checksum(table) == before
    assert every_referenced_file_exists(table)


def test_result_without_its_added_files_is_refused_and_the_table_keeps_every_row(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Data-loss path 2: an empty added_data_files list with counts of thousands of records would
    commit a replace that removes every file."""
    table = catalog.load_table("ns.t")
    before, state = live_checksum(table), table_state(table)
    results = planned_results(tmp_path)
    docs = json.loads(results.read_text())
    for doc in docs:
        doc["added_data_files"] = []
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(docs))

    code, _, err = run("commit", str(tampered), "--commit-id", "c")

    assert code == 2
    assert "key 'added_records'" in err
    assert len(err.strip().splitlines()) == 1
    assert table_state(table) == state
    assert live_checksum(table) == before
    # The files the real rewrite wrote are still there: a bad document deletes nothing.
    written = [f["file-path"] for d in json.loads(results.read_text()) for f in d["added_data_files"]]
    assert all(os.path.exists(local_path(p)) for p in written)


def test_orphan_list_naming_a_live_data_file_deletes_no_live_file(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Data-loss path 3: the orphan list is edited to name a live data file (and a metadata file); the
    delete proves every candidate against the complete reference set, not only newer manifests."""
    table = catalog.load_table("ns.t")
    before = live_checksum(table)
    code, out, _ = run("orphan-scan", "ns.t", "--older-than", "1d", "--json")
    assert code == 0, out
    scan = json.loads(out)
    live = [f.file_path for f in data_files(table)][:2]
    Path(local_path(scan["orphan_list_uri"])).write_text("\n".join([*live, table.metadata_location]) + "\n")
    for path in [*live, table.metadata_location]:  # old enough to pass the age fence
        os.utime(local_path(path), (1_000_000_000, 1_000_000_000))

    code, out, err = run("orphan-delete", scan["result_uri"], "--json")

    assert code == 0, err
    deleted = json.loads(out)
    assert deleted["deleted_file_count"] == 0
    assert deleted["skipped_referenced_count"] == 3
    assert live_checksum(table) == before
    assert every_referenced_file_exists(table)


def test_orphan_list_naming_a_file_outside_the_table_deletes_nothing(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = catalog.load_table("ns.t")
    code, out, _ = run("orphan-scan", "ns.t", "--older-than", "1d", "--json")
    scan = json.loads(out)
    precious = tmp_path / "warehouse" / "ns" / "other" / "data" / "precious.parquet"
    precious.parent.mkdir(parents=True)
    precious.write_bytes(b"x")
    os.utime(precious, (1_000_000_000, 1_000_000_000))
    Path(local_path(scan["orphan_list_uri"])).write_text(f"file://{precious}\n")
    # The scan result claims the whole warehouse was scanned: the table's own locations still rule.
    result_path = Path(local_path(scan["result_uri"]))
    result_path.write_text(json.dumps({**scan, "locations": [f"file://{tmp_path}/warehouse"]}))

    code, _, err = run("orphan-delete", scan["result_uri"])

    assert code == 2
    assert "outside" in err
    assert len(err.strip().splitlines()) == 1
    assert precious.exists()
    assert live_checksum(table)[0] == 1800


def test_orphan_delete_reapplies_the_24_hour_fence_unless_forced(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A scan result's older_than is a claim: the delete keeps files younger than 24 hours anyway."""
    table = catalog.load_table("ns.t")
    orphan = Path(local_path(table.location())) / "data" / "stray.parquet"
    orphan.write_bytes(b"x")
    code, out, _ = run("orphan-scan", "ns.t", "--older-than", "1d", "--json")
    scan = json.loads(out)
    Path(local_path(scan["result_uri"])).write_text(json.dumps({**scan, "older_than_ms": 2**50}))
    Path(local_path(scan["orphan_list_uri"])).write_text(f"file://{orphan}\n")

    code, out, _ = run("orphan-delete", scan["result_uri"], "--json")
    assert code == 0
    assert json.loads(out)["skipped_younger_count"] == 1
    assert orphan.exists()
    code, out, _ = run("orphan-delete", scan["result_uri"], "--json", "--force")
    assert code == 0
    assert json.loads(out)["deleted_file_count"] == 1
    assert not orphan.exists()


def test_orphan_delete_of_a_recreated_table_says_so(catalog: SqlCatalog, tmp_path: Path) -> None:
    code, out, _ = run("orphan-scan", "ns.t", "--older-than", "1d", "--json")
    scan = json.loads(out)
    Path(local_path(scan["result_uri"])).write_text(json.dumps({**scan, "table_uuid": "0" * 32}))

    code, _, err = run("orphan-delete", scan["result_uri"])

    assert code == 2
    assert "another table named 'ns.t'" in err


def _plan_and_execute(table: Any, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    plan = plan_compaction(table, options={"min-input-files": "2"})
    limits = ResourceLimits(spill_dir=str(tmp_path / "spill"))
    return plan, [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]


def test_a_rewrite_that_skipped_a_delete_file_is_refused(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A task whose delete-files list was emptied rewrites the deleted rows back; the commit proves the
    deletes applied against the base snapshot and refuses, so no row is resurrected."""
    table = catalog.load_table("ns.t")
    target = data_files(table)[0].file_path
    commit_position_deletes(table, target, [0, 1, 2])
    before, state = live_checksum(table), table_state(table)
    plan = plan_compaction(table, options={"min-input-files": "2"})
    task = next(t for t in plan["tasks"] if any(e["delete-files"] for e in t["data_files"]))
    forged = copy.deepcopy(task)
    for entry in forged["data_files"]:
        entry["delete-files"] = []
    result = execute_rewrite_task(table, forged, ResourceLimits(spill_dir=str(tmp_path / "spill")))

    with pytest.raises(DataFileCodecError, match="are not those that apply"):
        commit_compaction(table, [result], commit_id="forged")

    assert table_state(table) == state
    assert live_checksum(table) == before


def _grow_size(doc: dict[str, Any]) -> None:
    doc["added_data_files"][0]["file-size-in-bytes"] += 1
    doc["added_bytes_count"] += 1


def _grow_rows(doc: dict[str, Any]) -> None:
    """One more row claimed on both sides, so that the document still adds up."""
    for key, files in (("added_records", "added_data_files"), ("rewritten_records", "rewritten_data_files")):
        doc[files][0]["record-count"] += 1
        doc[key] += 1


def _move_outside(doc: dict[str, Any]) -> None:
    added = doc["added_data_files"][0]
    added["file-path"] = "file:///elsewhere/" + added["file-path"].rsplit("/", 1)[1]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_grow_size, "bytes, the result says"),
        (_grow_rows, "rows, the result says"),
        (_move_outside, "outside the table's locations"),
    ],
    ids=["size", "record-count", "outside-the-table"],
)
def test_added_files_are_proven_against_the_storage(
    catalog: SqlCatalog, tmp_path: Path, edit: Any, message: str
) -> None:
    table = catalog.load_table("ns.t")
    before, state = live_checksum(table), table_state(table)
    _, results = _plan_and_execute(table, tmp_path)
    tampered = copy.deepcopy(results)
    edit(tampered[0])

    with pytest.raises(DataFileCodecError, match=message):
        commit_compaction(table, tampered, commit_id="tampered")

    assert table_state(table) == state
    assert live_checksum(table) == before
    # The untampered results still commit: nothing was deleted by the refusal.
    commit_compaction(table, results, commit_id="genuine")
    assert live_checksum(table) == before


def test_a_base_snapshot_the_table_does_not_have_is_refused(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = catalog.load_table("ns.t")
    state = table_state(table)
    _, results = _plan_and_execute(table, tmp_path)
    for result in results:
        result["base_snapshot_id"] = 12345

    with pytest.raises(DataFileCodecError, match="base snapshot 12345 is not a snapshot"):
        commit_compaction(table, results, commit_id="c")
    assert table_state(table) == state


def test_rows_must_conserve_even_when_the_document_adds_up(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A result claiming deletes that no delete file can make is refused: the rows would be lost."""
    table = catalog.load_table("ns.t")
    before = live_checksum(table)
    _, results = _plan_and_execute(table, tmp_path)
    doc = results[0]
    dropped = doc["added_data_files"].pop()
    for key in ("added_records", "position_deleted_records", "deleted_records"):
        sign = -1 if key == "added_records" else 1
        doc[key] += sign * dropped["record-count"]
    doc["added_bytes_count"] -= dropped["file-size-in-bytes"]

    with pytest.raises(DataFileCodecError, match="position deletes that apply list 0"):
        commit_compaction(table, results, commit_id="c")
    assert live_checksum(table) == before


def test_cleanup_keeps_every_file_the_current_metadata_references(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = catalog.load_table("ns.t")
    stray = Path(local_path(table.location())) / "data" / "stray.parquet"
    stray.write_bytes(b"x")
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"x")
    live = data_files(table)[0].file_path
    old_manifest_list = table.metadata.snapshots[0].manifest_list

    report = delete_unreferenced(
        table,
        [live, old_manifest_list, table.metadata_location, f"file://{stray}", f"file://{outside}"],
        what="test",
    )

    assert report.deleted == (f"file://{stray}",)
    assert set(report.referenced) == {live, old_manifest_list, table.metadata_location}
    assert report.outside == (f"file://{outside}",)
    assert os.path.exists(local_path(live))
    assert outside.exists()
    assert not stray.exists()


def test_reference_guard_sees_a_file_a_later_commit_references(catalog: SqlCatalog) -> None:
    """Expiry's guard: a file proven unreferenced by one metadata is re-checked against the next one."""
    import pyarrow.parquet as pq

    table = catalog.load_table("ns.t")
    proven = table.metadata
    extra = f"{table.location()}/data/extra.parquet"
    pq.write_table(table.scan(limit=5).to_arrow().cast(table.schema().as_arrow()), local_path(extra))
    guard = ReferenceGuard(table, proven)
    assert guard.referenced([extra]) == set()

    table.add_files([extra])

    assert guard.referenced([extra]) == {local_path(extra)}


def test_staged_payloads_are_discarded_only_under_the_staging_directory(catalog: SqlCatalog) -> None:
    table = catalog.load_table("ns.t")
    ref = offload_payload(
        table.io, table.location(), {"schema": "s", "data_files": [{}] * 3}, name="p", threshold=0
    )
    live = data_files(table)[0].file_path

    report = discard_payloads(table, [ref["uri"], live])

    assert report.deleted == (ref["uri"],)
    assert report.outside == (live,)
    assert os.path.exists(local_path(live))
    assert discard_payloads(table, [ref["uri"]]).missing == (ref["uri"],)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compact", "ns.t", "--branch", "nosuch"], "branch 'nosuch' does not exist in ns.t"),
        (["delete", "ns.t", "--where", "id = 1", "--branch", "nosuch"], "branch 'nosuch' does not exist"),
        (["plan", "ns.t", "--branch", "nosuch"], "branch 'nosuch' does not exist"),
    ],
    ids=["compact", "delete", "plan"],
)
def test_an_unknown_branch_is_an_error(catalog: SqlCatalog, argv: list[str], message: str) -> None:
    table = catalog.load_table("ns.t")
    state = table_state(table)
    code, _, err = run(*argv)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert table_state(table) == state


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "expected a iceberg-exec/rewrite-task@1 document"),
        ({"schema": "iceberg-exec/compaction-plan@1", "table": "ns.t", "base_snapshot_id": 1}, "'tasks'"),
        ([], "expected a iceberg-exec/rewrite-task@1 document"),
        ({"schema": "iceberg-exec/rewrite-task@1", "table": "ns.t", "group_id": "g"}, "'base_snapshot_id'"),
    ],
    ids=["empty", "plan-without-tasks", "list", "task-without-base"],
)
def test_execute_of_a_bad_document_is_one_line(
    catalog: SqlCatalog, tmp_path: Path, document: Any, message: str
) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    code, _, err = run("execute", str(path))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("added_data_files"), "key 'added_data_files': is missing"),
        (lambda d: d.update(schema="iceberg-exec/rewrite-result@9"), "cannot commit results of schemas"),
        (lambda d: d.update(table=None), "key 'table'"),
        (lambda d: d["rewritten_data_files"].append(d["rewritten_data_files"][0]), "more than once"),
        (lambda d: d.update(applied_deletes={}), "applied_deletes"),
        (lambda d: d.update(commit_batch="0"), "commit_batch"),
    ],
    ids=["no-added-files", "schema-version", "no-table", "duplicate", "applied", "type"],
)
def test_commit_of_a_bad_result_is_one_line_and_changes_nothing(
    catalog: SqlCatalog, tmp_path: Path, edit: Any, message: str
) -> None:
    table = catalog.load_table("ns.t")
    state = table_state(table)
    results = planned_results(tmp_path)
    docs = json.loads(results.read_text())
    edit(docs[0])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(docs))

    code, _, err = run("commit", str(path), "--commit-id", "c")

    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert table_state(table) == state


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"TYPE": "hive", "URI": "thrift://127.0.0.1:9"}, "cannot load catalog 'bad': Apache Hive support"),
        ({"TYPE": "rest", "URI": "http://127.0.0.1:9"}, "catalog 'bad' is unavailable"),
        ({"TYPE": "sql", "URI": "postgresql+psycopg2://u:secret@127.0.0.1:9/x"}, "cannot reach the database"),
    ],
    ids=["not-installed", "unreachable-rest", "unreachable-database"],
)
def test_catalog_errors_are_one_line_with_the_catalog_name(
    monkeypatch: pytest.MonkeyPatch, properties: dict[str, str], message: str
) -> None:
    for key, value in properties.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__BAD__{key}", value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--catalog", "bad", "compact", "ns.t"], out=io.StringIO())
    assert code == 2
    assert message in err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1
    assert "secret" not in err.getvalue()


def test_a_commit_never_makes_a_vanished_output_live(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Checked on every commit attempt: a commit that retried for long may outlive a short orphan age,
    and the orphan removal may have deleted its output meanwhile (bench/soak.py saw it)."""
    from pyiceberg.manifest import DataFile

    from airflow_provider_iceberg_exec.engine.commit.snapshots import commit_rewrite
    from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
    from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json

    table = catalog.load_table("ns.t")
    before, state = live_checksum(table), table_state(table)
    _, results = _plan_and_execute(table, tmp_path)
    specs, schema = table.metadata.specs(), table.metadata.schema()

    def decode(key: str) -> list[DataFile]:
        return [data_file_from_json(f, specs, schema) for r in results for f in r[key]]

    added = decode("added_data_files")
    os.remove(local_path(added[0].file_path))

    with pytest.raises(CommitValidationError, match="output files no longer exist"):
        commit_rewrite(
            table,
            base_snapshot_id=results[0]["base_snapshot_id"],
            rewritten_data_files=decode("rewritten_data_files"),
            added_data_files=added,
            commit_id="late",
        )
    assert table_state(table) == state
    assert live_checksum(table) == before


def test_orphan_listing_skips_a_file_removed_while_it_walks(tmp_path: Path) -> None:
    """A failed commit's cleanup removing its manifests during the listing is not an error."""
    from airflow_provider_iceberg_exec.engine.ops.orphans.listing import _walk_local

    for i in range(10):
        (tmp_path / f"m{i}.avro").write_bytes(b"x")
    walk = _walk_local(str(tmp_path), ())
    first = next(walk)
    for path in tmp_path.iterdir():
        if str(path) != first[0]:
            path.unlink()

    assert list(walk) == []
