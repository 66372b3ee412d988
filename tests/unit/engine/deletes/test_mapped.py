"""engine/deletes/mapped.py: equality delete rows mapped from disk in key-hash order delete exactly the rows
the in-memory :class:`DeleteKeys` deletes (same key null-safely, higher sequence number, same partition
unless global), however many hash ranges they were sorted in, whatever the hashes say."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import mmap
import os
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_iceberg_exec.engine.deletes import mapped as mapped_module
from airflow_provider_iceberg_exec.engine.deletes.keysets import DeleteKeys, HashSet, key_hashes
from airflow_provider_iceberg_exec.engine.deletes.mapped import (
    MappedDeleteKeys,
    MappedHashSet,
    map_delete_keys,
    mapped_bitmap_bytes,
    mapped_bytes,
    remove_mapped,
    sorted_hash_set,
)

SEQ, PART = "seq", "part"


def _map(
    directory: str,
    columns: list[pa.Array],
    seqs: list[int],
    parts: list[int],
    *,
    is_global: bool,
    bucket_bytes: int = 1,
    batch_rows: int = 7,
    hold_hashes: bool = True,
) -> MappedDeleteKeys | None:
    """The delete rows in batches of ``batch_rows``; ``bucket_bytes=1``: as many hash ranges as rows."""
    names = [f"k{i}" for i in range(len(columns))]
    table = pa.table(
        [*columns, pa.array(seqs, pa.int64()), pa.array(parts, pa.int32())], names=[*names, SEQ, PART]
    )
    return map_delete_keys(
        table.to_batches(max_chunksize=batch_rows),
        names,
        rows=table.num_rows,
        row_bytes=table.nbytes / max(1, table.num_rows),
        is_global=is_global,
        directory=directory,
        bucket_bytes=bucket_bytes,
        seq_column=SEQ,
        part_column=PART,
        hold_hashes=hold_hashes,
    )


def _deleted(
    keys: MappedDeleteKeys | DeleteKeys,
    columns: list[pa.Array],
    seqs: list[int],
    parts: list[int],
    hashes: np.ndarray | None = None,
) -> list[bool]:
    deleted: list[bool] = keys.deleted(
        columns,
        key_hashes(columns) if hashes is None else hashes,
        np.array(seqs, dtype=np.int64),
        np.array(parts, dtype=np.int32),
    ).tolist()
    return deleted


def test_no_delete_rows_map_to_nothing(tmp_path: Path) -> None:
    assert _map(str(tmp_path / "m"), [pa.array([], pa.string())], [], [], is_global=True) is None


def test_keys_spread_over_many_ranges_are_found_in_hash_order(tmp_path: Path) -> None:
    """Thousands of keys in about 256 hash ranges: each range a chunk of the mapped file, the hashes in
    ascending order, every delete key found and no other."""
    keys = [f"key-{i:06d}" for i in range(0, 6000, 2)]
    held = _map(str(tmp_path / "m"), [pa.array(keys)], [5] * len(keys), [0] * len(keys), is_global=True)
    assert held is not None
    try:
        assert len(held) == len(keys)
        assert len(held._chunks) > 100
        assert (np.diff(held.hashes.sorted.astype(np.int64)) >= 0).all()
        probe = [f"key-{i:06d}" for i in range(6000)]
        got = _deleted(held, [pa.array(probe)], [1] * len(probe), [0] * len(probe))
        assert got == [i % 2 == 0 for i in range(6000)]
    finally:
        held.close()


def test_null_keys_match_null_keys_only_and_deletes_apply_to_older_rows(tmp_path: Path) -> None:
    held = _map(str(tmp_path / "m"), [pa.array(["a", None])], [5, 5], [0, 0], is_global=True)
    assert held is not None
    data = [pa.array(["a", None, "a", "b", None])]
    assert _deleted(held, data, [4, 4, 5, 4, 6], [0, 0, 0, 0, 0]) == [True, True, False, False, False]
    held.close()


def test_duplicate_keys_keep_their_highest_sequence_number_and_partitions_apart(tmp_path: Path) -> None:
    held = _map(
        str(tmp_path / "m"),
        [pa.array(["a", "a", "a", "b", "b"])],
        [3, 8, 5, 2, 9],
        [0, 0, 0, 1, 2],
        is_global=False,
    )
    assert held is not None
    assert len(held) == 3  # "a" once, "b" in each of its partitions
    data = [pa.array(["a", "a", "b", "b", "b"])]
    assert _deleted(held, data, [7, 8, 1, 1, 9], [0, 0, 1, 2, 2]) == [True, False, True, True, False]
    held.close()


def test_a_hash_collision_never_deletes_a_row(tmp_path: Path) -> None:
    held = _map(str(tmp_path / "m"), [pa.array(["a", "b", "c"])], [2, 2, 2], [0, 0, 0], is_global=True)
    assert held is not None
    same = np.repeat(held.hashes.sorted[:1], 5)  # every probe row given a hash the mapped rows have
    data = [pa.array(["b", "z", "c", "a", "y"])]
    got = _deleted(held, data, [1] * 5, [0] * 5, hashes=same)
    expected = [
        key in {"a", "b", "c"} and key_hashes([pa.array([key])])[0] == same[0] for key in data[0].to_pylist()
    ]
    assert got == expected
    held.close()


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1, None, 2**40, -3], pa.int64()),
        pa.array([1, None, 7, -3], pa.int32()),
        pa.array([b"\x00", None, b"xy", b""], pa.binary()),
        pa.array(
            [decimal.Decimal("1.20"), None, decimal.Decimal("-4.00"), decimal.Decimal(0)], pa.decimal128(9, 2)
        ),
        pa.array([datetime.date(2020, 1, 1), None, datetime.date(1970, 1, 1), datetime.date(2999, 12, 31)]),
        pa.array([uuid.UUID(int=i).bytes if i else None for i in range(4)], pa.uuid()),
        pa.array(
            [datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), None] * 2, pa.timestamp("us", tz="UTC")
        ),
    ],
    ids=["long", "int", "binary", "decimal", "date", "uuid", "timestamptz"],
)
def test_keys_of_several_types_match_as_in_memory(tmp_path: Path, column: pa.Array) -> None:
    seqs, parts = [3, 3, 3, 1], [0, 0, 0, 0]
    held = _map(str(tmp_path / "m"), [column], seqs, parts, is_global=True)
    in_memory = DeleteKeys(
        [column], key_hashes([column]), np.array(seqs), np.array(parts, np.int32), is_global=True
    )
    assert held is not None
    probe = pa.concat_arrays([column, column.slice(0, 2)])
    data_seqs, data_parts = [2] * len(probe), [0] * len(probe)
    assert _deleted(held, [probe], data_seqs, data_parts) == _deleted(
        in_memory, [probe], data_seqs, data_parts
    )
    held.close()


def test_a_probe_over_the_candidate_cap_is_matched_in_halves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MappedDeleteKeys, "MAX_CANDIDATES", 3)
    keys = [f"k{i % 4}" for i in range(40)]
    held = _map(str(tmp_path / "m"), [pa.array(keys)], [2] * 40, list(range(40)), is_global=False)
    assert held is not None
    probe = ["k1", "k2", "zz", "k1", "k0", "k3"] * 3
    parts = list(range(len(probe)))
    expected = [key in keys and keys[part] == key for key, part in zip(probe, parts, strict=True)]
    assert _deleted(held, [pa.array(probe)], [1] * len(probe), parts) == expected
    held.close()


def test_memory_is_the_hashes_and_the_mapped_pages_are_dropped(tmp_path: Path) -> None:
    """What stays in memory is 4 bytes a row and the bitmap; the rows themselves are in files under the
    directory, whose pages a probe leaves unmapped."""
    directory = str(tmp_path / "m")
    keys = [f"{i:090d}" for i in range(20_000)]
    held = _map(
        directory, [pa.array(keys)], [2] * len(keys), [0] * len(keys), is_global=True, bucket_bytes=1 << 16
    )
    assert held is not None
    assert mapped_bytes(len(held)) == 4 * len(held) + held.hashes.BITMAP_BYTES
    assert os.path.getsize(os.path.join(directory, "keys.arrow")) > 90 * len(keys)
    assert _deleted(held, [pa.array(keys[::7])], [1] * len(keys[::7]), [0] * len(keys[::7])) == [True] * len(
        keys[::7]
    )
    held.close()
    remove_mapped(directory)
    assert not os.path.exists(directory)


@pytest.mark.parametrize("hold_hashes", [True, False])
def test_staged_ranges_are_removed_once_mapped(tmp_path: Path, hold_hashes: bool) -> None:
    directory = tmp_path / "m"
    held = _map(
        str(directory),
        [pa.array(["a", "b", "c"])],
        [1, 1, 1],
        [0, 0, 0],
        is_global=True,
        hold_hashes=hold_hashes,
    )
    assert held is not None
    hashes = [] if hold_hashes else ["hashes.bin"]
    assert sorted(os.listdir(directory)) == sorted(["keys.arrow", "rows.bin", *hashes])
    held.close()


def _mapped_hashes(
    path: Path, hashes: np.ndarray, bitmap_bytes: int = HashSet.BITMAP_BYTES
) -> tuple[MappedHashSet, list[tuple[int, int]], mmap.mmap, int]:
    """``hashes`` (sorted) written to ``path``, mapped and open; the spans the set drops, as it drops them."""
    hashes.astype(np.uint32).tofile(path)
    fd = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    dropped: list[tuple[int, int]] = []

    def drop(span: tuple[int, int]) -> None:
        dropped.append(span)
        mapped.madvise(mmap.MADV_DONTNEED, span[0], span[1] - span[0])

    return MappedHashSet(mapped, drop, fd, bitmap_bytes=bitmap_bytes), dropped, mapped, fd


@pytest.mark.parametrize("preadv", [True, False])
@pytest.mark.parametrize("bitmap_bytes", [1, HashSet.BITMAP_BYTES, 8 << 20])
@pytest.mark.parametrize(("fence", "region"), [(2, 4), (4, 4), (1024, 1 << 19)])
def test_mapped_hashes_answer_as_held_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fence: int, region: int, bitmap_bytes: int, preadv: bool
) -> None:
    """Repeated hashes (a run across fences and regions), the smallest and largest, values between and
    beyond them: where each starts, how many there are, and whether it is there, as in memory (with a
    bitmap of one byte, every probe is searched in the hashes on disk), read with ``preadv`` or, where
    the system has none, ``pread``."""
    monkeypatch.setattr(mapped_module, "_FENCE_VALUES", fence)
    monkeypatch.setattr(mapped_module, "_REGION_VALUES", region)
    if not preadv:
        monkeypatch.delattr(os, "preadv")
    rng = np.random.default_rng(3)
    ordered = np.sort(
        np.concatenate([rng.integers(5, 400, 300), np.full(9, 200), [0, 2**32 - 1]]).astype(np.uint32)
    )
    in_memory = HashSet(ordered, presorted=True)
    mapped, _dropped, handle, fd = _mapped_hashes(tmp_path / "hashes.bin", ordered, bitmap_bytes)
    probe = np.concatenate([ordered, ordered + 1, ordered - 1, rng.integers(0, 2**32, 500)]).astype(np.uint32)
    rng.shuffle(probe)
    assert len(mapped) == len(ordered)
    assert mapped.contains(probe).tolist() == in_memory.contains(probe).tolist()
    for asked in (probe, probe[mapped.contains(probe)]):  # all of them, and those found (kept by the lookup)
        low, count = mapped.bounds(asked)
        expected_low, expected_count = in_memory.bounds(asked)
        assert low.tolist() == expected_low.tolist()
        assert count.tolist() == expected_count.tolist()
    del mapped, in_memory
    handle.close()
    os.close(fd)


def _resident_kib(path: Path) -> int:
    """Kilobytes of the mapping of ``path`` resident in this process (/proc/self/smaps)."""
    resident, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                resident += int(line.split()[1])
    return resident


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
def test_a_lookup_reads_each_region_of_the_hashes_once_and_maps_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2M hashes (8 MB, four regions): after building the bitmap (a chunk's pages dropped as it is read)
    none of the mapping's pages stay in the process, and a lookup maps none: it reads each region it
    searches once, whole, into one buffer of its thread's (searched through the mapping, each page was
    faulted in again after each drop), and none for the bounds of the hashes it found."""
    path = tmp_path / "hashes.bin"
    ordered = np.sort(np.random.default_rng(5).integers(0, 2**32, 2_000_000, dtype=np.uint64)).astype(
        np.uint32
    )
    mapped, dropped, handle, fd = _mapped_hashes(path, ordered)
    assert _resident_kib(path) == 0
    size = len(ordered) * 4
    chunk = HashSet._BUILD_CHUNK * 4  # the bitmap is built this many bytes of hashes at a time
    assert dropped == [*((start, min(size, start + chunk)) for start in range(0, size, chunk)), (0, size)]
    dropped.clear()
    region_bytes = mapped_module._REGION_VALUES * 4
    reads: list[tuple[int, int, int]] = []
    preadv = os.preadv

    def recorded(fd: int, buffers: list[memoryview], offset: int) -> int:
        reads.append((offset, len(buffers[0]), np.frombuffer(buffers[0], dtype=np.uint8).ctypes.data))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(mapped_module.os, "preadv", recorded)
    regions = [(r * region_bytes, min(size, (r + 1) * region_bytes) - r * region_bytes) for r in range(4)]
    # no region's first hash: its run would be looked for past its region too (in one fence span)
    probe = np.delete(ordered, np.arange(0, len(ordered), mapped_module._REGION_VALUES))[::3]
    in_memory = HashSet(ordered, presorted=True)
    for lookup, asked, read in [
        ("contains", probe, regions),
        ("bounds", probe, []),  # where the hashes the lookup found start and end: kept by the lookup
        ("bounds", probe + 1, regions),  # others: searched
    ]:
        reads.clear()
        answer = getattr(mapped, lookup)(asked)
        expected = getattr(in_memory, lookup)(asked)
        assert np.array_equal(np.stack(answer), np.stack(expected))
        assert [(offset, length) for offset, length, _ in reads] == read
        assert len({address for _, _, address in reads}) <= 1, "one buffer for the thread's regions"
        assert _resident_kib(path) == 0
    assert dropped == []
    del mapped
    handle.close()
    os.close(fd)


