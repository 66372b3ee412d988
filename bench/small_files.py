"""Many-small-files benchmark: planning and compacting tables of many tiny files (issue 16).

Run by hand, never as a test::

    /work/main/.venv/bin/python bench/small_files.py [--files 5000,50000,500000] [--rows-per-file 20]
        [--snapshots 10] [--codec zstd] [--cases plan,compact,spark,floor] [--spark-max-files 50000]
        [--repeat N] [--out bench/out/small-files] [--keep] [--no-snapshot]

1. Per file count, builds once (cached under ``--out/files-<n>``, ``files-<n>-<codec>`` for a codec other
   than zstd) an unpartitioned table of ``--files`` Parquet files of ``--rows-per-file`` rows each
   (bench/compaction.py's columns and rows), compressed with ``--codec`` (zstd, as Iceberg's writers
   default to; snappy or none to see what decompression costs a file), written
   directly with PyArrow by a process pool (one worker per core) and committed by ``--snapshots``
   PyIceberg fast appends of DataFile objects built from the files' footers. The build is timed on its
   own and counts in no figure.
2. Runs every case in its own child, from the same pristine metadata (the new files under the run's
   directory, as bench/compaction.py does), every file of the pristine table read once before each case
   (the same warm page cache for all), peak RSS of the whole child from ``wait4``:

   - ``plan``: ``plan_compaction`` and the plan document written as JSON, what ``iceberg-exec plan``
     does (the document's size is reported);
   - ``compact``: ``compact(table)`` (plan, every rewrite task, commit, one process), what
     ``iceberg-exec compact`` does, at the default 256 MiB limit;
   - ``spark``: Spark 3.5 / Iceberg 1.10 ``rewrite_data_files`` with default options (bench/mor.py's
     session: local[2], 4g driver); time = the CALL; peak RSS = JVM + Python ``VmHWM``;
   - ``floor``: bench/compaction.py's floor, PyArrow reading every file and writing the same rows.

   Both engines run with default options: every tiny file is below ``min-file-size-bytes``.
   With ``--repeat N`` the cases run round robin N times (a change in the machine's speed then meets
   every case alike); each case reports its median time and CPU and its highest peak RSS, and every run
   is kept beside the medians with the compact / Spark ratio of each round.
3. Verifies every run in another child: the live rows' count and order-independent checksum, read by
   PyIceberg (the floor's output by PyArrow), must equal the pristine ones (read by PyArrow's dataset
   reader when the table is built, and by PyIceberg's scan up to 50,000 files).

Results go to ``--out/results-<stamp>.json`` and ``.md`` (figures, ratios, per-file overhead, load
averages) and the charts of ``bench/charts.py`` beside them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

MiB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CASES = ("plan", "compact", "spark", "floor")
ICEBERG_CASES = ("compact", "spark")
MEMORY_LIMIT = 256 * MiB
OVERHEAD_TARGET = 350 * MiB
#: a pristine table is checksummed by PyIceberg's own scan too up to this many files (at 50,000 files
#: its scan took over 20 minutes on the loaded 2-core machine; PyArrow's dataset reader takes seconds)
PYICEBERG_PRISTINE_MAX_FILES = 5_000


def _sibling(name: str) -> Any:
    """Another script of bench/ as a module (bench/ is not a package)."""
    if f"bench_{name}" in sys.modules:
        return sys.modules[f"bench_{name}"]
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(HERE, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load bench/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


CB = _sibling("compaction")


# --------------------------------------------------------------------------------------------- build


def _field_id_schema() -> Any:
    """bench/compaction.py's Arrow schema with the Iceberg field ids of its table schema."""
    import pyarrow as pa

    schema = CB._arrow_schema()
    return pa.schema(
        [f.with_metadata({b"PARQUET:field_id": str(i).encode()}) for i, f in enumerate(schema, start=1)]
    )


