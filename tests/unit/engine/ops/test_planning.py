"""Unit tests of the pure file-group planner (Spark ``rewrite_data_files`` binpack semantics)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_iceberg_exec.engine.config import CompactionOptions, RewriteJobOrder
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.planning import (
    SPLIT_OVERHEAD_BYTES,
    FileCandidate,
    FileGroup,
    PlanOutcome,
    expected_output_files,
    plan_file_groups,
    write_max_file_size,
)

SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def opts(**overrides: Any) -> CompactionOptions:
    """Small sizes that keep the arithmetic readable: target 100, min 75, max 180 (write max 140)."""
    values: dict[str, Any] = {
        "target_file_size_bytes": 100,
        "min_file_size_bytes": 75,
        "max_file_size_bytes": 180,
    }
    values.update(overrides)
    return CompactionOptions(**values)


def f(
    name: str,
    size: int,
    *,
    spec_id: int = 0,
    partition: tuple[object, ...] = (),
    deletes: int = 0,
    handle: object = None,
) -> FileCandidate:
    return FileCandidate(
        path=f"s3://b/t/data/{name}.parquet",
        size_bytes=size,
        record_count=max(1, size),
        spec_id=spec_id,
        partition=partition,
        delete_file_count=deletes,
        handle=handle,
    )


def plan(
    files: Sequence[FileCandidate],
    options: CompactionOptions | None = None,
    *,
    current: int = 0,
    output: int | None = None,
    apply_deletes: bool = False,
) -> PlanOutcome:
    return plan_file_groups(
        files,
        options or opts(),
        current_spec_id=current,
        output_spec_id=current if output is None else output,
        apply_deletes=apply_deletes,
    )


def names(group: FileGroup) -> list[str]:
    return [c.path.rsplit("/", 1)[1].removesuffix(".parquet") for c in group.files]


def all_names(outcome: PlanOutcome) -> list[list[str]]:
    return [names(g) for g in outcome.groups]


# --- write_max_file_size / expected_output_files / split size ---------------------------------------


def test_write_max_file_size_is_target_plus_half_the_distance_to_max() -> None:
    assert write_max_file_size(opts()) == 140
    assert write_max_file_size(opts(max_file_size_bytes=181)) == 140  # (long) truncation of 140.5


def test_write_max_file_size_with_spark_defaults() -> None:
    options = CompactionOptions()
    target = options.target_file_size_bytes
    assert write_max_file_size(options) == int(target + (options.max_file_size_bytes - target) * 0.5)
    assert write_max_file_size(options) == 751619276


@pytest.mark.parametrize(
    ("input_bytes", "expected"),
    [
        pytest.param(0, 1, id="empty"),
        pytest.param(99, 1, id="below-target"),
        pytest.param(100, 1, id="exactly-target"),
        pytest.param(200, 2, id="exact-multiple"),
        pytest.param(180, 2, id="remainder-above-min-gets-own-file"),
        pytest.param(176, 2, id="remainder-76-above-min-75"),
        pytest.param(175, 2, id="remainder-equal-to-min-avg-too-big"),
        pytest.param(1050, 10, id="remainder-spread-avg-105"),
        pytest.param(1075, 10, id="remainder-at-min-spread-avg-107"),
        pytest.param(150, 2, id="remainder-not-spread-avg-150"),
        pytest.param(110, 1, id="avg-110-below-1.1-target-as-double"),
        pytest.param(111, 2, id="avg-111-above-1.1-target"),
    ],
)
def test_expected_output_files(input_bytes: int, expected: int) -> None:
    assert expected_output_files(input_bytes, opts()) == expected


def test_expected_output_files_average_bounded_by_write_max_file_size() -> None:
    # write max = 105 < 1.1 * target, so 10 files of 105 bytes are not allowed: 11 files.
    options = opts(max_file_size_bytes=110)
    assert write_max_file_size(options) == 105
    assert expected_output_files(1050, options) == 11
    assert expected_output_files(1040, options) == 10


def test_split_size_is_average_plus_overhead_within_target_and_write_max() -> None:
    options = opts(
        target_file_size_bytes=1_000_000,
        min_file_size_bytes=750_000,
        max_file_size_bytes=1_800_000,
        rewrite_all=True,
    )
    [group] = plan([f(str(i), 1_050_000) for i in range(10)], options).groups
    assert group.input_bytes == 10_500_000
    assert group.expected_output_files == 10
    assert group.split_size_bytes == 1_050_000 + SPLIT_OVERHEAD_BYTES

    [small] = plan([f("a", 500_000)], options).groups
    assert small.split_size_bytes == 1_000_000  # raised to the target

    [big] = plan([f("a", 1_390_000)], options).groups
    assert big.expected_output_files == 2  # one file would average 1_390_000 >= 1.1 * target
    assert big.split_size_bytes == 1_000_000  # 695_000 + 5 KiB < target


def test_split_size_capped_at_write_max_file_size() -> None:
    [group] = plan([f(str(i), 105) for i in range(10)], opts(rewrite_all=True)).groups
    assert group.expected_output_files == 10
    assert group.split_size_bytes == 140  # 105 + 5 KiB, capped at write max


# --- file filter -------------------------------------------------------------------------------------


def test_file_filter_keeps_files_outside_the_size_range_only() -> None:
    files = [f("small", 74), f("min", 75), f("target", 100), f("max", 180), f("big", 181)]
    outcome = plan(files, opts(min_input_files=1, max_file_group_size_bytes=10_000))
    assert all_names(outcome) == [["big", "small"]]


def test_file_in_range_with_too_many_deletes_is_selected() -> None:
    files = [f("ok1", 100), f("ok2", 100, deletes=2), f("ok3", 100, deletes=1)]
    outcome = plan(files, opts(delete_file_threshold=2), apply_deletes=True)
    # only ok2 passes the file filter; a single-file group survives because of tooManyDeletes
    assert all_names(outcome) == [["ok2"]]


def test_delete_file_threshold_zero_selects_every_file() -> None:
    files = [f("a", 100), f("b", 100)]
    outcome = plan(files, opts(delete_file_threshold=0))
    assert all_names(outcome) == [["a", "b"]]


# --- group filter ------------------------------------------------------------------------------------


def test_group_with_enough_input_files_is_rewritten() -> None:
    files = [f(str(i), 10) for i in range(5)]
    assert all_names(plan(files)) == [["0", "1", "2", "3", "4"]]


def test_group_below_min_input_files_and_target_is_not_rewritten() -> None:
    files = [f(str(i), 10) for i in range(4)]
    assert plan(files).groups == ()


def test_min_input_files_option() -> None:
    files = [f(str(i), 10) for i in range(2)]
    assert all_names(plan(files, opts(min_input_files=2))) == [["0", "1"]]


def test_single_small_file_is_never_rewritten_even_with_min_input_files_one() -> None:
    assert plan([f("a", 10)], opts(min_input_files=1)).groups == ()


def test_group_with_enough_content_is_rewritten() -> None:
    files = [f("a", 60), f("b", 50)]  # 110 > target, two files
    assert all_names(plan(files)) == [["a", "b"]]


def test_single_file_above_max_is_rewritten_as_too_much_content() -> None:
    assert all_names(plan([f("a", 181)])) == [["a"]]


def test_group_with_a_file_over_the_delete_threshold_is_rewritten() -> None:
    files = [f("a", 10, deletes=3), f("b", 10)]
    outcome = plan(files, opts(delete_file_threshold=3), apply_deletes=True)
    assert all_names(outcome) == [["a", "b"]]


# --- rewrite-all -------------------------------------------------------------------------------------


def test_rewrite_all_skips_both_filters() -> None:
    files = [f("target", 100), f("single", 10, partition=(1,))]
    outcome = plan(files, opts(rewrite_all=True))
    assert sorted(all_names(outcome)) == [["single"], ["target"]]


# --- bin-packing -------------------------------------------------------------------------------------


def test_packing_is_next_fit_in_path_order() -> None:
    """Java packs with look-back 1: a file that does not fit closes the open group for good."""
    files = [f("a", 60), f("b", 50), f("c", 40), f("d", 30)]
    outcome = plan(files, opts(rewrite_all=True, max_file_group_size_bytes=100))
    # first-fit would give [a, c], [b, d]
    assert all_names(outcome) == [["a"], ["b", "c"], ["d"]]


def test_group_may_reach_the_byte_cap_exactly() -> None:
    files = [f("a", 60), f("b", 40), f("c", 1)]
    outcome = plan(files, opts(rewrite_all=True, max_file_group_size_bytes=100))
    assert all_names(outcome) == [["a", "b"], ["c"]]


def test_file_larger_than_the_group_cap_is_a_group_of_its_own() -> None:
    files = [f("a", 10), f("b", 1000), f("c", 10)]
    outcome = plan(files, opts(rewrite_all=True, max_file_group_size_bytes=100))
    assert all_names(outcome) == [["a"], ["b"], ["c"]]


def test_max_file_group_input_files_caps_the_file_count() -> None:
    files = [f(str(i), 1) for i in range(7)]
    outcome = plan(files, opts(min_input_files=2, max_file_group_input_files=3))
    assert all_names(outcome) == [["0", "1", "2"], ["3", "4", "5"]]  # ["6"] alone fails the filter


def test_groups_are_filtered_after_packing() -> None:
    files = [f("a", 50), f("b", 60), f("c", 10)]
    outcome = plan(files, opts(max_file_group_size_bytes=110))
    # [a, b] has 110 > target bytes; [c] is a lone small file
    assert all_names(outcome) == [["a", "b"]]


# --- buckets and partition evolution ----------------------------------------------------------------


def test_files_are_bucketed_by_partition() -> None:
    files = [f(f"{p}{i}", 10, spec_id=1, partition=(p,)) for p in "xy" for i in range(5)]
    outcome = plan(files, current=1)
    assert [(g.spec_id, g.partition, len(g.files)) for g in outcome.groups] == [
        (1, ("x",), 5),
        (1, ("y",), 5),
    ]
    assert not any(g.needs_repartition for g in outcome.groups)


def test_files_of_other_specs_share_one_unpartitioned_bucket() -> None:
    old = [f(f"old{i}", 10, spec_id=0, partition=(f"p{i}",)) for i in range(3)]
    older = [f(f"older{i}", 10, spec_id=2, partition=()) for i in range(2)]
    current = [f(f"cur{i}", 10, spec_id=1, partition=(date(2024, 1, 1),)) for i in range(5)]
    outcome = plan(old + older + current, current=1)
    assert [(g.spec_id, g.partition, g.needs_repartition, len(g.files)) for g in outcome.groups] == [
        (1, (), True, 5),
        (1, (date(2024, 1, 1),), False, 5),
    ]
    assert outcome.groups[0].group_id == "1-unpartitioned-1"


def test_old_spec_bucket_uses_output_spec_id_for_the_test() -> None:
    """With output-spec-id other than the current spec, current-spec files must be repartitioned too."""
    current = [f(f"cur{i}", 10, spec_id=1, partition=("a",)) for i in range(3)]
    output = [f(f"out{i}", 10, spec_id=0, partition=("a",)) for i in range(5)]
    outcome = plan(current + output, opts(output_spec_id=0, min_input_files=3), current=1, output=0)
    assert [(g.spec_id, g.partition, g.needs_repartition, names(g)) for g in outcome.groups] == [
        (0, ("a",), False, ["out0", "out1", "out2", "out3", "out4"]),
        (1, (), True, ["cur0", "cur1", "cur2"]),
    ]


def test_unpartitioned_current_spec_shares_the_bucket_with_old_specs_as_in_java() -> None:
    files = [f(f"cur{i}", 10, spec_id=1) for i in range(2)] + [f("old", 10, spec_id=0, partition=(3,))]
    outcome = plan(files, opts(min_input_files=3), current=1)
    [group] = outcome.groups
    assert names(group) == ["cur0", "cur1", "old"]
    assert group.needs_repartition


def test_needs_repartition_is_per_group() -> None:
    files = [f("a-cur", 60, spec_id=1), f("b-cur", 60, spec_id=1), f("c-old", 200, spec_id=0, partition=(1,))]
    outcome = plan(files, opts(max_file_group_size_bytes=120), current=1)
    assert [(names(g), g.needs_repartition) for g in outcome.groups] == [
        (["a-cur", "b-cur"], False),
        (["c-old"], True),
    ]


def test_output_spec_id_option_must_agree_with_argument() -> None:
    with pytest.raises(ConfigurationError, match="output-spec-id"):
        plan([f("a", 10)], opts(output_spec_id=3), current=1, output=1)


# --- files with deletes ------------------------------------------------------------------------------


def test_files_with_deletes_are_skipped_without_apply_deletes() -> None:
    files = [f(str(i), 10) for i in range(5)] + [f("z-del", 10, deletes=2)]
    outcome = plan(files, opts(delete_file_threshold=1))
    assert all_names(outcome) == [["0", "1", "2", "3", "4"]]
    assert outcome.skipped == (
        (
            "s3://b/t/data/z-del.parquet",
            "has 2 delete file(s); applying deletes during rewrite is not supported yet",
        ),
    )


def test_files_with_deletes_are_candidates_with_apply_deletes() -> None:
    files = [f(str(i), 10) for i in range(4)] + [f("z-del", 10, deletes=2)]
    outcome = plan(files, apply_deletes=True)
    assert all_names(outcome) == [["0", "1", "2", "3", "z-del"]]
    assert outcome.skipped == ()


def test_skipped_files_are_sorted_by_path() -> None:
    files = [f("b", 10, deletes=1), f("a", 10, deletes=1)]
    assert [p for p, _ in plan(files).skipped] == ["s3://b/t/data/a.parquet", "s3://b/t/data/b.parquet"]


# --- max-files-to-rewrite ----------------------------------------------------------------------------


def test_max_files_to_rewrite_takes_buckets_in_order_and_cuts_a_group() -> None:
    files = [f(f"{p}{i}", 10, partition=(p,)) for p in "abc" for i in range(5)]
    outcome = plan(files, opts(max_files_to_rewrite=7))
    assert all_names(outcome) == [["a0", "a1", "a2", "a3", "a4"], ["b0", "b1"]]
    assert [g.group_id.rsplit("-", 1)[1] for g in outcome.groups] == ["1", "1"]


def test_cut_group_is_sized_from_its_own_files() -> None:
    """As upstream after apache/iceberg#15576: the cut prefix, not the whole group, sets the sizes."""
    files = [f(str(i), 200) for i in range(3)]
    options = opts(target_file_size_bytes=250, min_file_size_bytes=100, max_file_size_bytes=300)
    [group] = plan(files, dataclasses.replace(options, rewrite_all=True, max_files_to_rewrite=1)).groups
    assert group.input_bytes == 200
    assert group.expected_output_files == 1


