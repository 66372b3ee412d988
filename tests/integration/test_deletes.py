"""Compaction applies position deletes, deletion vectors and equality deletes (engine/deletes/).

Delete files are written by these tests and committed with the engine's own delete-manifest writer, as
tests/integration/test_commit.py does. PyIceberg 0.12 cannot read equality deletes, so the expected rows
of those tables are computed here from the spec's rules; once compaction resolved them, PyIceberg reads
the table and must see exactly those rows.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes import apply, matches
from airflow_provider_iceberg_exec.engine.deletes import mapped as mapped_module
from airflow_provider_iceberg_exec.engine.deletes.mapped import map_delete_keys
from airflow_provider_iceberg_exec.engine.deletes.vectors import decode_deletion_vector
from airflow_provider_iceberg_exec.engine.meta.scan import scan_data_files
from airflow_provider_iceberg_exec.engine.ops.compaction import compact, plan_compaction
from tests.helpers import commit_delete_files, commit_position_deletes, data_files, live_checksum

pytestmark = pytest.mark.integration

MiB = 1 << 20
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "name", StringType(), required=False),
)


@pytest.fixture(params=["held", "mapped", "mapped-hashes", "joined", "joined-filtered"])
def equality_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Equality deletes held in memory and matched as the data files stream; mapped from disk (no share
    of the memory limit for their rows, only for their hashes; sorted in many small hash ranges) and
    matched as the data files stream; the same with their hashes mapped too (as if the hashes were over
    their share; searched a few at a time); or (no share at all) matched first by the key join of
    engine/deletes/matches.py, its data rows ruled out by the delete keys' hashes held in memory, or
    (as if they were over their share) by the hashes sorted on disk and mapped, the join split in buckets:
    the same rows go."""
    mapping = request.param in ("mapped", "mapped-hashes")
    joining = request.param in ("joined", "joined-filtered")
    if mapping or joining:
        monkeypatch.setattr(apply, "HELD_SHARE", 0)
    if mapping:
        monkeypatch.setattr(apply, "_map_bucket_bytes", lambda limits: 256)
    if request.param == "mapped-hashes":
        _hashes_over_their_share(monkeypatch, apply)
    if joining:
        monkeypatch.setattr(apply, "MAPPED_SHARE", 0)
    sorted_sets = []
    if request.param == "joined-filtered":
        _hashes_over_their_share(monkeypatch, matches)
        monkeypatch.setattr(matches, "_keys_budget", lambda limits: 4096)
        real_sorted = mapped_module.sorted_hash_set

        def sorted_spy(unsorted: str, **kwargs: Any) -> Any:
            sorted_sets.append(unsorted)
            return real_sorted(unsorted, **kwargs)

        monkeypatch.setattr(matches, "sorted_hash_set", sorted_spy)
    mapped = []
    real = map_delete_keys

    def spy(*args: Any, **kwargs: Any) -> Any:
        mapped.append(kwargs["directory"])
        assert kwargs["hold_hashes"] == (request.param != "mapped-hashes")
        return real(*args, **kwargs)

    monkeypatch.setattr(apply, "map_delete_keys", spy)
    yield str(request.param)
    if request.param != "held":  # held: kinds over the held share are mapped too
        assert bool(mapped) == mapping, "the path the test meant to take"
    assert bool(sorted_sets) == (request.param == "joined-filtered"), "the join's filter the test meant"
    assert not any(os.path.exists(d) for d in mapped), "mapped delete rows left on disk"
    assert not any(os.path.exists(p) or os.path.exists(f"{p}.sorted") for p in sorted_sets), "hashes left"


def _hashes_over_their_share(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """As if the delete keys' hashes were over their share in ``module`` but their bitmap and fences were
    not: the hashes are mapped, searched a few at a time (a fence every 2 hashes, a region of 4)."""
    real_bytes = mapped_module.mapped_bytes
    monkeypatch.setattr(
        module, "mapped_bytes", lambda rows, *, hashes_held=True: 1 << 62 if hashes_held else real_bytes(rows)
    )
    monkeypatch.setattr(mapped_module, "_FENCE_VALUES", 2)
    monkeypatch.setattr(mapped_module, "_REGION_VALUES", 4)


def _limits(tmp_path: Path, memory_bytes: int = 64 * MiB) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=memory_bytes, spill_dir=str(tmp_path / "spill"))


def _create(catalog: SqlCatalog, *, partitioned_later: bool = False) -> Table:
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"format-version": "2"})
    if partitioned_later:
        with table.update_spec() as update:
            update.add_field("category", IdentityTransform(), "category")
    return table