def test_mapped_hashes_take_their_bitmap_fences_and_a_region() -> None:
    assert mapped_bytes(10_000_000, hashes_held=False) == (4 << 20) + 4 * 9766 + (2 << 20)
    assert mapped_bytes(10_000_000, hashes_held=False, bitmap_bytes=8 << 20) == (8 << 20) + 4 * 9766 + (
        2 << 20
    )
    assert mapped_bytes(10_000_000) == 40_000_000 + (4 << 20)


@pytest.mark.parametrize(
    ("rows", "budget", "expected"),
    [
        (10_000_000, 16 << 20, 8 << 20),  # 16 MiB would pass the budget with the region and fences
        (10_000_000, 64 << 20, 16 << 20),  # 32 MiB would be over 16 bits a hash
        (10_000_000, 10 << 20, 4 << 20),  # the default fits, its double does not
        (2_000_000, 1 << 30, 4 << 20),  # few hashes: the default has more than 16 bits each
        (300_000_000, 1 << 30, 512 << 20),  # every 32-bit hash its own bit: no larger bitmap
    ],
)
def test_the_mapped_bitmap_grows_within_its_budget(rows: int, budget: int, expected: int) -> None:
    size = mapped_bitmap_bytes(rows, budget)
    assert size == expected
    assert size == HashSet.BITMAP_BYTES or mapped_bytes(rows, hashes_held=False, bitmap_bytes=size) <= budget


