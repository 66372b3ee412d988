"""engine/io/merge_sort.py: sorted runs by PyArrow merged by DataFusion give DataFusion's own order (NaN,
-0.0, nulls first or last, descending), over several merge passes, with every spill file in the spill
directory and none left behind."""

from __future__ import annotations

import decimal
import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from datafusion import SessionContext, col

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io import merge_sort
from airflow_provider_iceberg_exec.engine.io.merge_sort import (
    MergePlan,
    SortColumn,
    SortStats,
    external_sort,
    sorted_lanes,
)

ORDER: list[SortColumn] = [("g", True, False), ("f", False, True), ("s", True, True)]


def _rows(count: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    floats = rng.choice(np.array([1.5, -1.5, 0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 2.25, -7.0]), count)
    return pa.table(
        {
            "g": pa.array(rng.integers(0, 5, count), pa.int64(), mask=rng.random(count) < 0.1),
            "f": pa.array(floats, pa.float64(), mask=rng.random(count) < 0.1),
            "s": pa.array([f"v{v}" for v in rng.integers(0, 50, count)], mask=rng.random(count) < 0.1),
            "id": pa.array(np.arange(count), pa.int64()),
        }
    )


def _batches(table: pa.Table, rows: int = 300):
    return iter(table.to_batches(max_chunksize=rows))


def _key_words(table: pa.Table) -> list[tuple]:
    """The order's key of every row (:func:`_key_rows` of its key columns)."""
    return _key_rows(table.select([name for name, _asc, _nulls in ORDER]))


def _datafusion_sorted(table: pa.Table) -> pa.Table:
    keys = [col(name).sort(ascending=asc, nulls_first=nulls) for name, asc, nulls in ORDER]
    return SessionContext().from_arrow(table).sort(*keys).to_arrow_table()


def _sort(table: pa.Table, spill_dir: Path, plan: MergePlan | None) -> pa.Table:
    out = external_sort(
        _batches(table),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill_dir)),
        str(spill_dir),
        prepare=pa.Table.from_batches,
        finish=lambda rows: rows,
        plan=plan,
    )
    return pa.Table.from_batches(list(out), schema=table.schema)


@pytest.mark.parametrize(
    "plan",
    [
        None,  # fits one run: sorted in memory
        MergePlan(run_bytes=16 << 10, fan_in=64),  # several runs, one merge
        MergePlan(run_bytes=8 << 10, fan_in=2),  # many runs, several merge passes
    ],
    ids=["in-memory", "one-merge", "multi-pass"],
)
def test_rows_come_out_in_datafusions_order(tmp_path: Path, plan: MergePlan | None) -> None:
    table = _rows(5000)
    out = _sort(table, tmp_path / "spill", plan)
    assert _key_words(out) == _key_words(_datafusion_sorted(table))
    assert sorted(out.column("id").to_pylist()) == list(range(5000))
    assert not (tmp_path / "spill" / "sort-runs").exists(), "the runs are removed"


def test_runs_are_spilled_into_the_spill_directory_only(tmp_path: Path, monkeypatch) -> None:
    """While the merge streams, its runs are files under the spill directory; nothing goes to the OS's
    temporary directory, and nothing is left afterwards."""
    os_temp = tmp_path / "os-temp"
    os_temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(os_temp))
    spill = tmp_path / "spill"
    seen: list[list[str]] = []

    def finish(rows):
        for batch in rows:  # the merge is under way (its runs are removed once it is done)
            seen.append(os.listdir(spill / "sort-runs"))
            yield batch

    out = external_sort(
        _batches(_rows(5000)),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill)),
        str(spill),
        prepare=pa.Table.from_batches,
        finish=finish,
        plan=MergePlan(run_bytes=8 << 10, fan_in=3),
    )
    assert sum(b.num_rows for b in out) == 5000
    assert 1 <= len(seen[0]) <= 3
    assert all(name.endswith(".arrow") for name in seen[0])
    assert not (spill / "sort-runs").exists()
    assert list(os_temp.iterdir()) == []


def test_stopping_early_removes_the_runs(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    out = external_sort(
        _batches(_rows(5000)),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill)),
        str(spill),
        prepare=pa.Table.from_batches,
        finish=lambda rows: rows,
        plan=MergePlan(run_bytes=8 << 10, fan_in=4),
    )
    next(out)
    assert (spill / "sort-runs").exists()
    out.close()
    assert not (spill / "sort-runs").exists()


def test_an_error_while_finishing_is_raised_in_the_caller(tmp_path: Path) -> None:
    def broken(rows):
        for batch in rows:
            yield batch
            raise RuntimeError("restore failed")

    out = external_sort(
        _batches(_rows(2000)),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)),
        str(tmp_path),
        prepare=pa.Table.from_batches,
        finish=broken,
        plan=MergePlan(run_bytes=8 << 10, fan_in=4),
    )
    with pytest.raises(RuntimeError, match="restore failed"):
        list(out)
    assert not (tmp_path / "sort-runs").exists()


@pytest.mark.parametrize("kind", [pa.decimal128(38, 0), pa.decimal256(76, 0)])
def test_decimal_keys_come_out_in_datafusions_order(tmp_path: Path, kind: pa.DataType) -> None:
    """Decimals are sorted by their limbs (the most significant signed): negatives, limbs that differ
    only in the low word, nulls first ascending and descending."""
    rng = np.random.default_rng(3)
    values = [
        None
        if rng.random() < 0.1
        else decimal.Decimal(int(rng.integers(-(2**62), 2**62)) * int(rng.choice([1, 2**64 - 1, 3])))
        for _ in range(3000)
    ]
    table = pa.table({"d": pa.array(values, kind), "id": pa.array(range(3000), pa.int64())})
    for ascending in (True, False):
        order: list[SortColumn] = [("d", ascending, True)]
        out = pa.Table.from_batches(
            list(
                external_sort(
                    _batches(table),
                    order,
                    ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)),
                    str(tmp_path),
                    prepare=pa.Table.from_batches,
                    finish=lambda rows: rows,
                    plan=MergePlan(run_bytes=8 << 10, fan_in=4),
                )
            )
        )
        expected = (
            SessionContext()
            .from_arrow(table)
            .sort(col("d").sort(ascending=ascending, nulls_first=True))
            .to_arrow_table()
        )
        assert out.column("d").to_pylist() == expected.column("d").to_pylist()


