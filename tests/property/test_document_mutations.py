"""Genuine documents, mutated at random, are refused cleanly or commit correctly.

A small real table (SQLite catalog, local warehouse, three partitions, position deletes on three files)
is built once; compaction and a copy-on-write ``delete`` are planned and executed on it, which gives
genuine plan, task and result documents and their output files. Each Hypothesis example restores the
table's directory from that pristine copy, mutates the documents (a key dropped, an entry duplicated or
moved, a path, a count, a data sequence number or a delete list edited, a result duplicated or removed,
a schema version changed, ...; optionally with the counts recomputed so that the lie is self-consistent
and reaches the checks against the table), and runs ``execute_*`` (task mutations, whose result is then
committed) or ``commit_*`` (result mutations) with a fresh commit id.

The property: either

(a) a clean refusal: an :class:`IcebergExecError`, and the table is unchanged (same current snapshot,
    same live rows), or
(b) a commit whose live rows are right: the same rows for compaction; for the delete, the rows before
    minus, for each data file, either none or all of its rows that match the predicate;

and in both cases every file the table references exists, and no file that was live before is gone.
A refused ``execute_*`` also leaves no file of its own behind in the table's directory.

Rows are compared by an order-independent digest of every live row read by PyIceberg's own reader
(:func:`tests.helpers.row_digest`, as :func:`tests.helpers.live_checksum` does), never by the engine.

The ``test_bug_*`` tests at the end are the minimal reproductions of the bugs this property found, each
now a regression test: a relabelled delete, unproven predicate counts, a trusted all-rows-match flag,
files loaded by a delete, missing ids, a partial commit before a refusal, a group id escaping the table.
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import IcebergExecError
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    execute_rewrite_task,
    plan_compaction,
)
from airflow_provider_iceberg_exec.engine.ops.cow import (
    commit_cow_rewrite,
    execute_cow_task,
    plan_cow_rewrite,
)
from tests.helpers import commit_position_deletes, data_files, live_checksum, local_path, row_digest

pytestmark = pytest.mark.integration

TABLE = "ns.t"
ROWS_PER_APPEND = 100
APPENDS = 4
WHERE = "id < 150"
#: ``where`` values a mutated copy-on-write task may carry that are valid, with the id bound they delete
VALID_WHERE = {WHERE: 150, "id < 100": 100}
_MASK = (1 << 64) - 1

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- the pristine table and its genuine documents --------------------------------------------------------


class World:
    """The table's fixed home (restored per example), its pristine copy and what is known about it.

    A plain class, not a dataclass: Hypothesis pretty-prints a dataclass argument field by field in its
    report, and that final replay of a failing example then fails as FlakyStrategyDefinition instead of
    showing the failure.
    """

    home: Path
    pristine: Path
    limits: ResourceLimits
    location: str
    plan: dict[str, Any]
    results: list[dict[str, Any]]
    cow_plan: dict[str, Any]
    cow_results: list[dict[str, Any]]
    snapshot_ids: list[int]
    base: int
    live_data: list[str]
    delete_json: dict[str, dict[str, Any]]
    orphan_delete: dict[str, Any]
    #: a copy of a live data file (of append 0, so every row matches the delete) outside the table
    outside_data: str
    true_applied: dict[str, dict[str, Any]]
    #: every live row at the base: digest -> (data file path, id)
    rows: dict[int, tuple[str, int]]
    checksum: tuple[int, int]
    referenced: frozenset[str]
    #: paths a mutation may put where a path was: live files, outputs, outside copies, missing files
    paths: tuple[str, ...]

    def __init__(self, **fields: Any) -> None:
        for name in type(self).__annotations__:
            setattr(self, name, fields.pop(name))
        assert not fields, f"unknown fields {sorted(fields)}"

    def __repr__(self) -> str:
        return f"World({self.home})"

    @contextlib.contextmanager
    def table(self) -> Iterator[Table]:
        """The table, restored to the pristine state (catalog database and warehouse)."""
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(self.pristine, self.home)
        catalog = _catalog(self.home)
        try:
            yield catalog.load_table(TABLE)
        finally:
            catalog.engine.dispose()


def _catalog(home: Path) -> SqlCatalog:
    return SqlCatalog("prop", uri=f"sqlite:///{home}/catalog.db", warehouse=f"file://{home}/warehouse")


def _first_id(path: str) -> int:
    return int(pq.read_table(local_path(path), columns=["id"])["id"].to_pylist()[0])


def live_rows_by_file(table: Table) -> dict[int, tuple[str, int]]:
    """Every live row, read by PyIceberg's reader file by file: digest -> (data file, id)."""
    table.refresh()
    out: dict[int, tuple[str, int]] = {}
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    for task in table.scan().plan_files():
        for row in scan.to_table([task]).to_pylist():
            digest = row_digest(row)
            assert digest not in out, "two rows share a digest: the checks below need distinct rows"
            out[digest] = (task.file.file_path, int(row["id"]))
    return out


def live_digests(table: Table) -> Counter[int]:
    """The live rows as a multiset of digests, read by PyIceberg's scan (as ``live_checksum`` reads)."""
    table.refresh()
    rows: Counter[int] = Counter()
    for batch in table.scan().to_arrow_batch_reader():
        rows.update(row_digest(row) for row in batch.to_pylist())
    return rows


def checksum_of(rows: Counter[int]) -> tuple[int, int]:
    """``live_checksum``'s ``(count, checksum)`` of a multiset of row digests."""
    return sum(rows.values()), sum(d * n for d, n in rows.items()) & _MASK


def referenced_files(table: Table) -> set[str]:
    """Every file the table's current metadata references, as local paths: the metadata files, every
    snapshot's manifest list and manifests and the live entries of every manifest."""
    table.refresh()
    metadata, io = table.metadata, table.io
    found = {str(table.metadata_location), *(e.metadata_file for e in metadata.metadata_log)}
    manifests: dict[str, Any] = {}
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests.setdefault(manifest.manifest_path, manifest)
    found |= set(manifests)
    for manifest in manifests.values():
        found |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True)}
    return {local_path(p) for p in found}