def test_max_files_to_rewrite_cap_across_groups_of_one_bucket() -> None:
    files = [f(str(i), 1) for i in range(9)]
    options = opts(min_input_files=2, max_file_group_input_files=3, max_files_to_rewrite=5)
    assert all_names(plan(files, options)) == [["0", "1", "2"], ["3", "4"]]


def test_max_files_to_rewrite_zero_plans_nothing() -> None:
    outcome = plan([f(str(i), 10) for i in range(5)], opts(max_files_to_rewrite=0))
    assert outcome.groups == ()
    assert outcome.commit_batches == ()


def test_max_files_to_rewrite_is_applied_before_job_order() -> None:
    files = [f(f"a{i}", 10, partition=("a",)) for i in range(5)]
    files += [f(f"b{i}", 50, partition=("b",)) for i in range(5)]
    options = opts(max_files_to_rewrite=5, rewrite_job_order=RewriteJobOrder.BYTES_DESC)
    assert all_names(plan(files, options)) == [["a0", "a1", "a2", "a3", "a4"]]


# --- job order and determinism -----------------------------------------------------------------------


def _ordering_files() -> list[FileCandidate]:
    return [
        *(f(f"n{i}", 10, partition=(None,)) for i in range(5)),  # 5 files, 50 bytes
        *(f(f"x{i}", 30, partition=(2,)) for i in range(6)),  # 6 files, 180 bytes
        f("y0", 50, partition=(10,)),  # partition 10: 3 files, 120 bytes
        f("y1", 50, partition=(10,)),
        f("y2", 20, partition=(10,)),
    ]