keys_strategy = st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=0, max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    delete_ids=keys_strategy,
    delete_names=st.lists(st.one_of(st.none(), st.sampled_from(["p", "q"])), min_size=30, max_size=30),
    data_ids=keys_strategy,
    seed=st.integers(0, 2**16),
    is_global=st.booleans(),
    bucket_bytes=st.sampled_from([1, 64, 1 << 20]),
    hold_hashes=st.booleans(),
)
def test_agrees_with_the_rule_row_by_row(
    tmp_path_factory: pytest.TempPathFactory,
    delete_ids: list[int | None],
    delete_names: list[str | None],
    data_ids: list[int | None],
    seed: int,
    is_global: bool,
    bucket_bytes: int,
    hold_hashes: bool,
) -> None:
    rng = np.random.default_rng(seed)
    d_names = delete_names[: len(delete_ids)]
    d_seqs = rng.integers(1, 5, len(delete_ids)).tolist()
    d_parts = rng.integers(0, 3, len(delete_ids)).tolist()
    names = rng.choice(np.array(["p", "q", None], dtype=object), len(data_ids)).tolist()
    seqs = rng.integers(0, 5, len(data_ids)).tolist()
    parts = rng.integers(0, 3, len(data_ids)).tolist()
    directory = str(tmp_path_factory.mktemp("mapped"))
    with (  # mapped hashes searched a region of two at a time
        mock.patch.object(mapped_module, "_FENCE_VALUES", 1),
        mock.patch.object(mapped_module, "_REGION_VALUES", 2),
    ):
        held = _map(
            directory,
            [pa.array(delete_ids, pa.int64()), pa.array(d_names, pa.string())],
            d_seqs,
            d_parts,
            is_global=is_global,
            bucket_bytes=bucket_bytes,
            hold_hashes=hold_hashes,
        )
    expected = [
        any(
            (delete_ids[j], d_names[j]) == (data_ids[i], names[i])
            and d_seqs[j] > seqs[i]
            and (is_global or d_parts[j] == parts[i])
            for j in range(len(delete_ids))
        )
        for i in range(len(data_ids))
    ]
    if held is None:
        assert not delete_ids
        return
    with (
        mock.patch.object(mapped_module, "_FENCE_VALUES", 1),
        mock.patch.object(mapped_module, "_REGION_VALUES", 2),
    ):
        got = _deleted(held, [pa.array(data_ids, pa.int64()), pa.array(names, pa.string())], seqs, parts)
    held.close()
    assert got == expected