def _write_range(job: tuple[str, int, int, int, int, str]) -> list[Any]:
    """Write files ``[first, last)`` of ``rows`` rows each; their DataFiles (built in a pool worker)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    data_dir, first, last, rows, seed, codec = job
    iceberg_schema = CB._iceberg_schema()
    stats_plan = compute_statistics_plan(iceberg_schema, {})
    mapping = parquet_path_to_id_mapping(iceberg_schema)
    schema = _field_id_schema()
    files = []
    for number in range(first, last):
        table = CB.make_batch(number, number * rows, rows, seed).cast(schema)
        path = os.path.join(data_dir, f"{number:07d}.parquet")
        collector: list[Any] = []
        pq.write_table(table, path, compression=codec, metadata_collector=collector)
        stats = data_file_statistics_from_parquet_metadata(collector[0], stats_plan, mapping)
        files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=f"file://{path}",
                file_format=FileFormat.PARQUET,
                partition=Record(),
                file_size_in_bytes=os.path.getsize(path),
                sort_order_id=None,
                spec_id=0,
                equality_ids=None,
                key_metadata=None,
                **stats.to_serialized_dict(),
            )
        )
    return files


def generate(
    out: str, files: int, rows_per_file: int, snapshots: int, seed: int, codec: str = "zstd"
) -> dict[str, Any]:
    """The pristine table under ``out/pristine``: ``files`` tiny files in ``snapshots`` fast appends."""
    from concurrent.futures import ProcessPoolExecutor

    pristine = os.path.join(out, "pristine")
    if os.path.exists(pristine):
        shutil.rmtree(pristine)
    data_dir = os.path.join(pristine, "data")
    os.makedirs(data_dir)
    catalog = CB._catalog("pristine", pristine)
    catalog.create_namespace_if_not_exists(CB.NAMESPACE)
    table = catalog.create_table(CB.TABLE, schema=CB._iceberg_schema())
    started = time.monotonic()
    chunk = 1000
    jobs = [(data_dir, a, min(a + chunk, files), rows_per_file, seed, codec) for a in range(0, files, chunk)]
    written: list[Any] = []
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for part in pool.map(_write_range, jobs):
            written.extend(part)
            if len(written) % 50_000 == 0:
                print(f"  wrote {len(written)}/{files} files ({time.monotonic() - started:.0f}s)", flush=True)
    write_seconds = time.monotonic() - started
    per_snapshot = -(-files // snapshots)
    for start in range(0, files, per_snapshot):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for data_file in written[start : start + per_snapshot]:
                append.append_data_file(data_file)
    table = catalog.load_table(CB.TABLE)
    snapshot = table.current_snapshot()
    return {
        "files": files,
        "rows_per_file": rows_per_file,
        "rows": files * rows_per_file,
        "snapshots": len(table.metadata.snapshots),
        "seed": seed,
        "codec": codec,
        "metadata_location": table.metadata_location,
        "data_dir": data_dir,
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "total_bytes": sum(f.file_size_in_bytes for f in written),
        "build_write_seconds": round(write_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def pristine_checksum(data_dir: str, metadata_location: str, files: int) -> dict[str, Any]:
    """The pristine rows' count and checksum: PyArrow's dataset reader, and PyIceberg's scan if small."""
    import pyarrow.dataset as ds

    t0 = time.monotonic()
    rows, checksum = CB.checksum_batches(ds.dataset(data_dir, format="parquet").to_batches())
    found: dict[str, Any] = {"rows": rows, "checksum": checksum, "seconds": round(time.monotonic() - t0, 1)}
    if files <= PYICEBERG_PRISTINE_MAX_FILES:
        by_pyiceberg = CB.verify(metadata_location)
        found["pyiceberg"] = {k: by_pyiceberg[k] for k in ("rows", "checksum", "data_files", "seconds")}
        if (by_pyiceberg["rows"], by_pyiceberg["checksum"]) != (rows, checksum):
            raise RuntimeError(f"PyArrow and PyIceberg disagree on the pristine rows: {found}")
    return found