def _order(order: RewriteJobOrder) -> list[tuple[object, ...]]:
    outcome = plan(_ordering_files(), opts(rewrite_job_order=order, min_input_files=3))
    return [g.partition for g in outcome.groups]


def test_job_order_none_sorts_buckets_with_none_first_and_numbers_naturally() -> None:
    assert _order(RewriteJobOrder.NONE) == [(None,), (2,), (10,)]


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        (RewriteJobOrder.BYTES_ASC, [(None,), (10,), (2,)]),
        (RewriteJobOrder.BYTES_DESC, [(2,), (10,), (None,)]),
        (RewriteJobOrder.FILES_ASC, [(10,), (None,), (2,)]),
        (RewriteJobOrder.FILES_DESC, [(2,), (None,), (10,)]),
    ],
)
def test_rewrite_job_order(order: RewriteJobOrder, expected: list[tuple[object, ...]]) -> None:
    assert _order(order) == expected


def test_job_order_ties_keep_bucket_order() -> None:
    files = [f(f"{p}{i}", 10, partition=(p,)) for p in "cab" for i in range(5)]
    outcome = plan(files, opts(rewrite_job_order=RewriteJobOrder.FILES_DESC))
    assert [g.partition for g in outcome.groups] == [("a",), ("b",), ("c",)]


