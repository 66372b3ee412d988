"""Constants and document builders shared by the unit tests (the `ns.events` table of `sqlite_table`)."""

from __future__ import annotations

import json

ENGINE_COMPACTION = "airflow_provider_iceberg_exec.engine.ops.compaction"
TABLE = "ns.events"
PARTIAL = {"partial-progress.enabled": "true"}


def connection_json(tmp_path, **extra) -> str:
    """An ``iceberg_exec`` connection (JSON) of the SQLite catalog under ``tmp_path``."""
    return json.dumps(
        {
            "conn_type": "iceberg_exec",
            "host": f"sqlite:///{tmp_path}/catalog.db",
            "schema": f"file://{tmp_path}/warehouse",
            "extra": {"catalog_name": "demo", **extra},
        }
    )


def append_rows(table, n: int = 1) -> None:
    """Append ``n`` one-row snapshots to the ``ns.events`` table of the ``sqlite_table`` fixture."""
    import pyarrow as pa

    schema = table.schema().as_arrow()
    for i in range(n):
        table.append(pa.table({"id": [1000 + i], "event_date": [None], "payload": ["x"]}, schema=schema))


def data_file(path: str) -> dict:
    """A REST content-file JSON document of a 1000-byte, 10-row data file."""
    return {
        "spec-id": 0,
        "content": "data",
        "file-path": path,
        "file-format": "parquet",
        "partition": [],
        "file-size-in-bytes": 1000,
        "record-count": 10,
    }


def rewrite_spec(group_id: int, n_files: int, batch: int = 0, options: dict | None = None) -> dict:
    """A rewrite-task spec of ``ns.events``: group ``group_id`` of ``n_files`` data files."""
    return {
        "schema": "iceberg-exec/rewrite-task@1",
        "table": TABLE,
        "branch": "main",
        "group_id": group_id,
        "commit_batch": batch,
        "base_snapshot_id": 1,
        "options": options or {},
        "data_files": [
            {"data-file": data_file(f"file:///w/g{group_id}/in-{i}.parquet"), "delete-files": []}
            for i in range(n_files)
        ],
    }


def rewrite_result(spec: dict, added: list[str] | None = None) -> dict:
    """The rewrite result of ``spec``: its files rewritten into the ``added`` locations."""
    return {
        "schema": "iceberg-exec/rewrite-result@1",
        "table": spec["table"],
        "branch": "main",
        "group_id": spec["group_id"],
        "commit_batch": spec["commit_batch"],
        "base_snapshot_id": 1,
        "options": spec["options"],
        "rewritten_data_files": [f["data-file"] for f in spec["data_files"]],
        "added_data_files": [data_file(p) for p in added or []],
    }


def cow_result(task_id: int, added: list[str]) -> dict:
    """A copy-on-write result of task ``task_id`` that wrote the ``added`` locations."""
    return {
        "schema": "iceberg-exec/cow-result@1",
        "table": TABLE,
        "branch": "main",
        "operation": "delete",
        "where": "id = 1",
        "set": None,
        "base_snapshot_id": 1,
        "isolation_level": "serializable",
        "task_id": task_id,
        "removed_data_files": [data_file(f"file:///w/cow-in-{task_id}.parquet")],
        "added_data_files": [data_file(p) for p in added],
    }


def plan_of(tasks: list[dict]) -> dict:
    """A compaction plan document holding ``tasks``, as the engine's planner returns it."""
    return {
        "schema": "iceberg-exec/compaction-plan@1",
        "table": TABLE,
        "branch": "main",
        "base_snapshot_id": 1,
        "strategy": "binpack",
        "sort_order": None,
        "where": None,
        "options": {},
        "tasks": tasks,
        "skipped": [],
        "commit_batches": [[t["group_id"] for t in tasks]] if tasks else [],
    }
