"""Unit tests of ``delete-ratio-threshold`` (Java's ``tooHighDeleteRatio``) in the file-group planner."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_iceberg_exec.engine.config import CompactionOptions
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.planning import (
    FileCandidate,
    PlanOutcome,
    plan_file_groups,
    too_high_delete_ratio,
)


def opts(**overrides: Any) -> CompactionOptions:
    """Target 100, min 75, max 180, as in test_planning.py."""
    values: dict[str, Any] = {
        "target_file_size_bytes": 100,
        "min_file_size_bytes": 75,
        "max_file_size_bytes": 180,
    }
    values.update(overrides)
    return CompactionOptions(**values)


def f(name: str, size: int = 100, *, records: int = 100, deletes: int = 0, known: int = 0) -> FileCandidate:
    return FileCandidate(
        path=f"s3://b/t/data/{name}.parquet",
        size_bytes=size,
        record_count=records,
        spec_id=0,
        partition=(),
        delete_file_count=deletes,
        file_scoped_deleted_records=known,
    )


def plan(files: list[FileCandidate], options: CompactionOptions | None = None) -> PlanOutcome:
    return plan_file_groups(files, options or opts(), current_spec_id=0, output_spec_id=0, apply_deletes=True)


def names(outcome: PlanOutcome) -> list[list[str]]:
    return [[c.path.rsplit("/", 1)[1].removesuffix(".parquet") for c in g.files] for g in outcome.groups]


# --- the ratio -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "deletes", "known", "threshold", "expected"),
    [
        pytest.param(100, 1, 30, 0.3, True, id="exactly-the-threshold"),
        pytest.param(100, 1, 29, 0.3, False, id="just-below"),
        pytest.param(100, 0, 50, 0.3, False, id="no-delete-files"),
        pytest.param(100, 2, 0, 0.3, False, id="only-unscoped-deletes"),
        pytest.param(10, 1, 50, 1.0, True, id="known-capped-at-record-count"),
        pytest.param(0, 1, 5, 0.3, False, id="no-rows-is-nan-in-java"),
        pytest.param(0, 1, 0, 1.0, False, id="zero-over-zero"),
        pytest.param(3, 1, 1, 1 / 3, True, id="double-division"),
        pytest.param(100, 1, 100, 1.0, True, id="fully-deleted-threshold-one"),
    ],
)
def test_too_high_delete_ratio(
    records: int, deletes: int, known: int, threshold: float, expected: bool
) -> None:
    candidate = f("a", records=records, deletes=deletes, known=known)
    assert too_high_delete_ratio(candidate, opts(delete_ratio_threshold=threshold)) is expected


def test_default_threshold_is_spark_default() -> None:
    assert CompactionOptions().delete_ratio_threshold == 0.3
    assert CompactionOptions.from_options({}).delete_ratio_threshold == 0.3


# --- file and group filters ----------------------------------------------------------------------------


def test_file_in_size_range_with_a_high_delete_ratio_is_rewritten_alone() -> None:
    """Both filters: the file passes filterFiles, and its one-file group passes filterFileGroups."""
    files = [f("heavy", deletes=1, known=30), f("light", deletes=1, known=29), f("clean")]
    assert names(plan(files)) == [["heavy"]]


def test_raising_the_threshold_leaves_the_file_alone() -> None:
    files = [f("heavy", deletes=1, known=30)]
    assert names(plan(files, opts(delete_ratio_threshold=0.31))) == []


def test_small_files_packed_with_a_high_ratio_file_are_rewritten_together() -> None:
    """Two small files are below min-input-files; the group survives because one file's ratio is high."""
    files = [f("a", 10, records=10, deletes=1, known=5), f("b", 10, records=10)]
    assert names(plan(files)) == [["a", "b"]]
    assert names(plan(files, opts(delete_ratio_threshold=0.6))) == []


def test_files_with_high_ratio_are_still_skipped_when_deletes_cannot_be_applied() -> None:
    outcome = plan_file_groups(
        [f("heavy", deletes=1, known=90)], opts(), current_spec_id=0, output_spec_id=0, apply_deletes=False
    )
    assert outcome.groups == ()
    assert [p for p, _ in outcome.skipped] == ["s3://b/t/data/heavy.parquet"]


