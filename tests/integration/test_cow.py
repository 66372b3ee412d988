"""Copy-on-write delete, update and overwrite by predicate against a real SQLite catalog and real files.

Every row-changing test compares the live rows after the operation, read by PyIceberg's scan, with the
rows before it (also read by PyIceberg) transformed by an independent oracle: the predicate written again
by hand in PyArrow compute, with SQL's rule that a row matches only when the predicate is TRUE.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from airflow_provider_iceberg_exec.engine.commit.snapshots import COMMIT_ID_PROPERTY
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import (
    CommitValidationError,
    ConfigurationError,
    DataFileReadError,
)
from airflow_provider_iceberg_exec.engine.io import read as read_module
from airflow_provider_iceberg_exec.engine.ops.cow import (
    commit_cow_rewrite,
    cow_rewrite,
    execute_cow_task,
    plan_cow_rewrite,
)
from tests.helpers import commit_delete_files, commit_position_deletes, data_files, row_digest
from tests.integration.test_commit import _race_once, _write_position_deletes
from tests.integration.test_deletes import (
    _append,
    _commit_deletes,
    _create,
    _equality_deletes,
    _ids,
    _live_delete_files,
)

pytestmark = pytest.mark.integration

MASK = (1 << 64) - 1
UTC = datetime.timezone.utc
BASE_TS = datetime.datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "user_id", LongType(), required=False),
    NestedField(3, "region", StringType(), required=False),
    NestedField(4, "score", DoubleType(), required=False),
    NestedField(5, "ts", TimestamptzType(), required=False),
    NestedField(6, "name", StringType(), required=False),
)
ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("user_id", pa.int64()),
        pa.field("region", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("name", pa.string()),
    ]
)
BY_REGION = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="region")
)
REGIONS = ("eu", "us", "apac", None)
FILES, ROWS_PER_FILE = 4, 100


def rows(start: int, count: int, *, region: str | object | None = ..., user_offset: int = 0) -> pa.Table:
    """Deterministic rows with nulls everywhere but ``id``, NaN scores and a null region now and then."""
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": ids,
            "user_id": [None if i % 17 == 0 else (i * 7919 + user_offset) % 1000 for i in ids],
            "region": [REGIONS[i % 4] if region is ... else region for i in ids],
            "score": [
                None if i % 11 == 0 else float("nan") if i % 13 == 0 else (i * 37) % 100 + 0.5 for i in ids
            ],
            "ts": [BASE_TS + datetime.timedelta(hours=i) for i in ids],
            "name": [None if i % 19 == 0 else f"n{i % 50}" for i in ids],
        },
        schema=ARROW,
    )


def make_table(
    catalog: SqlCatalog, name: str = "ns.t", *, partitioned: bool, files: int = FILES, **properties: str
) -> Table:
    table = catalog.create_table(
        name,
        schema=SCHEMA,
        partition_spec=BY_REGION if partitioned else PartitionSpec(),
        properties={"format-version": "2", "commit.retry.min-wait-ms": "1", **properties},
    )
    for number in range(files):
        table.append(rows(number * ROWS_PER_FILE, ROWS_PER_FILE))
    return table


def limits(tmp_path: Path) -> ResourceLimits:
    return ResourceLimits(
        memory_limit_bytes=64 * 1024 * 1024, spill_dir=str(tmp_path / "spill"), batch_size=50
    )


def digest(data: pa.Table) -> tuple[int, int]:
    total = 0
    for row in data.to_pylist():
        total = (total + row_digest(row)) & MASK
    return data.num_rows, total


def live(table: Table) -> pa.Table:
    table.refresh()
    return table.scan().to_arrow()


def unmatched(before: pa.Table, oracle: Callable[[pa.Table], pa.Array]) -> pa.Table:
    """The oracle: rows where the hand-written predicate is not TRUE."""
    return before.filter(pc.invert(pc.fill_null(oracle(before), False)))


def data_dir_files(table: Table) -> set[str]:
    root = table.location().removeprefix("file://") + "/data"
    return {os.path.join(d, f) for d, _, names in os.walk(root) for f in names}


def min_id(data_file: DataFile) -> int:
    return int.from_bytes(data_file.lower_bounds[1], "little", signed=True)


def ts(hours: int) -> pa.Scalar:
    return pa.scalar(BASE_TS + datetime.timedelta(hours=hours), pa.timestamp("us", tz="UTC"))


# (where, oracle) pairs: the oracle restates the predicate in PyArrow with SQL's nulls and IEEE NaN.
PREDICATES: list[tuple[str, Callable[[pa.Table], Any]]] = [
    ("region = 'eu'", lambda t: pc.equal(t["region"], "eu")),
    ("region is null", lambda t: pc.is_null(t["region"])),
    ("region != 'eu'", lambda t: pc.not_equal(t["region"], "eu")),
    (
        "region not in ('eu', 'us')",
        lambda t: pc.and_(pc.not_equal(t["region"], "eu"), pc.not_equal(t["region"], "us")),
    ),
    ("user_id < 300", lambda t: pc.less(t["user_id"], 300)),
    (
        "user_id >= 900 or score is nan",
        lambda t: pc.or_kleene(pc.greater_equal(t["user_id"], 900), pc.is_nan(t["score"])),
    ),
    ("score is null", lambda t: pc.is_null(t["score"], nan_is_null=False)),
    ("score is nan", lambda t: pc.is_nan(t["score"])),
    ("score > 50.0", lambda t: pc.greater(t["score"], 50.0)),
    ("score != 10.5", lambda t: pc.not_equal(t["score"], 10.5)),
    ("name like 'n1%'", lambda t: pc.starts_with(t["name"], "n1")),
    ("ts >= '2026-01-10T00:00:00+00:00'", lambda t: pc.greater_equal(t["ts"], ts(9 * 24))),
    ("id >= 0", lambda t: pc.greater_equal(t["id"], 0)),
    ("id < 0", lambda t: pc.less(t["id"], 0)),
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, tuple[Table, int]]]:
    """One table per layout, reset to its first full snapshot by every test that uses it."""
    root = tmp_path_factory.mktemp("cow-shared")
    catalog = SqlCatalog("shared", uri=f"sqlite:///{root}/c.db", warehouse=f"file://{root}/wh")
    catalog.create_namespace("ns")
    tables = {}
    for partitioned in (True, False):
        table = make_table(catalog, f"ns.t_{'p' if partitioned else 'u'}", partitioned=partitioned, files=3)
        assert table.metadata.current_snapshot_id is not None
        tables[partitioned] = (table, table.metadata.current_snapshot_id)
    yield tables
    catalog.engine.dispose()


def reset(table: Table, snapshot_id: int) -> Table:
    table.refresh()
    table.manage_snapshots().set_current_snapshot(snapshot_id).commit()
    table.refresh()
    return table


# -- delete: rows against the oracle ---------------------------------------------------------------------


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
@pytest.mark.parametrize(("where", "oracle"), PREDICATES, ids=[p[0] for p in PREDICATES])
def test_delete_leaves_exactly_the_rows_the_predicate_does_not_match(
    shared: dict[bool, tuple[Table, int]], tmp_path: Path, partitioned: bool, where: str, oracle: Any
) -> None:
    table = reset(*shared[partitioned])
    before = live(table)
    expected = unmatched(before, oracle)

    result = cow_rewrite(
        table, operation="delete", where=where, limits=limits(tmp_path), commit_id=f"d-{where}"
    )

    assert digest(live(table)) == digest(expected)
    assert result["deleted_rows"] == before.num_rows - expected.num_rows
    assert result["rewritten_rows"] + result["deleted_rows"] <= before.num_rows
    if result["deleted_rows"] == 0:
        assert result["snapshot_ids"] == []  # nothing matched: nothing committed
    else:
        snapshot = table.current_snapshot()
        assert snapshot is not None
        assert snapshot.summary is not None
        assert snapshot.summary.operation.value == (
            "overwrite" if result["added_data_files_count"] else "delete"
        )
        # Java's summary: records of every removed file count as deleted, copies of kept rows as added.
        summary = snapshot.summary.additional_properties
        assert summary["deleted-records"] == str(result["deleted_rows"] + result["rewritten_rows"])
        assert summary.get("added-records", "0") == str(result["rewritten_rows"])
        assert summary["deleted-data-files"] == str(result["deleted_data_files_count"])
        assert summary.get("added-data-files", "0") == str(result["added_data_files_count"])
        assert summary["total-records"] == str(expected.num_rows)
        assert summary["total-data-files"] == str(len(data_files(table)))
        assert summary[COMMIT_ID_PROPERTY] == f"d-{where}"


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_update_sets_sql_expressions_on_matching_rows_only(
    shared: dict[bool, tuple[Table, int]], tmp_path: Path, partitioned: bool
) -> None:
    table = reset(*shared[partitioned])
    before = live(table)
    match = pc.fill_null(
        pc.and_kleene(pc.less(before["user_id"], 500), pc.not_equal(before["region"], "apac")), False
    )
    expected = before.set_column(
        3, "score", pc.if_else(match, pc.multiply(before["score"], 2.0), before["score"])
    )
    expected = expected.set_column(
        5, "name", pc.if_else(match, pc.utf8_upper(before["name"]), before["name"])
    )

    result = cow_rewrite(
        table,
        operation="update",
        where="user_id < 500 and region != 'apac'",
        set_columns={"score": "score * 2", "name": "upper(name)"},
        limits=limits(tmp_path),
    )

    assert digest(live(table)) == digest(expected)
    assert result["updated_rows"] == pc.sum(match).as_py()
    assert result["deleted_rows"] == result["inserted_rows"] == 0
    assert table.current_snapshot().summary.operation.value == "overwrite"  # type: ignore[union-attr]


def test_update_of_a_partition_column_moves_rows_to_their_new_partition(
    shared: dict[bool, tuple[Table, int]], tmp_path: Path
) -> None:
    table = reset(*shared[True])
    before = live(table)
    match = pc.fill_null(pc.less(before["user_id"], 100), False)
    expected = before.set_column(2, "region", pc.if_else(match, pa.scalar("moved"), before["region"]))

    cow_rewrite(
        table,
        operation="update",
        where="user_id < 100",
        set_columns={"region": "'moved'"},
        limits=limits(tmp_path),
    )

    assert digest(live(table)) == digest(expected)
    for data_file in data_files(table):
        regions = set(
            pq.read_table(data_file.file_path.removeprefix("file://"), columns=["region"], partitioning=None)[
                "region"
            ].to_pylist()
        )
        assert regions == {data_file.partition[0]}, data_file.file_path


def test_update_of_a_required_column_to_null_fails_before_anything_is_committed(
    shared: dict[bool, tuple[Table, int]], tmp_path: Path
) -> None:
    table = reset(*shared[False])
    location, files = table.metadata_location, data_dir_files(table)

    with pytest.raises(ConfigurationError, match="gives null for required column id"):
        cow_rewrite(
            table,
            operation="update",
            where="user_id < 10",
            set_columns={"id": "NULL"},
            limits=limits(tmp_path),
        )
    with pytest.raises(ConfigurationError, match=r"gives null for \d+ row\(s\) but id is a required column"):
        cow_rewrite(
            table,
            operation="update",
            where="user_id < 500",
            set_columns={"id": "CASE WHEN user_id < 5 THEN NULL ELSE id END"},
            limits=limits(tmp_path),
        )
    with pytest.raises(ConfigurationError, match="does not fit column user_id"):
        cow_rewrite(
            table,
            operation="update",
            where="user_id < 500",
            set_columns={"user_id": "name"},
            limits=limits(tmp_path),
        )

    table.refresh()
    assert table.metadata_location == location
    assert data_dir_files(table) == files  # every file written was removed


def test_files_of_an_older_spec_are_rewritten_into_the_current_spec(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = make_table(catalog, partitioned=False)
    with table.update_spec() as update:
        update.add_identity("region")
    table.append(rows(1000, 40))
    before = live(table)
    expected = unmatched(before, lambda t: pc.less(t["user_id"], 200))

    cow_rewrite(table, operation="delete", where="user_id < 200", limits=limits(tmp_path))

    assert digest(live(table)) == digest(expected)
    added = [f for f in data_files(table) if "/cow-" in f.file_path]
    assert added
    assert {f.spec_id for f in added} == {table.metadata.default_spec_id}


# -- which files are touched -----------------------------------------------------------------------------


def test_files_without_a_matching_row_are_left_untouched(catalog: SqlCatalog, tmp_path: Path) -> None:
    """The user id is inside every file's bounds (so no file is pruned) but in one row of one file only."""
    table = make_table(catalog, partitioned=False)
    counts = pc.value_counts(live(table)["user_id"]).to_pylist()
    user_id = next(c["values"] for c in counts if c["counts"] == 1 and 100 < (c["values"] or 0) < 900)
    before = {f.file_path for f in data_files(table)}

    result = cow_rewrite(table, operation="delete", where=f"user_id = {user_id}", limits=limits(tmp_path))

    after = {f.file_path for f in data_files(table)}
    assert len(before - after) == 1
    assert len(after - before) == 1
    assert result["untouched_data_files_count"] == FILES - 1
    assert result["deleted_data_files_count"] == result["added_data_files_count"] == 1
    assert table.current_snapshot().summary["deleted-data-files"] == "1"  # type: ignore[union-attr]