def ensure_dataset(out: str, args: argparse.Namespace, files: int) -> dict[str, Any]:
    """The cached pristine table of ``files`` files, built (in a child) when missing or of another shape."""
    path = os.path.join(out, "dataset.json")
    shape = _shape(files, args)
    if os.path.exists(path):
        with open(path) as f:
            described: dict[str, Any] = json.load(f)
        if _shape_of(described, shape) == shape and os.path.exists(
            described["metadata_location"].removeprefix("file://")
        ):
            return described
    built = _built(os.path.join(out, "generate.json"), shape)
    if built is None:
        print(f"building {files} files of {args.rows_per_file} rows under {out}/pristine ...", flush=True)
        argv = ["generate", "--files", str(files), "--rows-per-file", str(args.rows_per_file)]
        argv += ["--snapshots", str(args.snapshots), "--seed", str(args.seed), "--codec", args.codec]
        built = run_child(argv, out, os.path.join(out, "generate.json"))["result"]
    described = built
    print(f"  built in {described['build_seconds']} s; checksumming ...", flush=True)
    argv = ["checksum", "--metadata", described["metadata_location"], "--files", str(files)]
    argv += ["--data-dir", described["data_dir"]]
    described["checksum"] = run_child(argv, out, os.path.join(out, "checksum.json"))["result"]
    described["files_on_disk"] = sum(1 for _ in _walk(os.path.join(out, "pristine")))
    with open(path, "w") as f:
        json.dump(described, f, indent=2)
    return described


