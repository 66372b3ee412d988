"""MERGE / upsert benchmark: ours (copy-on-write and merge-on-read) against PyIceberg's ``upsert``, Spark's
``MERGE INTO`` (both modes) and two floors, in the same run.

Run by hand, never as a test::

    /work/main/.venv/bin/python bench/merge.py [--rows 20000000 --files 400] [--source-rows 1000000]
        [--large-source-rows 5000000] [--memory-limit 256] [--large-memory-limit 64]
        [--cases ours-cow,ours-mor,pyiceberg,spark-cow,spark-mor,floor-mor,floor-cow,ours-large]
        [--pyiceberg-timeout 1800] [--spark-driver-memory 4g] [--out bench/out/merge] [--keep]

**Data.** The target is ``bench/compaction.py``'s table (``--rows`` rows in ``--files`` files, unique
``id`` 0..rows-1; cached under ``--dataset-dir``, default ``bench/out``, generated there when missing). A
source (cached under ``--out``) has the table's columns, new values (the same generator, another seed),
and ``--source-rows`` ids in random order: half are target ids drawn uniformly without replacement (so
every data file holds matched rows: nothing can be pruned), half are new ids above the table's.
``ours-large`` uses a second source of ``--large-source-rows`` rows (the same shape) at
``--large-memory-limit`` MiB: a source many times the limit.

**Cases**, each in its own child process, all from the same pristine table: the pristine metadata.json is
registered into a fresh catalog whose ``write.data.path`` / ``write.metadata.path`` point into the run's
directory (Spark: copied as ``v1.metadata.json`` of a Hadoop catalog table in the run's directory, data
path set there too), so each case starts from identical files and none writes into the pristine tree
(checked after the run). Every case is the upsert ``ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN
NOT MATCHED THEN INSERT *``:

- ``ours-cow`` / ``ours-mor``: ``engine.ops.merge.upsert(table, join_cols=["id"], source_files=[...],
  mode=..., limits=ResourceLimits(memory_limit_bytes=--memory-limit MiB))``.
- ``ours-large``: the same, copy-on-write, the large source, ``--large-memory-limit``.
- ``pyiceberg``: ``table.upsert(pq.read_table(source), join_cols=["id"])`` (its API takes an in-memory
  Arrow table). Killed after ``--pyiceberg-timeout`` seconds and reported as "> timeout".
- ``spark-cow`` / ``spark-mor``: local[2] Spark 3.5 + Iceberg 1.10 (``bench/mor.py``'s session,
  ``spark.driver.memory=--spark-driver-memory``), ``write.merge.mode`` set, the source read with
  ``spark.read.parquet``, then the ``MERGE INTO``; time = the statement only (start-up apart). Peak RSS =
  the JVM's + the Python driver's ``VmHWM``.
- ``floor-mor``: the least work any correct merge-on-read upsert does, in PyArrow, no Iceberg: read the
  ``id`` column of every data file and the whole source, find the matched (file, position) pairs
  (``pc.is_in``), write the source rows as zstd Parquet and the matched positions as a position delete
  file ``(file_path, pos)``.
- ``floor-cow``: the least work a copy-on-write upsert does: the same key read, then every data file
  holding a matched row read whole, its matched rows dropped, written back (zstd), and the source rows
  written.

Ratios: each case against PyIceberg, ours against Spark's same mode, ours-mor against floor-mor and
ours-cow against floor-cow. Peak RSS of ours: the child's ``ru_maxrss`` (``wait4``: the whole process).

**Correctness.** After each Iceberg case another child reads the table with PyIceberg (not our code) and
its live rows' count and order-independent checksum (``bench/compaction.py``'s: a sum mod 2**64 of
per-row hashes) must equal the model's, computed once per source by PyIceberg + PyArrow: the pristine
checksum, minus the pristine rows whose id the source has (``pc.is_in``), plus the source rows. A
mismatch exits 1. Results: ``--out/results-<stamp>.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

MiB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CASES = (
    "ours-cow",
    "ours-mor",
    "pyiceberg",
    "spark-cow",
    "spark-mor",
    "floor-mor",
    "floor-cow",
    "ours-large",
)
ICEBERG_CASES = ("ours-cow", "ours-mor", "pyiceberg", "spark-cow", "spark-mor", "ours-large")
OVERHEAD_TARGET = 350 * MiB
SOURCE_CHUNK = 1_000_000
UPSERT_SQL = (
    "MERGE INTO {t} t USING src s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)


def _load(name: str, file: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load bench/{file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


MOR = _load("bench_mor", "mor.py")  # Spark session, Hadoop publishing, VmHWM, code snapshot
CB = MOR.CB  # bench/compaction.py: the table, its generator, the checksum


# --------------------------------------------------------------------------------------------- data


def generate_source(path: str, rows: int, table_rows: int, seed: int) -> dict[str, Any]:
    """``rows`` source rows: half the ids drawn from the table's, half new; streamed to one Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng([seed, rows])
    matched = rng.choice(table_rows, rows // 2, replace=False).astype(np.int64)
    ids = np.concatenate([matched, np.arange(table_rows, table_rows + rows - len(matched), dtype=np.int64)])
    rng.shuffle(ids)
    tmp = path + ".tmp"
    with pq.ParquetWriter(tmp, CB._arrow_schema(), compression="zstd") as writer:
        for number, start in enumerate(range(0, rows, SOURCE_CHUNK)):
            chunk = CB.make_batch(50_000 + number, start, min(SOURCE_CHUNK, rows - start), seed + 1)
            chunk = chunk.set_column(
                0, chunk.schema.field("id"), pa.array(ids[start : start + chunk.num_rows])
            )
            writer.write_table(chunk, row_group_size=131072)
    os.replace(tmp, path)
    return {"path": path, "rows": rows, "matching_rows": len(matched), "bytes": os.path.getsize(path)}


def expected(metadata_location: str, source: str) -> dict[str, Any]:
    """The upsert's rows and checksum, by PyIceberg + PyArrow (the checksum is a sum of row hashes)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.table import StaticTable

    t0 = time.monotonic()
    keys = pq.read_table(source, columns=["id"]).column("id").combine_chunks()
    source_rows, source_sum = CB.checksum_batches(pq.ParquetFile(source).iter_batches(batch_size=131072))
    table = StaticTable.from_metadata(metadata_location)
    total_rows, total = 0, 0
    replaced_rows, replaced = 0, 0
    for batch in table.scan().to_arrow_batch_reader():
        n, s = CB.checksum_batches([batch])
        total_rows, total = total_rows + n, (total + int(s, 16)) % 2**64
        n, s = CB.checksum_batches([batch.filter(pc.is_in(batch.column("id"), value_set=keys))])
        replaced_rows, replaced = replaced_rows + n, (replaced + int(s, 16)) % 2**64
    checksum = (total - replaced + int(source_sum, 16)) % 2**64
    return {
        "rows": total_rows - replaced_rows + source_rows,
        "checksum": f"{checksum:016x}",
        "updated_rows": replaced_rows,
        "inserted_rows": source_rows - replaced_rows,
        "seconds": round(time.monotonic() - t0, 1),
    }


# ------------------------------------------------------------------------------------------ workers


def worker_ours(metadata: str, run_dir: str, source: str, mode: str, memory_limit: int) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.merge import upsert

    table = CB._run_table(run_dir, metadata)
    limits = ResourceLimits(memory_limit_bytes=memory_limit, spill_dir=os.path.join(run_dir, "spill"))
    t0 = time.monotonic()
    outcome = upsert(table, join_cols=["id"], source_files=[source], mode=mode, limits=limits)
    seconds = time.monotonic() - t0
    table.refresh()
    keep = (
        "num_target_rows_updated",
        "num_target_rows_inserted",
        "num_target_rows_deleted",
        "num_target_rows_copied",
        "added_data_files_count",
        "added_delete_files_count",
        "spilled_bytes",
        "snapshot_ids",
    )
    return {
        "seconds": seconds,
        "metadata_location": table.metadata_location,
        "mode": mode,
        "memory_limit_bytes": memory_limit,
        "engine_peak_rss_bytes": outcome.get("peak_rss_bytes"),
        "plan": outcome.get("plan"),
        **{k: outcome.get(k) for k in keep},
    }


def worker_pyiceberg(metadata: str, run_dir: str, source: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    table = CB._run_table(run_dir, metadata)
    t0 = time.monotonic()
    frame = pq.read_table(source).cast(table.schema().as_arrow())
    result = table.upsert(frame, join_cols=["id"])
    seconds = time.monotonic() - t0
    table.refresh()
    return {
        "seconds": seconds,
        "metadata_location": table.metadata_location,
        "rows_updated": result.rows_updated,
        "rows_inserted": result.rows_inserted,
    }


def worker_spark(metadata: str, run_dir: str, source: str, mode: str, driver_memory: str) -> dict[str, Any]:
    from pyspark import SparkContext

    from tests.interop.spark import metadata_location as current_metadata
    from tests.interop.spark import stop_spark

    warehouse = os.path.join(run_dir, "warehouse")
    MOR._publish_hadoop(metadata, MOR._hadoop_dir(warehouse))
    t0 = time.monotonic()
    spark = MOR._spark_session(os.path.join(run_dir, "spark-local"), warehouse, driver_memory)
    startup = time.monotonic() - t0
    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    t = MOR._ident()
    spark.sql(
        f"ALTER TABLE {t} SET TBLPROPERTIES ('write.data.path'='file://{run_dir}/data', "
        f"'write.merge.mode'='{mode}')"
    )
    spark.read.parquet(source).createOrReplaceTempView("src")
    statement = UPSERT_SQL.format(t=t)
    t1 = time.monotonic()
    spark.sql(statement).collect()
    seconds = time.monotonic() - t1
    final = current_metadata(spark, MOR.SPARK_TABLE)
    jvm_hwm = MOR._vm_hwm(jvm.pid)
    stop_spark(spark)
    python_hwm = MOR._vm_hwm("self")
    return {
        "seconds": seconds,
        "startup_seconds": startup,
        "metadata_location": final,
        "statement": statement,
        "mode": mode,
        "driver_memory": driver_memory,
        "jvm_peak_rss_bytes": jvm_hwm,
        "python_peak_rss_bytes": python_hwm,
        "peak_rss_bytes": jvm_hwm + python_hwm,
    }


def _matched_positions(data_files: list[str], keys: Any) -> dict[str, Any]:
    """Per data file, the positions of its rows whose id the source has (reads the ``id`` column only).

    The lookup is built once: a bitmap over the (dense, non-negative) ids; ``pc.is_in`` would rebuild a
    hash set of every source key per file.
    """
    import numpy as np
    import pyarrow.parquet as pq

    key_ids = keys.to_numpy(zero_copy_only=False)
    member = np.zeros(int(key_ids.max()) + 1, dtype=bool)
    member[key_ids] = True
    found = {}
    for path in data_files:
        ids = pq.read_table(path, columns=["id"]).column("id").to_numpy()
        inside = ids < len(member)
        hit = np.flatnonzero(inside & member[np.where(inside, ids, 0)])
        if len(hit):
            found[path] = hit
    return found


def worker_floor(data_dir: str, run_dir: str, source: str, cow: bool) -> dict[str, Any]:
    """PyArrow only: the key read and the writes any correct upsert of this mode does (module docstring)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = os.path.join(run_dir, "floor")
    os.makedirs(out_dir)
    t0 = time.monotonic()
    keys = pq.read_table(source, columns=["id"]).column("id").combine_chunks()
    matched = _matched_positions(CB._data_files_of(data_dir), keys)
    src = pq.ParquetFile(source)
    with pq.ParquetWriter(os.path.join(out_dir, "new.parquet"), src.schema_arrow, compression="zstd") as w:
        for batch in src.iter_batches(batch_size=131072):
            w.write_batch(batch)
    rewritten = 0
    if cow:
        for number, (path, positions) in enumerate(sorted(matched.items())):
            table = pq.read_table(path)
            keep = np.ones(table.num_rows, dtype=bool)
            keep[positions] = False
            kept = table.filter(pa.array(keep))
            pq.write_table(kept, os.path.join(out_dir, f"rewrite-{number:05d}.parquet"), compression="zstd")
            rewritten += kept.num_rows
    else:
        paths = pa.chunked_array([pa.array([p] * len(v), pa.string()) for p, v in sorted(matched.items())])
        pos = pa.chunked_array([pa.array(v, pa.int64()) for _p, v in sorted(matched.items())])
        pq.write_table(pa.table({"file_path": paths, "pos": pos}), os.path.join(out_dir, "deletes.parquet"))
    return {
        "seconds": time.monotonic() - t0,
        "matched_rows": int(sum(len(v) for v in matched.values())),
        "files_with_matches": len(matched),
        "rewritten_rows": rewritten,
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Body of a child process."""
    if args.action == "source":
        return generate_source(args.source, args.source_rows, args.rows, args.seed)
    if args.action == "expected":
        return expected(args.metadata, args.source)
    if args.action == "verify":
        return dict(CB.verify(args.metadata))
    run_dir = os.path.abspath(args.run_dir)
    if args.action.startswith("floor"):
        return worker_floor(args.data_dir, run_dir, args.source, cow=args.action == "floor-cow")
    if args.action.startswith("spark"):
        mode = "copy-on-write" if args.action == "spark-cow" else "merge-on-read"
        return worker_spark(args.metadata, run_dir, args.source, mode, args.spark_driver_memory)
    if args.action == "pyiceberg":
        return worker_pyiceberg(args.metadata, run_dir, args.source)
    mode = "merge-on-read" if args.action == "ours-mor" else "copy-on-write"
    limit = (args.large_memory_limit if args.action == "ours-large" else args.memory_limit) * MiB
    return worker_ours(args.metadata, run_dir, args.source, mode, limit)


# ------------------------------------------------------------------------------------- orchestration


def run_child(
    argv: list[str], args: argparse.Namespace, result_path: str, timeout: float | None = None
) -> dict[str, Any]:
    """Run this script as a child: its result, wall and CPU seconds, peak RSS (``wait4``); killed (with
    its process group) after ``timeout`` seconds."""
    cmd = [sys.executable, os.path.abspath(__file__), *_shape_argv(args), "--result", result_path, *argv]
    if os.path.exists(result_path):
        os.remove(result_path)
    root = os.environ.get(CB.CODE_ROOT_ENV, REPO)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in [root, REPO, os.environ.get("PYTHONPATH")] if p)
    )
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if timeout is not None and time.monotonic() - started > timeout and not timed_out:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.5)
    wall = time.monotonic() - started
    measured = {
        "process_seconds": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }
    code = os.waitstatus_to_exitcode(status)
    if timed_out:
        return {**measured, "timed_out": timeout}
    if code != 0:
        return {**measured, "failed": f"exit code {code}"}
    with open(result_path) as f:
        return {**measured, "result": json.load(f)}


def _shape_argv(args: argparse.Namespace) -> list[str]:
    return [
        "--rows", str(args.rows), "--files", str(args.files), "--seed", str(args.seed),
        "--out", args.out, "--dataset-dir", args.dataset_dir,
        "--memory-limit", str(args.memory_limit), "--large-memory-limit", str(args.large_memory_limit),
        "--spark-driver-memory", args.spark_driver_memory,
    ]  # fmt: skip


def ensure_source(args: argparse.Namespace, rows: int, dataset: dict[str, Any]) -> dict[str, Any]:
    """The cached source of ``rows`` rows and its expected outcome on the table."""
    out = os.path.abspath(args.out)
    path = os.path.join(out, f"source-{args.rows}-{rows}-{args.seed}.parquet")
    described_path = path + ".json"
    if os.path.exists(described_path) and os.path.exists(path):
        with open(described_path) as f:
            described: dict[str, Any] = json.load(f)
        if described.get("table_metadata") == dataset["metadata_location"]:
            return described
    print(f"generating a source of {rows} rows ...", flush=True)
    made = run_child(["source", "--source", path, "--source-rows", str(rows)], args, path + ".r.json")
    if "result" not in made:
        raise SystemExit(f"generating the source failed: {made}")
    print("computing the expected rows ...", flush=True)
    want = run_child(
        ["expected", "--metadata", dataset["metadata_location"], "--source", path], args, path + ".e.json"
    )
    if "result" not in want:
        raise SystemExit(f"computing the expected rows failed: {want}")
    described = {**made["result"], "table_metadata": dataset["metadata_location"], "expected": want["result"]}
    with open(described_path, "w") as f:
        json.dump(described, f, indent=2)
    return described


def run_case(
    case: str, dataset: dict[str, Any], source: dict[str, Any], args: argparse.Namespace, stamp: str
) -> dict[str, Any]:
    run_dir = os.path.join(os.path.abspath(args.out), "runs", f"{stamp}-{case}")
    os.makedirs(run_dir)
    CB._warm(dataset["data_dir"])
    load_before = os.getloadavg()
    argv = [
        case,
        "--run-dir",
        run_dir,
        "--metadata",
        dataset["metadata_location"],
        "--source",
        source["path"],
    ]
    argv += ["--data-dir", dataset["data_dir"]]
    timeout = args.pyiceberg_timeout if case == "pyiceberg" else None
    measured = run_child(argv, args, os.path.join(run_dir, "r.json"), timeout)
    result: dict[str, Any] = {"case": case, **measured.pop("result", {}), **measured}
    result["load_before"] = [round(x, 2) for x in load_before]
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    result["source_rows"] = source["rows"]
    if case in ICEBERG_CASES and "seconds" in result:
        checked = run_child(
            ["verify", "--metadata", result["metadata_location"]], args, os.path.join(run_dir, "v.json")
        )
        verify = checked.get("result", {"failed": checked.get("failed")})
        want = source["expected"]
        verify["matches"] = (verify.get("rows"), verify.get("checksum")) == (want["rows"], want["checksum"])
        result["verify"] = verify
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


LABELS = {
    "ours-cow": "ours, copy-on-write",
    "ours-mor": "ours, merge-on-read",
    "pyiceberg": "PyIceberg table.upsert()",
    "spark-cow": "Spark MERGE INTO, copy-on-write",
    "spark-mor": "Spark MERGE INTO, merge-on-read",
    "floor-mor": "floor, merge-on-read (PyArrow)",
    "floor-cow": "floor, copy-on-write (PyArrow)",
    "ours-large": "ours, copy-on-write, large source",
}
VERSUS = {"ours-cow": ("spark-cow", "floor-cow"), "ours-mor": ("spark-mor", "floor-mor")}


def _ratio(value: float | None, base: float | None, timed_out: bool = False) -> str:
    if not value or not base:
        return "-"
    return f"{'< ' if timed_out else ''}{value / base:.2f}x"


def _time(r: dict[str, Any]) -> str:
    if "timed_out" in r:
        return f"> {r['timed_out']:.0f}"
    if "failed" in r:
        return f"failed ({r['failed']})"
    return f"{r['seconds']:.1f}"


def render(report: dict[str, Any]) -> str:
    lines = [
        "| case | source rows | limit (MiB) | time (s) | peak RSS (MiB) | CPU (s) | vs PyIceberg | vs Spark "
        "| vs floor | load 1/5/15 before | rows + checksum |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    by = {r["case"]: r for r in report["results"]}
    py = by.get("pyiceberg", {})
    py_seconds = py.get("seconds") or py.get("timed_out")
    for case in CASES:
        r = by.get(case)
        if r is None:
            continue
        seconds = r.get("seconds")
        spark, floor = (by.get(c, {}) for c in VERSUS.get(case, ("", "")))
        limit = r.get("memory_limit_bytes")
        check = "-" if "verify" not in r else ("match" if r["verify"]["matches"] else "**MISMATCH**")
        lines.append(
            f"| {LABELS[case]} | {r['source_rows']} | {limit // MiB if limit else '-'} | {_time(r)} "
            f"| {r['peak_rss_bytes'] / MiB:.0f} | {r['cpu_seconds']:.0f} "
            f"| {_ratio(seconds, py_seconds, 'timed_out' in py) if case != 'pyiceberg' else '-'} "
            f"| {_ratio(seconds, spark.get('seconds'))} | {_ratio(seconds, floor.get('seconds'))} "
            f"| {' / '.join(str(x) for x in r['load_before'])} | {check} |"
        )
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def targets(report: dict[str, Any]) -> list[str]:
    by = {r["case"]: r for r in report["results"]}
    verdicts = []
    py = by.get("pyiceberg", {})
    for case in ("ours-cow", "ours-mor", "ours-large"):
        r = by.get(case)
        if r is None or "seconds" not in r:
            continue
        limit = r["memory_limit_bytes"] + OVERHEAD_TARGET
        rss = r["peak_rss_bytes"]
        verdicts.append(
            f"{case}: peak RSS {rss / MiB:.0f} MiB <= {limit / MiB:.0f} MiB: {_met(rss <= limit)}"
        )
        if case == "ours-large":
            continue
        if "seconds" in py:
            ok = py["seconds"] >= 20 * r["seconds"]
            verdicts.append(
                f"{case}: {py['seconds'] / r['seconds']:.1f}x faster than PyIceberg (>= 20x): {_met(ok)}"
            )
        elif "timed_out" in py:
            bound = py["timed_out"] / r["seconds"]
            verdict = "met" if bound >= 20 else "not shown"
            verdicts.append(f"{case}: > {bound:.1f}x faster than PyIceberg (timed out) (>= 20x): {verdict}")
        spark = by.get(VERSUS[case][0], {})
        if "seconds" in spark:
            ok = r["seconds"] <= spark["seconds"]
            verdicts.append(
                f"{case}: {r['seconds']:.1f} s vs Spark {spark['seconds']:.1f} s (no slower): {_met(ok)}"
            )
    return verdicts


def orchestrate(args: argparse.Namespace) -> int:
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := [c for c in cases if c not in CASES]:
        raise SystemExit(f"unknown cases {unknown}; from {', '.join(CASES)}")
    dataset = CB.ensure_dataset(os.path.abspath(args.dataset_dir), args.rows, args.files, 7)
    if not args.no_snapshot:
        MOR.snapshot_code(args.out, stamp)
    source = ensure_source(args, args.source_rows, dataset)
    large = ensure_source(args, args.large_source_rows, dataset) if "ours-large" in cases else None
    report = MOR.report_header(dataset)
    report.update({"memory_limit_bytes": args.memory_limit * MiB, "source": source, "large_source": large})
    report["results"] = []
    for case in cases:
        print(f"running {case} (load {os.getloadavg()[0]:.2f}) ...", flush=True)
        result = run_case(case, dataset, large if case == "ours-large" else source, args, stamp)
        report["results"].append(result)
        check = (
            ""
            if "verify" not in result
            else (", checksum " + ("matches" if result["verify"]["matches"] else "MISMATCH"))
        )
        print(
            f"  {case}: {_time(result)} s, peak RSS {result['peak_rss_bytes'] / MiB:.0f} MiB{check}",
            flush=True,
        )
    # Only reported, never removed: the dataset directory may be another checkout's cache.
    known = set(dataset["files_on_disk"])
    pristine = os.path.join(os.path.abspath(args.dataset_dir), "pristine")
    report["stray_pristine_files"] = [p for p in CB._walk(pristine) if p not in known]
    report["targets"] = targets(report)
    table = render(report)
    with open(os.path.join(args.out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(args.out, f"results-{stamp}.md"), "w") as f:
        f.write(table + "\n\n" + "\n".join(f"- {v}" for v in report["targets"]) + "\n")
    print(f"\n{table}\n\n" + "\n".join(report["targets"]) + f"\n\nresults: {args.out}/results-{stamp}.json")
    bad = [r for r in report["results"] if "verify" in r and not r["verify"]["matches"]]
    return 1 if bad or report["stray_pristine_files"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000_000, help="target rows (default: %(default)s)")
    parser.add_argument("--files", type=int, default=400, help="target data files (default: %(default)s)")
    parser.add_argument("--source-rows", type=int, default=1_000_000, help="source rows, half matching")
    parser.add_argument("--large-source-rows", type=int, default=5_000_000, help="the ours-large source")
    parser.add_argument("--memory-limit", type=int, default=256, help="MiB (default: %(default)s)")
    parser.add_argument(
        "--large-memory-limit", type=int, default=64, help="MiB, ours-large (default: %(default)s)"
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument(
        "--pyiceberg-timeout", type=float, default=1800.0, help="seconds (default: %(default)s)"
    )
    parser.add_argument("--spark-driver-memory", default="4g")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", default=os.path.join(HERE, "out", "merge"), help="sources and results")
    parser.add_argument("--dataset-dir", default=os.path.join(HERE, "out"), help="the cached target table")
    parser.add_argument("--keep", action="store_true", help="keep each run's catalog and files")
    parser.add_argument("--no-snapshot", action="store_true", help="import the work tree, not a copy")
    # Child-process arguments.
    for hidden in ("--result", "--run-dir", "--metadata", "--source", "--data-dir"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("action", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.action is None:
        return orchestrate(args)
    if args.action == "source":
        args.source_rows = int(args.source_rows)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
