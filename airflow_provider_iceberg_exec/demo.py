"""The demo: a fragmented table in a local SQLite catalog, compacted, with a before/after report.

``python -m airflow_provider_iceberg_exec.demo [--workdir DIR]`` or ``iceberg-exec demo``. The same table
builder serves the tests' fixtures and the benchmarks.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.progress import Progress

__all__ = ["demo_catalog_properties", "live_rows_checksum", "make_fragmented_table", "run_demo"]

DEMO_TABLE = "demo.events"


def demo_catalog_properties(workdir: str) -> dict[str, str]:
    """The embedded default catalog: SQLite file and a local warehouse under ``workdir``."""
    workdir = os.path.abspath(workdir)
    return {
        "type": "sql",
        "uri": f"sqlite:///{workdir}/catalog.db",
        "warehouse": f"file://{workdir}/warehouse",
    }


def _demo_batch(start: int, rows: int, seed: int) -> pa.Table:
    import pyarrow as pa

    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    ids = list(range(start, start + rows))
    digest = [
        int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "little") for i in ids
    ]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "user_id": pa.array([d % 100_000 for d in digest], pa.int64()),
            "region": pa.array([("eu", "us", "apac")[d % 3] for d in digest], pa.string()),
            "amount": pa.array([decimal.Decimal(d % 1_000_000) / 100 for d in digest], pa.decimal128(12, 2)),
            "score": pa.array([(d % 10_000) / 7.0 if d % 50 else None for d in digest], pa.float64()),
            "event_ts": pa.array(
                [base + datetime.timedelta(seconds=d % (86400 * 7)) for d in digest],
                pa.timestamp("us", "UTC"),
            ),
            "payload": pa.array([f"event-{d:x}" for d in digest], pa.string()),
        }
    )


def make_fragmented_table(
    catalog: Catalog,
    identifier: str,
    *,
    num_files: int,
    rows_per_file: int,
    partitioned: bool = True,
    seed: int = 0,
) -> Table:
    """Create ``identifier`` and append ``num_files`` small appends to it, one commit each.

    Partitioned tables are partitioned by ``region`` (identity), so each append writes one file per region.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    schema = _demo_batch(0, 1, seed).schema
    table = catalog.create_table(identifier, schema=schema)
    if partitioned:
        with table.update_spec() as update:
            update.add_identity("region")
    del PartitionField, PartitionSpec, IdentityTransform
    for number in range(num_files):
        table.append(_demo_batch(number * rows_per_file, rows_per_file, seed))
    return table


def live_rows_checksum(table: Table) -> tuple[int, str]:
    """``(rows, checksum)``: an order-independent digest of every live row, read by PyIceberg's scan."""
    total, count = 0, 0
    for batch in table.scan().to_arrow_batch_reader():
        for row in batch.to_pylist():
            text = repr(sorted((k, repr(v)) for k, v in row.items()))
            total = (
                total + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            ) & ((1 << 64) - 1)
            count += 1
    return count, f"{total:016x}"


def _table_report(table: Table) -> dict[str, Any]:
    table.refresh()
    files = [task.file for task in table.scan().plan_files()]
    snapshot = table.current_snapshot()
    rows, checksum = live_rows_checksum(table)
    return {
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "operation": snapshot.summary.operation.value if snapshot and snapshot.summary else None,
        "data_files": len(files),
        "total_bytes": sum(f.file_size_in_bytes for f in files),
        "rows": rows,
        "checksum": checksum,
    }


_DEMO_OPTIONS = {"target-file-size-bytes": str(1 << 20), "min-input-files": "2"}