def _name(i: int) -> str | None:
    return None if i % 5 == 0 else f"n{i}"


def _append(table: Table, ids: Sequence[int], category: str = "a") -> None:
    table.append(
        pa.table(
            {
                "id": pa.array(list(ids), pa.int64()),
                "category": [category] * len(ids),
                "name": [_name(i) for i in ids],
            }
        )
    )


def _commit_deletes(table: Table, delete_files: Sequence[DataFile]) -> None:
    """One ``delete`` snapshot adding ``delete_files`` (one delete manifest per spec)."""
    commit_delete_files(table, delete_files)


def _equality_deletes(
    table: Table,
    columns: dict[str, tuple[int, pa.DataType, list[Any]]],
    *,
    spec_id: int,
    partition: tuple[Any, ...] = (),
) -> DataFile:
    """An equality delete file keyed on ``columns`` (name -> field id, type, values)."""
    location = f"{table.location()}/data/eq-deletes-{uuid.uuid4().hex}.parquet"
    schema = pa.schema(
        [pa.field(name, t, metadata={"PARQUET:field_id": str(fid)}) for name, (fid, t, _) in columns.items()]
    )
    data = pa.table({name: values for name, (_, _, values) in columns.items()}, schema=schema)
    with table.io.new_output(location).create() as stream:
        pq.write_table(data, stream)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        record_count=data.num_rows,
        file_size_in_bytes=len(table.io.new_input(location)),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        equality_ids=[fid for fid, _, _ in columns.values()],
    )
    delete_file.spec_id = spec_id
    return delete_file


def _ids(table: Table) -> list[int]:
    """The ``id`` of every live row, read by PyIceberg (which refuses tables with equality deletes)."""
    table.refresh()
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def _live_delete_files(table: Table) -> list[DataFile]:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries

    return [
        e.data_file
        for m in snapshot.manifests(table.io)
        if m.content == ManifestContent.DELETES
        for e in read_manifest_entries(table.io, m)
    ]


_ALL = {"rewrite-all": "true"}


# -- position deletes ---------------------------------------------------------------------------------------


