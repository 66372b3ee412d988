"""OpenLineage events emitted by a real dag.test() run with Airflow's OpenLineage provider on.

The run (``openlineage_dag.py``, in a subprocess whose environment turns the provider on with its file
transport) compacts ``demo.events`` in one task, then deletes rows by copy-on-write through plan, mapped
rewrite and commit. The test reads the events the provider wrote and checks them against the tasks'
results and against the table as PyIceberg reads it: START and COMPLETE per task, the table named after
its location, the schema, the snapshot before and after, and what each commit added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.helpers import live_checksum
from tests.system.conftest import REPO, TABLE, connection_json
from tests.system.openlineage_dag import DAG_ID, DELETE_WHERE

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def lineage_run(airflow_db, tmp_path_factory) -> dict[str, Any]:
    """The events and task results of one run (shared by the tests: a run takes a minute), with the
    table's head snapshot before it."""
    from airflow_provider_iceberg_exec.demo import demo_catalog_properties, make_fragmented_table
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    workdir = tmp_path_factory.mktemp("lineage")
    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(str(workdir))))
    table = make_fragmented_table(catalog, TABLE, num_files=12, rows_per_file=300)
    before = table.current_snapshot().snapshot_id
    events_file, results_file = workdir / "events.jsonl", workdir / "results.json"
    env = {
        **os.environ,
        "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT": connection_json(workdir),
        "AIRFLOW__ICEBERG_EXEC__SPILL_DIR": str(workdir / "spill"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "iceberg-exec-tests",
        "PYICEBERG_HOME": str(workdir),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.system.openlineage_dag", str(results_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    results = json.loads(results_file.read_text())
    assert results["state"] == "success", results["tasks"]
    lines = events_file.read_text().splitlines() if events_file.exists() else []
    table.refresh()
    return {
        "events": [json.loads(line) for line in lines if line.strip()],
        "tasks": results["tasks"],
        "before": before,
        "table": table,
    }


def _event(run: dict[str, Any], task_id: str, event_type: str, map_index: int = -1) -> dict[str, Any]:
    """The one task event of ``event_type`` for ``task_id`` (and map index: named in the START event
    only, the COMPLETE one has the same run id)."""
    starts = [
        event
        for event in run["events"]
        if event.get("eventType") == "START"
        and event["job"]["name"] == f"{DAG_ID}.{task_id}"
        and event["run"]["facets"].get("airflow_mappedTask", {}).get("mapIndex", -1) == map_index
    ]
    names = sorted({(e["job"]["name"], e.get("eventType")) for e in run["events"]})
    assert len(starts) == 1, (task_id, map_index, names)
    run_id = starts[0]["run"]["runId"]
    found = [e for e in run["events"] if e.get("eventType") == event_type and e["run"]["runId"] == run_id]
    assert len(found) == 1, (task_id, event_type, map_index, names)
    return found[0]


def _one(datasets: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(datasets) == 1, datasets
    return datasets[0]


def _version(dataset: dict[str, Any]) -> int:
    return int(dataset["facets"]["version"]["datasetVersion"])


def _summary(table, snapshot_id: int) -> dict[str, str]:
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    assert snapshot.summary is not None
    return {key: str(value) for key, value in snapshot.summary.additional_properties.items()}


def test_every_task_emits_start_and_complete_with_the_table_named_after_its_location(lineage_run):
    """Each task's START and COMPLETE carry the table: namespace ``file``, name its path, its schema."""
    table = lineage_run["table"]
    location = urlsplit(table.location().rstrip("/"))
    columns = [(field.name, str(field.field_type)) for field in table.schema().fields]
    rewrites = [key for key in lineage_run["tasks"] if key.startswith("rewrite[")]
    assert rewrites
    tasks = [("compact", -1), ("plan", -1), ("commit", -1)]
    tasks += [("rewrite", int(key[len("rewrite[") : -1])) for key in rewrites]
    for task_id, map_index in tasks:
        for event_type in ("START", "COMPLETE"):
            dataset = _one(_event(lineage_run, task_id, event_type, map_index)["inputs"])
            assert (dataset["namespace"], dataset["name"]) == ("file", location.path)
            fields = dataset["facets"]["schema"]["fields"]
            assert [(field["name"], field["type"]) for field in fields] == columns
            assert dataset["facets"]["symlinks"]["identifiers"] == [
                {"namespace": "iceberg://demo", "name": "demo.events", "type": "TABLE"}
            ]


def test_compaction_reports_the_snapshots_before_and_after_and_what_it_wrote(lineage_run):
    """Compaction: input at the head before the run, output at its snapshot, statistics = its result."""
    table = lineage_run["table"]
    result = lineage_run["tasks"]["compact[-1]"]["value"]
    (snapshot_id,) = result["snapshot_ids"]
    start = _event(lineage_run, "compact", "START")
    assert _version(_one(start["inputs"])) == lineage_run["before"]
    complete = _event(lineage_run, "compact", "COMPLETE")
    assert _version(_one(complete["inputs"])) == lineage_run["before"]
    output = _one(complete["outputs"])
    assert _version(output) == snapshot_id
    summary = _summary(table, snapshot_id)
    assert output["outputFacets"]["outputStatistics"] == {
        "rowCount": int(summary["added-records"]),
        "size": int(summary["added-files-size"]),
        "fileCount": result["added_data_files_count"],
        **{key: value for key, value in output["outputFacets"]["outputStatistics"].items() if key[0] == "_"},
    }
    assert int(summary["added-records"]) == 12 * 300  # every row rewritten, none changed
    facet = complete["run"]["facets"]["icebergExec"]
    assert (facet["operation"], facet["changesRows"]) == ("compaction", False)
    assert facet["snapshotIdBefore"] == lineage_run["before"]
    assert facet["committedSnapshotIds"] == [snapshot_id]
    assert facet["counters"]["added_data_files_count"] == result["added_data_files_count"]


def test_copy_on_write_commit_reports_the_delete_and_what_it_rewrote(lineage_run):
    """The CoW commit: input at compaction's snapshot, output at its own; rows/bytes/files = its result."""
    table = lineage_run["table"]
    compacted = lineage_run["tasks"]["compact[-1]"]["value"]["snapshot_ids"][-1]
    result = lineage_run["tasks"]["commit[-1]"]["value"]
    (snapshot_id,) = result["snapshot_ids"]
    assert table.current_snapshot().snapshot_id == snapshot_id
    complete = _event(lineage_run, "commit", "COMPLETE")
    assert _version(_one(complete["inputs"])) == compacted
    output = _one(complete["outputs"])
    assert _version(output) == snapshot_id
    statistics = output["outputFacets"]["outputStatistics"]
    written_rows = result["rewritten_rows"] + result["updated_rows"] + result["inserted_rows"]
    assert (statistics["rowCount"], statistics["size"], statistics["fileCount"]) == (
        written_rows,
        result["written_bytes"],
        result["added_data_files_count"],
    )
    assert result["deleted_rows"] > 0
    facet = complete["run"]["facets"]["icebergExec"]
    assert (facet["operation"], facet["changesRows"]) == ("delete", True)
    assert facet["committedSnapshotIds"] == [snapshot_id]
    assert live_checksum(table) == live_checksum(table, row_filter=f"not ({DELETE_WHERE})")
    assert live_checksum(table, row_filter=DELETE_WHERE)[0] == 0


def test_plan_and_mapped_rewrites_only_read_the_table_at_the_planned_snapshot(lineage_run):
    """Planning and the mapped rewrites commit nothing: input at the planned snapshot, no output."""
    compacted = lineage_run["tasks"]["compact[-1]"]["value"]["snapshot_ids"][-1]
    rewrites = [key for key in lineage_run["tasks"] if key.startswith("rewrite[")]
    for task_id, map_index in [("plan", -1)] + [("rewrite", int(k[len("rewrite[") : -1])) for k in rewrites]:
        complete = _event(lineage_run, task_id, "COMPLETE", map_index)
        assert _version(_one(complete["inputs"])) == compacted
        assert complete["outputs"] == []
        assert complete["run"]["facets"]["icebergExec"]["operation"] == "delete"
