"""Work the fault tests run in freshly spawned processes, and the seam that pauses it at a known point.

A fault is injected at a deterministic point: :func:`install_pause` wraps PyIceberg's ``PyArrowFileIO``
(in the child process only) so that opening one chosen file (:data:`SEAMS`) first signals ``reached``
and then waits for ``go``; the parent breaks the component (kills the S3 server) in between, then lets the
child go on. The file I/O itself is PyIceberg's own, against the real server: nothing is faked, the child
is only held at the seam. Children are started and collected with :mod:`tests.integration.workers`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SEAMS", "compact_paused", "install_pause", "rewrite_then_commit_paused"]

_WAIT_SECONDS = 90.0
MiB = 1024 * 1024


def _nth(n: int) -> Callable[[], Callable[[str], bool]]:
    def make() -> Callable[[str], bool]:
        counter = itertools.count(1)
        return lambda _path: next(counter) == n

    return make


def _second_directory() -> Callable[[str], bool]:
    """True for the first path in another directory than the first path's: the next group's first file."""
    first: list[str] = []

    def pause_now(path: str) -> bool:
        directory = path.rsplit("/", 1)[0]
        if not first:
            first.append(directory)
        return directory != first[0]

    return pause_now


def _is_data(path: str) -> bool:
    return "/data/" in path and path.endswith(".parquet")


#: seam name -> (FileIO method, which paths count, a factory of the pause-now test run on each of them)
SEAMS: dict[str, tuple[str, Callable[[str], bool], Callable[[], Callable[[str], bool]]]] = {
    # the first group is rewritten (its output uploaded); the second group opens its first input
    "rewrite-read": ("new_input", _is_data, _second_directory),
    # the first group is rewritten; the second group opens its output file
    "rewrite-write": ("new_output", _is_data, _nth(2)),
    # the commit validated and opens its first manifest
    "commit-manifest": ("new_output", lambda p: "/metadata/" in p and p.endswith(".avro"), _nth(1)),
    # manifests and manifest list are written; the catalog opens the new table metadata file
    "commit-metadata": ("new_output", lambda p: p.endswith(".metadata.json"), _nth(1)),
}


def install_pause(seam: str, reached: Any, go: Any) -> None:
    """Hold the process once at ``seam`` (see :data:`SEAMS`): set ``reached``, wait for ``go``, go on."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    method, counts, make_test = SEAMS[seam]
    original = getattr(PyArrowFileIO, method)
    pause_now = make_test()
    lock = threading.Lock()
    done: list[bool] = []

    def paused(self: Any, location: str) -> Any:
        if counts(location):
            with lock:
                hold = not done and pause_now(location)
                if hold:
                    done.append(True)
            if hold:
                reached.set()
                if not go.wait(_WAIT_SECONDS):
                    raise TimeoutError(f"never released from seam {seam}")
        return original(self, location)

    setattr(PyArrowFileIO, method, paused)


def _table(properties: dict[str, str], table_name: str) -> Any:
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table

    return load_table(load_catalog(CatalogConfig("faults", properties)), table_name)


def _limits(spill_dir: str) -> Any:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

    return ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=spill_dir)


def compact_paused(
    properties: dict[str, str],
    table_name: str,
    options: dict[str, str],
    spill_dir: str,
    commit_id: str,
    seam: str,
    reached: Any,
    go: Any,
) -> dict[str, Any]:
    """``compact()`` (plan, rewrite every group, commit) held once at ``seam``."""
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    table = _table(properties, table_name)
    install_pause(seam, reached, go)
    return compact(table, options=options, limits=_limits(spill_dir), commit_id=commit_id)


def rewrite_then_commit_paused(
    properties: dict[str, str],
    table_name: str,
    options: dict[str, str],
    spill_dir: str,
    commit_id: str,
    results_path: str,
    seam: str,
    reached: Any,
    go: Any,
) -> dict[str, Any]:
    """Plan and rewrite every group, save the results to ``results_path``, then commit held at ``seam``.

    The saved results are what an Airflow commit task gets from XCom again on its retry.
    """
    from airflow_provider_iceberg_exec.engine.ops.compaction import (
        commit_compaction,
        execute_rewrite_task,
        plan_compaction,
    )

    table = _table(properties, table_name)
    plan = plan_compaction(table, options=options)
    results = [execute_rewrite_task(table, task, _limits(spill_dir)) for task in plan["tasks"]]
    with open(results_path, "w") as out:
        json.dump(results, out)
    install_pause(seam, reached, go)
    return commit_compaction(table, results, commit_id=commit_id)