def test_position_deletes_are_applied_and_their_file_removed(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    for start in (0, 10, 20):
        _append(table, range(start, start + 10))
    target = sorted(f.file_path for f in data_files(table))[0]
    commit_position_deletes(table, target, [0, 3, 9])
    before = live_checksum(table)
    assert before[0] == 27

    result = compact(table, options=_ALL, limits=_limits(tmp_path))

    assert live_checksum(table) == before
    assert result["removed_delete_files_count"] == 1
    assert _live_delete_files(table) == []
    assert len(data_files(table)) == 1


def test_position_deletes_by_file_path_bounds_apply(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A position delete file without referenced_data_file is applied by its file_path column."""
    table = _create(catalog)
    for start in (0, 10):
        _append(table, range(start, start + 10))
    target = sorted(f.file_path for f in data_files(table))[1]
    commit_position_deletes(table, target, [1, 2], set_referenced_data_file=False)
    before = live_checksum(table)

    compact(table, options=_ALL, limits=_limits(tmp_path))

    assert live_checksum(table) == before
    assert before[0] == 18


def test_plan_no_longer_skips_files_with_deletes(catalog: SqlCatalog) -> None:
    table = _create(catalog)
    for start in (0, 10):
        _append(table, range(start, start + 10))
    target = sorted(f.file_path for f in data_files(table))[0]
    commit_position_deletes(table, target, [0])

    plan = plan_compaction(table, options={"min-input-files": "2"})

    assert plan["skipped"] == []
    (task,) = plan["tasks"]
    assert {e["data-file"]["file-path"] for e in task["data_files"]} == {
        f.file_path for f in data_files(table)
    }
    # The task carries the delete that applies to its file; which deletes go is the commit's decision.
    deletes = {e["data-file"]["file-path"]: e["delete-files"] for e in task["data_files"]}
    assert len(deletes.pop(target)) == 1
    assert all(d == [] for d in deletes.values())


# -- equality deletes -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("equality_path")
def test_equality_delete_applies_to_older_data_only(catalog: SqlCatalog, tmp_path: Path) -> None:
    """seq 1: ids 0..9; seq 2: eq delete {3, 13}; seq 3: ids 10..19 -- 13 is newer than the delete."""
    table = _create(catalog)
    _append(table, range(10))
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [3, 13])}, spec_id=0)])
    _append(table, range(10, 20))

    result = compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == [i for i in range(20) if i != 3]  # PyIceberg reads it: no equality delete left
    assert result["removed_delete_files_count"] == 1
    assert _live_delete_files(table) == []


@pytest.mark.usefixtures("equality_path")
def test_global_and_partition_scoped_equality_deletes(catalog: SqlCatalog, tmp_path: Path) -> None:
    """Spec 0 is unpartitioned (global deletes), spec 1 identity(category)."""
    table = _create(catalog, partitioned_later=True)
    _append(table, range(10), "a")
    _append(table, range(10, 20), "b")
    _commit_deletes(
        table,
        [
            _equality_deletes(table, {"id": (1, pa.int64(), [1, 12])}, spec_id=0),  # global
            _equality_deletes(table, {"id": (1, pa.int64(), [2, 13])}, spec_id=1, partition=("a",)),
        ],
    )

    result = compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == [i for i in range(20) if i not in (1, 12, 2)]  # 13 is in partition b
    assert result["removed_delete_files_count"] == 2


@pytest.mark.usefixtures("equality_path")
def test_multi_column_equality_delete_matches_null_to_null(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    _append(table, range(10))
    _append(table, range(10, 20))
    deletes = _equality_deletes(
        table,
        {"id": (1, pa.int64(), [5, 7, 8, 15]), "name": (3, pa.string(), [None, "n7", "other", "n15"])},
        spec_id=0,
    )
    _commit_deletes(table, [deletes])

    compact(table, options=_ALL, limits=_limits(tmp_path))

    # 5 (name NULL) and 7 match; 8 has another name; 15's name is NULL, not 'n15'.
    assert _ids(table) == [i for i in range(20) if i not in (5, 7)]


def test_equality_delete_on_a_dropped_column_still_applies(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    _append(table, range(10))
    _append(table, range(10, 20))
    _commit_deletes(table, [_equality_deletes(table, {"name": (3, pa.string(), ["n4", "n11"])}, spec_id=0)])
    with table.update_schema() as update:
        update.delete_column("name")

    compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == [i for i in range(20) if i not in (4, 11)]
    assert table.schema().find_field("id") is not None
    assert "name" not in table.schema().column_names


@pytest.mark.usefixtures("equality_path")
def test_a_key_deleted_again_later_deletes_the_rows_between_too(catalog: SqlCatalog, tmp_path: Path) -> None:
    """seq 1: ids 0..9; seq 2: delete id 3; seq 3: id 3 again; seq 4: delete id 3 again; seq 5: id 3 again.

    The two deletes of one key are one delete row in memory with the higher sequence number: both older
    rows go, the newest stays."""
    table = _create(catalog)
    _append(table, range(10))
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [3])}, spec_id=0)])
    _append(table, [3])
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [3, 3])}, spec_id=0)])
    _append(table, [3])

    compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_float_keys_still_take_the_spilling_join(catalog: SqlCatalog, tmp_path: Path) -> None:
    """A double key is not hashed (equal doubles may differ in bits): DataFusion's join matches it."""
    from pyiceberg.types import DoubleType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "score", DoubleType(), required=False),
    )
    table = catalog.create_table("ns.f", schema=schema, properties={"format-version": "2"})
    for start in (0, 10):
        ids = list(range(start, start + 10))
        table.append(
            pa.table(
                {"id": pa.array(ids, pa.int64()), "score": [None if i == 4 else i / 2 for i in ids]},
                schema=pa.schema([("id", pa.int64()), ("score", pa.float64())]),
            )
        )
    deleted = [1.5, 6.0, None, 99.0]  # ids 3 and 12, and the NULL score of id 4
    _commit_deletes(table, [_equality_deletes(table, {"score": (2, pa.float64(), deleted)}, spec_id=0)])

    compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == [i for i in range(20) if i not in (3, 4, 12)]


@pytest.mark.usefixtures("equality_path")
def test_position_and_equality_deletes_together(catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _create(catalog)
    _append(table, range(10))
    _append(table, range(10, 20))
    first = sorted(f.file_path for f in data_files(table))[0]
    first_ids = pq.read_table(first.removeprefix("file://")).column("id").to_pylist()
    commit_position_deletes(table, first, [0, 1])
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [15, first_ids[5]])}, spec_id=0)])

    result = compact(table, options=_ALL, limits=_limits(tmp_path))

    gone = {first_ids[0], first_ids[1], first_ids[5], 15}
    assert _ids(table) == [i for i in range(20) if i not in gone]
    assert result["removed_delete_files_count"] == 2
    assert _live_delete_files(table) == []


