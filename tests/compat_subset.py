"""The compatibility subset (marker ``compat``): the tests `.ci/run` also runs against the oldest versions
pyproject's ranges allow (.ci/requirements-oldest.lock), so that the ranges are what CI proves.

Every unit test and doctest is in it (cheap); of the integration tests, the commit path of every
operation; of the system tests (a real Airflow), one run of each operator family, every example DAG
loaded (the compaction, maintenance and backfill ones run) and the OpenLineage events (the oldest lock
has the extra). Not in it: Spark interoperability, the Celery executor, the browser, the scheduler-driven
run, the fault and property tests, and the slow memory and scale tests (the whole suite has them).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

#: a test module (relative to tests/) -> the names of its compat tests, or ``ALL`` (None) for all of them
ALL = None
COMPAT: dict[str, frozenset[str] | None] = {
    # the commit path, operation by operation (engine on a real catalog and real files)
    "integration/test_commit.py": ALL,
    "integration/test_compaction.py": ALL,
    "integration/test_compaction_commit.py": ALL,
    "integration/test_cow.py": ALL,
    "integration/test_deletes.py": ALL,
    "integration/test_dangling_deletes.py": ALL,
    "integration/test_convert_equality_deletes.py": ALL,
    "integration/test_position_delete_rewrite.py": frozenset(
        {
            "test_small_position_deletes_become_one_file_per_data_file",
            "test_partition_granularity_writes_one_file_per_partition",
            "test_dangling_positions_are_dropped",
            "test_a_retry_with_the_same_commit_id_commits_nothing_more",
            "test_results_committed_twice_land_once",
            "test_an_input_removed_meanwhile_fails_validation_and_leaves_the_table",
            "test_where_selects_partitions",
            "test_nothing_to_do",
            "test_bad_input_is_one_line_and_changes_nothing",
        }
    ),
    "integration/test_rewrite_manifests.py": ALL,
    "integration/test_orphans.py": ALL,
    "integration/test_expire.py": ALL,
    "integration/test_merge.py": ALL,
    "integration/test_cli.py": ALL,
    # the reason for pyarrow>=23 (ParquetWriter's max_rows_per_page)
    "integration/test_compaction_files.py": frozenset({"test_page_row_limit_property_caps_rows_per_page"}),
    # PyArrow's S3 file system (its oldest allowed version) on a real S3 server
    "integration/test_object_store.py": frozenset(
        {"test_compaction_on_s3_keeps_every_row", "test_copy_on_write_delete_and_update_on_s3"}
    ),
    "integration/test_object_store_airflow.py": ALL,
    # a real Airflow: every operator family, the sensors through the example DAGs
    "system/test_example_dags.py": frozenset(
        {
            "test_dagbag_loads_every_example_without_import_errors",
            "test_on_demand_dag_compacts_the_table_with_params",
            "test_on_demand_dag_with_nothing_to_do_succeeds_and_skips_the_commit",
            "test_scheduled_maintenance_dag_senses_then_compacts",
            "test_backfill_dag_compacts_the_data_interval",
        }
    ),
    "system/test_operators_engine.py": frozenset(
        {
            "test_plan_rewrite_commit_compacts_and_keeps_every_row",
            "test_single_task_compaction_with_the_real_engine",
            "test_commit_of_a_stale_plan_fails_without_retry",
            "test_a_retry_of_a_landed_commit_reports_it_and_succeeds",
            "test_a_rewrite_task_logs_its_progress_from_start_to_done",
        }
    ),
    "system/test_partial_progress.py": frozenset(
        {
            "test_erasure_example_deletes_one_users_rows_through_the_planned_commit",
        }
    ),
    "system/test_convert_equality_deletes.py": frozenset(
        {"test_converts_in_one_task_without_touching_data_files", "test_mapped_form_plan_tasks_commit"}
    ),
    "system/test_resolve_equality_deletes.py": frozenset(
        {"test_resolves_the_equality_deletes_in_one_task_and_a_retry_reports_the_landed_commit"}
    ),
    # the events of a real run, all of them right on Airflow 3.1 too (docs/lineage.md)
    "system/test_openlineage.py": ALL,
    "system/test_merge.py": frozenset(
        {
            "test_upsert_operator_takes_the_source_from_an_upstream_tasks_xcom",
            "test_mapped_form_plans_several_tasks_and_commits_them_once",
        }
    ),
}


def mark_compat(items: Iterable[pytest.Item], tests: Path, package: Path) -> None:
    """Add ``compat`` to the unit tests, the doctests and the tests :data:`COMPAT` lists (by function name,
    every parametrization of it); tests/unit/test_compat_subset.py checks that each listed test exists."""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(package) or path.is_relative_to(tests / "unit"):
            item.add_marker("compat")
        elif path.is_relative_to(tests):
            module = path.relative_to(tests).as_posix()
            names = COMPAT.get(module, frozenset())
            if module in COMPAT and (names is ALL or getattr(item, "originalname", item.name) in names):
                item.add_marker("compat")
