"""engine/deletes/keysets.py: the in-memory exact match of equality delete keys agrees with the spec's rule
(same key null-safely, higher sequence number, same partition unless global) row by row, whatever the
hashes say: a collision never deletes a row, a repeated delete key keeps its highest sequence number."""

from __future__ import annotations

import datetime
import decimal
import uuid

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    LongType,
    NestedField,
    StringType,
    UUIDType,
)

from airflow_provider_iceberg_exec.engine.deletes.keysets import (
    DeleteKeys,
    HashSet,
    KeySet,
    bucket_of,
    hashable,
    in_sorted,
    key_hashes,
)


def _keys(
    columns: list[pa.Array],
    seqs: list[int],
    parts: list[int],
    *,
    is_global: bool,
    hashes: np.ndarray | None = None,
) -> DeleteKeys:
    return DeleteKeys(
        columns,
        key_hashes(columns) if hashes is None else hashes,
        np.array(seqs, dtype=np.int64),
        np.array(parts, dtype=np.int32),
        is_global=is_global,
    )


def _deleted(
    keys: DeleteKeys,
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


def test_only_hashable_key_types_take_the_in_memory_match() -> None:
    def field(t: object) -> NestedField:
        return NestedField(1, "k", t, required=False)  # type: ignore[arg-type]

    assert hashable([field(LongType()), field(StringType()), field(DecimalType(10, 2)), field(UUIDType())])
    assert not hashable([field(LongType()), field(DoubleType())])
    assert not hashable([field(BooleanType())])
    assert not hashable([])


def test_equal_keys_hash_alike_nulls_included_and_types_through_their_storage() -> None:
    ids = pa.array([1, None, 1, 2], pa.int64())
    names = pa.array(["a", None, "a", "a"], pa.large_string())
    hashed = key_hashes([ids, names])
    assert hashed[0] == hashed[2]
    assert hashed[0] != hashed[1]
    assert hashed[0] != hashed[3]
    u = uuid.uuid4().bytes
    uuids = pa.array([u, None, u], pa.uuid())
    assert key_hashes([uuids])[0] == key_hashes([uuids])[2]
    stamps = pa.array([datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)] * 2, pa.timestamp("us", tz="UTC"))
    assert key_hashes([stamps])[0] == key_hashes([stamps])[1]
    amounts = pa.array([decimal.Decimal("1.20"), decimal.Decimal("1.20")], pa.decimal128(10, 2))
    assert key_hashes([amounts])[0] == key_hashes([amounts])[1]


def test_null_matches_null_and_a_delete_applies_to_older_rows_only() -> None:
    keys = _keys([pa.array(["a", None])], [5, 5], [0, 0], is_global=True)
    data = [pa.array(["a", None, "a", "b", None])]
    assert _deleted(keys, data, [4, 4, 5, 4, 6], [0, 0, 0, 0, 0]) == [True, True, False, False, False]


def test_a_partition_scoped_delete_applies_in_its_partition_only() -> None:
    scoped = _keys([pa.array([7, 7], pa.int64())], [9, 9], [1, 2], is_global=False)
    data = [pa.array([7, 7, 7], pa.int64())]
    assert _deleted(scoped, data, [1, 1, 1], [1, 2, 3]) == [True, True, False]
    overall = _keys([pa.array([7], pa.int64())], [9], [1], is_global=True)
    assert _deleted(overall, data, [1, 1, 1], [1, 2, 3]) == [True, True, True]


def test_multi_column_keys_compare_every_column_null_safely() -> None:
    keys = _keys([pa.array([1, None], pa.int64()), pa.array([None, "x"])], [3, 3], [0, 0], is_global=True)
    data = [pa.array([1, 1, None, None], pa.int64()), pa.array([None, "x", "x", None])]
    assert _deleted(keys, data, [1, 1, 1, 1], [0, 0, 0, 0]) == [True, False, True, False]


def test_a_hash_collision_never_deletes_a_row() -> None:
    """Every key given the same hash: only the rows whose key is really deleted go."""
    same = np.zeros(3, dtype=np.uint32)
    keys = _keys([pa.array(["a", "b", "c"])], [2, 2, 2], [0, 0, 0], is_global=True, hashes=same)
    data = [pa.array(["b", "z", "c", "a", "y"])]
    assert _deleted(keys, data, [1] * 5, [0] * 5, hashes=np.zeros(5, dtype=np.uint32)) == [
        True,
        False,
        True,
        True,
        False,
    ]


def test_a_repeated_delete_key_keeps_its_highest_sequence_number() -> None:
    keys = _keys([pa.array(["a", "a", "a", "b"])], [3, 8, 5, 2], [0, 0, 0, 0], is_global=True)
    assert len(keys) == 2
    assert _deleted(keys, [pa.array(["a", "a", "b"])], [7, 8, 2], [0, 0, 0]) == [True, False, False]