def test_buckets_sort_by_spec_then_partition() -> None:
    files = [f(f"s2-{i}", 10, spec_id=2, partition=("a",)) for i in range(5)]
    files += [f(f"s1-{i}", 10, spec_id=1, partition=("b",)) for i in range(5)]
    outcome = plan(files, current=2)
    assert [(g.spec_id, g.partition) for g in outcome.groups] == [(2, ()), (2, ("a",))]


def test_group_ids_are_safe_stable_and_unique() -> None:
    files = [f(f"p{i}-{j}", 10, spec_id=3, partition=("x/y z", i)) for i in range(3) for j in range(5)]
    outcome = plan(files, opts(max_file_group_input_files=2, min_input_files=2), current=3)
    ids = [g.group_id for g in outcome.groups]
    assert all(SAFE_ID.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    # stable across runs and versions: the hash is of repr(partition)
    assert ids[:3] == ["3-e8561889252ccc91-1", "3-e8561889252ccc91-2", "3-c989d06a8d975e06-1"]


def test_plan_is_invariant_under_input_order() -> None:
    files = _ordering_files()
    assert plan(files) == plan(list(reversed(files)))


def test_duplicate_paths_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="listed twice"):
        plan([f("a", 10), f("a", 20)])


# --- commit batches ----------------------------------------------------------------------------------