def test_wide_rows_are_merged_in_small_batches(tmp_path: Path) -> None:
    """Rows of 40 KB: the run files and the merge's output come in batches of a few MB, not of 8192 rows
    (a merge of four inputs of such batches would not fit a 32 MiB pool)."""
    rng = np.random.default_rng(5)
    count = 600
    table = pa.table(
        {
            "k": pa.array(rng.integers(0, 1000, count), pa.int64()),
            "payload": pa.array([bytes(rng.integers(0, 255, 40_000, dtype=np.uint8)) for _ in range(count)]),
        }
    )
    out = list(
        external_sort(
            iter(table.to_batches(max_chunksize=50)),
            [("k", True, True)],
            ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)),
            str(tmp_path),
            prepare=pa.Table.from_batches,
            finish=lambda rows: rows,
            plan=MergePlan(run_bytes=2 << 20, fan_in=4),
        )
    )
    keys = [k for batch in out for k in batch.column("k").to_pylist()]
    assert keys == sorted(table.column("k").to_pylist())
    assert max(batch.nbytes for batch in out) <= 4 << 20


def _write_calls() -> int:
    """The write system calls this process has made (Linux's /proc/self/io)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("syscw:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's per-process I/O counters")
def test_a_run_file_is_written_in_few_system_calls(tmp_path: Path) -> None:
    """Arrow's IPC writer makes a write for every buffer of every batch: a run's writes are gathered (a
    20M-row sort made about 600,000 of them), and the file reads back whole."""
    table = _rows(200_000)
    before = _write_calls()
    path = merge_sort._write_run(table, str(tmp_path), "00000-000")
    calls = _write_calls() - before
    batches = -(-table.num_rows // merge_sort._batch_rows(table))
    assert batches >= 50  # unbuffered: several writes a batch
    assert calls <= table.nbytes // merge_sort._RUN_WRITE_BUFFER_BYTES + 10
    with pa.memory_map(path) as source:
        back = pa.ipc.open_file(source).read_all().combine_chunks()
    # ``f`` by its bits: equals() fails on a NaN
    assert back.drop_columns("f").equals(table.drop_columns("f"))
    assert back.column("f").chunk(0).view(pa.int64()).equals(table.column("f").chunk(0).view(pa.int64()))


@pytest.mark.parametrize(
    "plan",
    [MergePlan(run_bytes=16 << 10, fan_in=3), MergePlan(run_bytes=16 << 10, fan_in=3, whole_bytes=64 << 20)],
    ids=["runs", "one-piece"],
)
def test_every_column_type_goes_through_the_runs_and_the_merge_unchanged(
    tmp_path: Path, plan: MergePlan
) -> None:
    """Nested, temporal, decimal, binary, fixed and dictionary columns (and a name that needs quoting as the
    key) come out of run files and merge passes, or of a sort in one piece, as they went in."""
    import datetime
    import decimal

    count = 3000
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 40, count)
    table = pa.table(
        {
            'Key "one"': pa.array(keys, pa.int64()),
            "ts": pa.array(
                [
                    datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
                    + datetime.timedelta(seconds=int(k))
                    for k in keys
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "day": pa.array([datetime.date(2026, 1, 1 + int(k) % 28) for k in keys], pa.date32()),
            "amount": pa.array([decimal.Decimal(int(k)) / 100 for k in keys], pa.decimal128(18, 2)),
            "uuid": pa.array([int(i).to_bytes(16, "big") for i in range(count)], pa.binary(16)),
            "blob": pa.array([bytes([int(k)]) * int(k) for k in keys], pa.large_binary()),
            "st": pa.array([{"x": float(k), "y": None if k % 3 else str(k)} for k in keys]),
            "tags": pa.array([[str(k)] * int(k % 4) for k in keys], pa.list_(pa.string())),
            "props": pa.array([[("k", int(k))] for k in keys], pa.map_(pa.string(), pa.int64())),
            "kind": pa.array([f"k{k % 7}" for k in keys]).dictionary_encode(),
            "id": pa.array(range(count), pa.int64()),
        }
    )
    # batches whose dictionaries differ (a file's row groups each have their own)
    batches = [pa.RecordBatch.from_pylist(b.to_pylist(), schema=table.schema) for b in _batches(table)]
    out = pa.Table.from_batches(
        list(
            external_sort(
                iter(batches),
                [('Key "one"', False, True)],
                ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)),
                str(tmp_path),
                prepare=pa.Table.from_batches,
                finish=lambda rows: rows,
                plan=plan,
            )
        )
    )
    assert out.schema == table.schema
    assert out.column('Key "one"').to_pylist() == sorted(keys.tolist(), reverse=True)
    assert out.sort_by("id").to_pylist() == table.to_pylist()


# -- lanes: the sorted rows as streams of disjoint key ranges ----------------------------------------------


def _sorted_in_lanes(
    batches, order: list[SortColumn], spill_dir: Path, plan: MergePlan | None, lanes: int = 2, prepare=None
) -> list[pa.Table]:
    """Each lane's rows, every lane consumed on a thread of its own at once."""
    from concurrent.futures import ThreadPoolExecutor

    with (
        sorted_lanes(
            batches,
            order,
            ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill_dir)),
            str(spill_dir),
            prepare=prepare or pa.Table.from_batches,
            finish=lambda rows: rows,
            lanes=lanes,
            plan=plan,
        ) as streams,
        ThreadPoolExecutor(max_workers=max(1, len(streams))) as pool,
    ):
        return list(pool.map(list, streams))


def _lane_tables(lanes: list[list[pa.RecordBatch]], schema: pa.Schema) -> list[pa.Table]:
    return [pa.Table.from_batches(batches, schema=schema) for batches in lanes]