def files_below(path: str) -> set[str]:
    return {os.path.join(d, n) for d, _dirs, names in os.walk(path) for n in names}


def _true_applied(table: Table) -> dict[str, dict[str, Any]]:
    """For every live data file: its data sequence number and the deletes that apply (with theirs), as
    PyIceberg's planner and the manifests say."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    sequence = {
        e.data_file.file_path: int(e.sequence_number or 0)
        for m in snapshot.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    }
    return {
        task.file.file_path: {
            "data-sequence-number": sequence[task.file.file_path],
            "delete-files": {d.file_path: sequence[d.file_path] for d in task.delete_files},
        }
        for task in table.scan().plan_files()
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("mutations")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYICEBERG_HOME", str(root / "pyiceberg-home"))
        for name in list(os.environ):
            if name.startswith("PYICEBERG_CATALOG__"):
                patch.delenv(name)
        # Seeded file names and snapshot ids: the same world, in the same order, on every run, so that
        # Hypothesis's derandomized examples mean the same mutations everywhere.
        rng = random.Random(20260101)
        patch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4))
        return _build_world(root)


def _build_world(root: Path) -> World:
    home, pristine, outside = root / "home", root / "pristine", root / "outside"
    outside.mkdir()
    home.mkdir()
    catalog = _catalog(home)
    catalog.create_namespace("ns")
    table = make_fragmented_table(catalog, TABLE, num_files=APPENDS, rows_per_file=ROWS_PER_APPEND)
    location = table.location()
    by_append: dict[tuple[int, str], str] = {}
    for data_file in data_files(table):
        by_append[(_first_id(data_file.file_path) // ROWS_PER_APPEND, data_file.partition[0])] = (
            data_file.file_path
        )
    # Deletes on a file the delete removes whole (append 0), one it rewrites (append 1) and one it leaves
    # alone (append 3): one in each partition, so every compaction group applies one.
    commit_position_deletes(table, by_append[(0, "apac")], [0, 2])
    # The rewritten one loses a row the delete keeps and one it removes anyway.
    ids = pq.read_table(local_path(by_append[(1, "eu")]), columns=["id"])["id"].to_pylist()
    commit_position_deletes(
        table,
        by_append[(1, "eu")],
        [next(n for n, i in enumerate(ids) if i < 150), next(n for n, i in enumerate(ids) if i >= 150)],
    )
    commit_position_deletes(table, by_append[(3, "us")], [0])
    table.refresh()
    limits = ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(root / "spill"), target_partitions=2)

    plan = plan_compaction(table, options={"min-input-files": "2"})
    assert len(plan["tasks"]) == 3
    results = [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]
    cow_plan = plan_cow_rewrite(table, operation="delete", where=WHERE, task_size_bytes=3000)
    assert len(cow_plan["tasks"]) >= 2
    cow_results = [execute_cow_task(table, task, limits) for task in cow_plan["tasks"]]

    delete_json = {
        d["content-file"]["file-path"]: d["content-file"]
        for task in plan["tasks"]
        for entry in task["data_files"]
        for d in entry["delete-files"]
    }
    assert len(delete_json) == 3
    # An uncommitted copy of a committed delete file, inside the table: a foreign delete.
    first_delete = sorted(delete_json)[0]
    orphan_path = f"{location}/data/pos-deletes-orphan-copy.parquet"
    shutil.copyfile(local_path(first_delete), local_path(orphan_path))
    orphan_delete = {**delete_json[first_delete], "file-path": orphan_path}
    # Outside the table: a copy of a live data file, and one of an output named as its group's files.
    outside_data = outside / os.path.basename(by_append[(0, "apac")])
    shutil.copyfile(local_path(by_append[(0, "apac")]), outside_data)
    added_one = results[0]["added_data_files"][0]["file-path"]
    outside_added = outside / os.path.basename(added_one)
    shutil.copyfile(local_path(added_one), outside_added)

    rows = live_rows_by_file(table)
    before = Counter(rows.keys())
    assert checksum_of(before) == live_checksum(table)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    live_data = sorted(f.file_path for f in data_files(table))
    paths = (
        *live_data,
        *sorted(delete_json),
        orphan_path,
        f"file://{outside_data}",
        f"file://{outside_added}",
        f"{location}/data/region=apac/missing-00000.parquet",
        f"{results[0]['group_id']}-missing.parquet",
        str(table.metadata_location),
        local_path(live_data[0]),  # the same file without its scheme
        live_data[0].replace("/data/", "/data/../data/", 1),
        *(f["file-path"] for r in [*results, *cow_results] for f in r["added_data_files"]),
    )
    world = World(
        home=home,
        pristine=pristine,
        limits=limits,
        location=location,
        plan=plan,
        results=results,
        cow_plan=cow_plan,
        cow_results=cow_results,
        snapshot_ids=[s.snapshot_id for s in table.metadata.snapshots],
        base=snapshot.snapshot_id,
        live_data=live_data,
        delete_json=delete_json,
        orphan_delete=orphan_delete,
        outside_data=f"file://{outside_data}",
        true_applied=_true_applied(table),
        rows=rows,
        checksum=checksum_of(before),
        referenced=frozenset(referenced_files(table)),
        paths=paths,
    )
    catalog.engine.dispose()
    shutil.copytree(home, pristine)
    return world


# -- the property ------------------------------------------------------------------------------------------


def compaction_rows_ok(world: World, after: Counter[int]) -> str | None:
    if after != Counter(world.rows.keys()):
        lost = sum((Counter(world.rows.keys()) - after).values())
        extra = sum((after - Counter(world.rows.keys())).values())
        return f"compaction changed the live rows: {lost} lost, {extra} appeared"
    return None


def delete_rows_ok(world: World, after: Counter[int]) -> str | None:
    """The rows before minus, per data file, none or all of its rows matching one valid predicate."""
    before = Counter(world.rows.keys())
    if after - before:
        return f"{sum((after - before).values())} row(s) appeared (duplicated or resurrected)"
    gone: dict[str, set[int]] = {}
    for digest in before - after:
        path, _ = world.rows[digest]
        gone.setdefault(path, set()).add(digest)
    for path, digests in gone.items():
        of_file = {d: i for d, (p, i) in world.rows.items() if p == path}
        if not any(digests == {d for d, i in of_file.items() if i < bound} for bound in VALID_WHERE.values()):
            ids = sorted(of_file[d] for d in digests)
            return f"{path}: the rows removed (ids {ids}) are not those matching a predicate"
    return None


def run_and_check(
    world: World,
    table: Table,
    action: Callable[[], Any],
    rows_ok: Callable[[World, Counter[int]], str | None],
) -> str:
    """Run ``action`` and assert the property; returns ``"refused"`` or ``"committed"``."""
    try:
        action()
    except IcebergExecError as err:
        _note(f"refused: {type(err).__name__}: {err}")
        outcome = "refused"
    else:
        outcome = "committed"
    table.refresh()
    snapshot = table.current_snapshot()
    missing_referenced = sorted(p for p in referenced_files(table) if not os.path.exists(p))
    assert not missing_referenced, f"the table references files that are gone: {missing_referenced}"
    gone = sorted(p for p in world.referenced if not os.path.exists(p))
    assert not gone, f"files the table referenced before were deleted: {gone}"
    after = live_digests(table)
    assert snapshot is not None
    if outcome == "refused":
        assert snapshot.snapshot_id == world.base, "refused, but the table changed"
        assert checksum_of(after) == world.checksum == live_checksum(table)
    else:
        problem = rows_ok(world, after)
        assert problem is None, problem
    return outcome


def _note(text: str) -> None:
    """Hypothesis's ``note``, also callable from the plain tests."""
    with contextlib.suppress(InvalidArgument):
        note(text)