def _compact_with_engine(table: Table, workdir: str, memory_limit: str) -> Mapping[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits, parse_byte_size
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    limits = ResourceLimits(
        memory_limit_bytes=parse_byte_size(memory_limit), spill_dir=os.path.join(workdir, "spill")
    )
    return compact(table, options=_DEMO_OPTIONS, limits=limits)


def _compact_with_airflow(workdir: str, memory_limit: str, out: Any, *, verbose: bool) -> Mapping[str, Any]:
    """Run the on-demand example DAG with ``dag.test()`` on a SQLite Airflow metadata DB in ``workdir``.

    Airflow's own log lines go to a file (printed here first) unless ``verbose``; the demo shows the run
    task by task instead, with the engine's progress.
    """
    import importlib.util
    import json
    import subprocess
    from pathlib import Path

    dag_file = Path(__file__).resolve().parents[1] / "dags_examples" / "example_iceberg_on_demand.py"
    if not dag_file.exists():
        raise SystemExit(f"the example DAG {dag_file} is missing; run the demo from a checkout of the repo")
    home = os.path.join(workdir, "airflow")
    os.makedirs(home, exist_ok=True)
    # Airflow reads its configuration at its first import: set it up before that.
    os.environ["AIRFLOW_HOME"] = home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dag_file.parent)
    os.environ["AIRFLOW__ICEBERG_EXEC__SPILL_DIR"] = os.path.join(workdir, "spill")
    os.environ["AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT"] = json.dumps(
        {
            "conn_type": "iceberg_exec",
            "host": f"sqlite:///{workdir}/catalog.db",
            "schema": f"file://{workdir}/warehouse",
            "extra": {"catalog_type": "sql", "catalog_name": "demo"},
        }
    )
    if not os.path.exists(os.path.join(home, "airflow.db")):
        print("preparing the Airflow metadata database (airflow db migrate) ...", file=out, flush=True)
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        done = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"airflow db migrate failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    log_path = os.path.join(home, "demo-run.log")
    if not verbose:
        print(f"Airflow's own log lines go to {log_path} (--verbose prints them here)", file=out, flush=True)
    with _airflow_output(log_path, out, verbose=verbose) as screen:
        spec = importlib.util.spec_from_file_location("iceberg_exec_demo_dag", dag_file)
        if spec is None or spec.loader is None:
            raise SystemExit(f"cannot load {dag_file}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"running the DAG {module.dag.dag_id} (dag.test()), task by task:", file=screen, flush=True)
        with _watching(screen):
            run = module.dag.test(
                run_conf={
                    "table": DEMO_TABLE,
                    "target_file_size_bytes": int(_DEMO_OPTIONS["target-file-size-bytes"]),
                    "min_input_files": int(_DEMO_OPTIONS["min-input-files"]),
                    "memory_limit": memory_limit,
                }
            )
    instances = run.get_task_instances()
    print(f"Airflow DAG run {run.dag_id} / {run.run_id}: {run.state}", file=out)
    if str(run.state) != "success":
        for ti in sorted(instances, key=lambda ti: (ti.task_id, ti.map_index)):
            print(f"  {ti.task_id}[{ti.map_index}]: {ti.state}", file=out)
        print(f"Airflow's log lines: {log_path}", file=out)
        raise SystemExit(1)
    commit = next(ti for ti in instances if ti.task_id.endswith("commit"))
    result = commit.xcom_pull(task_ids=commit.task_id, dag_id=run.dag_id, run_id=run.run_id)
    return dict(result or {})


@contextmanager
def _airflow_output(log_path: str, out: Any, *, verbose: bool) -> Iterator[Any]:
    """Send what Airflow prints (its structlog lines on stdout and stderr) to ``log_path``; yield the
    stream the demo itself writes to, still the screen."""
    if verbose:
        yield out
        return
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    # The demo's own stream: a copy of the terminal's descriptor when it writes to stdout or stderr.
    screen = os.fdopen(os.dup(fd), "w", buffering=1) if fd in (1, 2) else out
    try:
        with open(log_path, "w") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield screen
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for descriptor in saved:
            os.close(descriptor)
        if screen is not out:
            screen.close()


@contextmanager
def _watching(screen: Any) -> Iterator[None]:
    """Show each task as it starts and ends, and the engine's progress while it runs."""
    from airflow_provider_iceberg_exec.compat import get_listener_manager
    from airflow_provider_iceberg_exec.engine.progress import listening

    watcher = _task_watcher(screen)
    manager = get_listener_manager()
    manager.pm.register(watcher)
    try:
        with listening(_progress_listener(screen)):
            yield
    finally:
        manager.pm.unregister(watcher)


def _progress_listener(screen: Any) -> Callable[[Progress], None]:
    """A bar on a terminal; elsewhere one line with every figure when an operation is done."""
    isatty = getattr(screen, "isatty", None)
    if isatty is not None and isatty():
        from airflow_provider_iceberg_exec.cli.progress import ProgressBar

        return ProgressBar(screen, redirect=False, indent="    ")

    def done_line(event: Progress) -> None:
        if event.phase == "done":
            print(f"    {event.describe()}", file=screen, flush=True)

    return done_line


def _task_watcher(screen: Any) -> Any:
    """An Airflow listener printing each task instance of the demo's run as it starts and ends."""
    from airflow.listeners import hookimpl

    started: dict[str, float] = {}

    def name_of(task_instance: Any) -> str:
        index = getattr(task_instance, "map_index", -1)
        suffix = f"[{index}]" if isinstance(index, int) and index >= 0 else ""
        return f"{task_instance.task_id}{suffix}"

    def end(task_instance: Any, state: str) -> None:
        seconds = time.monotonic() - started.pop(name_of(task_instance), time.monotonic())
        print(f"    {state} in {seconds:.1f} s", file=screen, flush=True)

    class TaskWatcher:
        @hookimpl
        def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
            started[name_of(task_instance)] = time.monotonic()
            print(f"  > {name_of(task_instance)}", file=screen, flush=True)

        @hookimpl
        def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
            end(task_instance, "success")

        @hookimpl
        def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
            end(task_instance, "FAILED")

    return TaskWatcher()


def run_demo(
    workdir: str,
    *,
    memory_limit: str = "256MiB",
    out: Any = None,
    through_airflow: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Build the fragmented demo table, compact it, and print the before/after report.

    :param through_airflow: run the on-demand example DAG with Airflow's ``dag.test()`` (the default),
        or call the engine directly.
    :param verbose: print Airflow's own log lines too (by default they go to a file whose path is printed).
    """
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    out = out or sys.stdout
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(workdir)))
    if catalog.table_exists(DEMO_TABLE):
        catalog.purge_table(DEMO_TABLE)
    table = make_fragmented_table(catalog, DEMO_TABLE, num_files=30, rows_per_file=2_000)
    before = _table_report(table)
    if through_airflow:
        result = _compact_with_airflow(workdir, memory_limit, out, verbose=verbose)
    else:
        from airflow_provider_iceberg_exec.engine.progress import listening

        with listening(_progress_listener(out)):
            result = _compact_with_engine(table, workdir, memory_limit)
    after = _table_report(table)
    lines = [
        f"table {DEMO_TABLE} in {os.path.abspath(workdir)}",
        f"{'':14}{'before':>22}{'after':>22}",
        *(f"{key:14}{before[key]!s:>22}{after[key]!s:>22}" for key in before),
        f"rewritten {result.get('rewritten_data_files_count')} files into "
        f"{result.get('added_data_files_count')} "
        f"(peak RSS {int(result.get('peak_rss_bytes') or 0) >> 20} MiB)",
        "row checksum unchanged"
        if (before["rows"], before["checksum"]) == (after["rows"], after["checksum"])
        else "ROW CHECKSUM CHANGED",
    ]
    print("\n".join(lines), file=out)
    if (before["rows"], before["checksum"]) != (after["rows"], after["checksum"]):
        raise SystemExit(1)
    return {"before": before, "after": after, "result": result}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry of the demo."""
    parser = argparse.ArgumentParser(prog="iceberg-exec demo", description=__doc__)
    parser.add_argument("--workdir", default="demo-warehouse", help="where the catalog and warehouse go")
    parser.add_argument("--memory-limit", default="256MiB")
    parser.add_argument("--engine-only", action="store_true", help="call the engine instead of Airflow")
    parser.add_argument("--verbose", action="store_true", help="print Airflow's log lines too")
    args = parser.parse_args(argv)
    run_demo(
        args.workdir,
        memory_limit=args.memory_limit,
        through_airflow=not args.engine_only,
        verbose=args.verbose,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