@pytest.mark.parametrize(
    "plan",
    [MergePlan(run_bytes=16 << 10, fan_in=64), MergePlan(run_bytes=8 << 10, fan_in=4)],
    ids=["one-merge-per-range", "extra-passes"],
)
def test_lanes_hold_disjoint_key_ranges_in_datafusions_order(tmp_path: Path, plan: MergePlan) -> None:
    """Nulls first and last, NaN, -0.0, a descending key and keys repeated across the splitters (``g``
    has five values): the lanes one after the other are DataFusion's order of all the rows, so each lane is
    sorted and every key of a lane sorts before or with every key of the next."""
    table = _rows(5000)
    lanes = _lane_tables(_sorted_in_lanes(_batches(table), ORDER, tmp_path / "spill", plan), table.schema)
    assert len(lanes) == 2
    assert all(lane.num_rows for lane in lanes)
    joined = pa.concat_tables(lanes)
    assert _key_words(joined) == _key_words(_datafusion_sorted(table))
    assert sorted(joined.column("id").to_pylist()) == list(range(5000))
    assert not (tmp_path / "spill" / "sort-runs").exists(), "the runs are removed"


def test_a_range_s_runs_are_removed_once_merged(tmp_path: Path) -> None:
    """Each key range's run files go as soon as its merge has handed out its last row, before the sort
    ends: the first lane consumed to its end leaves only the second lane's runs on disk."""
    spill = tmp_path / "spill"
    table = _rows(5000)
    with sorted_lanes(
        _batches(table),
        [("id", True, False)],
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill)),
        str(spill),
        prepare=pa.Table.from_batches,
        finish=lambda rows: rows,
        lanes=2,
        plan=MergePlan(run_bytes=16 << 10, fan_in=64),
    ) as (first, second):
        before = sorted(os.listdir(spill / "sort-runs"))
        assert len({name.rsplit("-", 1)[1] for name in before}) > 2, "several key ranges"
        ids = [value for batch in first for value in batch.column("id").to_pylist()]
        left = sorted(os.listdir(spill / "sort-runs"))
        assert left
        assert set(left) < set(before)
        # every file left holds rows of the second lane only, none of which the first lane handed out
        left_ids = {
            value
            for name in left
            for value in pa.ipc.open_file(str(spill / "sort-runs" / name)).read_all().column("id").to_pylist()
        }
        assert left_ids.isdisjoint(ids)
        rest = [value for batch in second for value in batch.column("id").to_pylist()]
        assert set(left_ids) == set(rest)
    assert sorted(ids + rest) == list(range(5000))
    assert not (spill / "sort-runs").exists()


def test_a_repeated_key_is_never_split_between_lanes(tmp_path: Path) -> None:
    """A key value lies in one lane only, even when most rows share it (equal splitters)."""
    rng = np.random.default_rng(2)
    count = 6000
    keys = np.where(rng.random(count) < 0.7, 7, rng.integers(0, 100, count))
    table = pa.table({"k": pa.array(keys, pa.int64()), "id": pa.array(np.arange(count), pa.int64())})
    order: list[SortColumn] = [("k", False, False)]
    lanes = _lane_tables(
        _sorted_in_lanes(_batches(table), order, tmp_path, MergePlan(run_bytes=8 << 10, fan_in=64)),
        table.schema,
    )
    values = [set(lane.column("k").to_pylist()) for lane in lanes]
    for a, b in itertools.combinations(values, 2):
        assert not a & b
    joined = pa.concat_tables(lanes)
    assert joined.column("k").to_pylist() == sorted(keys.tolist(), reverse=True)
    assert sorted(joined.column("id").to_pylist()) == list(range(count))


def test_all_equal_keys_come_out_in_one_lane(tmp_path: Path) -> None:
    table = pa.table({"k": pa.array([3] * 4000, pa.int64()), "id": pa.array(range(4000), pa.int64())})
    lanes = _sorted_in_lanes(
        _batches(table), [("k", True, True)], tmp_path, MergePlan(run_bytes=8 << 10, fan_in=64)
    )
    assert len(lanes) == 1
    assert sorted(pa.Table.from_batches(lanes[0]).column("id").to_pylist()) == list(range(4000))


@pytest.mark.parametrize("fan_in", [64, 4])
@pytest.mark.parametrize("common", [0, 1500])
def test_a_key_too_common_for_memory_is_merged_by_datafusion(
    tmp_path: Path, common: int, fan_in: int
) -> None:
    """A range is merged in memory a few fine key ranges at a time, each group within half a run's bytes; a
    key on more rows than that leaves its range to DataFusion, after the passes over the fan-in as before.
    Either way every row comes out once, in order."""
    rng = np.random.default_rng(4)
    keys = np.concatenate([rng.integers(-50_000, 50_000, 6000), np.full(common, 7)])
    table = pa.table({"k": pa.array(rng.permutation(keys), pa.int64()), "id": pa.array(np.arange(len(keys)))})
    out, stats = _one_lane_with_stats(table, [("k", False, True)], tmp_path, fan_in)
    assert out.column("k").to_pylist() == sorted(keys.tolist(), reverse=True)
    assert sorted(out.column("id").to_pylist()) == list(range(len(keys)))
    assert stats.runs > 8
    assert (stats.merge_passes > 0) == (fan_in < stats.runs)
    assert (stats.ranges_in_memory, stats.ranges_by_datafusion) == ((0, 1) if common else (1, 0))


def test_one_run_and_no_rows_need_no_lanes(tmp_path: Path) -> None:
    """Rows that fit one run are sorted in memory and come out as one lane; no rows, no lane."""
    table = _rows(500)
    (lane,) = _lane_tables(_sorted_in_lanes(_batches(table), ORDER, tmp_path, None), table.schema)
    assert _key_words(lane) == _key_words(_datafusion_sorted(table))
    assert _sorted_in_lanes(iter([]), ORDER, tmp_path, MergePlan(run_bytes=8 << 10, fan_in=4)) == []
    assert list(tmp_path.iterdir()) == [] or not (tmp_path / "sort-runs").exists()