def fresh_commit_id() -> str:
    return f"prop-{uuid.uuid4().hex}"


# -- mutations ---------------------------------------------------------------------------------------------

Draw = Callable[..., Any]
JUNK = (None, True, 0, -1, 1, 1 << 63, 1.5, "", "x", [], {})


def _junk(draw: Draw) -> Any:
    return copy.deepcopy(draw(st.sampled_from(JUNK), label="junk"))


def _choose(draw: Draw, items: Any, label: str) -> Any:
    items = list(items)
    if not items:
        return None
    # An index, not the item: the report then shows a number rather than a whole document.
    return items[draw(st.integers(0, len(items) - 1), label=f"{label} (index)")]


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _docs(docs: list[Any]) -> list[dict[str, Any]]:
    return [d for d in docs if isinstance(d, dict)]


def _tweak(draw: Draw, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        return _junk(draw)
    return value + draw(st.sampled_from((1, -1, -value, 1 << 40)), label="delta")


def _all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path below ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from _all_paths(child, (*prefix, key))


def _at(root: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    return parent, path[-1]


def mutate_anywhere(draw: Draw, docs: list[Any], _world: World) -> None:
    """Anywhere in the documents: delete a key or an item, put junk in, tweak a number, duplicate."""
    path = _choose(draw, _all_paths(docs), "path")
    if path is None:
        return
    parent, key = _at(docs, path)
    how = draw(st.sampled_from(("delete", "junk", "tweak", "duplicate")), label="how")
    if how == "delete":
        del parent[key]
    elif how == "junk":
        parent[key] = _junk(draw)
    elif how == "tweak":
        parent[key] = _tweak(draw, parent[key])
    elif isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    else:
        parent[key] = [copy.deepcopy(parent[key]), copy.deepcopy(parent[key])]


def mutate_top_key(draw: Draw, docs: list[Any], _world: World) -> None:
    doc = _choose(draw, _docs(docs), "doc")
    key = _choose(draw, sorted(doc or ()), "key")
    if key is None:
        return
    how = draw(st.sampled_from(("drop", "junk", "tweak", "null")), label="how")
    if how == "drop":
        del doc[key]
    elif how == "junk":
        doc[key] = _junk(draw)
    elif how == "null":
        doc[key] = None
    else:
        doc[key] = _tweak(draw, doc[key])


def mutate_identity(draw: Draw, docs: list[Any], world: World) -> None:
    """The envelope, the table, the branch or the base snapshot: of one document or of all."""
    targets = _docs(docs)
    if not targets:
        return
    if draw(st.booleans(), label="one document only"):
        targets = [_choose(draw, targets, "doc")]
    key = draw(st.sampled_from(("schema", "table", "branch", "base_snapshot_id")), label="key")
    values: dict[str, tuple[Any, ...]] = {
        "schema": (
            "iceberg-exec/rewrite-task@2",
            "iceberg-exec/rewrite-result@2",
            "iceberg-exec/cow-result@2",
            "iceberg-exec/rewrite-result@1",
            "iceberg-exec/cow-result@1",
            "iceberg-exec/rewrite-task@1",
            "iceberg-exec/cow-task@1",
        ),
        "table": ("ns.other", "ns.t ", "t", "other.t"),
        "branch": ("other", "", "main "),
        "base_snapshot_id": (*world.snapshot_ids[:-1], world.base + 1, None, str(world.base)),
    }
    value = draw(st.sampled_from(values[key]), label="value")
    for doc in targets:
        doc[key] = value


def _file_lists(doc: dict[str, Any]) -> list[str]:
    return [
        k
        for k in ("rewritten_data_files", "removed_data_files", "added_data_files", "removed_delete_files")
        if isinstance(doc.get(k), list)
    ]


def _some_file(draw: Draw, docs: list[Any]) -> tuple[dict[str, Any], str, list[Any], int] | None:
    """A content-file entry of a result: (document, list key, list, index)."""
    doc = _choose(draw, [d for d in _docs(docs) if any(d[k] for k in _file_lists(d))], "doc")
    if doc is None:
        return None
    key = _choose(draw, [k for k in _file_lists(doc) if doc[k]], "list")
    return doc, key, doc[key], draw(st.integers(0, len(doc[key]) - 1), label="index")


def _rename_applied(doc: dict[str, Any], old: Any, new: Any) -> None:
    applied = doc.get("applied_deletes")
    if isinstance(applied, dict) and isinstance(old, str) and old in applied:
        applied[str(new)] = applied.pop(old)


def mutate_file_entry(draw: Draw, docs: list[Any], world: World) -> None:
    """One content file of a result: drop a key, tweak a number, repath, repartition, change content."""
    found = _some_file(draw, docs)
    if found is None:
        return
    doc, _key, files, index = found
    entry = files[index]
    if not isinstance(entry, dict):
        return
    how = draw(st.sampled_from(("drop", "number", "path", "partition", "content")), label="how")
    if how == "drop":
        key = _choose(draw, sorted(entry), "key")
        if key is not None:
            del entry[key]
    elif how == "number":
        key = draw(st.sampled_from(("record-count", "file-size-in-bytes", "spec-id")), label="key")
        entry[key] = _tweak(draw, entry.get(key, 0))
    elif how == "path":
        old = entry.get("file-path")
        entry["file-path"] = draw(st.sampled_from(world.paths), label="new path")
        if draw(st.booleans(), label="rename in applied_deletes"):
            _rename_applied(doc, old, entry["file-path"])
    elif how == "partition":
        entry["partition"] = draw(
            st.sampled_from((["eu"], ["us"], ["apac"], [], [None], [1], "eu")), label="p"
        )
    else:
        entry["content"] = draw(
            st.sampled_from(("data", "position-deletes", "equality-deletes", 1)), label="c"
        )


def mutate_file_lists(draw: Draw, docs: list[Any], _world: World) -> None:
    """Duplicate, remove, move or swap content-file entries, within a result or between two."""
    found = _some_file(draw, docs)
    if found is None:
        return
    doc, _key, files, index = found
    how = draw(st.sampled_from(("duplicate", "remove", "move", "swap")), label="how")
    if how == "duplicate":
        files.append(copy.deepcopy(files[index]))
        return
    if how == "remove":
        files.pop(index)
        return
    other = _choose(draw, _docs(docs), "other doc")
    other_key = _choose(draw, _file_lists(other or {}), "other list")
    if other is None or other_key is None:
        return
    target = other[other_key]
    if how == "move":
        target.insert(draw(st.integers(0, len(target)), label="at"), files.pop(index))
    elif target:
        j = draw(st.integers(0, len(target) - 1), label="other index")
        files[index], target[j] = target[j], files[index]
        if draw(st.booleans(), label="swap applied_deletes too") and other is not doc:
            mine, theirs = doc.get("applied_deletes"), other.get("applied_deletes")
            here, there = _path_of(files[index]), _path_of(target[j])
            if isinstance(mine, dict) and isinstance(theirs, dict) and here in theirs and there in mine:
                mine[here], theirs[there] = theirs.pop(here), mine.pop(there)


def _path_of(entry: Any) -> Any:
    return entry.get("file-path") if isinstance(entry, dict) else None


def mutate_applied_deletes(draw: Draw, docs: list[Any], world: World) -> None:
    """A result's ``applied_deletes``: empty, foreign deletes, sequence numbers, entries dropped or added."""
    doc = _choose(draw, [d for d in _docs(docs) if isinstance(d.get("applied_deletes"), dict)], "doc")
    if doc is None:
        return
    applied = doc["applied_deletes"]
    how = draw(
        st.sampled_from(("empty", "foreign", "orphan", "data seq", "delete seq", "drop", "add", "junk")),
        label="how",
    )
    if how == "add":
        path = draw(st.sampled_from(world.live_data), label="path")
        applied[path] = copy.deepcopy(world.true_applied[path])
        return
    path = _choose(draw, sorted(applied), "path")
    if path is None:
        return
    if how == "drop":
        del applied[path]
    elif how == "junk":
        applied[path] = _junk(draw)
    else:
        _mutate_applied_entry(draw, how, applied[path], world)


def _mutate_applied_entry(draw: Draw, how: str, entry: Any, world: World) -> None:
    """One applied-deletes entry: its deletes emptied, a foreign one added, a sequence number changed."""
    deletes = entry.get("delete-files") if isinstance(entry, dict) else None
    if not isinstance(deletes, dict):
        return
    if how == "empty":
        deletes.clear()
    elif how in ("foreign", "orphan"):
        foreign = world.orphan_delete["file-path"] if how == "orphan" else None
        foreign = foreign or draw(st.sampled_from(sorted(world.delete_json)), label="delete")
        deletes[foreign] = draw(st.sampled_from((5, 6, 7, 0)), label="seq")
    elif how == "data seq":
        entry["data-sequence-number"] = _tweak(draw, entry.get("data-sequence-number", 0))
    else:
        one = _choose(draw, sorted(deletes), "delete")
        if one is not None:
            deletes[one] = _tweak(draw, deletes[one])


def mutate_documents(draw: Draw, docs: list[Any], _world: World) -> None:
    """Duplicate, remove or reorder whole documents, or copy one's key into another."""
    if not docs:
        return
    how = draw(st.sampled_from(("duplicate", "remove", "reverse", "copy key")), label="how")
    index = draw(st.integers(0, len(docs) - 1), label="index")
    if how == "duplicate":
        docs.append(copy.deepcopy(docs[index]))
    elif how == "remove":
        docs.pop(index)
    elif how == "reverse":
        docs.reverse()
    else:
        source, target = docs[index], _choose(draw, _docs(docs), "target")
        key = _choose(draw, sorted(source) if isinstance(source, dict) else (), "key")
        if target is not None and key is not None:
            target[key] = copy.deepcopy(source[key])


def mutate_cow_common(draw: Draw, docs: list[Any], _world: World) -> None:
    """The copy-on-write keys every task and result carries: predicate, operation, set, isolation."""
    targets = _docs(docs)
    if not targets:
        return
    if draw(st.booleans(), label="one document only"):
        targets = [_choose(draw, targets, "doc")]
    key = draw(st.sampled_from(("where", "operation", "set", "isolation_level", "schema_id")), label="key")
    values: dict[str, tuple[Any, ...]] = {
        "where": (*VALID_WHERE, "id <", "nope = 1", "", "true"),
        "operation": ("update", "overwrite", "DELETE", "merge"),
        "set": ({"id": "id + 1"}, {}, None, {"nope": "1"}),
        "isolation_level": ("snapshot", "bogus", ""),
        "schema_id": (1, -1, None),
    }
    value = draw(st.sampled_from(values[key]), label="value")
    for doc in targets:
        doc[key] = copy.deepcopy(value)


def _fix_rewrite_result(doc: Any, world: World, _draw: Draw) -> None:
    """Recompute a compaction result's counts and ``applied_deletes`` keys from its (mutated) files."""
    if not isinstance(doc, dict):
        return
    rewritten, added = doc.get("rewritten_data_files"), doc.get("added_data_files")
    if not _countable(rewritten) or not _countable(added):
        return
    doc["rewritten_records"] = sum(f["record-count"] for f in rewritten)
    doc["added_records"] = sum(f["record-count"] for f in added)
    doc["rewritten_bytes_count"] = sum(f["file-size-in-bytes"] for f in rewritten)
    doc["added_bytes_count"] = sum(f["file-size-in-bytes"] for f in added)
    doc["deleted_records"] = doc["position_deleted_records"] = doc["rewritten_records"] - doc["added_records"]
    doc["equality_deleted_records"] = 0
    _fix_applied(doc, rewritten, world)


def _fix_cow_result(doc: Any, world: World, draw: Draw) -> None:
    """Recompute a copy-on-write result's row counts and ``applied_deletes`` keys from its files.

    ``deleted_rows`` is set to the truth (the live rows of the removed files that match the predicate),
    never to whatever balances the counts, so that the mutation reaches the deeper checks; the commit proves
    ``deleted_rows`` from the files (test_bug_cow_commit_trusts_deleted_rows). One of the result's two
    equations is then balanced: the rows written, or the rows removed.
    """
    if not isinstance(doc, dict):
        return
    removed, added = doc.get("removed_data_files"), doc.get("added_data_files")
    if not _countable(removed) or not _countable(added):
        return
    others = [doc.get(k) for k in ("updated_rows", "inserted_rows", "delete_file_rows")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in others):
        return
    updated, inserted, by_deletes = others
    bound = VALID_WHERE.get(str(doc.get("where")), VALID_WHERE[WHERE])
    doc["deleted_rows"] = sum(
        1 for f in removed for p, i in world.rows.values() if p == f["file-path"] and i < bound
    )
    if draw(st.booleans(), label="balance the rows written"):
        doc["rewritten_rows"] = sum(f["record-count"] for f in added) - updated - inserted
    else:
        removed_rows = sum(f["record-count"] for f in removed)
        doc["rewritten_rows"] = removed_rows - doc["deleted_rows"] - updated - by_deletes
    _fix_applied(doc, removed, world)


def _countable(files: Any) -> bool:
    return isinstance(files, list) and all(
        isinstance(f, dict)
        and all(isinstance(f.get(k), int) for k in ("record-count", "file-size-in-bytes"))
        and isinstance(f.get("file-path"), str)
        for f in files
    )


def _fix_applied(doc: dict[str, Any], removed: list[dict[str, Any]], world: World) -> None:
    applied = doc.get("applied_deletes") if isinstance(doc.get("applied_deletes"), dict) else {}
    nothing = {"data-sequence-number": 0, "delete-files": {}}
    doc["applied_deletes"] = {
        f["file-path"]: applied.get(f["file-path"])
        or copy.deepcopy(world.true_applied.get(f["file-path"], nothing))
        for f in removed
    }


RESULT_MUTATIONS = (
    mutate_anywhere,
    mutate_top_key,
    mutate_identity,
    mutate_file_entry,
    mutate_file_entry,
    mutate_file_lists,
    mutate_file_lists,
    mutate_applied_deletes,
    mutate_applied_deletes,
    mutate_documents,
)


def mutate_results(
    draw: Draw,
    docs: list[Any],
    world: World,
    extra: tuple[Callable[..., None], ...],
    fix: Callable[[Any, World, Draw], None],
) -> None:
    for _ in range(draw(st.integers(1, 3), label="mutations")):
        mutation = draw(st.sampled_from((*RESULT_MUTATIONS, *extra)), label="mutation")
        note(f"mutation: {mutation.__name__}")
        mutation(draw, docs, world)
    if draw(st.booleans(), label="recompute counts"):
        note("counts recomputed")
        for doc in docs:
            fix(doc, world, draw)


# -- task mutations ----------------------------------------------------------------------------------------


def _task_entry(draw: Draw, task: Any) -> dict[str, Any] | None:
    entries = _dicts(task.get("data_files")) if isinstance(task, dict) else []
    return _choose(draw, entries, "entry")


def mutate_task_entries(draw: Draw, docs: list[Any], world: World) -> None:
    """A task's ``data_files``: drop a key, remove, duplicate, add one of another task, swap data files."""
    task = docs[0] if docs and isinstance(docs[0], dict) else None
    entries = task.get("data_files") if task else None
    if not isinstance(entries, list) or not entries:
        return
    how = draw(st.sampled_from(("drop key", "remove", "duplicate", "foreign", "swap")), label="how")
    index = draw(st.integers(0, len(entries) - 1), label="index")
    entry = entries[index]
    if how == "drop key" and isinstance(entry, dict):
        key = _choose(draw, sorted(entry), "key")
        if key is not None:
            del entry[key]
    elif how == "remove":
        entries.pop(index)
    elif how == "duplicate":
        entries.append(copy.deepcopy(entry))
    elif how == "foreign":
        tasks = world.plan["tasks"] if "group_id" in task else world.cow_plan["tasks"]
        foreign = draw(st.sampled_from([e for t in tasks for e in t["data_files"]]), label="foreign entry")
        entries.append(copy.deepcopy(foreign))
    else:
        other = _choose(draw, _dicts(entries), "other")
        if isinstance(entry, dict) and other is not None:
            entry["data-file"], other["data-file"] = other.get("data-file"), entry.get("data-file")


def mutate_task_data_file(draw: Draw, docs: list[Any], world: World) -> None:
    """The data file of a task entry: a number, its path, its partition, its content, its sequence number."""
    entry = _task_entry(draw, docs[0] if docs else None)
    if entry is None or not isinstance(entry.get("data-file"), dict):
        return
    data_file = entry["data-file"]
    how = draw(
        st.sampled_from(("number", "path", "partition", "content", "seq", "all rows match")), label="how"
    )
    if how == "number":
        key = draw(st.sampled_from(("record-count", "file-size-in-bytes", "spec-id")), label="key")
        data_file[key] = _tweak(draw, data_file.get(key, 0))
    elif how == "path":
        data_file["file-path"] = draw(st.sampled_from(world.paths), label="new path")
    elif how == "partition":
        data_file["partition"] = draw(st.sampled_from((["eu"], ["us"], ["apac"], [], [None], [1])), label="p")
    elif how == "content":
        data_file["content"] = draw(st.sampled_from(("position-deletes", "equality-deletes")), label="c")
    elif how == "seq":
        entry["data-sequence-number"] = _tweak(draw, entry.get("data-sequence-number", 0))
    else:
        entry["all-rows-match"] = not entry.get("all-rows-match")


def mutate_task_deletes(draw: Draw, docs: list[Any], world: World) -> None:
    """The delete files of a task entry: emptied, a foreign one, a path, a number, equality content."""
    entry = _task_entry(draw, docs[0] if docs else None)
    if entry is None or not isinstance(entry.get("delete-files"), list):
        return
    deletes = entry["delete-files"]
    how = draw(
        st.sampled_from(("empty", "foreign", "orphan", "path", "number", "seq", "equality")), label="how"
    )
    if how == "empty":
        deletes.clear()
    elif how in ("foreign", "orphan"):
        content = (
            world.orphan_delete
            if how == "orphan"
            else world.delete_json[draw(st.sampled_from(sorted(world.delete_json)), label="delete")]
        )
        seq = draw(st.sampled_from((5, 6, 7, 0)), label="seq")
        deletes.append({"content-file": copy.deepcopy(content), "data-sequence-number": seq})
    elif deletes and isinstance(deletes[0], dict) and isinstance(deletes[0].get("content-file"), dict):
        delete = deletes[draw(st.integers(0, len(deletes) - 1), label="index")]
        content = delete.get("content-file")
        if not isinstance(content, dict):
            return
        if how == "path":
            content["file-path"] = draw(st.sampled_from(world.paths), label="new path")
        elif how == "number":
            key = draw(st.sampled_from(("record-count", "file-size-in-bytes")), label="key")
            content[key] = _tweak(draw, content.get(key, 0))
        elif how == "seq":
            delete["data-sequence-number"] = _tweak(draw, delete.get("data-sequence-number", 0))
        else:
            content["content"] = "equality-deletes"
            content["equality-ids"] = [1]


def mutate_task_settings(draw: Draw, docs: list[Any], world: World) -> None:
    """A task's own settings: group, spec, strategy, sort order, options, batch, repartitioning."""
    task = docs[0] if docs and isinstance(docs[0], dict) else None
    if task is None:
        return
    groups = [t["group_id"] for t in world.plan["tasks"]]
    choices: dict[str, tuple[Any, ...]] = {
        "group_id": (*groups, "g", "a/b", "../../x", " "),
        "task_id": (0, 1, 2, 99, -1),
        "output_spec_id": (0, 2, -1),
        "strategy": ("sort", "zorder", "BINPACK"),
        "sort_order": ("id ASC", "nope ASC", None),
        "options": (
            {"target-file-size-bytes": "1000"},
            {"target-file-size-bytes": "0"},
            {"bogus": "1"},
            {"partial-progress.enabled": "true"},
            None,
        ),
        "commit_batch": (1, -1),
        "needs_repartition": (True, False, "yes"),
        "removed_delete_files": ([], [copy.deepcopy(world.orphan_delete)], "x"),
        "source_files": (
            [{"path": world.outside_data, "size-in-bytes": 1, "record-count": 1}],
            [{"path": world.live_data[0], "size-in-bytes": 1, "record-count": 1}],
            [{"path": "missing.parquet", "size-in-bytes": 1, "record-count": 1}],
        ),
    }
    key = draw(st.sampled_from(sorted(choices)), label="key")
    task[key] = copy.deepcopy(draw(st.sampled_from(choices[key]), label="value"))


TASK_MUTATIONS = (
    mutate_anywhere,
    mutate_top_key,
    mutate_identity,
    mutate_task_entries,
    mutate_task_data_file,
    mutate_task_data_file,
    mutate_task_deletes,
    mutate_task_deletes,
    mutate_task_settings,
)


def mutate_task(
    draw: Draw, docs: list[Any], world: World, extra: tuple[Callable[..., None], ...] = ()
) -> None:
    for _ in range(draw(st.integers(1, 3), label="mutations")):
        mutation = draw(st.sampled_from((*TASK_MUTATIONS, *extra)), label="mutation")
        note(f"mutation: {mutation.__name__}")
        mutation(draw, docs, world)


# -- the tests ---------------------------------------------------------------------------------------------


def test_genuine_documents_commit_correctly(world: World) -> None:
    """The unmutated documents commit, and the rows are what they must be (the property's baseline)."""
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_compaction(table, copy.deepcopy(world.results), commit_id=fresh_commit_id()),
            compaction_rows_ok,
        )
        assert table.current_snapshot().snapshot_id != world.base
        assert live_checksum(table) == world.checksum
    with world.table() as table:
        expected = live_checksum(table, f"not ({WHERE})")
        run_and_check(
            world,
            table,
            lambda: commit_cow_rewrite(table, copy.deepcopy(world.cow_results), commit_id=fresh_commit_id()),
            delete_rows_ok,
        )
        assert live_checksum(table) == expected != world.checksum


@PROPERTY_SETTINGS
@given(data=st.data())
def test_mutated_compaction_results(world: World, data: st.DataObject) -> None:
    docs: list[Any] = copy.deepcopy(world.results)
    mutate_results(data.draw, docs, world, (), _fix_rewrite_result)
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_compaction(table, docs, commit_id=fresh_commit_id()),
            compaction_rows_ok,
        )