def test_module_names_what_it_exports() -> None:
    assert set(mapped_module.__all__) == {
        "MappedDeleteKeys",
        "MappedHashSet",
        "map_delete_keys",
        "mapped_bitmap_bytes",
        "mapped_bytes",
        "remove_mapped",
        "sorted_hash_set",
    }


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
def test_a_probe_reads_its_candidates_from_the_files_not_through_the_mappings(tmp_path: Path) -> None:
    """The candidates' keys, sequence numbers and partition ids are read from the files: the probe faults in
    no page of the keys' or the rows' mapping (each such page held up to a folio, and dropping them
    stopped both cores), and still finds every key."""
    keys = [f"key-{i:06d}-" + "x" * (i % 50) for i in range(20_000)]
    directory = tmp_path / "m"
    held = _map(str(directory), [pa.array(keys)], [5] * len(keys), [0] * len(keys), is_global=True)
    assert held is not None
    before = {name: _resident_kib(directory / name) for name in ("keys.arrow", "rows.bin")}
    dropped: list[tuple[int, int]] = []
    real_drop = held._drop

    def drop_spy(mapped: mmap.mmap, span: tuple[int, int]) -> None:  # pages a probe touched, dropped
        dropped.append(span)
        real_drop(mapped, span)

    held._drop = drop_spy  # type: ignore[method-assign]
    probe = keys[::5]
    assert _deleted(held, [pa.array(probe)], [1] * len(probe), [0] * len(probe)) == [True] * len(probe)
    after = {name: _resident_kib(directory / name) for name in ("keys.arrow", "rows.bin")}
    assert after == before
    assert before["rows.bin"] == 0
    assert dropped == []
    held.close()