_BYTE_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.string_view()]


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.text(max_size=40)), min_size=1, max_size=40),
    cut=st.integers(0, 5),
    kind=st.sampled_from(_BYTE_TYPES),
)
def test_a_string_hashes_alike_whatever_its_array_its_neighbours_or_its_slice(
    values: list[str | None], cut: int, kind: pa.DataType
) -> None:
    """Strings and binaries are hashed from their bytes, eight at a time: a value's hash is its own,
    whether the values around it are of its length (read as views of the data) or not (read from any byte),
    in any string or binary array, sliced or not."""
    alone = [key_hashes([pa.array([value], pa.string())])[0] for value in values]
    padded = ["x" * 50] * cut + values + ["y" * 3]
    array = pa.array(padded, kind)[cut : cut + len(values)]
    assert list(key_hashes([array])) == alone
    assert [h == alone[0] for h in alone] == [v == values[0] for v in values]  # no collision among these


def test_values_of_one_length_and_of_many_hash_alike() -> None:
    same = [f"{i:013d}" for i in range(0, 3000, 7)]  # one length: read as views of the data
    mixed = [*same, "short", "a much longer value than the others"]  # read from any byte
    assert list(key_hashes([pa.array(same)])) == list(key_hashes([pa.array(mixed)]))[: len(same)]
    encoded = pa.array(mixed).dictionary_encode()
    assert list(key_hashes([encoded])) == list(key_hashes([pa.array(mixed)]))
    fixed = pa.array([uuid.uuid4().bytes for _ in range(50)], pa.binary(16))
    assert list(key_hashes([fixed])) == list(key_hashes([fixed.cast(pa.binary())]))
    assert list(key_hashes([fixed[7:]])) == list(key_hashes([fixed]))[7:]


def test_integers_of_any_width_hash_alike() -> None:
    assert list(key_hashes([pa.array([1, None, -5], pa.int32())])) == list(
        key_hashes([pa.array([1, None, -5], pa.int64())])
    )


@pytest.mark.parametrize(
    "column",
    [pa.array([f"key-{i}" for i in range(20_000)]), pa.array(range(20_000), pa.int64())],
    ids=["strings", "longs"],
)
def test_a_single_column_hash_takes_all_32_bits(column: pa.Array) -> None:
    """A bitmap or a range keyed by a hash's top bits uses all of them: the bucket transform's hashes
    are below 2**31, and a single column's were taken as they were (half the bitmap unused)."""
    hashed = key_hashes([column])
    top = hashed >> np.uint32(31)
    assert 0.45 < top.mean() < 0.55
    quarters = np.bincount(hashed >> np.uint32(30), minlength=4)
    assert quarters.min() > 0.9 * quarters.mean()


def test_buckets_spread_hashes_and_sorted_search_finds_members() -> None:
    hashed = key_hashes([pa.array([f"key-{i}" for i in range(10_000)])])
    counts = np.bincount(bucket_of(hashed, 7), minlength=7)
    assert counts.min() > 0.8 * counts.mean()
    members = np.unique(hashed[:100])
    assert in_sorted(hashed[:200], members)[:100].all()
    assert not in_sorted(np.array([1, 2], dtype=np.uint32), np.empty(0, dtype=np.uint32)).any()


keys_strategy = st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=0, max_size=30)