@PROPERTY_SETTINGS
@given(data=st.data())
def test_mutated_cow_results(world: World, data: st.DataObject) -> None:
    docs: list[Any] = copy.deepcopy(world.cow_results)
    mutate_results(data.draw, docs, world, (mutate_cow_common,), _fix_cow_result)
    with world.table() as table:
        run_and_check(
            world, table, lambda: commit_cow_rewrite(table, docs, commit_id=fresh_commit_id()), delete_rows_ok
        )


def _steer_clear_of_cow_task_bugs(docs: list[Any], world: World, genuine: dict[str, Any]) -> None:
    """Undo the parts of a mutated copy-on-write task whose outcome the property cannot judge: the files
    an overwrite loads and the ``set`` of an update are what a user asks for, not lies."""
    task = docs[0] if docs and isinstance(docs[0], dict) else None
    if task is None:
        return
    overwrite = str(task.get("operation")).strip().lower() == "overwrite"
    if overwrite and isinstance(task.get("source_files"), list) and task["source_files"]:
        # In an overwrite the files to load are what the user asked for, which the property cannot tell
        # from a lie (elsewhere they are refused: test_bug_cow_delete_task_loads_source_files).
        note("steered: source_files of an overwrite cleared")
        task["source_files"] = []
    if str(task.get("operation")).strip().lower() == "update" and task.get("set"):
        # A valid update of other rows than the delete's: the property's expectation does not apply.
        note("steered: set cleared")
        task["set"] = None