@pytest.mark.usefixtures("equality_path")
def test_a_row_deleted_by_position_and_by_key_is_counted_once(catalog: SqlCatalog, tmp_path: Path) -> None:
    """The rewrite checks that it wrote the rows read minus those deleted: a row both kinds delete must
    count once."""
    table = _create(catalog)
    _append(table, range(10))
    _append(table, range(10, 20))
    first = sorted(f.file_path for f in data_files(table))[0]
    first_ids = pq.read_table(first.removeprefix("file://")).column("id").to_pylist()
    commit_position_deletes(table, first, [0, 1, 2])
    both = [first_ids[0], first_ids[2], first_ids[7]]
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), both)}, spec_id=0)])

    compact(table, options=_ALL, limits=_limits(tmp_path))

    gone = {*first_ids[:3], first_ids[7]}
    assert _ids(table) == [i for i in range(20) if i not in gone]


def test_equality_delete_shared_with_a_file_outside_the_plan_is_kept(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """A delete that still applies to a live file that was not rewritten stays in the table."""
    table = _create(catalog, partitioned_later=True)
    _append(table, range(10), "a")
    _append(table, range(10, 20), "b")
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [1, 12])}, spec_id=0)])

    result = compact(table, where="category = 'a'", options=_ALL, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == 1
    assert result["removed_delete_files_count"] == 0
    assert len(_live_delete_files(table)) == 1
    snapshot = table.current_snapshot()
    assert snapshot is not None
    scanned = scan_data_files(table, snapshot, AlwaysTrue())
    with_deletes = [f.data_file.partition[0] for f in scanned if f.delete_files]
    assert with_deletes == ["b"]


def test_equality_anti_join_with_keys_larger_than_memory_spills(catalog: SqlCatalog, tmp_path: Path) -> None:
    """300k delete keys of ~200 bytes (about 60 MB) under a 32 MiB limit: the sort-merge join spills."""
    table = _create(catalog)
    n = 300_000
    pad = "x" * 190
    table.append(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "category": ["a"] * n,
                "name": [f"{pad}{i:09d}" for i in range(n)],
            }
        )
    )
    _append(table, range(n, n + 10))
    deleted = [f"{pad}{i:09d}" for i in range(0, n, 2)] + [f"{pad}missing{i}" for i in range(n // 2)]
    _commit_deletes(table, [_equality_deletes(table, {"name": (3, pa.string(), deleted)}, spec_id=0)])

    result = compact(table, options=_ALL, limits=_limits(tmp_path, 32 * MiB))

    assert result["spilled_bytes"] > 0, result
    table.refresh()
    assert table.scan().count() == n // 2 + 10


# -- deletion vectors ----------------------------------------------------------------------------------------


def _dv_blob(payload: bytes) -> bytes:
    body = b"\xd1\xd3\x39\x64" + payload
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [3, 5, 7],
        list(range(5000, 9000)),
        list(range(0, 200000, 3)),
        [1, (1 << 32) + 2, (3 << 32) + 9],
    ],
    ids=["empty", "one", "array", "run", "bitmap", "high-keys"],
)
def test_deletion_vector_decoding_matches_pyroaring(positions: list[int]) -> None:
    from pyroaring import BitMap64

    bitmap = BitMap64(positions)
    bitmap.run_optimize()
    assert decode_deletion_vector(_dv_blob(bitmap.serialize())).tolist() == positions


def test_deletion_vector_with_a_bad_crc_is_refused() -> None:
    from pyroaring import BitMap64

    from airflow_provider_iceberg_exec.engine.errors import DataFileReadError

    blob = bytearray(_dv_blob(BitMap64([1, 2]).serialize()))
    blob[-1] ^= 0xFF
    with pytest.raises(DataFileReadError, match="CRC-32"):
        decode_deletion_vector(bytes(blob))


# -- equality-delete resolution ------------------------------------------------------------------------------


