"""Object-storage benchmark: compaction of one table on a local S3 server against the local filesystem.

Run by hand, never as a test (it starts its own SeaweedFS on loopback, like the integration tests)::

    /work/venv/bin/python bench/object_store.py [--rows 4000000 --files 40] [--out bench/out]

1. Generates the same fragmented, unpartitioned table twice, each in its own SQLite catalog: once with
   the warehouse in a local directory (``file://``), once in a bucket of the S3 server (``s3://``, with the
   ``s3.*`` properties a user gives the catalog). ``--rows`` rows of mixed types in ``--files`` appends.
2. Runs every case in its own subprocess from the pristine table (its first metadata file registered into
   a fresh catalog); the child reports its wall time (imports excluded) and its own peak RSS
   (``VmHWM``; ``wait4``'s ``ru_maxrss`` would include this large parent's RSS, which Linux carries
   across ``exec``):

   - ``compact-file``: ``compact()`` (plan, rewrite, commit) on the local table, ``ResourceLimits(256 MiB)``,
     ``target-file-size-bytes`` 128 MiB;
   - ``compact-s3``: the same on the S3 table: reads and writes (multipart) go through PyIceberg's FileIO;
   - ``pyiceberg-s3``: what a PyIceberg user does instead, ``table.overwrite(table.scan().to_arrow())``;
   - ``floor-s3``: PyArrow streams every data file from the bucket and writes the same rows back as zstd
     Parquet rolled at 128 MiB, no Iceberg work.

3. Verifies every Iceberg case in another subprocess: row count and order-independent sums of the live
   rows, read by PyIceberg, must equal the original's.

Results go to ``--out/object-store-<stamp>.json`` and a Markdown table to ``--out/object-store-<stamp>.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

MiB = 1024 * 1024
TABLE = "bench.events"
TARGET_FILE_SIZE = 128 * MiB
MEMORY_LIMIT = 256 * MiB
CASES = ("compact-file", "compact-s3", "pyiceberg-s3", "floor-s3")


def _batch(start: int, rows: int, seed: int) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed * 1_000_003 + start)
    user_id = rng.integers(0, 1_000_000, rows)
    base = np.datetime64("2026-01-01T00:00:00", "us").astype(np.int64)
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + rows, dtype=np.int64)),
            "user_id": pa.array(user_id),
            "quantity": pa.array(rng.integers(1, 100, rows, dtype=np.int32)),
            "price": pa.array(np.round(rng.random(rows) * 1000, 2)),
            "name": pc.binary_join_element_wise("user-", pa.array(user_id).cast(pa.string()), ""),
            "event_ts": pa.array(base + rng.integers(0, 7 * 86_400 * 10**6, rows), pa.timestamp("us", "UTC")),
        }
    )


def _catalog(properties: dict[str, str]) -> Any:
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    return load_catalog(CatalogConfig("bench", properties))


def _generate(properties: dict[str, str], rows: int, files: int, seed: int) -> str:
    """Create the fragmented table; return its metadata location."""
    catalog = _catalog(properties)
    catalog.create_namespace_if_not_exists("bench")
    per_file = rows // files
    table = None
    for number in range(files):
        batch = _batch(number * per_file, per_file, seed)
        if table is None:
            table = catalog.create_table(
                TABLE,
                schema=batch.schema,
                properties={"write.target-file-size-bytes": str(TARGET_FILE_SIZE)},
            )
        table.append(batch)
    assert table is not None
    return str(table.metadata_location)


def _fresh_table(properties: dict[str, str], metadata: str, run_dir: str) -> Any:
    """The pristine table, registered from its first metadata file into a new catalog in ``run_dir``."""
    catalog = _catalog({**properties, "uri": f"sqlite:///{run_dir}/catalog.db"})
    catalog.create_namespace_if_not_exists("bench")
    return catalog.register_table(TABLE, metadata)


# --------------------------------------------------------------------------------------------- cases


def _case_compact(properties: dict[str, str], metadata: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    table = _fresh_table(properties, metadata, run_dir)
    limits = ResourceLimits(memory_limit_bytes=MEMORY_LIMIT, spill_dir=os.path.join(run_dir, "spill"))
    result = compact(table, options={"target-file-size-bytes": str(TARGET_FILE_SIZE)}, limits=limits)
    return {
        "rewritten_files": result["rewritten_data_files_count"],
        "added_files": result["added_data_files_count"],
        "metadata": table.metadata_location,
    }


def _case_pyiceberg(properties: dict[str, str], metadata: str, run_dir: str) -> dict[str, Any]:
    table = _fresh_table(properties, metadata, run_dir)
    table.overwrite(table.scan().to_arrow())
    return {"metadata": table.metadata_location}


def _case_floor(properties: dict[str, str], metadata: str, run_dir: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    table = _fresh_table(properties, metadata, run_dir)
    io = table.io
    out_prefix = f"{table.metadata.location}/floor-{uuid.uuid4().hex[:8]}"
    writer, stream, written, number, outputs = None, None, 0, 0, 0
    schema = None
    for task in table.scan().plan_files():
        with io.new_input(task.file.file_path).open() as source:
            parquet = pq.ParquetFile(source, pre_buffer=False, buffer_size=1 << 20)
            for batch in parquet.iter_batches(batch_size=8192, use_threads=False):
                if writer is None:
                    schema = batch.schema
                    number += 1
                    stream = io.new_output(f"{out_prefix}/{number:05d}.parquet").create()
                    writer = pq.ParquetWriter(stream, schema, compression="zstd")
                writer.write_batch(batch)
                written += batch.num_rows
                if stream is not None and stream.tell() >= TARGET_FILE_SIZE:
                    writer.close()
                    stream.close()
                    writer, stream, outputs = None, None, outputs + 1
    if writer is not None and stream is not None:
        writer.close()
        stream.close()
        outputs += 1
    return {"rows": written, "added_files": outputs}


_CASES = {
    "compact-file": ("file", _case_compact),
    "compact-s3": ("s3", _case_compact),
    "pyiceberg-s3": ("s3", _case_pyiceberg),
    "floor-s3": ("s3", _case_floor),
}


def _sums(properties: dict[str, str], metadata: str, run_dir: str) -> dict[str, Any]:
    """Row count and order-independent sums of the live rows, read by PyIceberg's scan."""
    import pyarrow.compute as pc

    table = _fresh_table(properties, metadata, run_dir)
    size = sum(task.file.file_size_in_bytes for task in table.scan().plan_files())
    rows, ids, users, price = 0, 0, 0, 0.0
    for batch in table.scan().to_arrow_batch_reader():
        rows += batch.num_rows
        ids += pc.sum(batch.column("id")).as_py() or 0
        users += pc.sum(batch.column("user_id")).as_py() or 0
        price += pc.sum(batch.column("price")).as_py() or 0.0
    return {"rows": rows, "ids": ids, "users": users, "price": round(price, 2), "bytes": size}