def _execute_then_commit(
    world: World,
    table: Table,
    execute: Callable[[], dict[str, Any]],
    commit: Callable[[list[Any]], Any],
    others: list[dict[str, Any]],
) -> Callable[[], Any]:
    """Execute the mutated task; a refusal leaves no file behind; its result is committed with ``others``."""

    def action() -> Any:
        files_before = files_below(local_path(world.location))
        try:
            result = execute()
        except IcebergExecError:
            left = files_below(local_path(world.location)) - files_before
            assert not left, f"a refused execution left files behind: {sorted(left)}"
            raise
        return commit([*copy.deepcopy(others), result])

    return action


@PROPERTY_SETTINGS
@given(data=st.data())
def test_mutated_compaction_tasks(world: World, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(world.plan["tasks"]) - 1), label="task")
    docs: list[Any] = [copy.deepcopy(world.plan["tasks"][index])]
    mutate_task(data.draw, docs, world)
    others = [
        r for i, r in enumerate(world.results) if i != index and data.draw(st.booleans(), label=f"with {i}")
    ]
    with world.table() as table:
        action = _execute_then_commit(
            world,
            table,
            lambda: execute_rewrite_task(table, docs[0] if docs else None, world.limits),
            lambda results: commit_compaction(table, results, commit_id=fresh_commit_id()),
            others,
        )
        run_and_check(world, table, action, compaction_rows_ok)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_mutated_cow_tasks(world: World, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(world.cow_plan["tasks"]) - 1), label="task")
    docs: list[Any] = [copy.deepcopy(world.cow_plan["tasks"][index])]
    mutate_task(data.draw, docs, world, (mutate_cow_common,))
    _steer_clear_of_cow_task_bugs(docs, world, world.cow_plan["tasks"][index])
    others = [
        r
        for i, r in enumerate(world.cow_results)
        if i != index and data.draw(st.booleans(), label=f"with {i}")
    ]
    with world.table() as table:
        action = _execute_then_commit(
            world,
            table,
            lambda: execute_cow_task(table, docs[0] if docs else None, world.limits),
            lambda results: commit_cow_rewrite(table, results, commit_id=fresh_commit_id()),
            others,
        )
        run_and_check(world, table, action, delete_rows_ok)