def _seven_groups(**overrides: Any) -> PlanOutcome:
    files = [f(f"{p}{i}", 10, partition=(p,)) for p in "abcdefg" for i in range(5)]
    return plan(files, opts(**overrides))


def test_one_commit_batch_without_partial_progress() -> None:
    outcome = _seven_groups(partial_progress_max_commits=3)
    assert outcome.commit_batches == (tuple(g.group_id for g in outcome.groups),)


def test_partial_progress_batches_ceil_groups_per_commit() -> None:
    outcome = _seven_groups(partial_progress_enabled=True, partial_progress_max_commits=3)
    ids = [g.group_id for g in outcome.groups]
    assert outcome.commit_batches == (tuple(ids[0:3]), tuple(ids[3:6]), tuple(ids[6:7]))


def test_partial_progress_with_more_commits_than_groups() -> None:
    outcome = _seven_groups(partial_progress_enabled=True, partial_progress_max_commits=10)
    assert [len(b) for b in outcome.commit_batches] == [1] * 7


def test_empty_plan_has_no_commit_batch() -> None:
    assert plan([]) == PlanOutcome(groups=(), skipped=(), commit_batches=())


# --- FileCandidate -----------------------------------------------------------------------------------


def test_candidate_handle_is_not_compared() -> None:
    assert f("a", 10, handle=object()) == f("a", 10, handle=object())
    assert hash(f("a", 10, handle=[1])) == hash(f("a", 10))