@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("fits", [True, False], ids=["within-whole-bytes", "beyond-whole-bytes"])
def test_input_within_the_whole_bytes_is_sorted_in_one_piece_else_in_runs(
    tmp_path: Path, fits: bool, lanes: int
) -> None:
    """Input that ends within ``whole_bytes`` (many runs' worth) is sorted in memory in one piece: no run,
    nothing spilled, handed on in batches of its own. More input goes to runs as before, its first
    ``whole_bytes`` included; a sort in lanes keeps to runs. Every way gives DataFusion's order."""
    table = _rows(5000)
    whole_bytes = 2 * table.nbytes if fits else table.nbytes // 2
    stats = SortStats()
    with sorted_lanes(
        _batches(table),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path), batch_size=1000),
        str(tmp_path),
        prepare=pa.Table.from_batches,
        finish=lambda rows: rows,
        lanes=lanes,
        plan=MergePlan(run_bytes=8 << 10, fan_in=64, whole_bytes=whole_bytes),
        stats=stats,
    ) as streams:
        batches = [b for stream in streams for b in stream]
    out = pa.Table.from_batches(batches, schema=table.schema)
    assert _key_words(out) == _key_words(_datafusion_sorted(table))
    assert sorted(out.column("id").to_pylist()) == list(range(5000))
    in_one_piece = fits and lanes == 1
    assert (stats.runs, stats.spilled_bytes) == (0, 0) if in_one_piece else stats.runs > 8
    if in_one_piece:  # batches of the limits' size, each in buffers of its own, freed once handed on
        assert [b.num_rows for b in batches] == [1000] * 5
        assert len({b.column(0).buffers()[1].address for b in batches}) == len(batches)
    assert not (tmp_path / "sort-runs").exists()


@pytest.mark.parametrize("told", [True, False], ids=["told-its-rows", "not-told"])
def test_a_sort_told_more_rows_than_one_piece_holds_sorts_its_runs_as_it_reads(
    tmp_path: Path, told: bool
) -> None:
    """Not told how many rows come, a sort holds its input's start until it knows whether all of it fits one
    piece; told more than that, it sorts its first run as soon as it is read (the start is not held beside
    the runs being sorted). Either way the rows come out in DataFusion's order."""
    table = _rows(5000)
    batches = table.to_batches(max_chunksize=300)  # each more than a run of 8 KiB
    pulled: list[int] = []
    pulled_at_first_run: list[int] = []

    def read():
        for batch in batches:
            pulled.append(batch.num_rows)
            yield batch

    def prepare(run: list[pa.RecordBatch]) -> pa.Table:
        pulled_at_first_run.append(len(pulled))
        return pa.Table.from_batches(run)

    whole_bytes = sum(b.nbytes for b in batches) // 2
    with sorted_lanes(
        read(),
        ORDER,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)),
        str(tmp_path),
        prepare=prepare,
        finish=lambda rows: rows,
        plan=MergePlan(run_bytes=8 << 10, fan_in=64, whole_bytes=whole_bytes),
        expected_rows=table.num_rows if told else 0,
    ) as streams:
        out = pa.Table.from_batches([b for stream in streams for b in stream], schema=table.schema)
    assert _key_words(out) == _key_words(_datafusion_sorted(table))
    held = next(i for i in range(len(batches)) if sum(b.nbytes for b in batches[: i + 1]) >= whole_bytes) + 1
    assert pulled_at_first_run[0] <= 3 if told else pulled_at_first_run[0] >= held > 3


def test_a_failure_sorting_the_first_run_fails_the_runs_waiting_for_its_splitters(tmp_path: Path) -> None:
    """The later runs wait for the splitters the first run gives: its error reaches the caller, nothing
    hangs, nothing is left in the spill directory."""
    calls = []

    def prepare(batches):
        calls.append(len(batches))
        if len(calls) == 1:
            raise RuntimeError("first run broken")
        return pa.Table.from_batches(batches)

    with pytest.raises(RuntimeError, match="first run broken"):
        _sorted_in_lanes(
            _batches(_rows(5000)), ORDER, tmp_path, MergePlan(run_bytes=8 << 10, fan_in=4), prepare=prepare
        )
    assert not (tmp_path / "sort-runs").exists()


@pytest.mark.parametrize("lanes", [2, 3])
def test_float_decimal_and_string_keys_split_into_lanes_in_order(tmp_path: Path, lanes: int) -> None:
    """Keys compared by their images (floats by total order, decimals by limbs, strings by bytes) are cut
    where DataFusion orders them."""
    import decimal

    rng = np.random.default_rng(9)
    count = 4000
    table = pa.table(
        {
            "d": pa.array(
                [decimal.Decimal(int(v)) for v in rng.integers(-(2**40), 2**40, count)], pa.decimal128(38, 0)
            ),
            "s": pa.array(["é" * int(v % 3) + f"{v:05d}" for v in rng.integers(0, 30, count)]),
            "f": pa.array(rng.choice([-0.0, 0.0, np.nan, -np.inf, 1.0], count), pa.float64()),
            "id": pa.array(range(count), pa.int64()),
        }
    )
    order: list[SortColumn] = [("s", False, True), ("f", True, True), ("d", True, False)]
    out = _lane_tables(
        _sorted_in_lanes(
            _batches(table), order, tmp_path, MergePlan(run_bytes=16 << 10, fan_in=64), lanes=lanes
        ),
        table.schema,
    )
    assert 2 <= len(out) <= lanes
    keys = [col(name).sort(ascending=asc, nulls_first=nulls) for name, asc, nulls in order]
    expected = SessionContext().from_arrow(table).sort(*keys).to_arrow_table()
    joined = pa.concat_tables(out)
    for name in ("s", "d"):
        assert joined.column(name).to_pylist() == expected.column(name).to_pylist()
    bits = [joined.column("f").to_numpy().view(np.int64), expected.column("f").to_numpy().view(np.int64)]
    assert (np.isnan(joined.column("f").to_numpy()) == np.isnan(expected.column("f").to_numpy())).all()
    assert ((bits[0] == bits[1]) | np.isnan(joined.column("f").to_numpy())).all()
    assert sorted(joined.column("id").to_pylist()) == list(range(count))


