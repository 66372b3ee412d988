"""``plan_file_groups(..., bucket_by_file_spec=True)``: every file keeps its own spec's bucket (position
delete files are rewritten where they are; no mixed bucket, no repartitioning)."""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.config import PositionDeleteOptions
from airflow_provider_iceberg_exec.engine.ops.planning import FileCandidate, plan_file_groups


def _files(spec_id: int, partition: tuple, count: int, size: int = 100) -> list[FileCandidate]:
    return [FileCandidate(f"s{spec_id}-{partition}-{i}", size, 1, spec_id, partition) for i in range(count)]


def test_old_spec_files_keep_their_own_partitions() -> None:
    options = PositionDeleteOptions.from_options({}).planner
    candidates = [*_files(0, ("a",), 5), *_files(0, ("b",), 5), *_files(1, (), 5)]
    plan = plan_file_groups(
        candidates, options, current_spec_id=1, output_spec_id=1, bucket_by_file_spec=True
    )
    buckets = sorted((g.spec_id, g.partition, len(g.files), g.needs_repartition) for g in plan.groups)
    assert buckets == [(0, ("a",), 5, False), (0, ("b",), 5, False), (1, (), 5, False)]
    # Without it, compaction's rule: old-spec files share one bucket of the current spec.
    mixed = plan_file_groups(candidates, options, current_spec_id=1, output_spec_id=1)
    assert sorted((g.spec_id, g.partition, len(g.files)) for g in mixed.groups) == [(1, (), 15)]


def test_spark_position_delete_defaults() -> None:
    """64 MiB target from write.delete.target-file-size-bytes; min 0.75, max 1.8 of it; five input files."""
    options = PositionDeleteOptions.from_options({})
    planner = options.planner
    assert planner.target_file_size_bytes == 64 * 1024 * 1024
    assert planner.min_file_size_bytes == int(64 * 1024 * 1024 * 0.75)
    assert planner.max_file_size_bytes == int(64 * 1024 * 1024 * 1.8)
    assert (planner.min_input_files, planner.rewrite_all) == (5, False)
    assert planner.max_file_group_size_bytes == 100 * 1024**3
    assert (options.partial_progress_enabled, planner.partial_progress_max_commits) == (False, 10)
    assert planner.rewrite_job_order.value == "none"
    from_table = PositionDeleteOptions.from_options({}, {"write.delete.target-file-size-bytes": "1000"})
    assert from_table.planner.target_file_size_bytes == 1000
    # The data-file target does not apply to delete files.
    other = PositionDeleteOptions.from_options({}, {"write.target-file-size-bytes": "1000"})
    assert other.planner.target_file_size_bytes == 64 * 1024 * 1024


def test_four_small_files_are_not_worth_a_rewrite_five_are() -> None:
    options = PositionDeleteOptions.from_options({}).planner
    kwargs = {"current_spec_id": 0, "output_spec_id": 0, "bucket_by_file_spec": True}
    assert plan_file_groups(_files(0, (), 4), options, **kwargs).groups == ()
    assert len(plan_file_groups(_files(0, (), 5), options, **kwargs).groups) == 1
    everything = PositionDeleteOptions.from_options({"rewrite-all": "true"}).planner
    assert len(plan_file_groups(_files(0, (), 1), everything, **kwargs).groups) == 1
