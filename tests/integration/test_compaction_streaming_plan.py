"""Compaction planning streams the manifests (issue 16): the plan must be exactly the plan made from the
whole scan (``scan_snapshot``, PyIceberg's planner), whatever the filter, the deletes, the specs and the
format version; and nothing of the scan's DataFiles may be kept by the plan."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.documents import applied_deletes_of
from airflow_provider_iceberg_exec.engine.meta import scan as scan_module
from airflow_provider_iceberg_exec.engine.meta.scan import scan_snapshot, stream_data_files
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_to_json
from airflow_provider_iceberg_exec.engine.ops.compaction import plan as plan_module
from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction
from tests.helpers import commit_position_deletes, data_files
from tests.integration.test_deletes import _append, _commit_deletes, _create, _equality_deletes
from tests.integration.test_v3_commit import _append as _v3_append
from tests.integration.test_v3_commit import _upgraded

pytestmark = pytest.mark.integration

_ALL = {"rewrite-all": "true"}


def _whole_scan(io: Any, metadata: Any, snapshot: Any, row_filter: Any = None) -> Any:
    """The scan compaction planned from before it streamed: every file of the table in one list."""
    return iter(scan_snapshot(io, metadata, snapshot, row_filter).data_files)


def _plans_both_ways(
    table: Table, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    streamed = plan_compaction(table, **kwargs)
    with monkeypatch.context() as patch:
        patch.setattr(plan_module, "stream_data_files", _whole_scan)
        whole = plan_compaction(table, **kwargs)
    # JSON round trip: equal documents, not merely equal Python objects.
    return json.loads(json.dumps(streamed)), json.loads(json.dumps(whole))


def _two_spec_table(catalog: SqlCatalog, files_per_spec: int) -> Table:
    """Spec 0 unpartitioned then spec 1 identity(category), small files over several snapshots, position
    deletes (file-scoped and by bounds)."""
    table = _create(catalog)
    rows = 6 * files_per_spec
    for start in range(0, rows, 6):
        _append(table, range(start, start + 6), "a")
    with table.update_spec() as update:
        from pyiceberg.transforms import IdentityTransform

        update.add_field("category", IdentityTransform(), "category")
    for start in range(rows, 2 * rows, 6):
        _append(table, range(start, start + 6), "a" if start % 12 else "b")
    by_path = sorted(data_files(table), key=lambda f: f.file_path)
    commit_position_deletes(table, by_path[0].file_path, [0, 1, 2], set_referenced_data_file=True)
    commit_position_deletes(table, by_path[3].file_path, [1], set_referenced_data_file=False)
    return table


def _mixed_table(catalog: SqlCatalog) -> Table:
    """:func:`_two_spec_table` with global and partition equality deletes, and files newer than them."""
    table = _two_spec_table(catalog, 10)
    _commit_deletes(
        table,
        [
            _equality_deletes(table, {"id": (1, pa.int64(), [7, 70])}, spec_id=0),
            _equality_deletes(table, {"id": (1, pa.int64(), [64])}, spec_id=1, partition=("a",)),
        ],
    )
    for start in range(120, 150, 6):  # newer than the equality deletes
        _append(table, range(start, start + 6), "b")
    return table


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"options": _ALL}, id="rewrite-all"),
        pytest.param({}, id="default-options"),
        pytest.param({"options": _ALL, "where": "category = 'b'"}, id="partition-filter"),
        pytest.param({"options": _ALL, "where": "id >= 100"}, id="metrics-filter"),
        pytest.param({"options": _ALL, "where": "id < 0"}, id="filter-matching-nothing"),
        pytest.param({"options": {**_ALL, "max-file-group-input-files": "7"}}, id="many-groups"),
        pytest.param({"options": _ALL, "only_files_with_equality_deletes": True}, id="equality-deletes-only"),
    ],
)
def test_streamed_plan_equals_the_plan_of_the_whole_scan(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    table = _mixed_table(catalog)
    options = kwargs.pop("options", None)
    only_eq = kwargs.pop("only_files_with_equality_deletes", False)

    streamed, whole = _plans_both_ways(
        table, monkeypatch, options=options, only_files_with_equality_deletes=only_eq, **kwargs
    )

    assert streamed == whole
    if "where" not in kwargs:
        assert streamed["tasks"], "the table has files to compact: the comparison must not be vacuous"


def test_streamed_scan_finds_the_same_files_deletes_and_metrics(catalog: SqlCatalog) -> None:
    """File by file, with every field and metric: the streaming reader (the v3 layout) encodes exactly as
    PyIceberg's planner's DataFiles do."""
    table = _mixed_table(catalog)
    metadata, snapshot = table.metadata, table.current_snapshot()
    assert snapshot is not None
    specs, schema = metadata.specs(), metadata.schema()

    def encoded(files: Any) -> list[dict[str, Any]]:
        return sorted(
            (scanned_to_json(f, specs, schema) for f in files), key=lambda e: e["data-file"]["file-path"]
        )

    streamed = encoded(stream_data_files(table.io, metadata, snapshot))
    whole = encoded(scan_snapshot(table.io, metadata, snapshot).data_files)

    assert streamed == whole
    assert len(streamed) == 25
    assert sum(1 for e in streamed if e["delete-files"]) > 2


def test_streamed_plan_of_a_v3_table_carries_the_inherited_row_ids(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _upgraded(catalog)
    _v3_append(table, 30, 10)
    _v3_append(table, 40, 10)

    streamed, whole = _plans_both_ways(table, monkeypatch, options=_ALL)

    assert streamed == whole
    inputs = [e["data-file"] for t in streamed["tasks"] for e in t["data_files"]]
    assert len(inputs) == 5
    assert sorted(f["first-row-id"] for f in inputs if "first-row-id" in f) == [0, 10, 20, 30, 40]


def test_plan_keeps_no_data_file(catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan's DataFiles are garbage once the plan is made: only the lean candidates' JSON remains."""
    table = _mixed_table(catalog)
    seen: list[weakref.ref[DataFile]] = []
    streaming = scan_module.stream_data_files

    def watched(*args: Any, **kwargs: Any) -> Any:
        for scanned in streaming(*args, **kwargs):
            seen.append(weakref.ref(scanned.data_file))
            yield scanned

    monkeypatch.setattr(plan_module, "stream_data_files", watched)
    plan = plan_compaction(table, options=_ALL)
    gc.collect()

    assert plan["tasks"]
    assert len(seen) == 25
    assert [ref for ref in seen if ref() is not None] == []