# --- options and validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "0.0", "-0.1", "1.0001", "2", "nan", "NaN", "inf", "abc", ""])
def test_invalid_delete_ratio_threshold_is_a_one_line_configuration_error(value: str) -> None:
    with pytest.raises(ConfigurationError, match="delete-ratio-threshold") as err:
        CompactionOptions.from_options({"delete-ratio-threshold": value})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("value", "expected"), [("1", 1.0), ("0.5", 0.5), ("1e-3", 0.001), (0.25, 0.25)])
def test_valid_delete_ratio_threshold(value: object, expected: float) -> None:
    options = CompactionOptions.from_options({"delete-ratio-threshold": value})  # type: ignore[dict-item]
    assert options.delete_ratio_threshold == expected
    assert CompactionOptions.from_options(options.to_options()) == options


def test_remove_dangling_deletes_option_defaults_to_false_and_round_trips() -> None:
    assert CompactionOptions.from_options({}).remove_dangling_deletes is False
    options = CompactionOptions.from_options({"remove-dangling-deletes": "true"})
    assert options.remove_dangling_deletes is True
    assert options.to_options()["remove-dangling-deletes"] == "true"
    assert CompactionOptions.from_options(options.to_options()) == options
    with pytest.raises(ConfigurationError, match="remove-dangling-deletes"):
        CompactionOptions.from_options({"remove-dangling-deletes": "yes"})


def test_negative_file_scoped_deleted_records_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="file_scoped_deleted_records"):
        f("a", known=-1)


# --- properties ----------------------------------------------------------------------------------------


@st.composite
def ratio_candidates(draw: st.DrawFn) -> list[FileCandidate]:
    ids = draw(st.lists(st.integers(0, 10_000), unique=True, max_size=30))
    return [
        FileCandidate(
            path=f"s3://b/t/data/{i:05d}.parquet",
            size_bytes=draw(st.integers(0, 400)),
            record_count=draw(st.integers(0, 200)),
            spec_id=0,
            partition=(draw(st.integers(0, 2)),),
            delete_file_count=(count := draw(st.sampled_from([0, 0, 1, 2]))),
            file_scoped_deleted_records=draw(st.integers(0, 300)) if count else 0,
        )
        for i in ids
    ]


thresholds = st.floats(min_value=0.0, max_value=1.0, exclude_min=True)


@settings(max_examples=300, deadline=None)
@given(ratio_candidates(), thresholds, st.integers(1, 6))
def test_property_every_high_ratio_file_is_in_a_group(
    files: list[FileCandidate], threshold: float, min_input_files: int
) -> None:
    """Without caps on files, a file whose ratio reaches the threshold is always rewritten."""
    options = opts(delete_ratio_threshold=threshold, min_input_files=min_input_files)
    grouped = {c.path for g in plan(files, options).groups for c in g.files}
    for file in files:
        if file.delete_file_count and file.record_count:
            ratio = min(file.file_scoped_deleted_records, file.record_count) / file.record_count
            if ratio >= threshold:
                assert file.path in grouped


@settings(max_examples=300, deadline=None)
@given(ratio_candidates(), thresholds, thresholds)
def test_property_lowering_the_threshold_never_rewrites_fewer_files(
    files: list[FileCandidate], first: float, second: float
) -> None:
    """With a size cap that makes every file its own group, selection is monotone in the threshold."""
    low, high = sorted((first, second))

    def rewritten(threshold: float) -> set[str]:
        options = opts(delete_ratio_threshold=threshold, max_file_group_input_files=1)
        return {c.path for g in plan(files, options).groups for c in g.files}

    assert rewritten(high) <= rewritten(low)


@settings(max_examples=200, deadline=None)
@given(ratio_candidates())
def test_property_files_without_known_deletes_plan_as_before(files: list[FileCandidate]) -> None:
    """Zero file-scoped deleted records: the ratio never selects anything, whatever the threshold."""
    cleared = [
        FileCandidate(c.path, c.size_bytes, c.record_count, c.spec_id, c.partition, c.delete_file_count)
        for c in files
    ]
    assert plan(cleared, opts(delete_ratio_threshold=1e-9)) == plan(cleared, opts(delete_ratio_threshold=1.0))