# -- the bugs this property found, each one deterministic mutation, now regression tests ---------------


def _ids_of(world: World, path: str) -> list[int]:
    return sorted(i for p, i in world.rows.values() if p == path)


def _entry_with_deletes(world: World, tasks: list[dict[str, Any]], *, partial: bool) -> tuple[int, int]:
    """(task, entry) of a data file with delete files; ``partial``: one only some rows of match WHERE."""
    for t, task in enumerate(tasks):
        for e, entry in enumerate(task["data_files"]):
            ids = _ids_of(world, entry["data-file"]["file-path"])
            if entry["delete-files"] and (not partial or ids[0] < 150 <= ids[-1]):
                return t, e
    raise AssertionError("no such entry")


@pytest.mark.parametrize("kind", ["compaction", "cow"])
def test_bug_task_relabels_position_delete_as_equality_delete(world: World, kind: str) -> None:
    tasks = world.plan["tasks"] if kind == "compaction" else world.cow_plan["tasks"]
    t, e = _entry_with_deletes(world, tasks, partial=kind == "cow")
    task = copy.deepcopy(tasks[t])
    content = task["data_files"][e]["delete-files"][0]["content-file"]
    content["content"] = "equality-deletes"
    content["equality-ids"] = [1]
    with world.table() as table:
        if kind == "compaction":
            action = lambda: commit_compaction(  # noqa: E731
                table, [execute_rewrite_task(table, task, world.limits)], commit_id=fresh_commit_id()
            )
            run_and_check(world, table, action, compaction_rows_ok)
        else:
            action = lambda: commit_cow_rewrite(  # noqa: E731
                table, [execute_cow_task(table, task, world.limits)], commit_id=fresh_commit_id()
            )
            run_and_check(world, table, action, delete_rows_ok)


