"""MERGE and upsert on a real SQLite catalog with real Parquet files and real DataFusion.

The expected live rows come from a model of Spark's MERGE semantics written here in plain Python (first
true clause wins, NULL keys never match, the cardinality check); PyIceberg's own scan, a reader other
than the code under test, must read exactly those rows after each merge, in both write modes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
)
from airflow_provider_iceberg_exec.engine.ops.compaction import compact
from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes
from airflow_provider_iceberg_exec.engine.ops.merge import (
    commit_merge,
    execute_merge_task,
    merge,
    plan_merge,
    upsert,
)
from tests.helpers import commit_delete_files, live_checksum, row_digest
from tests.integration.maintenance_support import (
    ARROW_SCHEMA,
    create_table,
    limits,
    write_equality_deletes,
    write_position_deletes,
)

_MASK = (1 << 64) - 1
MODES = ("copy-on-write", "merge-on-read")
Row = dict[str, Any]


def _checksum(live: Sequence[Row]) -> tuple[int, int]:
    total = 0
    for row in live:
        total = (total + row_digest(row)) & _MASK
    return len(live), total


@dataclass
class When:
    """A clause of the model: its kind, SQL text, condition and the row it writes (None: delete)."""

    kind: str  # matched | not_matched | by_source
    text: str
    condition: Callable[[Row | None, Row | None], bool | None] | None = None
    write: Callable[[Row | None, Row | None], Row] | None = None


def model_merge(target: list[Row], source: list[Row], on: str, clauses: Sequence[When]) -> list[Row]:
    """Spark's MERGE over lists of rows (the reference model)."""
    by_key: dict[Any, list[int]] = {}
    for index, row in enumerate(source):
        if row[on] is not None:
            by_key.setdefault(row[on], []).append(index)
    matched_sources: set[int] = set()
    out: list[Row] = []
    matched = [c for c in clauses if c.kind == "matched"]
    # Spark skips the cardinality check only for a single unconditional DELETE.
    checks = bool(matched) and not (
        len(matched) == 1 and matched[0].write is None and not matched[0].condition
    )
    for row in target:
        hits = by_key.get(row[on], []) if row[on] is not None else []
        if len(hits) > 1 and checks:
            raise AssertionError("cardinality")
        matched_sources.update(hits)
        kind, src = ("matched", source[hits[0]]) if hits else ("by_source", None)
        out.extend(_apply(row, src, [c for c in clauses if c.kind == kind], keep=True))
    for index, src in enumerate(source):
        if index not in matched_sources:
            out.extend(_apply(None, src, [c for c in clauses if c.kind == "not_matched"], keep=False))
    return out


def _apply(target: Row | None, source: Row | None, clauses: Sequence[When], *, keep: bool) -> list[Row]:
    for clause in clauses:
        if clause.condition is None or clause.condition(target, source) is True:
            return [] if clause.write is None else [clause.write(target, source)]
    return [dict(target)] if keep and target is not None else []


def _table(catalog: Catalog, partitioned: bool, name: str = "ns.t", **props: str) -> Table:
    table = create_table(catalog, name, partition_name="category" if partitioned else None, **props)
    return table


def _load(table: Table, rows: list[Row], files: int = 3) -> None:
    step = max(1, len(rows) // files)
    for start in range(0, len(rows), step):
        table.append(pa.Table.from_pylist(rows[start : start + step], schema=ARROW_SCHEMA))


def _source(tmp_path: Path, rows: list[Row], name: str = "source.parquet", **extra: list[Any]) -> str:
    data = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    for column, values in extra.items():
        data = data.append_column(column, pa.array(values))
    path = tmp_path / name
    pq.write_table(data, path)
    return str(path)


def _live(table: Table) -> list[Row]:
    table.refresh()
    return table.scan().to_arrow().to_pylist()


TARGET = [
    *({"id": i, "category": "a" if i % 2 else "b"} for i in range(1, 41)),
    {"id": None, "category": "a"},
]
SOURCE = [
    *({"id": i, "category": "c"} for i in range(31, 61)),  # 31..40 match, 41..60 new
    {"id": None, "category": "n"},  # a NULL key never matches: inserted
]
UPSERT = [
    When("matched", "UPDATE SET *", write=lambda t, s: dict(s or {})),
    When("not_matched", "INSERT *", write=lambda t, s: dict(s or {})),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("partitioned", [False, True])
def test_upsert_matches_the_model(catalog: Catalog, tmp_path: Path, mode: str, partitioned: bool) -> None:
    table = _table(catalog, partitioned)
    _load(table, TARGET)
    before = table.current_snapshot().snapshot_id
    result = merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, SOURCE)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode=mode,
        limits=limits(tmp_path),
    )
    expected = model_merge(TARGET, SOURCE, "id", UPSERT)
    assert live_checksum(table) == _checksum(expected)
    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (10, 21)
    assert result["num_target_rows_deleted"] == 0
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.parent_snapshot_id == before
    assert snapshot.summary.operation.value == "overwrite"
    deletes = table.inspect.delete_files().to_pylist()
    if mode == "merge-on-read":
        assert deletes
        assert all(d["content"] == 1 for d in deletes)
        assert result["num_target_rows_copied"] == 0
    else:
        assert not deletes
        assert result["num_target_rows_copied"] > 0


