"""The OpenLineage facet methods of the operators, on a real SQLite table; and life without the provider.

What the OpenLineage provider emits from them in a real run is checked in tests/system/test_openlineage.py.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk import BaseOperator

from airflow_provider_iceberg_exec import operators
from airflow_provider_iceberg_exec.operators.commit import CommitOperator
from airflow_provider_iceberg_exec.operators.compaction import (
    BoundedRewriteOperator,
    CompactionOperator,
    CompactionPlanOperator,
    CompactionRewriteOperator,
    OneTaskCommitOperator,
    TablePlanOperator,
)
from airflow_provider_iceberg_exec.operators.lineage import (
    OpenLineageMixin,
    TableLineage,
    schema_fields,
    snapshot_statistics,
)
from airflow_provider_iceberg_exec.operators.maintenance import ExpireSnapshotsOperator
from tests.unit.support import ENGINE_COMPACTION, TABLE, plan_of

COMPACTION = "airflow_provider_iceberg_exec.operators.compaction"
REPO = Path(__file__).resolve().parents[3]
DAGS = sorted((REPO / "dags_examples").glob("example_*.py"))


def _operator_classes() -> list[type]:
    """Every operator class defined in the package's operators/ modules."""
    found = []
    for info in pkgutil.iter_modules(operators.__path__):
        module = importlib.import_module(f"{operators.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseOperator) and cls.__module__ == module.__name__:
                found.append(cls)
    return found


@pytest.mark.parametrize("cls", _operator_classes(), ids=lambda cls: cls.__name__)
def test_every_operator_reports_lineage_and_says_what_it_does_to_the_table(cls):
    """A new operator without the mixin, or without saying its kind of change, would report nothing."""
    assert issubclass(cls, OpenLineageMixin)
    if cls in (BoundedRewriteOperator, OneTaskCommitOperator, TablePlanOperator):  # abstract bases
        return
    assert cls.table_lineage != OpenLineageMixin.table_lineage, f"{cls.__name__} sets no table_lineage"
    assert cls.table_lineage.output in ("", "commit", "cleanup")


def test_on_start_reports_the_table_at_its_head_with_its_schema(sqlite_table):
    operator = CompactionOperator(task_id="compact", table=TABLE)
    lineage = operator.get_openlineage_facets_on_start()
    assert lineage is not None
    (dataset,) = lineage.inputs
    assert dataset.namespace == "file"
    assert dataset.name == sqlite_table.location().removeprefix("file://")
    assert dataset.facets["version"].datasetVersion == str(sqlite_table.current_snapshot().snapshot_id)
    assert [(f.name, f.type) for f in dataset.facets["schema"].fields] == [
        ("id", "long"),
        ("event_date", "date"),
        ("payload", "string"),
    ]
    (output,) = lineage.outputs  # a committing task names its output at the start, without a version
    assert "version" not in output.facets
    assert lineage.run_facets["icebergExec"].operation == "compaction"


def test_execute_keeps_its_result_for_the_complete_event(sqlite_table, monkeypatch):
    """The plan's COMPLETE names the snapshot it planned on (its result's), and no output."""
    head = sqlite_table.current_snapshot()
    assert head.parent_snapshot_id is not None
    planned_on = head.parent_snapshot_id
    plan = {**plan_of([]), "base_snapshot_id": planned_on}
    monkeypatch.setattr(f"{ENGINE_COMPACTION}.plan_compaction", lambda table, **kw: plan)
    tasks = [{"schema": "iceberg-exec/rewrite-task@1", "table": TABLE, "base_snapshot_id": planned_on}]
    monkeypatch.setattr(
        "airflow_provider_iceberg_exec.operators.compaction.stage_task_specs", lambda *a, **k: tasks
    )
    operator = CompactionPlanOperator(task_id="plan", table=TABLE)
    assert operator.execute(context={}) == tasks
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert lineage is not None
    (dataset,) = lineage.inputs
    assert dataset.facets["version"].datasetVersion == str(planned_on)
    assert lineage.outputs == []


def test_the_methods_report_what_the_executed_copy_of_the_task_rendered_and_returned(
    sqlite_table, monkeypatch
):
    """Airflow 3.1's task runner renders and executes a copy of the task (``ti.task``), but its listener
    calls the methods on the task from before the copy (templates unrendered, no result): they report
    from the copy, the START one found through the running task's context."""
    from airflow.sdk.execution_time.context import set_current_context

    planned_on = sqlite_table.current_snapshot().parent_snapshot_id
    assert planned_on is not None
    plan = {**plan_of([]), "base_snapshot_id": planned_on}
    monkeypatch.setattr(f"{ENGINE_COMPACTION}.plan_compaction", lambda table, **kw: plan)
    tasks = [{"schema": "iceberg-exec/rewrite-task@1", "table": TABLE, "base_snapshot_id": planned_on}]
    monkeypatch.setattr(f"{COMPACTION}.stage_task_specs", lambda *a, **k: tasks)
    operator = CompactionPlanOperator(task_id="plan", table="{{ params.table }}")
    executed = operator.prepare_for_execution()
    executed.render_template_fields({"params": {"table": TABLE}})
    task_instance = SimpleNamespace(task=executed)  # what the methods use of Airflow's task instance
    with set_current_context({"ti": task_instance}):
        start = operator.get_openlineage_facets_on_start()
    assert executed.execute(context={}) == tasks
    complete = operator.get_openlineage_facets_on_complete(task_instance)
    failure = operator.get_openlineage_facets_on_failure(task_instance)
    assert (operator.table, operator._lineage_result) == ("{{ params.table }}", None)  # the copy's, not its
    head = str(sqlite_table.current_snapshot().snapshot_id)
    for lineage, version in ((start, head), (complete, str(planned_on)), (failure, head)):
        assert lineage is not None
        (dataset,) = lineage.inputs
        assert dataset.name == sqlite_table.location().removeprefix("file://")
        assert dataset.facets["version"].datasetVersion == version
    assert operator.get_openlineage_facets_on_start() is None  # alone, it has no table it can load


def test_without_the_tasks_result_the_complete_event_names_no_version(sqlite_table):
    """A commit's COMPLETE without the result of its execute(): the head is not the snapshot it read and
    may not be the one it committed, so no version rather than a wrong one; no statistics either."""
    operator = CommitOperator(task_id="commit", results=[], table=TABLE)
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert lineage is not None
    (before,), (after,) = lineage.inputs, lineage.outputs
    assert "version" not in before.facets
    assert "version" not in after.facets
    assert after.outputFacets == {}
    facet = lineage.run_facets["icebergExec"]
    assert (facet.snapshotIdBefore, facet.committedSnapshotIds) == (None, [])


def test_a_commit_reports_before_and_after_and_what_its_snapshots_added(sqlite_table):
    """Before: the parent of the first committed snapshot; after: the last; statistics: their summaries."""
    snapshots = sqlite_table.snapshots()
    committed = [snapshots[-2].snapshot_id, snapshots[-1].snapshot_id]
    operator = CommitOperator(task_id="commit", results=[], table=TABLE)
    operator._lineage_result = {"schema": "iceberg-exec/compaction-result@1", "snapshot_ids": committed}
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert lineage is not None
    (before,), (after,) = lineage.inputs, lineage.outputs
    assert before.facets["version"].datasetVersion == str(snapshots[-3].snapshot_id)
    assert after.facets["version"].datasetVersion == str(committed[-1])
    statistics = after.outputFacets["outputStatistics"]
    assert (statistics.rowCount, statistics.fileCount) == (20, 2)  # two appends of 10 rows, one file each
    assert statistics.size == snapshot_statistics(sqlite_table, committed)["bytes"] > 0
    facet = lineage.run_facets["icebergExec"]
    assert (facet.operation, facet.changesRows, facet.committedSnapshotIds) == (
        "compaction",
        False,
        committed,
    )


def test_copy_on_write_is_reported_as_the_row_changing_operation_it_commits():
    operator = CommitOperator(task_id="commit", results=[], table=TABLE)
    assert operator._lineage_operation(
        {"schema": "iceberg-exec/cow-commit-result@1", "operation": "update"}
    ) == ("update")
    rewrite = CompactionRewriteOperator(task_id="rewrite", task_spec={"table": TABLE})
    assert rewrite._lineage_operation(None) == "compaction"


def test_a_dry_run_expiry_changes_nothing_and_reports_no_output(sqlite_table):
    operator = ExpireSnapshotsOperator(task_id="expire", table=TABLE)
    operator._lineage_result = {"schema": "iceberg-exec/expire-snapshots-result@1", "dry_run": True}
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert lineage is not None
    assert lineage.outputs == []
    assert operator.table_lineage == TableLineage("expire-snapshots", output="cleanup")


def test_a_failure_in_lineage_code_never_fails_the_task(sqlite_table, caplog):
    """OpenLineage's contract: the facet methods log and return nothing, they never raise."""
    operator = CompactionOperator(task_id="compact", table="ns.missing")
    assert operator.get_openlineage_facets_on_start() is None
    assert operator.get_openlineage_facets_on_complete(None) is None
    assert operator.get_openlineage_facets_on_failure(None) is None
    assert "No lineage for task compact" in caplog.text


def test_nested_columns_keep_their_fields():
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, NestedField, StringType, StructType

    point = StructType(NestedField(3, "x", LongType(), required=False))
    schema = Schema(
        NestedField(1, "id", LongType(), required=True, doc="the key"),
        NestedField(2, "points", ListType(4, point, element_required=False), required=False),
        NestedField(5, "name", StringType(), required=False),
    )
    assert schema_fields(schema) == [
        {"name": "id", "type": "long", "description": "the key"},
        {"name": "points", "type": str(schema.find_type(2)), "fields": [{"name": "x", "type": "long"}]},
        {"name": "name", "type": "string"},
    ]


# A fresh interpreter, as the DAG processor parses: import every operator module and every example DAG,
# optionally with the OpenLineage packages made unimportable, and call the facet methods.
_PROBE = """
import importlib, importlib.abc, importlib.util, json, pkgutil, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "openlineage" or name.startswith(("openlineage.", "airflow.providers.openlineage")):
            raise ImportError(f"{name} is blocked")
        return None

def uninstalled(distributions):
    def without_openlineage(**kwargs):
        for dist in distributions(**kwargs):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if not name.startswith(("openlineage-", "apache-airflow-providers-openlineage")):
                yield dist
    return without_openlineage

block, table, dags = sys.argv[1] == "block", sys.argv[2], sys.argv[3:]
if block:  # as if the extra were not installed: no module, no distribution (provider entry point)
    import importlib.metadata, importlib_metadata
    sys.meta_path.insert(0, Blocked())
    for metadata in (importlib.metadata, importlib_metadata):
        metadata.distributions = uninstalled(metadata.distributions)
import airflow_provider_iceberg_exec.operators as operators
for info in pkgutil.iter_modules(operators.__path__):
    importlib.import_module(f"{operators.__name__}.{info.name}")
tasks = 0
for number, path in enumerate(dags):
    spec = importlib.util.spec_from_file_location(f"probe_dag_{number}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tasks += len(module.dag.task_dict)
loaded = sorted(m for m in sys.modules if m.startswith(("openlineage", "airflow.providers.openlineage")))
from airflow_provider_iceberg_exec.operators.compaction import CompactionOperator
operator = CompactionOperator(task_id="compact", table=table)
facets = [operator.get_openlineage_facets_on_start(), operator.get_openlineage_facets_on_complete(None),
          operator.get_openlineage_facets_on_failure(None)]
print(json.dumps({"loaded_at_parse": loaded, "tasks": tasks, "facets": [f is not None for f in facets]}))
"""


def _probe(mode: str, env_table: str) -> dict:
    import os

    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, env_table, *map(str, DAGS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_the_provider_operators_and_example_dags_load_and_lineage_is_empty(sqlite_table):
    """The optional extra: with the OpenLineage packages unimportable nothing breaks; the facet methods
    (never called then) return nothing."""
    report = _probe("block", TABLE)
    assert report["tasks"] > 0
    assert report["facets"] == [False, False, False]


def test_parsing_never_imports_openlineage_even_when_it_is_installed(sqlite_table):
    """Only Airflow's own provider discovery touches the provider (its provider info) at parse time."""
    report = _probe("installed", TABLE)
    discovery = {"airflow.providers.openlineage", "airflow.providers.openlineage.get_provider_info"}
    assert set(report["loaded_at_parse"]) - discovery == set()
    assert report["facets"] == [True, True, True]