@settings(max_examples=60, deadline=None)
@given(
    delete_ids=keys_strategy,
    delete_names=st.lists(st.one_of(st.none(), st.sampled_from(["p", "q"])), min_size=30, max_size=30),
    data_ids=keys_strategy,
    seed=st.integers(0, 2**16),
    is_global=st.booleans(),
    collide=st.booleans(),
)
def test_agrees_with_the_rule_row_by_row(
    delete_ids: list[int | None],
    delete_names: list[str | None],
    data_ids: list[int | None],
    seed: int,
    is_global: bool,
    collide: bool,
) -> None:
    rng = np.random.default_rng(seed)
    d_names = delete_names[: len(delete_ids)]
    d_seqs = rng.integers(1, 5, len(delete_ids)).tolist()
    d_parts = rng.integers(0, 3, len(delete_ids)).tolist()
    names = rng.choice(np.array(["p", "q", None], dtype=object), len(data_ids)).tolist()
    seqs = rng.integers(0, 5, len(data_ids)).tolist()
    parts = rng.integers(0, 3, len(data_ids)).tolist()
    delete_columns = [pa.array(delete_ids, pa.int64()), pa.array(d_names, pa.string())]
    data_columns = [pa.array(data_ids, pa.int64()), pa.array(names, pa.string())]
    zeros = np.zeros  # collide: every key hashes alike, so only the exact comparison decides
    keys = _keys(
        delete_columns,
        d_seqs,
        d_parts,
        is_global=is_global,
        hashes=zeros(len(delete_ids), dtype=np.uint32) if collide else None,
    )
    got = _deleted(
        keys, data_columns, seqs, parts, hashes=zeros(len(data_ids), dtype=np.uint32) if collide else None
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
    assert got == expected


@pytest.mark.parametrize("rows", [0, 1])
def test_empty_sides(rows: int) -> None:
    keys = _keys([pa.array(["a"] * rows, pa.string())], [1] * rows, [0] * rows, is_global=True)
    assert _deleted(keys, [pa.array(["a"])], [0], [0]) == [bool(rows)]
    assert _deleted(keys, [pa.array([], pa.string())], [], []) == []


def test_the_hash_set_answers_as_a_sorted_search_does() -> None:
    rng = np.random.default_rng(5)
    members = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32)
    probes = np.concatenate(
        [members[:1000], rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)]
    )
    probes = np.append(probes, np.uint32(2**32 - 1))  # the NULL hash
    assert (HashSet(members).contains(probes) == in_sorted(probes, np.unique(members))).all()
    assert HashSet(members).contains(probes)[:1000].all()
    assert not HashSet(np.empty(0, dtype=np.uint32)).contains(probes).any()


@pytest.mark.parametrize("bitmap_bytes", [1, 1 << 10, 1 << 22, 1 << 24])
def test_a_hash_set_answers_alike_whatever_its_bitmap(bitmap_bytes: int) -> None:
    """The bitmap only rules rows out: from one byte (every hash shares a few bits) to 16 MiB, the set
    answers as the sorted search does, and a larger bitmap lets fewer non-members through."""
    rng = np.random.default_rng(8)
    members = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    probes = np.append(rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32), members[:500])
    held = HashSet(members, bitmap_bytes=bitmap_bytes)
    assert (held.contains(probes) == in_sorted(probes, np.unique(members))).all()
    slots = (probes >> np.uint32(held._shift)).astype(np.int64)
    passed = (held._bits[slots >> 3] >> (slots & 7).astype(np.uint8)) & 1
    expected = 1 - np.exp(-len(members) / (bitmap_bytes * 8))  # the share of bits set
    assert abs(passed[:-500].mean() - expected) < 0.01


@pytest.mark.parametrize("bitmap_bytes", [0, 3, 3 << 20, 1 << 30])
def test_a_hash_set_bitmap_is_a_power_of_two_up_to_every_hash(bitmap_bytes: int) -> None:
    with pytest.raises(ValueError, match="power of two bytes up to 512 MiB"):
        HashSet(np.arange(3, dtype=np.uint32), bitmap_bytes=bitmap_bytes)


def _pairs(held: KeySet, columns: list[pa.Array], **kwargs: object) -> set[tuple[int, int]]:
    rows, found = held.pairs(columns, key_hashes(columns), **kwargs)  # type: ignore[arg-type]
    return set(zip(rows.tolist(), found.tolist(), strict=True))


def test_a_key_set_gives_every_pair_of_equal_keys_numbered_as_given() -> None:
    """MERGE's ON: a probe row meets every copy of its key (the cardinality check needs them all)."""
    held = KeySet([pa.array(["b", "a", "b", "c", None])], key_hashes([pa.array(["b", "a", "b", "c", None])]))
    probe = [pa.array(["a", "b", "z", None])]

    assert _pairs(held, probe) == {(0, 1), (1, 0), (1, 2), (3, 4)}


def test_a_key_set_with_partitions_pairs_within_a_partition_only() -> None:
    keys = [pa.array([7, 7], pa.int64())]
    held = KeySet(keys, key_hashes(keys), np.array([1, 2], dtype=np.int32))
    probe = [pa.array([7, 7, 7], pa.int64())]

    pairs = _pairs(held, probe, partitions=np.array([2, 3, 1], dtype=np.int32))

    assert pairs == {(0, 1), (2, 0)}


def test_a_probe_with_many_candidates_is_matched_in_halves_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [pa.array([i % 5 for i in range(200)], pa.int64())]  # every key 40 times
    held = KeySet(keys, key_hashes(keys))
    probe = [pa.array([i % 7 for i in range(50)], pa.int64())]
    whole = _pairs(held, probe, where=lambda rows, found: (rows + found) % 3 != 0)

    monkeypatch.setattr(KeySet, "MAX_CANDIDATES", 16)
    halves = _pairs(held, probe, where=lambda rows, found: (rows + found) % 3 != 0)

    expected = {(r, f) for r in range(50) for f in range(200) if r % 7 == f % 5 and (r + f) % 3 != 0}
    assert whole == halves == expected