@pytest.mark.parametrize(("fan_in", "passes"), [(64, False), (4, True)])
def test_stats_count_the_runs_and_the_passes_that_merge_again(
    tmp_path: Path, fan_in: int, passes: bool
) -> None:
    """Runs over the fan-in are merged again (by DataFusion) before the last merge, just enough of them: the
    stats say how many passes and bytes; within the fan-in there are none."""
    table = _rows(5000)
    out, stats = _one_lane_with_stats(table, ORDER, tmp_path, fan_in)
    assert _key_words(out) == _key_words(_datafusion_sorted(table))
    assert stats.runs > 8
    assert stats.lanes == 1
    assert stats.spilled_bytes > 0
    assert (stats.merge_passes > 0) == passes
    assert (stats.remerged_bytes > 0) == passes
    assert stats.ranges_in_memory + stats.ranges_by_datafusion == 1  # one range (which way: the keys')
    if passes:  # just enough runs merged again each time, not all of them
        assert stats.remerged_bytes < stats.spilled_bytes * stats.merge_passes


def _one_lane_with_stats(
    table: pa.Table,
    order: list[SortColumn],
    spill_dir: Path,
    fan_in: int,
    *,
    expected_rows: int = 0,
    run_bytes: int = 8 << 10,
) -> tuple[pa.Table, SortStats]:
    """``table`` sorted in one lane, in runs of ``run_bytes`` merged ``fan_in`` at a time, and the sort's
    stats."""
    stats = SortStats()
    with sorted_lanes(
        _batches(table),
        order,
        ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill_dir)),
        str(spill_dir),
        prepare=pa.Table.from_batches,
        finish=lambda rows: rows,
        plan=MergePlan(run_bytes=run_bytes, fan_in=fan_in),
        stats=stats,
        expected_rows=expected_rows,
    ) as streams:
        out = pa.Table.from_batches([b for stream in streams for b in stream], schema=table.schema)
    return out, stats


def _spread_keys(count: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-(1 << 40), 1 << 40, count)
    return pa.table({"k": pa.array(keys, pa.int64()), "id": pa.array(np.arange(count), pa.int64())})


@pytest.mark.parametrize(("fan_in", "passes"), [(64, False), (4, True)])
def test_passes_over_the_fan_in_merge_in_memory_where_the_range_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_in: int, passes: bool
) -> None:
    """Runs over the fan-in are merged again first, in memory where their fine key ranges fit a group
    (spread keys), by DataFusion where they do not (a key too common for memory). Freed memory is handed
    back after the runs, and after the passes before the last merge."""
    releases: list[bool] = []
    release = merge_sort.release_memory

    def counted() -> None:
        releases.append(True)
        release()

    monkeypatch.setattr(merge_sort, "release_memory", counted)
    table = _spread_keys(6000, seed=11)
    out, stats = _one_lane_with_stats(table, [("k", True, False)], tmp_path, fan_in)
    assert out.column("k").to_pylist() == sorted(table.column("k").to_pylist())
    assert sorted(out.column("id").to_pylist()) == list(range(6000))
    assert (stats.ranges_in_memory, stats.ranges_by_datafusion) == (1, 0)
    assert (stats.merge_passes > 0) == passes
    assert stats.memory_passes == stats.merge_passes
    assert len(releases) == (2 if passes else 1)  # after the runs, and after the range's passes

    rng = np.random.default_rng(5)
    keys = np.concatenate([rng.integers(-50_000, 50_000, 4000), np.full(4000, 7)])
    table = pa.table({"k": pa.array(rng.permutation(keys), pa.int64()), "id": pa.array(np.arange(len(keys)))})
    out, stats = _one_lane_with_stats(table, [("k", True, False)], tmp_path / "common", fan_in)
    assert out.column("k").to_pylist() == sorted(keys.tolist())
    assert (stats.ranges_in_memory, stats.ranges_by_datafusion) == (0, 1)
    assert (stats.merge_passes > 0) == passes
    assert stats.memory_passes == 0


@pytest.mark.parametrize(("expected_rows", "in_memory"), [(0, False), (100_000, True)])
def test_a_sort_told_its_rows_cuts_fine_ranges_small_enough_for_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expected_rows: int, in_memory: bool
) -> None:
    """Fine key ranges are cut from the first run, a fixed count to a key range unless the sort is told how
    many rows come: then as many as keep each about half a group, so that a sort of many runs still merges
    in memory (told nothing, its fine ranges outgrow the groups and DataFusion merges)."""
    monkeypatch.setattr(merge_sort, "_FINE_PER_RANGE", 16)  # as 256 is to a sort 16 times the size
    table = _spread_keys(100_000, seed=12)
    out, stats = _one_lane_with_stats(
        table,
        [("k", True, False)],
        tmp_path,
        512,
        expected_rows=expected_rows,
        run_bytes=64 << 10,
    )
    assert out.column("k").to_pylist() == sorted(table.column("k").to_pylist())
    assert sorted(out.column("id").to_pylist()) == list(range(100_000))
    assert stats.runs > 20
    assert stats.merge_passes == 0
    assert (stats.ranges_in_memory, stats.ranges_by_datafusion) == ((1, 0) if in_memory else (0, 1))


def _lanes_with_stats(
    table: pa.Table, order: list[SortColumn], spill_dir: Path, lanes: int = 2
) -> tuple[list[pa.Table], SortStats]:
    from concurrent.futures import ThreadPoolExecutor

    stats = SortStats()
    with (
        sorted_lanes(
            _batches(table),
            order,
            ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(spill_dir)),
            str(spill_dir),
            prepare=pa.Table.from_batches,
            finish=lambda rows: rows,
            lanes=lanes,
            plan=MergePlan(run_bytes=16 << 10, fan_in=64),
            stats=stats,
        ) as streams,
        ThreadPoolExecutor(max_workers=max(1, len(streams))) as pool,
    ):
        lanes_rows: list[list[pa.RecordBatch]] = list(pool.map(list, streams))
    out = [pa.Table.from_batches(batches, schema=table.schema) for batches in lanes_rows]
    return out, stats