def _built(path: str, shape: dict[str, Any]) -> dict[str, Any] | None:
    """The build of an interrupted earlier run (its checksum not taken yet), when of the same shape."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        built: dict[str, Any] = json.load(f)
    same = _shape_of(built, shape) == shape
    return built if same and os.path.exists(built["metadata_location"].removeprefix("file://")) else None


def _shape(files: int, args: argparse.Namespace) -> dict[str, Any]:
    return {"files": files, "rows_per_file": args.rows_per_file, "seed": args.seed, "codec": args.codec}


def _shape_of(described: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """``described``'s values of ``shape``'s keys (tables built before ``--codec`` existed are zstd)."""
    return {k: described.get(k, "zstd" if k == "codec" else None) for k in shape}


def _size_dir(out: str, files: int, codec: str) -> str:
    """Where the table of ``files`` files compressed with ``codec`` is cached (zstd's as before)."""
    return os.path.join(
        os.path.abspath(out), f"files-{files}" if codec == "zstd" else f"files-{files}-{codec}"
    )


def _walk(root: str) -> Iterator[str]:
    for directory, _dirs, names in os.walk(root):
        for name in names:
            yield os.path.join(directory, name)


# ------------------------------------------------------------------------------------------- workers


def worker_plan(metadata_location: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction

    table = CB._run_table(run_dir, metadata_location)
    t0 = time.monotonic()
    plan = plan_compaction(table)
    t1 = time.monotonic()
    path = os.path.join(run_dir, "plan.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    t2 = time.monotonic()
    return {
        "seconds": t2 - t0,
        "phases": {"plan": t1 - t0, "write_json": t2 - t1},
        "groups": len(plan["tasks"]),
        "planned_files": sum(len(t["data_files"]) for t in plan["tasks"]),
        "plan_bytes": os.path.getsize(path),
    }


def worker_compact(metadata_location: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    table = CB._run_table(run_dir, metadata_location)
    limits = ResourceLimits(memory_limit_bytes=MEMORY_LIMIT, spill_dir=os.path.join(run_dir, "spill"))
    t0 = time.monotonic()
    outcome = compact(table, limits=limits)
    seconds = time.monotonic() - t0
    table.refresh()
    return {
        "seconds": seconds,
        "metadata_location": table.metadata_location,
        "groups": outcome.get("plan", {}).get("groups"),
        "rewritten_files": outcome["rewritten_data_files_count"],
        "added_files": outcome["added_data_files_count"],
        "engine_peak_rss_bytes": outcome["peak_rss_bytes"],
        "spilled_bytes": outcome["spilled_bytes"],
    }


def worker_spark(metadata_location: str, run_dir: str, driver_memory: str) -> dict[str, Any]:
    mor = _sibling("mor")
    found: dict[str, Any] = mor.spark_procedure(
        metadata_location, run_dir, driver_memory, "rewrite_data_files", {}
    )
    found["metadata_location"] = "file://" + mor._local(found["metadata_location"])
    return found


def verify_table(metadata_location: str) -> dict[str, Any]:
    checked: dict[str, Any] = CB.verify(metadata_location)
    checked.pop("file_sizes_mib", None)
    return checked


def verify_floor(run_dir: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    paths = sorted(_walk(os.path.join(run_dir, "floor")))
    rows, checksum = CB.checksum_batches(b for p in paths for b in pq.ParquetFile(p).iter_batches())
    return {"rows": rows, "checksum": checksum, "data_files": len(paths)}


def worker(args: argparse.Namespace) -> Any:
    """Body of a child process; its result goes to ``--result`` as JSON."""
    if args.action == "generate":
        return generate(args.out, args.files, args.rows_per_file, args.snapshots, args.seed, args.codec)
    if args.action == "checksum":
        return pristine_checksum(args.data_dir, args.metadata, args.files)
    if args.action == "verify":
        return verify_table(args.metadata)
    if args.action == "verify-floor":
        return verify_floor(args.run_dir)
    with open(os.path.join(args.out, "dataset.json")) as f:
        dataset = json.load(f)
    run_dir = os.path.abspath(args.run_dir)
    location = dataset["metadata_location"]
    if args.action == "plan":
        return worker_plan(location, run_dir)
    if args.action == "compact":
        return worker_compact(location, run_dir)
    if args.action == "spark":
        return worker_spark(location, run_dir, args.spark_driver_memory)
    if args.action == "floor":
        return CB._worker_floor(dataset["data_dir"], run_dir, dataset["rows"])
    raise SystemExit(f"unknown action {args.action}")


# ------------------------------------------------------------------------------------- orchestration


def run_child(argv: list[str], out: str, result_path: str) -> dict[str, Any]:
    """Run this script as a child: its result, wall and CPU seconds and peak RSS (``wait4``)."""
    import subprocess

    cmd = [sys.executable, os.path.abspath(__file__), "--out", out, "--result", result_path, *argv]
    if os.path.exists(result_path):
        os.remove(result_path)
    root = os.environ.get(CB.CODE_ROOT_ENV, REPO)
    path = [root, REPO, os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"child {argv[0]} failed with exit code {code}")
    with open(result_path) as f:
        result = json.load(f)
    return {
        "result": result,
        "process_seconds": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }


def _verify(case: str, result: dict[str, Any], dataset: dict[str, Any], out: str, run_dir: str) -> None:
    if case == "plan":
        return
    if case == "floor":
        argv = ["verify-floor", "--run-dir", run_dir]
    else:
        argv = ["verify", "--metadata", result["metadata_location"]]
    checked = run_child(argv, out, os.path.join(run_dir, "verify.json"))["result"]
    original = dataset["checksum"]
    checked["matches"] = (checked["rows"], checked["checksum"]) == (original["rows"], original["checksum"])
    result["verify"] = checked


def run_case(
    case: str, dataset: dict[str, Any], args: argparse.Namespace, out: str, stamp: str, repetition: int = 1
) -> dict[str, Any]:
    run_dir = os.path.join(out, "runs", f"{stamp}-{case}-{repetition}")
    os.makedirs(run_dir)
    # Every file of the pristine table read once: each case starts with the same (warm) page cache, as
    # bench/compaction.py's do (the first case ran on files the run before had pushed out of it).
    CB.read_through(_walk(os.path.join(out, "pristine")))
    load_before = os.getloadavg()
    argv = [case, "--run-dir", run_dir, "--spark-driver-memory", args.spark_driver_memory]
    measured = run_child(argv, out, os.path.join(run_dir, "result.json"))
    result = {"case": case, "repetition": repetition, **measured.pop("result"), **measured}
    if case == "spark":
        # ru_maxrss covers the larger of the Python child and its reaped JVM, not their sum.
        result["ru_maxrss_bytes"] = measured["peak_rss_bytes"]
        result["peak_rss_bytes"] = result["jvm_peak_rss_bytes"] + result["python_peak_rss_bytes"]
    result["load_before"] = [round(x, 2) for x in load_before]
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    _verify(case, result, dataset, out, run_dir)
    stray = sum(1 for _ in _walk(os.path.join(out, "pristine"))) - dataset["files_on_disk"]
    if stray:
        result["stray_files_in_pristine_tree"] = stray
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def per_file_ms(by_case: dict[str, dict[str, Any]], files: int) -> float | None:
    """Our compaction's time above the floor's (the same bytes read and written), per input file."""
    compact, floor = by_case.get("compact"), by_case.get("floor")
    if not compact or not floor:
        return None
    return round((compact["seconds"] - floor["seconds"]) / files * 1000, 3)


def render(report: dict[str, Any]) -> str:
    lines = [
        "| files | case | time s | process s | CPU s | peak RSS MiB | vs Spark | vs floor | load 1/5/15 "
        "before -> after | check |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for size in report["sizes"]:
        by_case = {r["case"]: r for r in size["results"]}
        spark, floor = by_case.get("spark", {}), by_case.get("floor", {})
        for r in size["results"]:
            check = "-" if "verify" not in r else ("ok" if r["verify"]["matches"] else "MISMATCH")
            extra = f" ({r['plan_bytes'] / MiB:.1f} MiB plan)" if "plan_bytes" in r else ""
            loads = "/".join(map(str, r["load_before"])) + " -> " + "/".join(map(str, r["load_after"]))
            vs_spark = _ratio(r["seconds"], spark.get("seconds"))
            vs_floor = _ratio(r["seconds"], floor.get("seconds"))
            lines.append(
                f"| {size['files']:,} | {r['case']}{extra} | {r['seconds']:.1f} | "
                f"{r['process_seconds']:.1f} | {r['cpu_seconds']:.1f} | {r['peak_rss_bytes'] / MiB:,.0f} | "
                f"{vs_spark} | {vs_floor} | {loads} | {check} |"
            )
    return "\n".join(lines)


def targets(report: dict[str, Any]) -> list[str]:
    """Issue 16's many-small-files targets, met or missed, per size."""
    found = []
    limit = (MEMORY_LIMIT + OVERHEAD_TARGET) / MiB
    for size in report["sizes"]:
        by_case = {r["case"]: r for r in size["results"]}
        n = size["files"]
        for case in ("plan", "compact"):
            if case in by_case:
                rss = by_case[case]["peak_rss_bytes"] / MiB
                verdict = "met" if rss <= limit else "MISSED"
                found.append(f"{n:,} files: {case} peak RSS {rss:,.0f} MiB <= {limit:.0f} MiB: {verdict}")
        ms = size.get("per_file_ms")
        if ms is not None:
            verdict = "met" if ms <= 0.3 else "MISSED"
            found.append(f"{n:,} files: per-file overhead over the floor {ms:.3f} ms <= 0.3 ms: {verdict}")
        if "compact" in by_case and "spark" in by_case:
            ratio = by_case["compact"]["seconds"] / by_case["spark"]["seconds"]
            verdict = "met" if ratio <= 0.5 else "MISSED"
            rounds = size.get("compact_vs_spark_by_round") or []
            each = f" (medians; each round: {', '.join(f'{r:.2f}x' for r in rounds)})" if rounds[1:] else ""
            found.append(f"{n:,} files: compact / Spark {ratio:.2f}x{each} <= 0.5x: {verdict}")
    return found


def _one_size(args: argparse.Namespace, files: int, cases: list[str], stamp: str) -> dict[str, Any]:
    out = _size_dir(args.out, files, args.codec)
    os.makedirs(out, exist_ok=True)
    dataset = ensure_dataset(out, args, files)
    if "spark" in cases and files > args.spark_max_files:
        print(f"skipping spark at {files} files (--spark-max-files {args.spark_max_files})", flush=True)
        cases = [case for case in cases if case != "spark"]
    runs = []
    for repetition in range(1, args.repeat + 1):
        # Round robin, as bench/compaction.py's --repeat: a change in the machine's speed meets every case.
        for case in cases:
            print(f"running {case} at {files} files ({repetition}/{args.repeat}) ...", flush=True)
            r = run_case(case, dataset, args, out, stamp, repetition)
            check = (
                ""
                if "verify" not in r
                else ", checksum " + ("matches" if r["verify"]["matches"] else "MISMATCH")
            )
            print(
                f"  {case}: {r['seconds']:.1f} s, peak RSS {r['peak_rss_bytes'] / MiB:.0f} MiB, "
                f"load {r['load_before'][0]}->{r['load_after'][0]}{check}",
                flush=True,
            )
            runs.append(r)
    results = [CB._summarize(case, [r for r in runs if r["case"] == case]) for case in cases]
    size = {"files": files, "dataset": dataset, "results": results, "runs": runs}
    size["per_file_ms"] = per_file_ms({r["case"]: r for r in results}, files)
    size["compact_vs_spark_by_round"] = compact_vs_spark_by_round(runs)
    return size


def compact_vs_spark_by_round(runs: list[dict[str, Any]]) -> list[float]:
    """The compact / Spark time ratio of each round that ran both (runs close in time, paired).

    >>> runs = [("compact", 1, 20.0), ("spark", 1, 40.0), ("compact", 2, 22.0), ("spark", 2, 55.0)]
    >>> compact_vs_spark_by_round([{"case": c, "repetition": n, "seconds": s} for c, n, s in runs])
    [0.5, 0.4]
    """
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        by_round.setdefault(int(r["repetition"]), {})[r["case"]] = float(r["seconds"])
    return [
        round(cases["compact"] / cases["spark"], 3)
        for _, cases in sorted(by_round.items())
        if cases.get("compact") and cases.get("spark")
    ]


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        CB.snapshot_code(out, stamp)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if args.repeat < 1:
        raise SystemExit(f"--repeat {args.repeat}: run every case at least once (1 or more)")
    report: dict[str, Any] = {
        "bench": "small_files",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": CB._machine(),
        "versions": CB._versions(),
        "settings": {"memory_limit_bytes": MEMORY_LIMIT, "options": "defaults", "codec": args.codec},
        "sizes": [_one_size(args, int(n), cases, stamp) for n in args.files.split(",")],
    }
    report["targets"] = targets(report)
    json_path = os.path.join(out, f"results-{stamp}.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=2)
    table = render(report)
    per_file = [f"- {s['files']:,} files: per-file overhead {s['per_file_ms']} ms" for s in report["sizes"]]
    text = table + "\n\n" + "\n".join(per_file + [f"- {t}" for t in report["targets"]]) + "\n"
    with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
        f.write(text)
    print("\n" + text)
    CB.draw_charts(json_path)
    print(f"results: {json_path}")
    bad = [
        r["case"]
        for s in report["sizes"]
        for r in s["results"]
        if not r.get("verify", {}).get("matches", True)
    ]
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", default="orchestrate")
    parser.add_argument("--files", default="5000,50000")
    parser.add_argument("--rows-per-file", type=int, default=20)
    parser.add_argument("--snapshots", type=int, default=10)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--codec", choices=("zstd", "snappy", "none"), default="zstd")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--spark-max-files", type=int, default=50_000)
    parser.add_argument("--spark-driver-memory", default="4g")
    parser.add_argument("--repeat", type=int, default=1, help="run every case N times, round robin")
    parser.add_argument("--out", default=os.path.join(HERE, "out", "small-files"))
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-snapshot", action="store_true")
    parser.add_argument("--result")
    parser.add_argument("--run-dir")
    parser.add_argument("--metadata")
    parser.add_argument("--data-dir")
    args = parser.parse_args(argv)
    if args.action == "orchestrate":
        return orchestrate(args)
    if args.action in ("generate", "checksum"):
        args.files = int(args.files)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