@pytest.mark.parametrize("is_global", [True, False])
def test_a_candidate_its_chunk_decides_reads_no_row(tmp_path: Path, is_global: bool) -> None:
    """A chunk's rows' oldest and newest sequence numbers and lowest and highest partition ids decide a
    candidate where they can: deletes newer than the data rows (in their one partition) delete them, and
    deletes no newer (or of other partitions) do not, without a read of the candidates' own rows. Only
    the candidates they leave undecided are read, and answer by their own rows."""
    keys = [f"key-{i:05d}" for i in range(4_000)]
    seqs = [5 if i % 2 else 9 for i in range(len(keys))]  # every chunk holds both sequence numbers
    held = _map(str(tmp_path / "m"), [pa.array(keys)], seqs, [3] * len(keys), is_global=is_global)
    assert held is not None
    read: list[int] = []
    real_fields = held._row_fields

    def fields_spy(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        read.append(len(at))
        return real_fields(at)

    held._row_fields = fields_spy  # type: ignore[method-assign]
    probe = [pa.array(keys[::10])]
    n = len(keys[::10])
    assert _deleted(held, probe, [4] * n, [3] * n) == [True] * n  # newer, same partition: decided
    assert _deleted(held, probe, [9] * n, [3] * n) == [False] * n  # none newer: decided
    if not is_global:
        assert _deleted(held, probe, [4] * n, [2] * n) == [False] * n  # another partition: decided
    assert read == []
    assert _deleted(held, probe, [7] * n, [3] * n) == [seqs[i] > 7 for i in range(0, len(keys), 10)]
    assert read == [n]  # newer than some rows of each chunk, not all: each candidate's row read
    held.close()


def _ipc_columns(path: Path, table: pa.Table) -> tuple[list[pa.Array], mmap.mmap]:
    """``table`` written to an Arrow IPC file at ``path`` in one batch, mapped: its columns over the map."""
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=table.num_rows)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    batch = pa.ipc.open_file(pa.py_buffer(mapped)).get_batch(0)
    return batch.columns, mapped