def test_plan_of_a_table_without_snapshot_is_empty(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)

    assert plan_compaction(table, options=_ALL)["tasks"] == []


def test_commit_base_keeps_only_the_removed_files_and_still_proves_them(
    catalog: SqlCatalog,
) -> None:
    """The compaction commit streams the base and keeps only the files it removes, without metrics; a
    file the base does not have live is still refused."""
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    from airflow_provider_iceberg_exec.engine.commit.verification import BaseFiles, RemovedClaim
    from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

    table = _mixed_table(catalog)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    everything = BaseFiles(table, snapshot.snapshot_id)
    gone = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{sorted(everything.live)[0]}.not-there",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=6,
        file_size_in_bytes=10,
    )

    removed, other = sorted(everything.live)[:2]
    lean = BaseFiles(table, snapshot.snapshot_id, only={removed, gone.file_path})

    # The lean proof answers as the full one for the files it kept, with no DataFile of the table held.
    entry = scanned_to_json(everything.live[removed], table.metadata.specs(), table.metadata.schema())
    applied = {removed: applied_deletes_of(entry)}
    assert applied[removed]["delete-files"], "the file has deletes applied: the check compares them"
    claimed = RemovedClaim.of(everything.live[removed].data_file)
    assert lean.check_removed([claimed], applied) == everything.check_removed([claimed], applied)
    assert lean.live == {}
    assert not any(isinstance(v, DataFile) for proof in lean._proofs.values() for v in proof)  # type: ignore[union-attr]
    # A file live in the base but not among those kept, and one the base does not have, are refused.
    with pytest.raises(DataFileCodecError, match="was not live in base snapshot"):
        lean.check_removed([RemovedClaim.of(everything.live[other].data_file)], {other: applied[removed]})
    with pytest.raises(DataFileCodecError, match="was not live in base snapshot"):
        lean.check_removed([RemovedClaim.of(gone)], {})


@pytest.mark.parametrize("table_kind", ["v2-mixed", "v3"])
def test_a_plan_made_in_this_process_proves_what_the_base_manifests_prove(
    catalog: SqlCatalog, table_kind: str
) -> None:
    """compact() proves its results against its own plan's entries, not the base's manifests read again:
    for every planned file the proof must answer exactly as the base's (records, data sequence number,
    first row id, the deletes that apply and their counts), and refuse a file the plan does not hold."""
    from airflow_provider_iceberg_exec.engine.commit.verification import BaseFiles, RemovedClaim
    from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

    if table_kind == "v3":
        table = _upgraded(catalog)
        _v3_append(table, 30, 10)
        _v3_append(table, 40, 10)
    else:
        table = _mixed_table(catalog)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    plan = plan_compaction(table, options=_ALL, packed=True)
    entries = [e for task in plan["tasks"] for e in task["data_files"]]
    paths = {e["data-file"]["file-path"] for e in entries}
    outsider = sorted(paths)[0]
    only = paths - {outsider}
    read = BaseFiles(table, snapshot.snapshot_id, only=only)
    planned = BaseFiles.planned(table, snapshot.snapshot_id, iter(entries), only=only)

    claims = [
        RemovedClaim.of_json(e["data-file"]) for e in entries if e["data-file"]["file-path"] != outsider
    ]
    applied = {e["data-file"]["file-path"]: applied_deletes_of(e) for e in entries}
    assert len(claims) == len(only) > 1
    assert planned.check_removed(claims, applied) == read.check_removed(claims, applied)
    for claim in claims:  # file by file: a sum could hide two differences
        assert planned.check_removed([claim], applied) == read.check_removed([claim], applied)
    if table_kind == "v3":
        assert all(claim.first_row_id is not None for claim in claims)
    else:
        assert planned.check_removed(claims, applied).position_delete_records > 0
        assert planned.check_removed(claims, applied).has_equality_deletes
    # A planned file kept out of ``only``, a claim with other deletes, or another sequence number: refused.
    with pytest.raises(DataFileCodecError, match="was not live in base snapshot"):
        planned.check_removed([RemovedClaim.of_json({"file-path": outsider})], applied)
    if table_kind != "v3":
        with_deletes = next(c for c in claims if applied[c.file_path]["delete-files"])
        stripped = {with_deletes.file_path: dict(applied[with_deletes.file_path], **{"delete-files": {}})}
        with pytest.raises(DataFileCodecError, match="are not those that apply"):
            planned.check_removed([with_deletes], stripped)
    # A base the table no longer has (expired meanwhile) proves nothing, whatever the plan read there.
    with pytest.raises(DataFileCodecError, match="is not a snapshot of the table"):
        BaseFiles.planned(table, snapshot.snapshot_id + 1, iter(entries), only=only).check_removed(
            claims, applied
        )
    shifted = {claims[0].file_path: dict(applied[claims[0].file_path])}
    shifted[claims[0].file_path]["data-sequence-number"] += 1
    with pytest.raises(DataFileCodecError, match="data sequence number"):
        planned.check_removed([claims[0]], shifted)


