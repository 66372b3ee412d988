"""Work run in separate, freshly spawned Python processes by the integration tests.

A worker is a module-level function; :func:`start_child` runs it in a ``spawn`` process (no fork of a
process holding threads and open connections) and :func:`child_outcome` collects its return value or its
error, bounded in time. Only the engine and PyIceberg are imported here, so a child starts quickly.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    execute_rewrite_task,
    plan_compaction,
)

__all__ = ["append_batches", "child_outcome", "compact_at_barrier", "run_in_child", "start_child"]

MiB = 1024 * 1024
_WAIT_SECONDS = 60.0


def _child_main(target: Callable[..., Any], args: tuple[Any, ...], results: Any) -> None:
    try:
        results.put(("ok", target(*args)))
    except BaseException as err:  # reported to the parent, which inspects it
        results.put(("error", (type(err).__name__, str(err), traceback.format_exc())))


def start_child(target: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    """Start ``target(*args)`` in a fresh (spawned) Python process; returns ``(process, results queue)``."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_child_main, args=(target, args, results), daemon=True)
    process.start()
    return process, results


def child_outcome(process: Any, results: Any, timeout: float = 120.0) -> tuple[str, Any]:
    """Wait (bounded) for a child: ``("ok", value)`` or ``("error", (type name, message, traceback))``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            outcome: tuple[str, Any] = results.get(timeout=0.5)
        except queue_module.Empty:
            if not process.is_alive():
                raise AssertionError(
                    f"child process died with exit code {process.exitcode} and no result"
                ) from None
            continue
        process.join(timeout=30)
        return outcome
    process.kill()
    raise AssertionError(f"child process gave no result within {timeout:.0f} s")


def run_in_child(target: Callable[..., Any], *args: Any, timeout: float = 120.0) -> Any:
    """Run ``target(*args)`` in a fresh Python process and return its value; its error fails the caller."""
    status, value = child_outcome(*start_child(target, *args), timeout=timeout)
    if status != "ok":
        name, message, trace = value
        raise AssertionError(f"child raised {name}: {message}\n{trace}")
    return value


def _table(catalog_name: str, properties: dict[str, str], table_name: str) -> Any:
    return load_table(load_catalog(CatalogConfig(catalog_name, properties)), table_name)


def compact_at_barrier(
    catalog_name: str,
    properties: dict[str, str],
    table_name: str,
    spill_dir: str,
    planned: Any,
    go: Any,
) -> dict[str, Any]:
    """Plan and rewrite every group, then signal ``planned``, wait for ``go`` and commit.

    :returns: the commit summary plus ``base_snapshot_id`` and the rewritten and added file paths.
    """
    table = _table(catalog_name, properties, table_name)
    plan = plan_compaction(table, options={"min-input-files": "2"})
    limits = ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=spill_dir)
    results = [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]
    planned.set()
    if not go.wait(_WAIT_SECONDS):
        raise TimeoutError("never told to commit")
    added = [f["file-path"] for r in results for f in r["added_data_files"]]
    summary = commit_compaction(table, results, commit_id=f"compact-{uuid.uuid4().hex}")
    return {**summary, "base_snapshot_id": plan["base_snapshot_id"], "added_paths": added}


def append_batches(
    catalog_name: str,
    properties: dict[str, str],
    table_name: str,
    batches: int,
    rows_per_batch: int,
    first_id: int,
    start: Any,
    appended_once: Any,
) -> list[int]:
    """Wait for ``start``, then append ``batches`` batches of demo rows, one commit each.

    Rows are the demo table's rows with ids from ``first_id`` on; ``appended_once`` is set after the first
    commit. :returns: the snapshot ids of the appends.
    """
    from airflow_provider_iceberg_exec.demo import _demo_batch

    table = _table(catalog_name, properties, table_name)
    if not start.wait(_WAIT_SECONDS):
        raise TimeoutError("never told to start")
    snapshots = []
    for number in range(batches):
        table.append(_demo_batch(first_id + number * rows_per_batch, rows_per_batch, seed=0))
        snapshots.append(table.current_snapshot().snapshot_id)
        appended_once.set()
    return snapshots
