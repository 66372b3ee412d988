"""Orphan-scan benchmark: our bounded scan against the Python-set scan a PyIceberg user writes today.

Run by hand, never as a test::

    /work/venv/bin/python bench/orphans.py [--files 1000000] [--out bench/out]

1. Generates once (cached under ``--out``) a table location with ``--files`` files in directories of
   ``--per-dir`` files, of which every tenth is an orphan: empty files created with ``os.open`` and
   aged ten days with ``os.utime``; the others are committed as data files of an unpartitioned v2 table
   in a local SQLite catalog, 100,000 per fast append (one manifest each).
2. Runs every case in its own subprocess and takes the peak RSS of the whole child from ``wait4``:

   - ``engine``: :func:`scan_orphan_files` with ``ResourceLimits(memory_limit_bytes=256 MiB)``: listing
     and references staged as Parquet, sort-merge anti-join in DataFusion, orphan list written to a file;
   - ``pyset``: what a user writes with PyIceberg's public API: every manifest's entries through
     ``ManifestFile.fetch_manifest_entry`` into a Python ``set`` of referenced paths, the location listed
     with ``pyarrow.fs.FileSelector(recursive=True)``, the difference written to a file;
   - ``pyset-lean``: the same Python ``set`` built as leanly as Python allows: manifests streamed with the
     engine's reader (no ``DataFile`` objects), the location walked with ``os.scandir`` and each file
     checked against the set as it is listed, so the set of referenced paths is all that is held;
   - ``floor``: listing the location (``os.scandir``, streaming) and nothing else.

3. Checks that both scans found exactly the planted orphans (count, and every path is an ``o-`` file).

Results go to ``--out/orphans-results-<stamp>.json`` and a Markdown table to ``.md`` beside it.
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
import time
from typing import Any

MiB = 1024 * 1024
MEMORY_LIMIT = 256 * MiB
TARGET_PEAK_RSS_MIB = 600
AGE_SECONDS = 10 * 86400
COMMIT_BATCH = 100_000
CASES = ("engine", "pyset", "pyset-lean", "floor")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _catalog(directory: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("bench", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/wh")


def _data_file(path: str) -> Any:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=0,
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
    )
    data_file.spec_id = 0
    return data_file


def generate(directory: str, files: int, per_dir: int) -> dict[str, Any]:
    """Create the table location; return the dataset description (cached as ``dataset.json``)."""
    import pyarrow as pa

    os.makedirs(directory, exist_ok=True)
    catalog = _catalog(directory)
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(
        "bench.t", schema=pa.schema([pa.field("id", pa.int64())]), properties={"format-version": "2"}
    )
    location = table.location()
    root = location.removeprefix("file://")
    old = time.time() - AGE_SECONDS
    pending: list[Any] = []
    orphans = 0
    started = time.monotonic()

    def commit() -> None:
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for data_file in pending:
                append.append_data_file(data_file)
        pending.clear()

    for i in range(files):
        folder = f"{root}/data/bucket={i // per_dir:05d}"
        if i % per_dir == 0:
            os.makedirs(folder, exist_ok=True)
        orphan = i % 10 == 9
        name = f"{'o' if orphan else 'd'}-{i:09d}-5f0c6a1e-2b9d-4d8e-9a51-{i % 997:012d}.parquet"
        path = f"{folder}/{name}"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        os.utime(path, (old, old))
        if orphan:
            orphans += 1
        else:
            pending.append(_data_file(f"file://{path}"))
            if len(pending) >= COMMIT_BATCH:
                commit()
                print(f"  {i + 1} files, {time.monotonic() - started:.0f} s", flush=True)
    if pending:
        commit()
    for folder, _dirs, names in os.walk(f"{root}/metadata"):
        for name in names:
            os.utime(os.path.join(folder, name), (old, old))
    table.refresh()
    dataset = {
        "files": files,
        "per_dir": per_dir,
        "orphans": orphans,
        "referenced_data_files": files - orphans,
        "snapshots": len(table.metadata.snapshots),
        "location": location,
        "generate_seconds": round(time.monotonic() - started, 1),
    }
    with open(os.path.join(directory, "dataset.json"), "w") as f:
        json.dump(dataset, f, indent=2)
    catalog.engine.dispose()
    return dataset


def ensure_dataset(out: str, files: int, per_dir: int) -> tuple[str, dict[str, Any]]:
    directory = os.path.join(out, f"orphans-{files}-{per_dir}")
    marker = os.path.join(directory, "dataset.json")
    if os.path.exists(marker):
        with open(marker) as f:
            return directory, json.load(f)
    shutil.rmtree(directory, ignore_errors=True)
    print(f"generating {files} files under {directory} ...", flush=True)
    # In a child: ru_maxrss survives exec, so a big orchestrator would inflate every case's peak RSS.
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "generate", "--dir", directory]
    cmd += ["--files", str(files), "--per-dir", str(per_dir)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    subprocess.run(cmd, env=env, check=True)
    with open(marker) as f:
        return directory, json.load(f)


# ------------------------------------------------------------------------------------------ workers


def _worker_engine(directory: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.orphans import scan_orphan_files

    table = _catalog(directory).load_table("bench.t")
    started = time.monotonic()
    result = scan_orphan_files(
        table,
        limits=ResourceLimits(memory_limit_bytes=MEMORY_LIMIT, spill_dir=os.path.join(run_dir, "spill")),
        orphan_list_uri=os.path.join(run_dir, "orphans.txt"),
    )
    return {
        "seconds": time.monotonic() - started,
        "orphans": result["orphan_file_count"],
        "list": os.path.join(run_dir, "orphans.txt"),
        "spilled_bytes": result["spilled_bytes"],
    }


def _worker_pyset(directory: str, run_dir: str) -> dict[str, Any]:
    import pyarrow.fs as pafs

    table = _catalog(directory).load_table("bench.t")
    started = time.monotonic()
    io, metadata = table.io, table.metadata
    referenced: set[str] = {table.metadata_location}
    referenced.update(e.metadata_file for e in metadata.metadata_log)
    for snapshot in metadata.snapshots:
        referenced.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            referenced.add(manifest.manifest_path)
            referenced.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io))
    cutoff_ns = int((time.time() - 3 * 86400) * 1e9)
    root = table.location().removeprefix("file://")
    listing = pafs.LocalFileSystem().get_file_info(pafs.FileSelector(root, recursive=True))
    orphans = [
        f"file://{info.path}"
        for info in listing
        if info.type == pafs.FileType.File
        and info.mtime_ns < cutoff_ns
        and f"file://{info.path}" not in referenced
    ]
    path = os.path.join(run_dir, "orphans.txt")
    with open(path, "w") as f:
        f.write("\n".join(orphans) + "\n")
    return {"seconds": time.monotonic() - started, "orphans": len(orphans), "list": path}


def _worker_pyset_lean(directory: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.meta.reachable import (
        iter_live_content_files,
        snapshot_manifests,
    )

    table = _catalog(directory).load_table("bench.t")
    started = time.monotonic()
    io, metadata = table.io, table.metadata
    referenced: set[str] = {table.metadata_location}
    referenced.update(e.metadata_file for e in metadata.metadata_log)
    referenced.update(s.manifest_list for s in metadata.snapshots)
    for path, manifest in snapshot_manifests(io, metadata.snapshots).items():
        referenced.add(path)
        referenced.update(file_path for file_path, _kind in iter_live_content_files(io, manifest))
    cutoff_ns = int((time.time() - 3 * 86400) * 1e9)
    path = os.path.join(run_dir, "orphans.txt")
    count = 0
    stack = [table.location().removeprefix("file://")]
    with open(path, "w") as out:
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.stat().st_mtime_ns < cutoff_ns and f"file://{entry.path}" not in referenced:
                        out.write(f"file://{entry.path}\n")
                        count += 1
    return {"seconds": time.monotonic() - started, "orphans": count, "list": path}


def _worker_floor(directory: str, run_dir: str) -> dict[str, Any]:
    started = time.monotonic()
    count = 0
    stack = [os.path.join(directory, "wh")]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    entry.stat()
                    count += 1
    return {"seconds": time.monotonic() - started, "listed": count}


WORKERS = {
    "engine": _worker_engine,
    "pyset": _worker_pyset,
    "pyset-lean": _worker_pyset_lean,
    "floor": _worker_floor,
}


def _check(result: dict[str, Any], dataset: dict[str, Any]) -> bool:
    if "list" not in result:
        return True
    count = 0
    with open(result["list"]) as f:
        for line in f:
            if line.strip():
                count += 1
                if "/o-" not in line:
                    return False
    return count == result["orphans"] == dataset["orphans"]


# ------------------------------------------------------------------------------------ orchestration


def _run_child(case: str, directory: str, run_dir: str) -> dict[str, Any]:
    result_path = os.path.join(run_dir, "result.json")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        case,
        "--dir",
        directory,
        "--run-dir",
        run_dir,
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"case {case} failed with exit code {code}")
    with open(result_path) as f:
        result: dict[str, Any] = json.load(f)
    result.update(
        case=case,
        process_seconds=time.monotonic() - started,
        peak_rss_bytes=usage.ru_maxrss * 1024,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
    )
    return result


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("pyiceberg", "datafusion", "pyarrow")}


def render(report: dict[str, Any]) -> str:
    rows = [
        "| case | scan time (s) | peak RSS (MiB) | orphans found | correct |",
        "|---|---:|---:|---:|---|",
    ]
    for r in report["results"]:
        rows.append(
            f"| {r['case']} | {r['seconds']:.1f} | {r['peak_rss_bytes'] / MiB:.0f} | "
            f"{r.get('orphans', '-')} | {'yes' if r['correct'] else 'NO'} |"
        )
    return "\n".join(rows)


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    directory, dataset = ensure_dataset(out, args.files, args.per_dir)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": _versions(),
        "dataset": dataset,
        "memory_limit_bytes": MEMORY_LIMIT,
        "results": [],
    }
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
        run_dir = os.path.join(out, "runs", f"orphans-{stamp}-{case}")
        os.makedirs(run_dir)
        print(f"running {case} ...", flush=True)
        load_before = round(os.getloadavg()[0], 2)
        result = _run_child(case, directory, run_dir)
        result["load_before"], result["load_after"] = load_before, round(os.getloadavg()[0], 2)
        result["correct"] = _check(result, dataset)
        report["results"].append(result)
        print(
            f"  {case}: {result['seconds']:.1f} s, peak RSS {result['peak_rss_bytes'] / MiB:.0f} MiB, "
            f"correct: {result['correct']}",
            flush=True,
        )
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    engine = next((r for r in report["results"] if r["case"] == "engine"), None)
    if engine:
        rss = engine["peak_rss_bytes"] / MiB
        report["target"] = (
            f"engine peak RSS {rss:.0f} MiB <= {TARGET_PEAK_RSS_MIB} MiB at a 256 MiB limit: "
            + ("met" if rss <= TARGET_PEAK_RSS_MIB else "MISSED")
        )
    with open(os.path.join(out, f"orphans-results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2)
    table = render(report)
    with open(os.path.join(out, f"orphans-results-{stamp}.md"), "w") as f:
        f.write(table + "\n\n" + report.get("target", "") + "\n")
    print()
    print(table)
    print(report.get("target", ""))
    print(f"\nresults: {out}/orphans-results-{stamp}.json")
    _draw_charts(os.path.join(out, f"orphans-results-{stamp}.json"))
    return 0 if all(r["correct"] for r in report["results"]) else 1


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
    parser.add_argument("--files", type=int, default=1_000_000, help="files in the table location")
    parser.add_argument("--per-dir", type=int, default=1000, help="files per directory")
    parser.add_argument(
        "--out", default=os.path.join(HERE, "out"), help="cache and results (default bench/out)"
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--keep", action="store_true", help="keep each run's directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None:
        return orchestrate(args)
    if args.child == "generate":
        generate(args.dir, args.files, args.per_dir)
        return 0
    result = WORKERS[args.child](args.dir, args.run_dir)
    with open(os.path.join(args.run_dir, "result.json"), "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