def test_handle_is_passed_through_untouched() -> None:
    handle = object()
    files = [f("h", 500, handle=handle)]
    assert plan(files).groups[0].files[0].handle is handle


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size_bytes": -1},
        {"record_count": -1},
        {"delete_file_count": -1},
        {"partition": [1]},
        {"partition": ([1],)},
    ],
)
def test_candidate_validation(kwargs: dict[str, Any]) -> None:
    values: dict[str, Any] = {"path": "p", "size_bytes": 1, "record_count": 1, "spec_id": 0, "partition": ()}
    values.update(kwargs)
    with pytest.raises(ConfigurationError):
        FileCandidate(**values)


# --- properties --------------------------------------------------------------------------------------

partition_values = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "é/ü"]),
    st.dates(min_value=date(2024, 1, 1), max_value=date(2024, 1, 3)),
)


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[FileCandidate]:
    ids = draw(st.lists(st.integers(0, 10_000), unique=True, max_size=40))
    files = []
    for i in ids:
        spec_id = draw(st.integers(0, 2))
        width = spec_id  # spec n has n partition fields
        files.append(
            FileCandidate(
                path=f"s3://b/t/data/{i:05d}.parquet",
                size_bytes=draw(st.integers(0, 400)),
                record_count=draw(st.integers(0, 1000)),
                spec_id=spec_id,
                partition=tuple(draw(partition_values) for _ in range(width)),
                delete_file_count=draw(st.sampled_from([0, 0, 0, 1, 3])),
            )
        )
    return files


@st.composite
def option_sets(draw: st.DrawFn) -> CompactionOptions:
    target = draw(st.integers(1, 200))
    return CompactionOptions(
        target_file_size_bytes=target,
        min_file_size_bytes=draw(st.integers(0, target)),
        max_file_size_bytes=draw(st.integers(target, 3 * target)),
        min_input_files=draw(st.integers(1, 6)),
        rewrite_all=draw(st.booleans()),
        max_file_group_size_bytes=draw(st.integers(1, 1000)),
        max_file_group_input_files=draw(st.integers(1, 8)),
        max_files_to_rewrite=draw(st.none() | st.integers(0, 30)),
        delete_file_threshold=draw(st.sampled_from([0, 1, 2, 2**31 - 1])),
        partial_progress_enabled=draw(st.booleans()),
        partial_progress_max_commits=draw(st.integers(1, 5)),
        rewrite_job_order=draw(st.sampled_from(list(RewriteJobOrder))),
    )


specs = st.tuples(st.integers(0, 2), st.integers(0, 2))  # (current, output)


