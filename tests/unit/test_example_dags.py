"""Every example DAG parses without PyArrow, DataFusion, PyIceberg or the engine: the imports that make
parsing slow. (No time is asserted: a timing in a test says more about the load than the code.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DAGS = sorted((Path(__file__).resolve().parents[2] / "dags_examples").glob("example_*.py"))

# Parse the files one after another in a fresh interpreter, the way the DAG processor does (Airflow
# already imported); report the heavy modules loaded so far by each file, and its tasks.
_PROBE = """
import importlib.util, json, sys
import airflow.sdk
for number, path in enumerate(sys.argv[1:]):
    spec = importlib.util.spec_from_file_location(f"probe_dag_{number}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyarrow", "datafusion", "pyiceberg")
                   or m.startswith("airflow_provider_iceberg_exec.engine"))
    tasks = sorted(module.dag.task_dict)
    print(json.dumps({"path": path, "heavy": heavy, "tasks": tasks}))
"""


@pytest.fixture(scope="module")
def parse_reports() -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *map(str, DAGS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {Path(r["path"]).name: r for r in reports}


COMPACTION_DAGS = {
    "example_iceberg_backfill.py",
    "example_iceberg_on_demand.py",
    "example_iceberg_scheduled_maintenance.py",
}


RESOLVE_DAG = "example_iceberg_resolve_equality_deletes.py"


def test_the_compaction_examples_exist():
    assert {p.name for p in DAGS} >= {*COMPACTION_DAGS, RESOLVE_DAG}


def test_the_resolution_example_is_the_mapped_plan_rewrite_commit(parse_reports):
    assert {"resolve.plan", "resolve.rewrite", "resolve.commit"} <= set(parse_reports[RESOLVE_DAG]["tasks"])


@pytest.mark.parametrize("path", DAGS, ids=lambda p: p.stem)
def test_example_dag_parses_without_heavy_imports(path, parse_reports):
    report = parse_reports[path.name]
    assert report["heavy"] == [], f"{path.name} imports {report['heavy']} at parse time"
    if path.name in COMPACTION_DAGS:
        assert {"compaction.plan", "compaction.rewrite", "compaction.commit"} <= set(report["tasks"])


@pytest.mark.parametrize("path", DAGS, ids=lambda p: p.stem)
def test_example_dag_is_runnable_as_a_script(path):
    assert 'if __name__ == "__main__":\n    dag.test()' in path.read_text()