@pytest.mark.parametrize("lanes", [2, 3])
def test_a_first_run_unlike_the_rest_is_cut_again_from_every_run(tmp_path: Path, lanes: int) -> None:
    """Input whose first run holds only the smallest keys (files in the order of a correlated key): the
    first run's splitters would leave one lane with almost every row. The heavy range is cut again at
    splitters sampled from every run's piece of it, into fine key ranges too: the lanes get about equal
    rows, every range is merged in memory, their key ranges are disjoint and in order, no row is lost or
    repeated, nulls stay where the order puts them."""
    rng = np.random.default_rng(4)
    count = 8105  # runs of 900 rows: the last run's 5 rows are a piece too small to give a sample row
    # the whole first run (900 rows) below every other key
    keys = np.concatenate([np.sort(rng.integers(0, 50, 900)), rng.integers(50, 100_000, count - 900)])
    f = pa.array(rng.choice([1.5, -0.0, 0.0, np.nan], count), pa.float64(), mask=rng.random(count) < 0.05)
    table = pa.table(
        {
            "k": pa.array(keys, pa.int64(), mask=np.arange(count) % 97 == 5),
            "f": f,
            "id": pa.array(np.arange(count), pa.int64()),
        }
    )
    order: list[SortColumn] = [("k", True, False), ("f", False, True)]
    out, stats = _lanes_with_stats(table, order, tmp_path / "spill", lanes)
    assert stats.recut_bytes > 0
    assert stats.ranges_by_datafusion == 0  # the ranges cut again keep fine key ranges: merged in memory
    assert len(out) == lanes
    sizes = [lane.num_rows for lane in out]
    assert max(sizes) < 1.35 * count / lanes, sizes
    joined = pa.concat_tables(out)
    assert sorted(joined.column("id").to_pylist()) == list(range(count))
    expected = (
        SessionContext()
        .from_arrow(table)
        .sort(
            col("k").sort(ascending=True, nulls_first=False), col("f").sort(ascending=False, nulls_first=True)
        )
        .to_arrow_table()
    )
    assert joined.column("k").to_pylist() == expected.column("k").to_pylist()
    assert joined.column("k").null_count == table.column("k").null_count
    assert joined.column("k").to_pylist()[-1] is None  # NULLS LAST, in the last lane
    bits = [
        joined.column("f").to_numpy(zero_copy_only=False),
        expected.column("f").to_numpy(zero_copy_only=False),
    ]
    assert ((bits[0] == bits[1]) | (np.isnan(bits[0]) & np.isnan(bits[1]))).all()
    for before, after in itertools.pairwise(out):  # disjoint and in order: the lanes meet at most at equals
        last, first = before.column("k")[-1].as_py(), after.column("k")[0].as_py()
        assert first is None or (last is not None and last <= first)
    assert not (tmp_path / "spill" / "sort-runs").exists()


def test_a_representative_first_run_cuts_nothing_again(tmp_path: Path) -> None:
    """Shuffled input of many distinct keys: the first run's splitter deals the lanes evenly, no range is
    cut again."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 1 << 40, 8000)
    table = pa.table({"k": pa.array(keys, pa.int64()), "id": pa.array(np.arange(8000), pa.int64())})
    out, stats = _lanes_with_stats(table, [("k", False, True)], tmp_path)
    assert stats.recut_bytes == 0
    assert stats.lanes == 2
    assert pa.concat_tables(out).column("k").to_pylist() == sorted(keys.tolist(), reverse=True)


def _mixed_keys(count: int, seed: int) -> pa.Table:
    """Key columns of every type the NumPy sort takes, few distinct values (many ties), nulls, extremes."""
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray:
        return rng.random(count) < 0.15

    small = rng.integers(-3, 3, count)
    return pa.table(
        {
            "i64": pa.array(rng.choice([-(2**63), -1, 0, 5, 2**63 - 1], count), pa.int64(), mask=nulls()),
            "u64": pa.array(rng.choice(np.array([0, 1, 2**63, 2**64 - 1], np.uint64), count), pa.uint64()),
            "i8": pa.array(small, pa.int8(), mask=nulls()),
            "u16": pa.array(rng.integers(0, 3, count), pa.uint16()),
            "f": pa.array(
                rng.choice([np.nan, -np.nan, -0.0, 0.0, np.inf, -1.5], count), pa.float64(), mask=nulls()
            ),
            "f32": pa.array(rng.choice([np.nan, -0.0, 0.0, 2.5], count), pa.float32()),
            "dec": pa.array(
                [
                    None if n else decimal.Decimal(int(v) * (2**64 - 1))
                    for n, v in zip(nulls(), small, strict=True)
                ],
                pa.decimal128(38, 0),
            ),
            "d": pa.array(rng.integers(0, 3, count).astype("datetime64[D]"), pa.date32(), mask=nulls()),
            "ts": pa.array(rng.integers(0, 3, count).astype("datetime64[us]"), pa.timestamp("us", "UTC")),
            "t": pa.array(rng.integers(0, 3, count) * 1_000_000, pa.time64("us"), mask=nulls()),
            "dur": pa.array(rng.integers(-2, 2, count), pa.duration("ms")),
            "id": pa.array(np.arange(count), pa.int64()),
        }
    )


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "in-turn"])
@pytest.mark.parametrize(("seed", "count"), [*((seed, 5000) for seed in range(6)), (6, 30_000), (7, 30_000)])
def test_the_numpy_sort_orders_rows_as_pyarrow_and_datafusion_do(
    seed: int, count: int, packed: bool, monkeypatch
) -> None:
    """Orders of two to four keys drawn from every integer, floating-point, decimal and temporal type,
    ascending or descending, nulls first or last, over rows with many ties: the NumPy sort's keys come
    out as PyArrow's stable sort's and as DataFusion's, and splitters after the rows equal to them, with
    the keys packed into one number where they fit or sorted by in turn. At 30,000 rows the groups of ties
    are sorted by radix too (:func:`.merge_sort._radix_order`)."""
    if not packed:
        monkeypatch.setattr(merge_sort, "_packed", lambda *args: None)
    rng = np.random.default_rng(100 + seed)
    table = _mixed_keys(count, seed)
    names = [name for name in table.column_names if name != "id"]
    order: list[SortColumn] = [
        (str(name), bool(rng.integers(2)), bool(rng.integers(2)))
        for name in rng.choice(names, int(rng.integers(2, 5)), replace=False)
    ]
    keys = [name for name, _asc, _nulls in order]
    splitters = table.select(keys).take([7, 19, 19, 300]).combine_chunks()

    numpy_sorted = []
    numpy_sort = merge_sort._numpy_sort_indices

    def spied(*args):
        indices = numpy_sort(*args)
        numpy_sorted.append(indices is not None)
        return indices

    monkeypatch.setattr(merge_sort, "_numpy_sort_indices", spied)
    fast = merge_sort._sort_indices([table, splitters], order)
    assert numpy_sorted == [True]  # every type here is one NumPy sorts
    monkeypatch.setattr(merge_sort, "_numpy_sort_indices", lambda *args: None)
    stable = merge_sort._sort_indices([table, splitters], order)
    monkeypatch.undo()

    rows = pa.concat_tables([table.select(keys), splitters])
    assert sorted(fast.to_pylist()) == list(range(rows.num_rows))
    assert _key_rows(rows.take(fast)) == _key_rows(rows.take(stable))
    expected = (
        SessionContext()
        .from_arrow(table.select(keys))
        .sort(*(col(name).sort(ascending=asc, nulls_first=first) for name, asc, first in order))
        .to_arrow_table()
    )
    rows_only = np.asarray(fast.to_pylist())
    assert _key_rows(table.select(keys).take(pa.array(rows_only[rows_only < table.num_rows]))) == _key_rows(
        expected
    )
    # a splitter comes after every row equal to it: where the stable sort puts it
    marks = [i for i, v in enumerate(fast.to_pylist()) if v >= table.num_rows]
    assert marks == [i for i, v in enumerate(stable.to_pylist()) if v >= table.num_rows]


def _key_rows(table: pa.Table) -> list[tuple]:
    """Each row's key values, floats as their bits (NaN and -0.0 compare as DataFusion orders them)."""
    columns = []
    for column in table.columns:
        column = column.combine_chunks()
        if pa.types.is_floating(column.type):
            bits = column.cast(pa.float64()).to_numpy(zero_copy_only=False).view(np.int64).tolist()
            columns.append(
                [None if n else b for n, b in zip(column.is_null().to_pylist(), bits, strict=True)]
            )
        else:
            columns.append(column.to_pylist())
    return list(zip(*columns, strict=True))