def test_compact_proves_its_results_without_reading_the_base_again(
    catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compact() reads the base's manifests once, to plan: its commit proves the results against that
    plan, position deletes and two specs included, and the rows conserve (checked by PyIceberg's reader,
    which reads no equality deletes)."""
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact
    from tests.helpers import live_checksum

    table = _two_spec_table(catalog, 5)
    before = live_checksum(table)

    def read_again(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the commit read the base's manifests again")

    monkeypatch.setattr(scan_module, "stream_data_files", read_again)  # the commit's import, not the plan's
    result = compact(table, options=_ALL, limits=ResourceLimits())

    assert result["rewritten_data_files_count"] == 10
    table.refresh()
    assert live_checksum(table) == before


def test_a_packed_plan_gives_every_entry_as_the_scan_encodes_it(catalog: SqlCatalog) -> None:
    """compact()'s plan keeps its entries packed: each must come back as the scanned file's own entry,
    deletes, partitions of both specs and sequence numbers included, and the plan's lists must be the same."""
    table = _mixed_table(catalog)
    metadata, snapshot = table.metadata, table.current_snapshot()
    assert snapshot is not None
    specs, schema = metadata.specs(), metadata.schema()
    by_path = {
        f.data_file.file_path: scanned_to_json(f, specs, schema, metrics=False)
        for f in scan_snapshot(table.io, metadata, snapshot).data_files
    }

    packed = plan_compaction(table, options=_ALL, packed=True)
    listed = plan_compaction(table, options=_ALL)

    entries = [e for task in packed["tasks"] for e in task["data_files"]]
    assert len(entries) == len(by_path) == 25
    assert sum(1 for e in entries if e["delete-files"]) > 2
    assert json.dumps(entries, sort_keys=True) == json.dumps(
        [by_path[e["data-file"]["file-path"]] for e in entries], sort_keys=True
    )
    assert [list(t["data_files"]) for t in packed["tasks"]] == [t["data_files"] for t in listed["tasks"]]
    assert all(type(t["data_files"]) is list for t in listed["tasks"])


@pytest.mark.parametrize("claim", [1, None], ids=["moved", "dropped"])
def test_a_result_claiming_another_first_row_id_is_refused_with_the_table_unchanged(
    catalog: SqlCatalog, claim: int | None
) -> None:
    """The commit proves the removed files from the result's JSON claims: an edited ``first-row-id`` (the
    row ids the rewrite materialised) must be refused before anything is committed."""
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
    from airflow_provider_iceberg_exec.engine.ops.compaction import commit_compaction, execute_rewrite_task

    table = _upgraded(catalog)
    _v3_append(table, 30, 10)
    _v3_append(table, 40, 10)
    plan = plan_compaction(table, options=_ALL)
    results = [execute_rewrite_task(table, task, ResourceLimits()) for task in plan["tasks"]]
    before = table.metadata.current_snapshot_id
    claimed = next(f for r in results for f in r["rewritten_data_files"] if f.get("first-row-id"))
    honest = claimed["first-row-id"]
    if claim is None:
        del claimed["first-row-id"]
    else:
        claimed["first-row-id"] = honest + claim

    with pytest.raises(DataFileCodecError, match="first_row_id"):
        commit_compaction(table, results, commit_id="edited")
    table.refresh()
    assert table.metadata.current_snapshot_id == before

    claimed["first-row-id"] = honest  # the honest claim commits
    assert commit_compaction(table, results, commit_id="honest")["snapshot_ids"]