def test_files_that_fully_match_by_partition_are_dropped_without_being_read(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = make_table(catalog, partitioned=True)
    eu = [f for f in data_files(table) if f.partition[0] == "eu"]
    expected = unmatched(live(table), lambda t: pc.equal(t["region"], "eu"))
    for data_file in eu:  # reading any of them now fails
        os.remove(data_file.file_path.removeprefix("file://"))

    result = cow_rewrite(table, operation="delete", where="region = 'eu'", limits=limits(tmp_path))

    assert result["dropped_without_reading_count"] == len(eu) == FILES
    assert result["added_data_files_count"] == 0
    assert table.current_snapshot().summary.operation.value == "delete"  # type: ignore[union-attr]
    assert digest(live(table)) == digest(expected)


def test_files_that_fully_match_by_metrics_are_dropped_without_being_read(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Files 0 and 1 hold ids below 200 only (id is required, so no null): removed unread; file 2 is cut."""
    table = make_table(catalog, partitioned=False)
    files = sorted(data_files(table), key=min_id)
    expected = unmatched(live(table), lambda t: pc.less(t["id"], 250))
    for data_file in files[:2]:
        os.remove(data_file.file_path.removeprefix("file://"))

    result = cow_rewrite(table, operation="delete", where="id < 250", limits=limits(tmp_path))

    assert result["dropped_without_reading_count"] == 2
    assert result["deleted_data_files_count"] == 3
    assert result["added_data_files_count"] == 1
    assert digest(live(table)) == digest(expected)
    assert files[3].file_path in {f.file_path for f in data_files(table)}


def test_a_metrics_proof_does_not_count_when_the_column_holds_nulls(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """PyIceberg's strict evaluator says every row matches ``user_id != -1``; SQL keeps the null ones."""
    table = make_table(catalog, partitioned=False)
    expected = unmatched(live(table), lambda t: pc.not_equal(t["user_id"], -1))
    assert pc.sum(pc.is_null(expected["user_id"])).as_py() == expected.num_rows > 0

    result = cow_rewrite(table, operation="delete", where="user_id != -1", limits=limits(tmp_path))

    assert result["dropped_without_reading_count"] == 0
    assert digest(live(table)) == digest(expected)


def _file_of(table: Table, present: set[str]) -> DataFile:
    """The one live data file added since ``present`` (paths)."""
    added: list[DataFile] = [f for f in data_files(table) if f.file_path not in present]
    assert len(added) == 1
    return added[0]


def _appended_files(table: Table, *id_ranges: range) -> list[DataFile]:
    """Append each range as one data file (test_deletes' schema); return the files in that order."""
    out: list[DataFile] = []
    for ids in id_ranges:
        _append(table, ids)
        out.append(_file_of(table, {f.file_path for f in out}))
    return out


@pytest.mark.parametrize(
    ("where", "matching"), [("id < 6", {0, 2, 3, 5}), ("id < 10", {0, 2, 3, 5, 6, 7, 8, 9})]
)
def test_delete_applies_position_deletes(
    catalog: SqlCatalog, tmp_path: Path, where: str, matching: set[int]
) -> None:
    table = _create(catalog)
    first, second, _ = _appended_files(table, range(10), range(10, 20), range(20, 30))
    first_deletes = commit_position_deletes(table, first.file_path, [1, 4])  # ids 1 and 4
    second_deletes = commit_position_deletes(table, second.file_path, [2])  # id 12
    before = _ids(table)
    assert before == sorted(set(range(30)) - {1, 4, 12})

    result = cow_rewrite(table, operation="delete", where=where, limits=limits(tmp_path))

    assert _ids(table) == sorted(set(before) - matching)
    assert result["deleted_rows"] == len(matching)  # the deleted rows 1 and 4 are not counted
    assert result["dropped_without_reading_count"] == 0  # live rows are not in the metadata
    assert result["removed_delete_files_count"] == 1
    live_deletes = {f.file_path for f in _live_delete_files(table)}
    assert live_deletes == {second_deletes.file_path}  # the untouched file's delete file stays
    assert first_deletes.file_path not in live_deletes


def test_delete_applies_equality_deletes(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    _appended_files(table, range(10), range(10, 20))
    equality = _equality_deletes(table, {"id": (1, pa.int64(), [3, 15])}, spec_id=0)
    _commit_deletes(table, [equality])
    matching = {1, 12, 13, 14, 16, 17, 18, 19}  # "id = 1 or id >= 12" over the live rows (3, 15 deleted)

    result = cow_rewrite(table, operation="delete", where="id = 1 or id >= 12", limits=limits(tmp_path))

    assert result["deleted_rows"] == len(matching)
    # Both files it applied to were rewritten: the equality delete is gone and PyIceberg reads the table.
    assert _live_delete_files(table) == []
    assert _ids(table) == sorted(set(range(20)) - {3, 15} - matching)


def test_update_does_not_resurrect_position_deleted_rows(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    first, _ = _appended_files(table, range(10), range(10, 20))
    first_deletes = commit_position_deletes(table, first.file_path, [1, 4])

    result = cow_rewrite(
        table, operation="update", where="id < 6", set_columns={"name": "'x'"}, limits=limits(tmp_path)
    )

    assert result["updated_rows"] == 4
    table.refresh()
    names = {r["id"]: r["name"] for r in table.scan().to_arrow().to_pylist()}
    assert sorted(names) == sorted(set(range(20)) - {1, 4})
    assert {i for i, name in names.items() if name == "x"} == {0, 2, 3, 5}
    assert first_deletes.file_path not in {f.file_path for f in _live_delete_files(table)}


def test_the_rewrite_streams(catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No whole-file or whole-result read: PyArrow's and DataFusion's materialising calls are forbidden."""
    import datafusion

    table = make_table(catalog, partitioned=True)
    before = live(table)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("materialised a whole file or result")

    monkeypatch.setattr(pq, "read_table", forbidden)
    monkeypatch.setattr(pq.ParquetFile, "read", forbidden)
    # A tiny file (<= 64 KiB stored) is read whole by design (io/read.py): its bytes bound what it holds.
    # This test's files are that small: the streamed path, which every larger file takes, is checked.
    monkeypatch.setattr(read_module, "TINY_FILE_BYTES", 1)
    monkeypatch.setattr(datafusion.DataFrame, "collect", forbidden)
    monkeypatch.setattr(datafusion.DataFrame, "to_arrow_table", forbidden)
    cow_rewrite(
        table,
        operation="update",
        where="user_id < 500",
        set_columns={"score": "score + 1"},
        limits=limits(tmp_path),
    )
    cow_rewrite(table, operation="delete", where="user_id < 100 or region = 'apac'", limits=limits(tmp_path))
    monkeypatch.undo()

    match = pc.fill_null(pc.less(before["user_id"], 500), False)
    updated = before.set_column(3, "score", pc.if_else(match, pc.add(before["score"], 1.0), before["score"]))
    expected = unmatched(
        updated, lambda t: pc.or_kleene(pc.less(t["user_id"], 100), pc.equal(t["region"], "apac"))
    )
    assert digest(live(table)) == digest(expected)


# -- overwrite by predicate ------------------------------------------------------------------------------


def write_parquet(path: Path, data: pa.Table) -> str:
    pq.write_table(data, path)
    return str(path)


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_overwrite_replaces_the_matching_rows_with_the_loaded_ones(
    catalog: SqlCatalog, tmp_path: Path, partitioned: bool
) -> None:
    table = make_table(catalog, partitioned=partitioned)
    loaded = rows(5000, 70, region="eu", user_offset=3)
    # A file written by another tool: no field ids, int32 user ids (promoted), columns in another order.
    source = (
        loaded.drop_columns(["name"])
        .cast(
            pa.schema(
                [
                    f.with_type(pa.int32()) if f.name == "user_id" else f
                    for f in loaded.schema
                    if f.name != "name"
                ]
            )
        )
        .select(["ts", "id", "region", "score", "user_id"])
    )
    path = write_parquet(tmp_path / "load.parquet", source)
    expected = pa.concat_tables(
        [
            unmatched(live(table), lambda t: pc.equal(t["region"], "eu")),
            loaded.set_column(5, "name", pa.nulls(70, pa.string())),
        ]
    )

    result = cow_rewrite(
        table, operation="overwrite", where="region = 'eu'", source_files=[path], limits=limits(tmp_path)
    )

    assert digest(live(table)) == digest(expected)
    assert result["inserted_rows"] == 70
    assert table.current_snapshot().summary.operation.value == "overwrite"  # type: ignore[union-attr]
    rerun = cow_rewrite(
        table, operation="overwrite", where="region = 'eu'", source_files=[path], limits=limits(tmp_path)
    )
    assert rerun["deleted_rows"] == rerun["inserted_rows"] == 70  # an idempotent re-run of the load
    assert digest(live(table)) == digest(expected)


def test_overwrite_refuses_rows_that_do_not_match_the_predicate(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_table(catalog, partitioned=True)
    location, files = table.metadata_location, data_dir_files(table)
    path = write_parquet(
        tmp_path / "bad.parquet", pa.concat_tables([rows(5000, 10, region="eu"), rows(6000, 1, region="us")])
    )

    with pytest.raises(
        ConfigurationError, match="Cannot append file with rows that do not match filter: region = 'eu'"
    ):
        cow_rewrite(
            table, operation="overwrite", where="region = 'eu'", source_files=[path], limits=limits(tmp_path)
        )

    table.refresh()
    assert table.metadata_location == location
    assert data_dir_files(table) == files


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"id": [1], "extra": [1]}), "column\\(s\\) extra that the table does not have"),
        (pa.table({"user_id": [1]}), "lacks required column\\(s\\) id"),
        (pa.table({"id": pa.array([None], pa.int64()), "region": ["eu"]}), "null in required column id"),
        (pa.table({"id": ["x"], "region": ["eu"]}), "does not fit the table schema"),
    ],
    ids=["extra-column", "missing-required", "null-required", "bad-type"],
)
def test_overwrite_refuses_files_that_do_not_fit_the_table(
    catalog: SqlCatalog, tmp_path: Path, data: pa.Table, message: str
) -> None:
    table = make_table(catalog, partitioned=False)
    location = table.metadata_location
    path = write_parquet(tmp_path / "x.parquet", data)
    with pytest.raises(ConfigurationError, match=message):
        cow_rewrite(
            table, operation="overwrite", where="region = 'eu'", source_files=[path], limits=limits(tmp_path)
        )
    table.refresh()
    assert table.metadata_location == location


# -- concurrent writers and isolation levels ---------------------------------------------------------------


def staged(table: Table, tmp_path: Path, **plan: Any) -> list[dict[str, Any]]:
    """Plan and execute, not commit: the work a commit task receives."""
    doc = plan_cow_rewrite(table, **plan)
    return [execute_cow_task(table, task, limits(tmp_path)) for task in doc["tasks"]]


@pytest.mark.parametrize(
    ("isolation", "where_appended"),
    [("serializable", "us"), ("snapshot", "eu"), ("snapshot", "us")],
)
def test_a_concurrent_append_conflicts_only_under_serializable_and_only_if_it_may_match(
    catalog: SqlCatalog, tmp_path: Path, isolation: str, where_appended: str
) -> None:
    table = make_table(catalog, partitioned=True, **{"write.delete.isolation-level": isolation})
    results = staged(table, tmp_path, operation="delete", where="region = 'eu'")
    catalog.load_table("ns.t").append(rows(9000, 5, region=where_appended))
    expected = unmatched(live(table), lambda t: pc.equal(t["region"], "eu"))
    if isolation == "snapshot" and where_appended == "eu":  # accepted: the appended rows stay, as in Java
        expected = pa.concat_tables([expected, rows(9000, 5, region="eu")])

    outcome = commit_cow_rewrite(table, results, commit_id="c-1")

    assert outcome["isolation_level"] == isolation
    assert outcome["snapshot_ids"]
    assert digest(live(table)) == digest(expected)


def test_serializable_rejects_a_concurrent_append_that_may_match(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_table(catalog, partitioned=True)
    results = staged(table, tmp_path, operation="delete", where="region = 'eu' and user_id < 500")
    catalog.load_table("ns.t").append(rows(9000, 5, region="eu"))
    location, files = catalog.load_table("ns.t").metadata_location, data_dir_files(table)

    with pytest.raises(
        CommitValidationError, match="Found conflicting files that can contain records matching"
    ):
        commit_cow_rewrite(table, results, commit_id="c-1")

    table.refresh()
    assert table.metadata_location == location
    written = {
        p for r in results for f in r["added_data_files"] for p in [f["file-path"].removeprefix("file://")]
    }
    assert written
    assert not written & data_dir_files(table)
    assert data_dir_files(table) < files


def test_update_reads_its_isolation_level_from_write_update_isolation_level(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = make_table(catalog, partitioned=True, **{"write.update.isolation-level": "snapshot"})
    results = staged(table, tmp_path, operation="update", where="region = 'eu'", set_columns={"name": "'x'"})
    catalog.load_table("ns.t").append(rows(9000, 5, region="eu"))
    assert commit_cow_rewrite(table, results, commit_id="c-1")["isolation_level"] == "snapshot"
    plan = plan_cow_rewrite(table, operation="delete", where="region = 'eu'")
    assert plan["isolation_level"] == "serializable"


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_a_concurrent_delete_file_for_a_rewritten_file_conflicts_under_both_levels(
    catalog: SqlCatalog, tmp_path: Path, isolation: str
) -> None:
    table = make_table(catalog, partitioned=False)
    results = staged(table, tmp_path, operation="delete", where="user_id < 300", isolation_level=isolation)
    target = results[0]["removed_data_files"][0]["file-path"]
    other = catalog.load_table("ns.t")
    commit_delete_files(other, [_write_position_deletes(other, "pd", [(target, 1)])])

    with pytest.raises(CommitValidationError, match="found new delete for replaced data file"):
        commit_cow_rewrite(table, results, commit_id="c-1")


def test_a_concurrently_removed_file_fails_the_commit(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_table(catalog, partitioned=False)
    results = staged(table, tmp_path, operation="delete", where="user_id < 300", isolation_level="snapshot")
    catalog.load_table("ns.t").delete("id < 100")  # PyIceberg's own delete drops the first file

    with pytest.raises(CommitValidationError, match="Missing required files to delete"):
        commit_cow_rewrite(table, results, commit_id="c-1")


def test_a_conflict_during_the_catalog_commit_is_revalidated_on_retry(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append lands between our validation and the catalog commit: the retry sees it and rejects it."""
    table = make_table(catalog, partitioned=True)
    results = staged(table, tmp_path, operation="delete", where="region = 'eu'")
    other = SqlCatalog(catalog.name, uri=catalog.properties["uri"], warehouse=catalog.properties["warehouse"])
    calls = _race_once(
        monkeypatch, catalog, lambda: other.load_table("ns.t").append(rows(9000, 5, region="eu"))
    )

    with pytest.raises(CommitValidationError, match="Found conflicting files"):
        commit_cow_rewrite(table, results, commit_id="c-1")
    assert len(calls) == 1  # the retry failed validation before reaching the catalog


def test_a_non_conflicting_race_is_retried_and_the_commit_lands(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(catalog, partitioned=True)
    results = staged(table, tmp_path, operation="delete", where="region = 'eu'")
    expected = pa.concat_tables(
        [unmatched(live(table), lambda t: pc.equal(t["region"], "eu")), rows(9000, 5, region="us")]
    )
    other = SqlCatalog(catalog.name, uri=catalog.properties["uri"], warehouse=catalog.properties["warehouse"])
    calls = _race_once(
        monkeypatch, catalog, lambda: other.load_table("ns.t").append(rows(9000, 5, region="us"))
    )

    outcome = commit_cow_rewrite(table, results, commit_id="c-1")

    assert len(calls) == 2
    assert outcome["snapshot_ids"]
    assert digest(live(table)) == digest(expected)


def test_committing_the_same_results_again_is_idempotent(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_table(catalog, partitioned=False)
    results = staged(table, tmp_path, operation="delete", where="user_id < 300")
    first = commit_cow_rewrite(table, results, commit_id="erasure-1")
    snapshots = len(table.metadata.snapshots)

    again = commit_cow_rewrite(catalog.load_table("ns.t"), results, commit_id="erasure-1")

    assert again["already_committed"] is True
    assert again["snapshot_ids"] == first["snapshot_ids"]
    table.refresh()
    assert len(table.metadata.snapshots) == snapshots


# -- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operation": "merge", "where": "id = 1"}, "unknown operation 'merge'"),
        ({"operation": "delete", "where": ""}, "a predicate is required"),
        ({"operation": "delete", "where": "id >"}, "cannot parse where"),
        ({"operation": "delete", "where": "nope = 1"}, "does not fit the table schema"),
        ({"operation": "update", "where": "id = 1"}, "an update needs at least one assignment"),
        ({"operation": "update", "where": "id = 1", "set_columns": {"nope": "1"}}, "not a top-level column"),
        (
            {"operation": "update", "where": "id = 1", "set_columns": {"name": "upper("}},
            "cannot evaluate set name",
        ),
        (
            {"operation": "update", "where": "id = 1", "set_columns": {"name": "nope + 1"}},
            "No field named nope",
        ),
        (
            {"operation": "delete", "where": "id = 1", "set_columns": {"name": "'x'"}},
            "set applies to update only",
        ),
        ({"operation": "overwrite", "where": "id = 1"}, "needs at least one Parquet file"),
        (
            {"operation": "overwrite", "where": "id = 1", "source_files": ["/nope.parquet"]},
            "cannot read Parquet file",
        ),
        ({"operation": "delete", "where": "id = 1", "isolation_level": "linear"}, "unknown isolation level"),
    ],
)
def test_bad_input_is_a_configuration_error_and_changes_nothing(
    shared: dict[bool, tuple[Table, int]], tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    table = reset(*shared[False])
    location = table.metadata_location
    with pytest.raises(ConfigurationError, match=message):
        cow_rewrite(table, limits=limits(tmp_path), **kwargs)
    table.refresh()
    assert table.metadata_location == location


def test_a_missing_data_file_is_a_read_error_and_changes_nothing(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = make_table(catalog, partitioned=False)
    victim: DataFile = data_files(table)[0]
    os.remove(victim.file_path.removeprefix("file://"))
    location = table.metadata_location
    with pytest.raises(DataFileReadError, match="cannot be opened"):
        cow_rewrite(table, operation="delete", where="user_id < 300", limits=limits(tmp_path))
    table.refresh()
    assert table.metadata_location == location