def test_resolution_rewrites_only_files_with_equality_deletes(catalog: SqlCatalog, tmp_path: Path) -> None:
    from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes

    table = _create(catalog, partitioned_later=True)
    _append(table, range(10), "a")
    _append(table, range(10, 20), "b")
    untouched = {f.file_path for f in data_files(table) if f.partition[0] == "b"}
    _commit_deletes(
        table, [_equality_deletes(table, {"id": (1, pa.int64(), [2, 3])}, spec_id=1, partition=("a",))]
    )
    _append(table, range(20, 30), "a")  # newer than the delete: not rewritten

    result = resolve_equality_deletes(table, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == 1
    assert result["removed_delete_files_count"] == 1
    assert _live_delete_files(table) == []
    assert untouched <= {f.file_path for f in data_files(table)}
    assert _ids(table) == [i for i in range(30) if i not in (2, 3)]


def test_resolve_deletes_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import json

    from airflow_provider_iceberg_exec.cli import main

    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", f"file://{tmp_path}/warehouse")
    cli_catalog = SqlCatalog(
        "it", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    cli_catalog.create_namespace("ns")
    table = _create(cli_catalog)
    _append(table, range(10))
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [4])}, spec_id=0)])
    out = io.StringIO()

    code = main(
        ["--catalog", "it", "resolve-deletes", "ns.t", "--spill-dir", str(tmp_path / "spill"), "--json"],
        out=out,
    )

    assert code == 0
    assert json.loads(out.getvalue())["removed_delete_files_count"] == 1
    assert _ids(table) == [i for i in range(10) if i != 4]


@pytest.mark.usefixtures("equality_path")
def test_bucketed_anti_join_applies_several_delete_kinds(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """About 6 MB staged per side under a 32 MiB limit: split into key buckets, one pass per delete kind."""
    from airflow_provider_iceberg_exec.engine.io import staging

    # What was staged to the spill directory, counted as it is written: the execution's sampled spill
    # peak (every 0.1 s) can miss staged sets that live a few milliseconds on a busy machine.
    staged: list[int] = []
    write = staging.StagedParquet.write

    def counting_write(self: staging.StagedParquet, batch: pa.RecordBatch) -> None:
        staged.append(batch.nbytes)
        write(self, batch)

    monkeypatch.setattr(staging.StagedParquet, "write", counting_write)
    table = _create(catalog, partitioned_later=True)
    n = 30_000
    pad = "y" * 190
    for category, start in (("a", 0), ("b", n)):
        ids = range(start, start + n)
        table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "category": [category] * n,
                    "name": [None if i % 7 == 0 else f"{pad}{i}" for i in ids],
                }
            )
        )
    by_name = [f"{pad}{i}" for i in range(0, 2 * n, 3)] + [None]  # global: every third id, and NULL names
    by_id = list(range(1, 2 * n, 10))  # partition-scoped: only the ids in partition a
    _commit_deletes(
        table,
        [
            _equality_deletes(table, {"name": (3, pa.string(), by_name)}, spec_id=0),
            _equality_deletes(table, {"id": (1, pa.int64(), by_id)}, spec_id=1, partition=("a",)),
        ],
    )

    result = compact(table, options=_ALL, limits=_limits(tmp_path, 32 * MiB))

    gone = {i for i in range(2 * n) if i % 3 == 0 or i % 7 == 0} | set(range(1, n, 10))
    assert _ids(table) == [i for i in range(2 * n) if i not in gone]
    assert result["removed_delete_files_count"] == 2
    assert sum(staged) > 2 * MiB  # the delete keys (4 MB) did not fit a sixteenth of the limit: staged