CDC_SOURCE = [
    {"id": 2, "category": "z"},  # op D: delete
    {"id": 3, "category": "z"},  # op U, 'z' > 'a': update
    {"id": 4, "category": "a"},  # op U, 'a' < 'b': no clause, kept
    {"id": 100, "category": "q"},  # op I: insert
    {"id": 101, "category": "q"},  # op D, not matched: not inserted
    {"id": None, "category": "q"},  # NULL key, op I: inserted
]
CDC_OPS = ["D", "U", "U", "I", "D", "I"]


def _cdc_clauses() -> list[When]:
    return [
        When(
            "matched", "AND s.op = 'D' THEN DELETE", condition=lambda t, s: s is not None and s["op"] == "D"
        ),
        When(
            "matched",
            "AND s.category > t.category THEN UPDATE SET category = s.category",
            condition=lambda t, s: s is not None and t is not None and s["category"] > t["category"],
            write=lambda t, s: {**(t or {}), "category": (s or {})["category"]},
        ),
        When(
            "not_matched",
            "AND s.op <> 'D' THEN INSERT (id, category) VALUES (s.id, concat(s.category, '!'))",
            condition=lambda t, s: s is not None and s["op"] != "D",
            write=lambda t, s: {"id": (s or {})["id"], "category": (s or {})["category"] + "!"},
        ),
        When(
            "by_source",
            "AND t.id > 35 THEN DELETE",
            condition=lambda t, s: t is not None and t["id"] is not None and t["id"] > 35,
        ),
        When(
            "by_source",
            "AND t.id <= 5 THEN UPDATE SET category = 'old'",
            condition=lambda t, s: t is not None and t["id"] is not None and t["id"] <= 5,
            write=lambda t, s: {**(t or {}), "category": "old"},
        ),
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("partitioned", [False, True])
def test_conditional_clauses_first_true_wins(
    catalog: Catalog, tmp_path: Path, mode: str, partitioned: bool
) -> None:
    table = _table(catalog, partitioned)
    _load(table, TARGET)
    clauses = _cdc_clauses()
    source = [{**row, "op": op} for row, op in zip(CDC_SOURCE, CDC_OPS, strict=True)]
    path = _source(tmp_path, CDC_SOURCE, op=CDC_OPS)
    result = merge(
        table,
        on=["id"],
        source_files=[path],
        when_matched=[c.text for c in clauses if c.kind == "matched"],
        when_not_matched=[c.text for c in clauses if c.kind == "not_matched"],
        when_not_matched_by_source=[c.text for c in clauses if c.kind == "by_source"],
        mode=mode,
        limits=limits(tmp_path),
    )
    expected = model_merge(TARGET, source, "id", clauses)
    assert live_checksum(table) == _checksum(expected)
    # 2 deleted as D, 36..40 by source; 3 updated, 1 and 5 by source (id 2, 3, 4 matched)
    assert result["num_target_rows_deleted"] == 1 + 5
    assert result["num_target_rows_updated"] == 1 + 2
    assert result["num_target_rows_inserted"] == 2
    assert result["plan"]["conflict_filter"] == "true"  # NOT MATCHED BY SOURCE reads every file


def test_duplicate_source_keys_fail_and_leave_the_table(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False)
    _load(table, TARGET)
    before = (table.current_snapshot().snapshot_id, live_checksum(table))
    path = _source(tmp_path, [{"id": 5, "category": "x"}, {"id": 5, "category": "y"}])
    with pytest.raises(ConfigurationError, match="matched a single row from the target table with multiple"):
        merge(
            table,
            on=["id"],
            source_files=[path],
            when_matched=["AND s.id = 6 THEN DELETE"],
            limits=limits(tmp_path),
        )
    table.refresh()
    assert (table.current_snapshot().snapshot_id, live_checksum(table)) == before


def test_duplicates_pass_an_unconditional_delete_and_an_insert_only_merge(
    catalog: Catalog, tmp_path: Path
) -> None:
    table = _table(catalog, False)
    _load(table, TARGET)
    dupes = [
        {"id": 5, "category": "x"},
        {"id": 5, "category": "y"},
        {"id": 77, "category": "u"},
        {"id": 77, "category": "v"},
    ]
    path = _source(tmp_path, dupes)
    merge(table, on=["id"], source_files=[path], when_matched=["DELETE"], limits=limits(tmp_path))
    expected = [r for r in TARGET if r["id"] != 5]
    assert live_checksum(table) == _checksum(expected)
    result = merge(
        table, on=["id"], source_files=[path], when_not_matched=["INSERT *"], limits=limits(tmp_path)
    )
    table.refresh()
    assert table.current_snapshot().summary.operation.value == "append"
    assert result["num_target_rows_inserted"] == 4  # 5 is gone now; Spark inserts duplicates
    assert live_checksum(table) == _checksum([*expected, *dupes])


@pytest.mark.parametrize("mode", MODES)
def test_existing_deletes_apply_first(catalog: Catalog, tmp_path: Path, mode: str) -> None:
    table = _table(catalog, False)
    _load(table, TARGET, files=2)
    first = max(table.scan().plan_files(), key=lambda t: t.file.record_count).file.file_path
    first_rows = pq.read_table(first).to_pylist()
    gone_by_position = [first_rows[0]["id"], first_rows[1]["id"]]
    commit_delete_files(
        table,
        [write_position_deletes(table, first, [0, 1], "a"), write_equality_deletes(table, [31, 32], "a")],
    )
    table.refresh()
    target = [r for r in TARGET if r["id"] not in (*gone_by_position, 31, 32)]
    source = [{"id": i, "category": "s"} for i in (*gone_by_position, 31, 32, 33)]
    result = merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, source)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode=mode,
        limits=limits(tmp_path),
    )
    # Deleted rows never match: their keys are inserted, not updated (nor resurrected).
    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (1, 4)
    # PyIceberg cannot read equality deletes: the conversion (checked against Java on its own) turns
    # what is left of them into position deletes first.
    convert_equality_deletes(table, limits=limits(tmp_path))
    assert live_checksum(table) == _checksum(model_merge(target, source, "id", UPSERT))