def worker(args: argparse.Namespace) -> dict[str, Any]:
    spec = json.loads(args.spec)
    if args.action == "verify":
        return _sums(spec["properties"], spec["metadata"], args.run_dir)
    _kind, function = _CASES[args.action]
    # Import everything first: the clock measures the work, not the interpreter's start.
    import datafusion  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pyiceberg.catalog.sql
    import pyiceberg.io.pyarrow  # noqa: F401

    import airflow_provider_iceberg_exec.engine.ops.compaction  # noqa: F401

    started = time.monotonic()
    result = function(spec["properties"], spec["metadata"], args.run_dir)
    return {**result, "seconds": round(time.monotonic() - started, 2), "peak_rss_bytes": _own_peak_rss()}


def _own_peak_rss() -> int:
    """This process's peak RSS (VmHWM), which starts afresh at exec.

    Not ``wait4``'s ``ru_maxrss``: Linux carries the RSS the process had before ``exec`` -- the parent's,
    under fork or vfork -- into it, so a child of a large parent reports at least the parent's size.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# --------------------------------------------------------------------------------------- orchestration


def _child(action: str, spec: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """Run ``action`` in a subprocess and return its result."""
    result_path = os.path.join(run_dir, f"{action}.json")
    command = [sys.executable, __file__, action, "--spec", json.dumps(spec), "--run-dir", run_dir]
    command += ["--result", result_path]
    code = subprocess.run(command, cwd=REPO, check=False).returncode
    if code != 0:
        raise SystemExit(f"{action} failed with exit code {code}")
    with open(result_path) as f:
        result: dict[str, Any] = json.load(f)
    return result


def orchestrate(args: argparse.Namespace) -> int:
    from tests.integration.services import start_seaweedfs

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-object-store-", dir=args.work_dir)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    rows_out: list[dict[str, Any]] = []
    try:
        with start_seaweedfs(Path(work)) as s3:
            properties = {
                "file": {
                    "type": "sql",
                    "uri": f"sqlite:///{work}/file.db",
                    "warehouse": f"file://{work}/warehouse",
                },
                "s3": {
                    "type": "sql",
                    "uri": f"sqlite:///{work}/s3.db",
                    "warehouse": s3.warehouse("bench"),
                    **s3.properties(),
                },
            }
            metadata: dict[str, str] = {}
            for kind in ("file", "s3"):
                started = time.monotonic()
                metadata[kind] = _generate(properties[kind], args.rows, args.files, args.seed)
                print(f"generated the {kind} table in {time.monotonic() - started:.1f} s", flush=True)
            reference = _sums(properties["file"], metadata["file"], tempfile.mkdtemp(dir=work))
            print(
                f"table: {reference['rows']} rows in {args.files} files, {reference['bytes'] / MiB:.1f} MiB"
            )
            for case in cases:
                kind = _CASES[case][0]
                run_dir = tempfile.mkdtemp(prefix=f"{case}-", dir=work)
                spec = {"properties": properties[kind], "metadata": metadata[kind]}
                load_before = round(os.getloadavg()[0], 2)
                result = _child(case, spec, run_dir)
                row: dict[str, Any] = {
                    "case": case,
                    "seconds": result["seconds"],
                    "peak_rss_mib": result["peak_rss_bytes"] // MiB,
                    "load_before": load_before,
                    "load_after": round(os.getloadavg()[0], 2),
                }
                if "metadata" in result:
                    verify_dir = tempfile.mkdtemp(prefix="verify-", dir=work)
                    check = _child("verify", {**spec, "metadata": result["metadata"]}, verify_dir)
                    same = {k: v for k, v in check.items() if k != "bytes"} == {
                        k: v for k, v in reference.items() if k != "bytes"
                    }
                    row["rows_and_sums_equal"] = same
                    if not same:
                        raise SystemExit(f"{case}: live rows changed: {check} != {reference}")
                else:
                    row["rows_and_sums_equal"] = result["rows"] == reference["rows"]
                row["added_files"] = result.get("added_files")
                rows_out.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    _report(args, stamp, rows_out, reference)
    return 0


def _report(args: argparse.Namespace, stamp: str, rows: list[dict[str, Any]], table: dict[str, Any]) -> None:
    by_case = {r["case"]: r for r in rows}
    file_case, s3_case = by_case.get("compact-file"), by_case.get("compact-s3")
    lines = [
        f"Command: `python bench/object_store.py --rows {args.rows} --files {args.files}`",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end",
        f"Table: {table['rows']} rows in {args.files} files, {table['bytes'] / MiB:.1f} MiB; memory limit "
        f"{MEMORY_LIMIT // MiB} MiB, target file size {TARGET_FILE_SIZE // MiB} MiB",
        "",
        "| case | wall time (s) | peak RSS (MiB) | output files | rows and sums equal |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        cells = [r["case"], r["seconds"], r["peak_rss_mib"], r["added_files"], r["rows_and_sums_equal"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if file_case and s3_case:
        lines += [
            "",
            f"S3 / local: time x{s3_case['seconds'] / max(file_case['seconds'], 0.01):.2f}, "
            f"peak RSS x{s3_case['peak_rss_mib'] / max(file_case['peak_rss_mib'], 1):.2f}",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, f"object-store-{stamp}.md"), "w") as f:
        f.write(text)
    document = {
        "bench": "object_store",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "args": {"rows": args.rows, "files": args.files},
        "results": rows,
    }
    path = os.path.join(args.out, f"object-store-{stamp}.json")
    with open(path, "w") as f:
        json.dump(document, f, indent=2)
    _draw_charts(path)


def _draw_charts(json_path: str) -> None:
    """bench/charts.py's charts beside the result JSON."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_charts", os.path.join(HERE, "charts.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot load bench/charts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_charts"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    module.draw_next_to(json_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(HERE, "out"), help="results (default bench/out)")
    parser.add_argument("--work-dir", default=None, help="where the tables and the S3 data go (default: tmp)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--keep", action="store_true", help="keep the tables and the server's data")
    # Child-process arguments.
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("action", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.action is None:
        return orchestrate(args)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