_INTEGER_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", _INTEGER_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("spread", ["full", "narrow", "one-value"])
@pytest.mark.parametrize("nulls", ["none", "some", "all"])
@pytest.mark.parametrize("nulls_first", [False, True], ids=["nulls-last", "nulls-first"])
def test_the_radix_sort_is_a_stable_sort(dtype, spread: str, nulls: str, nulls_first: bool) -> None:
    """Every integer width, signed or not, over its whole range, a narrow one straddling zero (one or two
    16-bit digits) and one value, with nulls first or last: the radix order is the stable sort's, rows
    equal on their value (and every null) in their input order; a 64-bit whole range with nulls leaves no
    slot for them (None, and the caller sorts otherwise)."""
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    count = 9000
    if spread == "full":
        values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        values[:2] = [info.min, info.max]
    elif spread == "narrow":
        low = max(int(info.min), -70_000)
        values = rng.integers(low, min(int(info.max), low + 140_000), count).astype(dtype)
    else:
        values = np.full(count, info.max // 3, dtype=dtype)
    missing = {"none": None, "some": rng.random(count) < 0.2, "all": np.ones(count, np.bool_)}[nulls]
    if missing is not None and nulls == "some":
        missing[:2] = False  # the extremes stay values

    order = merge_sort._radix_order(values, missing, nulls_first)

    if nulls == "some" and spread == "full" and np.dtype(dtype).itemsize == 8:
        assert order is None
        return
    null_rank = np.ones(count, np.int8) if missing is None else np.where(missing, 0 if nulls_first else 2, 1)
    # stable: ties (equal values, every null) by input position
    sort_values = np.where(missing, 0, values) if missing is not None else values
    expected = sorted(
        range(count), key=lambda i: (null_rank[i], int(sort_values[i]) if null_rank[i] == 1 else 0, i)
    )
    assert order is not None
    assert order.tolist() == expected


@pytest.mark.parametrize("count", [500, 9000], ids=["argsort", "radix"])
@pytest.mark.parametrize("top", ["few-values", "whole-range"])
@pytest.mark.parametrize("nulls_first", [None, False, True], ids=["no-nulls", "nulls-last", "nulls-first"])
def test_a_key_of_limbs_sorts_as_its_limbs_compare(count: int, top: str, nulls_first: bool | None) -> None:
    """A key of two images (a decimal's limbs: a signed top, an unsigned bottom), its top of few values
    (a z-order's) or over its whole range, with or without nulls: sorted from the bottom limb, the rows
    come out as the limbs compare, top first, nulls first or last."""
    rng = np.random.default_rng(21)
    if top == "few-values":
        high = rng.integers(-20, 20, count).astype(np.int64)
    else:
        high = rng.integers(-(2**63), 2**63 - 1, count, dtype=np.int64, endpoint=True)
    low = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True)
    low[::7] = low[0]  # ties on both limbs too
    high[::7] = high[0]
    nulls = None if nulls_first is None else rng.random(count) < 0.1

    order = merge_sort._key_order((high, low), nulls, bool(nulls_first))

    null_rank = [1] * count if nulls is None else [(0 if nulls_first else 2) if n else 1 for n in nulls]
    expected = sorted(
        range(count),
        key=lambda i: (null_rank[i], (int(high[i]), int(low[i])) if null_rank[i] == 1 else (0, 0)),
    )
    assert sorted(order.tolist()) == list(range(count))
    got = [(null_rank[i], (int(high[i]), int(low[i])) if null_rank[i] == 1 else (0, 0)) for i in order]
    assert got == [
        (null_rank[i], (int(high[i]), int(low[i])) if null_rank[i] == 1 else (0, 0)) for i in expected
    ]