def test_upsert_shorthand_and_source_table(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False)
    _load(table, TARGET)
    staged = catalog.create_table("ns.changes", schema=table.schema(), properties={"format-version": "2"})
    staged.append(pa.Table.from_pylist(SOURCE, schema=ARROW_SCHEMA))
    result = upsert(table, join_cols=["id"], source_table="ns.changes", limits=limits(tmp_path))
    assert (result["rows_updated"], result["rows_inserted"]) == (10, 21)
    assert live_checksum(table) == _checksum(model_merge(TARGET, SOURCE, "id", UPSERT))


def test_idempotent_commit_and_refused_results(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False)
    _load(table, TARGET, files=4)
    source = [{"id": i, "category": "s"} for i in (5, 15, 25, 35, 70)]
    plan = plan_merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, source)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        task_size_bytes=1,
    )
    assert len(plan["tasks"]) == 5
    assert sum(t["inserts"] for t in plan["tasks"]) == 1
    results = [execute_merge_task(table, task, limits(tmp_path)) for task in plan["tasks"]]
    with pytest.raises(ConfigurationError, match="task"):
        commit_merge(table, results[1:], commit_id="m1")
    tampered = copy.deepcopy(results)
    changed = next(r for r in tampered if r["removed_data_files"])
    changed["num_target_rows_copied"] += 1  # rows that were never written
    changed["added_data_files"][0]["record-count"] += 1
    with pytest.raises(DataFileCodecError, match="holds"):
        commit_merge(table, tampered, commit_id="m1")
    tampered = copy.deepcopy(results)
    other = next(r for r in tampered if r["removed_data_files"] and r is not changed)
    other["removed_data_files"][0]["file-path"] += ".elsewhere"  # a file that was never in the table
    other["applied_deletes"] = {
        other["removed_data_files"][0]["file-path"]: next(iter(other["applied_deletes"].values()))
    }
    other["changed_data_files"] = [other["removed_data_files"][0]["file-path"]]
    with pytest.raises(DataFileCodecError, match="not live"):
        commit_merge(table, tampered, commit_id="m1")
    first = commit_merge(table, results, commit_id="m1")
    again = commit_merge(table, results, commit_id="m1")
    assert again["already_committed"]
    assert again["snapshot_ids"] == first["snapshot_ids"]
    assert live_checksum(table) == _checksum(model_merge(TARGET, source, "id", UPSERT))