def _run(
    files: Sequence[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> PlanOutcome:
    return plan_file_groups(
        files, options, current_spec_id=spec_ids[0], output_spec_id=spec_ids[1], apply_deletes=deletes
    )


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans())
def test_property_groups_are_made_of_distinct_candidates(
    files: list[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> None:
    outcome = _run(files, options, spec_ids, deletes)
    grouped = [c for g in outcome.groups for c in g.files]
    assert all(c in files for c in grouped)
    paths = [c.path for c in grouped]
    assert len(paths) == len(set(paths))
    skipped = {p for p, _ in outcome.skipped}
    assert not skipped & set(paths)
    if not deletes:
        assert skipped == {c.path for c in files if c.delete_file_count > 0}
        assert all(c.delete_file_count == 0 for c in grouped)
    else:
        assert skipped == set()


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans())
def test_property_groups_respect_caps(
    files: list[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> None:
    for group in _run(files, options, spec_ids, deletes).groups:
        assert 1 <= len(group.files) <= options.max_file_group_input_files
        assert group.input_bytes == sum(c.size_bytes for c in group.files)
        if len(group.files) > 1:
            assert group.input_bytes <= options.max_file_group_size_bytes


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans(), st.randoms(use_true_random=False))
def test_property_invariant_under_permutation(
    files: list[FileCandidate],
    options: CompactionOptions,
    spec_ids: tuple[int, int],
    deletes: bool,
    random: Random,
) -> None:
    shuffled = list(files)
    random.shuffle(shuffled)
    assert _run(files, options, spec_ids, deletes) == _run(shuffled, options, spec_ids, deletes)


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans())
def test_property_rewrite_all_groups_every_kept_file(
    files: list[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> None:
    options = dataclasses.replace(options, rewrite_all=True, max_files_to_rewrite=None)
    outcome = _run(files, options, spec_ids, deletes)
    grouped = {c.path for g in outcome.groups for c in g.files}
    skipped = {p for p, _ in outcome.skipped}
    assert grouped | skipped == {c.path for c in files}


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans())
def test_property_groups_share_their_bucket(
    files: list[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> None:
    current, output = spec_ids
    for group in _run(files, options, spec_ids, deletes).groups:
        for c in group.files:
            if c.spec_id == output:
                assert (c.spec_id, c.partition) == (group.spec_id, group.partition)
            else:
                assert (group.spec_id, group.partition) == (current, ())
        assert group.needs_repartition == any(c.spec_id != output for c in group.files)


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), option_sets(), specs, st.booleans())
def test_property_sizes_ids_and_batches(
    files: list[FileCandidate], options: CompactionOptions, spec_ids: tuple[int, int], deletes: bool
) -> None:
    outcome = _run(files, options, spec_ids, deletes)
    write_max = write_max_file_size(options)
    for group in outcome.groups:
        assert group.expected_output_files >= 1
        assert options.target_file_size_bytes <= group.split_size_bytes <= write_max
        assert SAFE_ID.match(group.group_id)
    ids = [g.group_id for g in outcome.groups]
    assert len(set(ids)) == len(ids)
    assert [i for batch in outcome.commit_batches for i in batch] == ids
    if ids:
        per_commit = math.ceil(len(ids) / options.partial_progress_max_commits)
        limit = per_commit if options.partial_progress_enabled else len(ids)
        assert all(1 <= len(batch) <= limit for batch in outcome.commit_batches)
    if options.max_files_to_rewrite is not None:
        assert sum(len(g.files) for g in outcome.groups) <= options.max_files_to_rewrite


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**15), option_sets())
def test_property_expected_output_files_bounds(input_bytes: int, options: CompactionOptions) -> None:
    count = expected_output_files(input_bytes, options)
    target = options.target_file_size_bytes
    assert count >= 1
    assert count in {max(1, input_bytes // target), max(1, -(-input_bytes // target))}


def test_nan_partition_values_share_a_bucket_as_in_java() -> None:
    """``nan != nan`` in Python, but Java's ``Double.equals`` treats NaN partition values as equal."""
    files = [f(f"n{i}", 10, partition=(float("nan"), "a")) for i in range(5)]
    [group] = plan(files).groups
    assert len(group.files) == 5
    assert group.partition[1] == "a"
    assert math.isnan(group.partition[0])  # type: ignore[arg-type]


class _SameRepr:
    def __repr__(self) -> str:
        return "SameRepr()"


def test_distinct_partitions_with_one_repr_get_distinct_ids() -> None:
    first, second = _SameRepr(), _SameRepr()  # unequal, hashed by identity
    files = [f(f"a{i}", 10, partition=(first,)) for i in range(5)]
    files += [f(f"b{i}", 10, partition=(second,)) for i in range(5)]
    outcome = plan(files)
    ids = [g.group_id for g in outcome.groups]
    assert len(ids) == 2
    assert len(set(ids)) == 2
    assert all(SAFE_ID.match(i) for i in ids)
    assert [names(g)[0] for g in outcome.groups] == ["a0", "b0"]


def test_partition_values_of_mixed_kinds_sort_without_error() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    values: list[object] = [None, 1, "a", b"a", 1.5, date(2024, 1, 1), Decimal("7.25"), Opaque()]
    files = [f(f"v{k}-{i}", 10, partition=(v,)) for k, v in enumerate(values) for i in range(5)]
    outcome = plan(files)
    assert len(outcome.groups) == len(values)
    assert outcome.groups[0].partition == (None,)
    assert plan(list(reversed(files))) == outcome