def test_values_read_from_the_file_equal_a_take_of_every_key_type(tmp_path: Path) -> None:
    """Each key type a mapped delete file holds (binary-like with 32- and 64-bit offsets, fixed widths from
    4 to 16 bytes, UUIDs through their storage), with nulls and without, read from the file at scattered
    rows, as a take from the mapped column gives them."""
    import decimal

    rng = np.random.default_rng(4)
    n = 3000
    nulls = [i % 7 == 0 for i in range(n)]

    def maybe(values: list[Any]) -> list[Any]:
        return [None if null else v for v, null in zip(values, nulls, strict=True)]

    texts = [f"t{i}-" + "y" * (i % 40) for i in range(n)]
    table = pa.table(
        {
            "string": pa.array(maybe(texts), pa.string()),
            "large_string": pa.array(texts, pa.large_string()),
            "binary": pa.array(maybe([t.encode() for t in texts]), pa.binary()),
            "large_binary": pa.array([t.encode() for t in texts], pa.large_binary()),
            "int32": pa.array(maybe(list(range(n))), pa.int32()),
            "int64": pa.array(list(range(n)), pa.int64()),
            "date32": pa.array(maybe(list(range(n))), pa.date32()),
            "time64": pa.array(list(range(n)), pa.time64("us")),
            "timestamp": pa.array(maybe(list(range(n))), pa.timestamp("us", tz="UTC")),
            "decimal": pa.array(maybe([decimal.Decimal(i) / 100 for i in range(n)]), pa.decimal128(12, 2)),
            "fixed": pa.array(maybe([i.to_bytes(16, "little") for i in range(n)]), pa.binary(16)),
            "uuid": pa.ExtensionArray.from_storage(
                pa.uuid(), pa.array([i.to_bytes(16, "big") for i in range(n)], pa.binary(16))
            ),
            "empty": pa.array([""] * n, pa.string()),
            "all_null": pa.array([None] * n, pa.string()),
            "one_length": pa.array([f"code-{i:06d}" for i in range(n)], pa.string()),
            "large_one_length": pa.array([f"{i:06d}".encode() for i in range(n)], pa.large_binary()),
        }
    )
    of_one_length = {"empty", "one_length", "large_one_length"}
    columns, mapped = _ipc_columns(tmp_path / "keys.arrow", table)
    base = pa.py_buffer(mapped).address
    rows = np.sort(rng.choice(n, 500, replace=False)).astype(np.int64)
    fd = os.open(tmp_path / "keys.arrow", os.O_RDONLY)
    try:
        for name, column in zip(table.column_names, columns, strict=True):
            layout = mapped_module._Layout.of(column, base, len(mapped))
            assert layout is not None, name
            expected = mapped_module.storage_of(column.take(pa.array(rows)))
            assert mapped_module._gather(fd, layout, rows).equals(expected), name
            # values all of one length are read without their offsets
            checked = mapped_module._of_one_length(fd, layout, n)
            assert checked is not None, name
            assert (checked.one_length is not None) == (name in of_one_length), name
            assert mapped_module._gather(fd, checked, rows).equals(expected), name
    finally:
        os.close(fd)
        del columns, column
        with contextlib.suppress(BufferError):  # arrays still view it: unmapped when they go
            mapped.close()