def _partial_cow_result(world: World, *, with_others: bool) -> tuple[int, dict[str, Any]]:
    """A copy-on-write result that rewrote a file only some rows of which match (and, ``with_others``,
    removed other files too): its index and that file."""
    for n, result in enumerate(world.cow_results):
        for removed in result["removed_data_files"]:
            ids = _ids_of(world, removed["file-path"])
            if ids[0] < 150 <= ids[-1] and (not with_others or len(result["removed_data_files"]) > 1):
                return n, removed
    raise AssertionError("no such result")


@pytest.mark.parametrize("lie", ["added file dropped", "rewritten file kept"])
def test_bug_cow_commit_trusts_deleted_rows(world: World, lie: str) -> None:
    index, partial = _partial_cow_result(world, with_others=lie == "rewritten file kept")
    result = copy.deepcopy(world.cow_results[index])
    if lie == "added file dropped":
        # The rows the rewrite kept are claimed deleted by the predicate; its output file is left out.
        result["deleted_rows"] += result["rewritten_rows"]
        result["rewritten_rows"] = 0
        result["written_bytes"] = 0
        result["added_data_files"] = []
    else:
        # The partly matching file is left out of the removed files (it stays live) but its output is
        # added; the rows the other removed files hold beyond the output are claimed deleted.
        result["removed_data_files"] = [
            f for f in result["removed_data_files"] if f["file-path"] != partial["file-path"]
        ]
        del result["applied_deletes"][partial["file-path"]]
        result["delete_file_rows"] = 0
        result["deleted_rows"] = (
            sum(f["record-count"] for f in result["removed_data_files"]) - result["rewritten_rows"]
        )
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_cow_rewrite(table, [result], commit_id=fresh_commit_id()),
            delete_rows_ok,
        )