def test_new_equality_delete_conflicts_with_a_rewrite_into_another_spec(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    """Files of spec 1 (category) are rewritten into the unpartitioned spec (category dropped). An
    equality delete of spec 1's partition committed meanwhile would not reach that output: with the
    base's sequence number the commit would bring its rows back, so it must fail validation and leave the
    table as it was. (It also rewrites into an unpartitioned spec, which needs no clustering sort.)"""
    from airflow_provider_iceberg_exec.engine.errors import CommitValidationError
    from airflow_provider_iceberg_exec.engine.ops.compaction import commit_compaction, execute_rewrite_task

    table = _create(catalog, partitioned_later=True)
    _append(table, range(10), "a")
    _append(table, range(10, 20), "a")
    with table.update_spec() as update:
        update.remove_field("category")
    table.refresh()
    plan = plan_compaction(table, options=_ALL)
    assert plan["tasks"]
    assert all(t["output_spec_id"] != 1 for t in plan["tasks"])
    results = [execute_rewrite_task(table, task, _limits(tmp_path)) for task in plan["tasks"]]
    _commit_deletes(
        table, [_equality_deletes(table, {"id": (1, pa.int64(), [4])}, spec_id=1, partition=("a",))]
    )
    head = table.current_snapshot()

    with pytest.raises(CommitValidationError, match="delete"):
        commit_compaction(table, results, commit_id="spec-change")

    table.refresh()
    assert table.current_snapshot() == head
    assert len(_live_delete_files(table)) == 1


@pytest.mark.usefixtures("equality_path")
def test_files_read_ahead_and_streamed_alike_get_their_deletes(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small files are read whole on worker threads ahead of the stream, larger ones streamed in their
    turn (io.read.read_files_ahead): position and equality deletes still reach each file's own rows."""
    import airflow_provider_iceberg_exec.engine.io.read as read_module

    table = _create(catalog)
    for number in range(24):
        start = number * 1000
        _append(table, range(start, start + (1000 if number % 3 == 0 else 40)))
    files = sorted(data_files(table), key=lambda f: f.file_path)
    sizes = sorted(f.file_size_in_bytes for f in files)
    # Between the small and the large files: both paths are taken, interleaved.
    monkeypatch.setattr(read_module, "SMALL_FILE_BYTES", (sizes[0] + sizes[-1]) // 2)
    for f in files[::5]:
        commit_position_deletes(table, f.file_path, [0, 7])
    _commit_deletes(
        table, [_equality_deletes(table, {"id": (1, pa.int64(), [5, 3001, 12003, 21039])}, spec_id=0)]
    )
    expected = {
        i for f in files for i in pq.read_table(f.file_path.removeprefix("file://")).column("id").to_pylist()
    }
    for f in files[::5]:
        ids = pq.read_table(f.file_path.removeprefix("file://")).column("id").to_pylist()
        expected -= {ids[0], ids[7]}
    expected -= {5, 3001, 12003, 21039}

    result = compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == sorted(expected)
    assert result["rewritten_data_files_count"] == len(files)
    assert _live_delete_files(table) == []


@pytest.mark.parametrize("path", ["held", "mapped"])
def test_held_deletes_are_matched_behind_the_decoding_thread_and_a_read_error_stops_both(
    catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Streamed files under held equality deletes are decoded on a thread of their own and matched on
    the stream's (apply._stream): the same rows go; a file that cannot be read fails the compaction with
    its error, leaves the table as it was and no thread behind."""
    import threading

    import airflow_provider_iceberg_exec.engine.io.read as read_module
    from airflow_provider_iceberg_exec.engine.errors import DataFileReadError

    table = _create(catalog)
    for number in range(6):
        _append(table, range(number * 1000, number * 1000 + 1000))
    files = sorted(f.file_path for f in data_files(table))
    commit_position_deletes(table, files[2], [0, 9])
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [5, 3001, 5999])}, spec_id=0)])
    monkeypatch.setattr(read_module, "SMALL_FILE_BYTES", 0)  # every file streamed, none read by the workers
    if path == "mapped":
        monkeypatch.setattr(apply, "HELD_SHARE", 0)
    # Thread objects, not idents: an ident is reused once its thread has ended.
    decoding: set[threading.Thread] = set()
    matching: set[threading.Thread] = set()
    real_decode, real_mask = apply.iter_data_file_batches, apply._held_mask

    def decode(*args: Any, **kwargs: Any) -> Any:
        decoding.add(threading.current_thread())
        return real_decode(*args, **kwargs)

    def mask(*args: Any, **kwargs: Any) -> Any:
        matching.add(threading.current_thread())
        return real_mask(*args, **kwargs)

    monkeypatch.setattr(apply, "iter_data_file_batches", decode)
    monkeypatch.setattr(apply, "_held_mask", mask)
    expected = set(range(6000)) - {5, 3001, 5999}
    expected -= {pq.read_table(files[2].removeprefix("file://")).column("id")[p].as_py() for p in (0, 9)}
    before = table.metadata_location
    threads = set(threading.enumerate())
    lost = files[4]
    os.rename(lost.removeprefix("file://"), lost.removeprefix("file://") + ".away")

    with pytest.raises(DataFileReadError, match=os.path.basename(lost)):
        compact(table, options=_ALL, limits=_limits(tmp_path))

    assert catalog.load_table(table.name()).metadata_location == before
    assert set(threading.enumerate()) <= threads, "a reading thread left behind"
    os.rename(lost.removeprefix("file://") + ".away", lost.removeprefix("file://"))
    decoding.clear()
    matching.clear()

    compact(table, options=_ALL, limits=_limits(tmp_path))

    assert _ids(table) == sorted(expected)
    assert _live_delete_files(table) == []
    assert decoding, "no file decoded"
    assert matching, "no batch matched"
    assert decoding.isdisjoint(matching), "decoded and matched on one thread"