def _planned(table: Table, tmp_path: Path, mode: str) -> list[dict[str, Any]]:
    plan = plan_merge(
        table,
        on=["id"],
        source_files=[_source(tmp_path, SOURCE)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode=mode,
    )
    return [execute_merge_task(table, task, limits(tmp_path)) for task in plan["tasks"]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("race", ["append", "delete", "compaction"])
def test_racing_commits_conflict_and_leave_the_table(
    catalog: Catalog, tmp_path: Path, mode: str, race: str
) -> None:
    table = _table(catalog, False)
    _load(table, TARGET, files=4)
    results = _planned(table, tmp_path, mode)
    if race == "append":  # a row in the source's key range: serializable isolation refuses
        table.append(pa.Table.from_pylist([{"id": 45, "category": "new"}], schema=ARROW_SCHEMA))
    elif race == "delete":  # a row the merge updates
        table.delete("id = 35")
    else:
        compact(table, limits=limits(tmp_path))
    table.refresh()
    state = (table.current_snapshot().snapshot_id, live_checksum(table))
    with pytest.raises(CommitValidationError):
        commit_merge(table, results, commit_id="racing")
    table.refresh()
    assert (table.current_snapshot().snapshot_id, live_checksum(table)) == state


def test_snapshot_isolation_accepts_a_racing_append(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False, **{"write.merge.isolation-level": "snapshot"})
    _load(table, TARGET, files=4)
    results = _planned(table, tmp_path, "copy-on-write")
    table.append(pa.Table.from_pylist([{"id": 45, "category": "new"}], schema=ARROW_SCHEMA))
    commit_merge(table, results, commit_id="snap")
    expected = [*model_merge(TARGET, SOURCE, "id", UPSERT), {"id": 45, "category": "new"}]
    assert live_checksum(table) == _checksum(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on": ["nope"], "when_matched": ["DELETE"]}, "join column 'nope'"),
        ({"on": ["id"], "when_matched": ["UPSERT"]}, "cannot parse WHEN MATCHED"),
        ({"on": ["id"], "when_matched": ["UPDATE SET nope = 1"]}, "cannot set 'nope'"),
        ({"on": ["id"], "when_not_matched": ["DELETE"]}, "WHEN NOT MATCHED allows only INSERT"),
        ({"on": ["id"], "when_matched": ["DELETE", "UPDATE SET *"]}, "put it last"),
        ({"on": ["id"]}, "at least one WHEN clause"),
        ({"on": ["id"], "when_matched": ["DELETE"], "mode": "sideways"}, "copy-on-write or merge-on-read"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    catalog: Catalog, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    table = _table(catalog, False)
    _load(table, TARGET)
    before = table.current_snapshot().snapshot_id
    with pytest.raises(ConfigurationError, match=message) as err:
        merge(table, source_files=[_source(tmp_path, SOURCE)], limits=limits(tmp_path), **kwargs)
    assert "\n" not in str(err.value)
    table.refresh()
    assert table.current_snapshot().snapshot_id == before


def test_source_that_does_not_fit_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False)
    _load(table, TARGET)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["x"], "category": ["y"]}), bad)
    with pytest.raises(ConfigurationError, match="column id is string"):
        merge(
            table, on=["id"], source_files=[str(bad)], when_matched=["UPDATE SET *"], limits=limits(tmp_path)
        )
    narrow = tmp_path / "narrow.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), narrow)
    with pytest.raises(ConfigurationError, match="lacks category"):
        merge(
            table,
            on=["id"],
            source_files=[str(narrow)],
            when_matched=["UPDATE SET *"],
            limits=limits(tmp_path),
        )
    # An int source key is promoted to the table's long; a DELETE needs no other column.
    merge(table, on=["id"], source_files=[str(narrow)], when_matched=["DELETE"], limits=limits(tmp_path))
    assert live_checksum(table) == _checksum([r for r in TARGET if r["id"] != 1])
    with pytest.raises(ConfigurationError, match="qualify columns"):
        merge(
            table,
            on=["id"],
            source_files=[str(narrow)],
            when_matched=["AND nope > 1 THEN DELETE"],
            limits=limits(tmp_path),
        )


def test_a_source_larger_than_the_memory_limit(catalog: Catalog, tmp_path: Path) -> None:
    table = _table(catalog, False)
    count = 400_000
    pad = "p" * 80
    table.append(
        pa.table({"id": list(range(0, count, 2)), "category": [pad] * (count // 2)}, schema=ARROW_SCHEMA)
    )
    path = tmp_path / "big.parquet"
    pq.write_table(
        pa.table(
            {"id": list(range(count)), "category": [f"s{i}{pad}" for i in range(count)]}, schema=ARROW_SCHEMA
        ),
        path,
    )
    small = ResourceLimits(
        memory_limit_bytes=32 * 1024 * 1024, spill_dir=str(tmp_path / "spill"), target_partitions=2
    )
    result = merge(
        table,
        on=["id"],
        source_files=[str(path)],
        when_matched=["UPDATE SET *"],
        when_not_matched=["INSERT *"],
        mode="merge-on-read",
        limits=small,
    )
    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (count // 2, count // 2)
    live = _live(table)
    assert len(live) == count
    assert {r["category"] for r in live} == {f"s{i}{pad}" for i in range(count)}