def test_bug_cow_task_all_rows_match_is_trusted(world: World) -> None:
    tasks = world.cow_plan["tasks"]
    t, e = next(
        (t, e)
        for t, task in enumerate(tasks)
        for e, entry in enumerate(task["data_files"])
        if not entry["delete-files"] and _ids_of(world, entry["data-file"]["file-path"])[-1] >= 150
    )
    task = copy.deepcopy(tasks[t])
    task["data_files"][e]["all-rows-match"] = True
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_cow_rewrite(
                table, [execute_cow_task(table, task, world.limits)], commit_id=fresh_commit_id()
            ),
            delete_rows_ok,
        )


@pytest.mark.parametrize("key", ["schema_id", "output_spec_id"])
@pytest.mark.parametrize("how", ["null", "missing"])
def test_bug_cow_task_without_schema_or_spec_id(world: World, key: str, how: str) -> None:
    task = copy.deepcopy(world.cow_plan["tasks"][0])
    if how == "null":
        task[key] = None
    else:
        del task[key]
    with world.table() as table:
        run_and_check(world, table, lambda: execute_cow_task(table, task, world.limits), delete_rows_ok)


def test_bug_cow_delete_task_loads_source_files(world: World) -> None:
    task = copy.deepcopy(world.cow_plan["tasks"][0])
    assert task["operation"] == "delete"
    rows = pq.ParquetFile(local_path(world.outside_data)).metadata.num_rows
    # Every row of that file matches the predicate (it is a copy of a live file of append 0).
    task["source_files"] = [{"path": world.outside_data, "size-in-bytes": 1, "record-count": rows}]
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_cow_rewrite(
                table, [execute_cow_task(table, task, world.limits)], commit_id=fresh_commit_id()
            ),
            delete_rows_ok,
        )


def test_bug_compaction_refusal_after_an_earlier_batch_committed(world: World) -> None:
    docs = copy.deepcopy(world.results)
    docs[1]["commit_batch"] = docs[2]["commit_batch"] = 1
    applied = docs[2]["applied_deletes"]
    applied[sorted(applied)[0]]["data-sequence-number"] += 1  # a false claim, in batch 1 only
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_compaction(table, docs, commit_id=fresh_commit_id()),
            compaction_rows_ok,
        )


def test_bug_group_id_writes_outside_the_table(world: World) -> None:
    task = copy.deepcopy(world.plan["tasks"][0])
    task["group_id"] = "../../../../../escape"
    outside_table = world.home.parent
    before = files_below(str(outside_table))
    with world.table() as table:
        run_and_check(
            world,
            table,
            lambda: commit_compaction(
                table, [execute_rewrite_task(table, task, world.limits)], commit_id=fresh_commit_id()
            ),
            compaction_rows_ok,
        )
        inside = local_path(world.location) + "/"
        left = sorted(p for p in files_below(str(outside_table)) - before if not p.startswith(inside))
        assert not left, f"files written outside the table: {left}"