def test_types_without_a_layout_are_taken_from_the_mapping_alike(tmp_path: Path) -> None:
    """A column the file reader has no layout for (a dictionary here) is taken from the mapped chunk, its
    pages dropped: the same rows are deleted."""
    columns, mapped = _ipc_columns(
        tmp_path / "keys.arrow", pa.table({"k": pa.array(["a", "b"]).dictionary_encode()})
    )
    assert mapped_module._Layout.of(columns[0], pa.py_buffer(mapped).address, len(mapped)) is None
    assert mapped_module._Layout.of(pa.array([True, False]), 0, 1 << 40) is None  # one bit a value
    del columns
    with contextlib.suppress(BufferError):
        mapped.close()
    keys = [f"k{i}" for i in range(200)]
    held = _map(str(tmp_path / "m"), [pa.array(keys)], [5] * len(keys), [0] * len(keys), is_global=True)
    assert held is not None
    held._layouts = [[None] * len(layouts) for layouts in held._layouts]
    probe = [*keys[::3], "absent"]
    assert _deleted(held, [pa.array(probe)], [1] * len(probe), [0] * len(probe)) == [*[True] * 67, False]
    held.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_mapped_files_that_differ_in_length_are_refused_and_left_closed(tmp_path: Path) -> None:
    """Rows, hashes and keys of another length (a rows file cut short): refused, no descriptor it opened
    left open."""
    keys = [f"k{i}" for i in range(50)]
    held = _map(str(tmp_path), [pa.array(keys)], [5] * 50, [0] * 50, is_global=True, hold_hashes=False)
    assert held is not None
    held.close()
    rows = tmp_path / "rows.bin"
    rows.write_bytes(rows.read_bytes()[:-12])

    opened: list[int] = []
    real_open = os.open

    def recorded(*args: Any, **kwargs: Any) -> int:
        opened.append(real_open(*args, **kwargs))
        return opened[-1]

    with (
        mock.patch.object(mapped_module.os, "open", recorded),
        pytest.raises(ValueError, match="differ in length"),
    ):
        MappedDeleteKeys(
            str(tmp_path / "keys.arrow"), str(rows), str(tmp_path / "hashes.bin"), is_global=True
        )

    assert opened, "the hashes' file was opened"
    for fd in opened:  # closed: nothing was opened since that could take its number
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


@pytest.mark.parametrize("sort_bytes", [64, 1 << 20])
def test_hashes_sorted_on_disk_answer_as_held_ones_and_leave_no_file(tmp_path: Path, sort_bytes: int) -> None:
    """Hashes written in any order with repeats (one hash 5,000 times, across every chunk), sorted a range
    at a time (64 bytes: 16 hashes a chunk, the most ranges), mapped: the set answers as one held in
    memory, and every file it wrote, the unsorted one included, is gone once it is closed."""
    rng = np.random.default_rng(11)
    hashes = np.concatenate(
        [rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32), np.full(5_000, 7, np.uint32)]
    )
    rng.shuffle(hashes)
    unsorted = tmp_path / "hashes.bin"
    hashes.tofile(unsorted)
    probe = np.concatenate([hashes[:3000], rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32)])
    with sorted_hash_set(str(unsorted), bitmap_bytes=1 << 10, sort_bytes=sort_bytes) as on_disk:
        assert isinstance(on_disk, MappedHashSet)
        assert on_disk.sorted.tolist() == np.unique(hashes).tolist()
        assert on_disk.contains(probe).tolist() == HashSet(hashes).contains(probe).tolist()
    assert os.listdir(tmp_path) == []


def test_no_hashes_sort_to_an_empty_set(tmp_path: Path) -> None:
    unsorted = tmp_path / "hashes.bin"
    unsorted.write_bytes(b"")
    with sorted_hash_set(str(unsorted), bitmap_bytes=1 << 10, sort_bytes=1 << 20) as empty:
        assert not empty.contains(np.arange(10, dtype=np.uint32)).any()
    assert os.listdir(tmp_path) == []


def test_hashes_sorted_on_disk_are_removed_when_the_caller_fails(tmp_path: Path) -> None:
    unsorted = tmp_path / "hashes.bin"
    np.arange(100, dtype=np.uint32).tofile(unsorted)
    with (
        pytest.raises(RuntimeError, match="the caller"),
        sorted_hash_set(str(unsorted), bitmap_bytes=1 << 10, sort_bytes=64),
    ):
        raise RuntimeError("the caller failed")
    assert os.listdir(tmp_path) == []