@pytest.mark.parametrize(
    ("top", "parts"),
    [("two-clusters", 2), ("wide-top", 2), ("narrow-top", 1), ("one-value", 1), ("whole-range", 1)],
)
@pytest.mark.parametrize("ascending", [True, False])
def test_a_two_limb_key_split_in_two_sorts_as_its_limbs_compare(
    top: str, parts: int, ascending: bool
) -> None:
    """A decimal key without nulls whose top limb spans more than one radix pass but few bits once the bits
    every row shares are out (a z-order's: the rows with a null in two clusters far apart) is sorted as two
    64-bit keys in turn; one whose top limb spans one pass or the whole range limb by limb. Either way the
    rows come out as the limbs compare, a second table's rows after their equals (a run's splitters)."""
    rng = np.random.default_rng(31)
    count, second = 9000, 500
    if top == "two-clusters":
        high = rng.integers(0, 1 << 20, count).astype(np.int64) | np.int64(1 << 62)
        high[rng.random(count) < 0.1] = np.int64(-(1 << 62))
    elif top == "wide-top":
        high = rng.integers(-(1 << 20), 1 << 20, count).astype(np.int64)
    elif top == "narrow-top":
        high = rng.integers(-3, 3, count).astype(np.int64)
    elif top == "one-value":
        high = np.full(count, 12345, dtype=np.int64)
    else:
        high = rng.integers(-(2**63), 2**63 - 1, count, dtype=np.int64, endpoint=True)
    low = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True)
    low[::7], high[::7] = low[0], high[0]  # ties on both limbs
    low[1::11] = low[1] ^ rng.integers(0, 8, len(low[1::11])).astype(np.uint64)  # on all but the lowest bits
    high[1::11] = high[1]
    flipped = np.arange(3, 3 + 64 * 5, 5)  # on the top limb, and on all but one bit of the low limb, each
    high[flipped] = high[3]
    low[flipped] = low[3] ^ (np.uint64(1) << np.arange(64, dtype=np.uint64))
    column = pa.Array.from_buffers(
        pa.decimal128(38, 0), count, [None, pa.py_buffer(np.stack([low, high.view(np.uint64)], axis=1))]
    )
    images = tuple(v if ascending else ~v for v in (high, low))
    split = merge_sort._split_limbs(merge_sort._Key(images, None, False))
    assert len(split) == parts

    order = merge_sort._numpy_sort_indices([column], [("d", ascending, False)], [count - second, second])

    def key(i: int) -> tuple[int, int]:
        value = (int(high[i]) << 64) + int(low[i])
        return (value if ascending else -value, i >= count - second)

    assert sorted(order.tolist()) == list(range(count))
    assert [key(i) for i in order] == sorted(key(i) for i in range(count))


def test_more_tied_groups_than_a_radix_sort_numbers_are_sorted_too(monkeypatch) -> None:
    """Over 65,536 groups of rows tied on the first key, sorted by the keys in turn: the stable sort by
    group takes two 16-bit radix passes; the rows come out as PyArrow sorts them."""
    monkeypatch.setattr(merge_sort, "_packed", lambda *args: None)
    rng = np.random.default_rng(8)
    first = np.repeat(np.arange(70_000), 2)
    table = pa.table(
        {"a": pa.array(rng.permutation(first), pa.int64()), "b": pa.array(rng.integers(0, 9, 140_000))}
    )
    order: list[SortColumn] = [("a", False, False), ("b", True, False)]
    out = table.take(merge_sort._sort_indices([table], order))
    assert out.equals(table.sort_by([("a", "descending"), ("b", "ascending")]))


def test_ranges_of_about_equal_bytes_are_dealt_evenly() -> None:
    """Key ranges within 2 % of each other: every lane gets the same number of them (a lane whose ranges
    fell a hair short of its share used to take one more: five ranges and three, 62 % of a z-order's
    rows on one lane and the other idle for the last part of the merge)."""
    rng = np.random.default_rng(6)
    for _ in range(50):
        sizes = (1000 * (1 + rng.uniform(-0.02, 0.02, 8))).astype(int).tolist()
        assert [len(group) for group in merge_sort._even_groups(sizes, 2)] == [4, 4], sizes
        assert [len(group) for group in merge_sort._even_groups(sizes, 4)] == [2, 2, 2, 2], sizes


def _python_key(keys: list[merge_sort._Key], row: int) -> tuple:
    """Row ``row``'s sort key by Python's own comparison: per key its null rank, then its images."""
    key: list[object] = []
    for k in keys:
        null = k.nulls is not None and bool(k.nulls[row])
        key.append((0 if null else 1) if k.nulls_first else (1 if null else 0))
        key.extend(0 if null else int(image[row]) for image in k.images)
    return tuple(key)


@pytest.mark.parametrize("seed", range(16))
def test_packed_keys_sort_as_the_keys_in_turn(seed: int) -> None:
    """One to three keys of every integer width, signed or not, their values a few bits wide anywhere in
    the type's range (at its ends too), with nulls first or last or none, some of two images (a decimal's
    limbs): the order of the packed number is Python's sort of the keys, and the keys sorted in turn."""
    rng = np.random.default_rng(300 + seed)
    rows = 6000
    keys = []
    for _ in range(int(rng.integers(1, 4))):
        images = []
        for _limb in range(int(rng.integers(1, 3))):
            dtype = np.dtype(rng.choice(_INTEGER_TYPES))
            info = np.iinfo(dtype)
            spread = 1 << int(rng.integers(0, min(12, dtype.itemsize * 8 - 1)))
            low = int(rng.choice([info.min, info.max - spread + 1, 0, -spread // 2]))
            low = max(int(info.min), min(low, int(info.max) - spread + 1))
            offsets = rng.integers(0, spread, rows).tolist()
            images.append(np.array([low + offset for offset in offsets], dtype))
        nulls = None if rng.integers(3) == 0 else rng.random(rows) < 0.1
        keys.append(merge_sort._Key(tuple(images), nulls, bool(rng.integers(2))))
    packed = merge_sort._packed(keys, rows)
    assert packed is not None  # a few bits a key, on 6,000 rows: most rows tie on the first
    order = merge_sort._stable_order(packed, None, False)
    expected = sorted(range(rows), key=lambda row: _python_key(keys, row))
    assert [_python_key(keys, row) for row in order] == [_python_key(keys, row) for row in expected]
    in_turn = merge_sort._refined(keys, rows)
    assert [_python_key(keys, row) for row in in_turn] == [_python_key(keys, row) for row in expected]
