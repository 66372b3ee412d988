"""Delete-file maintenance benchmark (issue 13): conversion and position-delete compaction against the
full rewrite and Spark's nearest procedures, on ``bench/mor.py``'s merge-on-read table.

Run by hand, never as a test::

    /work/venv/bin/python bench/delete_maintenance.py [--rows 20000000 --files 400] [--memory-limit 64]
        [--cases ours-convert,...] [--spark-driver-memory 4g] [--out bench/out/delete-maintenance]

The table is ``bench/mor.py``'s (generated once, cached under ``--out``): ``--rows`` rows in ``--files``
data files, 10 % deleted by Spark's merge-on-read DELETE (position deletes), 5 % by ``--eq-files``
equality delete files on the 97-character ``key`` column (at 20M rows the keys' Arrow size, 96 MiB, is
larger than the 64 MiB limit). Every case runs in its own child process from the same pristine
metadata, new files under ``--out/runs/<stamp>-<case>-1``:

- ``ours-convert``: ``convert_equality_deletes(table, limits=ResourceLimits(--memory-limit MiB))``:
  equality deletes -> position deletes, no data file rewritten;
- ``ours-rewrite-position-deletes``: ``rewrite_position_deletes(table, options={"rewrite-all": "true"})``
  (``engine.ops.position_deletes``; skipped with a note where that module is not in the code under test);
- ``ours-convert-then-rewrite-position-deletes``: both, one after the other (the read path fully fixed
  without rewriting data);
- ``ours-full-rewrite``: ``compact`` with ``rewrite-all`` and a 128 MiB target, every delete applied
  (``bench/mor.py``'s ``ours``): the baseline the conversion is compared with;
- ``spark-full-rewrite``: Spark's ``rewrite_data_files`` with ``rewrite-all`` (``bench/mor.py``'s
  ``spark``); Java 1.10 has no procedure converting equality deletes to position deletes (only the
  ``ConvertEqualityDeleteFiles`` API, without an implementation), so this is Spark's nearest to the
  conversion;
- ``spark-rewrite-position-deletes``: ``CALL spark_cat.system.rewrite_position_delete_files(table =>
  'db.events', options => map('rewrite-all', 'true'))``.

Per case: the operation's time, the child's wall and CPU time, peak RSS of the whole process (ours:
``ru_maxrss``; Spark: JVM + Python ``VmHWM``), bytes and files added (the new snapshots' summaries,
``added-files-size``), the load average (1/5/15) at start and end, and the ratios: time and bytes against
the full rewrite of the same engine, time, RSS and bytes against Spark's nearest procedure. Our peak RSS
is flagged when above the limit + 350 MiB. One Spark child then reads every result: the live rows' count
and checksum must equal the pristine ones (exit 1 otherwise); no equality delete may be left after a
conversion, no delete file after our full rewrite.

Results: ``--out/results-<stamp>.json`` and ``--out/results-<stamp>.md``.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)


def _mor_bench() -> Any:
    """bench/mor.py as a module: its table, child-process machinery, Spark session and checks."""
    spec = importlib.util.spec_from_file_location("bench_mor", os.path.join(HERE, "mor.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot load bench/mor.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mor"] = module
    spec.loader.exec_module(module)
    return module


MOR = _mor_bench()
CB = MOR.CB
MiB = MOR.MiB

CONVERT = "ours-convert"
REWRITE_POSITIONS = "ours-rewrite-position-deletes"
CHAIN = "ours-convert-then-rewrite-position-deletes"
OURS_FULL = "ours-full-rewrite"
SPARK_FULL = "spark-full-rewrite"
SPARK_POSITIONS = "spark-rewrite-position-deletes"
CASES = (CONVERT, REWRITE_POSITIONS, CHAIN, OURS_FULL, SPARK_FULL, SPARK_POSITIONS)
#: the full rewrite of the same engine each case is compared with
FULL_REWRITE_OF = {
    CONVERT: OURS_FULL,
    REWRITE_POSITIONS: OURS_FULL,
    CHAIN: OURS_FULL,
    SPARK_POSITIONS: SPARK_FULL,
}
#: Spark's nearest procedure (Java 1.10 has no conversion procedure: the full rewrite is nearest)
SPARK_NEAREST = {
    CONVERT: SPARK_FULL,
    REWRITE_POSITIONS: SPARK_POSITIONS,
    CHAIN: SPARK_FULL,
    OURS_FULL: SPARK_FULL,
}
#: delete-file kinds each case must leave none of (None: every kind); the rest are reported
FORBIDDEN_LEFT: dict[str, tuple[str, ...] | None] = {
    CONVERT: ("equality",),
    REWRITE_POSITIONS: (),
    CHAIN: ("equality",),
    OURS_FULL: None,
    SPARK_FULL: None,
    SPARK_POSITIONS: (),
}
POSITION_DELETES_MODULE = "airflow_provider_iceberg_exec.engine.ops.position_deletes"
POSITION_DELETE_OPTIONS = {"rewrite-all": "true"}
CONVERT_FIELDS = (
    "converted_equality_delete_files_count",
    "added_position_delete_files_count",
    "removed_position_delete_files_count",
    "matched_rows_count",
    "added_bytes_count",
    "kept_equality_delete_files",
    "spilled_bytes",
)
POSITION_DELETE_FIELDS = (
    "rewritten_delete_files_count",
    "added_delete_files_count",
    "rewritten_bytes_count",
    "added_bytes_count",
)
NO_SPARK_CONVERSION = (
    "Java Iceberg 1.10 has no procedure converting equality deletes to position deletes (only the "
    "ConvertEqualityDeleteFiles API, without an implementation): for the conversion, Spark's nearest "
    "is the full rewrite (rewrite_data_files)."
)


# ------------------------------------------------------------------------------------------ workers


def _limits(run_dir: str, memory_limit: int) -> Any:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

    return ResourceLimits(memory_limit_bytes=memory_limit, spill_dir=os.path.join(run_dir, "spill"))


def _picked(outcome: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {k: outcome.get(k) for k in fields}


def _rewrite_position_deletes() -> tuple[Callable[..., Any] | None, str]:
    """The engine's ``rewrite_position_deletes``, or None and why not where the module is not there."""
    try:
        from airflow_provider_iceberg_exec.engine.ops.position_deletes import (
            rewrite_position_deletes,
        )
    except ImportError as error:
        if error.name != POSITION_DELETES_MODULE:
            raise  # the module is there but broken: a failure, not a skip
        return None, f"skipped: {POSITION_DELETES_MODULE}.rewrite_position_deletes does not import ({error})"
    return rewrite_position_deletes, ""


def _convert_step(table: Any, limits: Any) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes

    t0 = time.monotonic()
    outcome = convert_equality_deletes(table, limits=limits)
    return {
        "seconds": time.monotonic() - t0,
        "procedure_result": _picked(outcome, CONVERT_FIELDS),
        "engine_peak_rss_bytes": outcome.get("peak_rss_bytes"),
    }


def _position_step(rewrite: Callable[..., Any], table: Any, limits: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    outcome = rewrite(table, options=dict(POSITION_DELETE_OPTIONS), limits=limits)
    return {
        "seconds": time.monotonic() - t0,
        "options": dict(POSITION_DELETE_OPTIONS),
        "procedure_result": _picked(outcome, POSITION_DELETE_FIELDS),
        "engine_peak_rss_bytes": outcome.get("peak_rss_bytes"),
        "spilled_bytes": outcome.get("spilled_bytes"),
    }


def worker_convert(metadata_location: str, run_dir: str, memory_limit: int) -> dict[str, Any]:
    table = CB._run_table(run_dir, metadata_location)
    step = _convert_step(table, _limits(run_dir, memory_limit))
    table.refresh()
    return {**step, "metadata_location": table.metadata_location, "memory_limit_bytes": memory_limit}


def worker_rewrite_positions(metadata_location: str, run_dir: str, memory_limit: int) -> dict[str, Any]:
    rewrite, why = _rewrite_position_deletes()
    if rewrite is None:
        return {"skipped": why}
    table = CB._run_table(run_dir, metadata_location)
    step = _position_step(rewrite, table, _limits(run_dir, memory_limit))
    table.refresh()
    return {**step, "metadata_location": table.metadata_location, "memory_limit_bytes": memory_limit}


def worker_chain(metadata_location: str, run_dir: str, memory_limit: int) -> dict[str, Any]:
    """Conversion, then position-delete compaction of its output, on one table in one process."""
    rewrite, why = _rewrite_position_deletes()
    if rewrite is None:
        return {"skipped": why}
    table = CB._run_table(run_dir, metadata_location)
    limits = _limits(run_dir, memory_limit)
    converted = _convert_step(table, limits)
    compacted = _position_step(rewrite, table, limits)
    table.refresh()
    return {
        "seconds": converted["seconds"] + compacted["seconds"],
        "steps": {"convert": converted, "rewrite_position_deletes": compacted},
        "metadata_location": table.metadata_location,
        "memory_limit_bytes": memory_limit,
    }


OURS_WORKERS: dict[str, Callable[[str, str, int], dict[str, Any]]] = {
    CONVERT: worker_convert,
    REWRITE_POSITIONS: worker_rewrite_positions,
    CHAIN: worker_chain,
    OURS_FULL: MOR.worker_ours,
}


def worker(args: argparse.Namespace) -> Any:
    """Body of a case's child process (the table's generation and Spark's reads are bench/mor.py's)."""
    out = os.path.abspath(args.out)
    with open(os.path.join(out, "dataset.json")) as f:
        location = json.load(f)["metadata_location"]
    run_dir = os.path.abspath(args.run_dir)
    if args.action == SPARK_FULL:
        return MOR.worker_spark(location, run_dir, args.spark_driver_memory)
    if args.action == SPARK_POSITIONS:
        return MOR.spark_procedure(
            location,
            run_dir,
            args.spark_driver_memory,
            "rewrite_position_delete_files",
            POSITION_DELETE_OPTIONS,
        )
    if args.action in OURS_WORKERS:
        result = OURS_WORKERS[args.action](location, run_dir, args.memory_limit * MiB)
        return {**result, "engine_sha256": CB._engine_digest()}
    raise SystemExit(f"unknown action {args.action}")


# ------------------------------------------------------------------------------------------ figures


def _metadata(location: str) -> dict[str, Any]:
    path = MOR._local(location)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        document: dict[str, Any] = json.load(f)
    return document


def added_files(metadata_location: str, pristine_location: str) -> dict[str, int]:
    """What the snapshots newer than the pristine table's added and removed, from their summaries
    (Java's and PyIceberg's ``added-files-size`` count data and delete files alike)."""
    known = {s["snapshot-id"] for s in _metadata(pristine_location).get("snapshots", [])}
    new = [s for s in _metadata(metadata_location).get("snapshots", []) if s["snapshot-id"] not in known]
    total: dict[str, int] = {"snapshots": len(new)}
    for key in (
        "added-files-size",
        "removed-files-size",
        "added-data-files",
        "deleted-data-files",
        "added-delete-files",
        "removed-delete-files",
    ):
        total[key] = sum(int(s.get("summary", {}).get(key, 0)) for s in new)
    return total


def _disk_bytes(directory: str) -> int:
    """Bytes of the files under ``directory``, without Hadoop's ``.<name>.crc`` checksum files."""
    return sum(
        os.path.getsize(os.path.join(d, n))
        for d, _dirs, names in os.walk(directory)
        for n in names
        if not (n.startswith(".") and n.endswith(".crc"))
    )


def _measure_written(result: dict[str, Any], dataset: dict[str, Any]) -> None:
    """Bytes and files the case added, and the bytes under its data directory (a cross-check)."""
    added = added_files(result["metadata_location"], dataset["metadata_location"])
    result["snapshot_summaries"] = added
    result["bytes_written"] = added["added-files-size"]
    result["files_added"] = added["added-data-files"] + added["added-delete-files"]
    result["bytes_on_disk_under_data"] = _disk_bytes(os.path.join(result["run_dir"], "data"))


def _over_limit(result: dict[str, Any], limit: int) -> bool:
    return bool(result["case"].startswith("ours") and result["peak_rss_bytes"] > limit + MOR.OVERHEAD_TARGET)


# ------------------------------------------------------------------------------------- orchestration


def _verify(
    results: list[dict[str, Any]], dataset: dict[str, Any], args: argparse.Namespace, stamp: str
) -> tuple[list[str], list[str]]:
    """Spark reads every result that ran; returns (failures, notes)."""
    failures: list[str] = []
    notes: list[str] = []
    ran = [r for r in results if _ran(r)]
    checked = {v["case"]: v for v in MOR.spark_read(ran, CASES, args, stamp)}
    for r in ran:
        MOR._judge_spark_read(
            r, checked[r["case"]], dataset, failures, notes, FORBIDDEN_LEFT[r["case"]], (SPARK_FULL,)
        )
        if r.get("stray_files_in_pristine_tree"):
            failures.append(
                f"{r['case']} wrote into the pristine tree: {r['stray_files_in_pristine_tree'][:5]}"
            )
        if _over_limit(r, args.memory_limit * MiB):
            notes.append(
                f"{r['case']}: peak RSS {r['peak_rss_bytes'] / MiB:.0f} MiB is above the limit + 350 MiB "
                f"({(args.memory_limit * MiB + MOR.OVERHEAD_TARGET) / MiB:.0f} MiB)"
            )
        if r["bytes_written"] != r["bytes_on_disk_under_data"]:
            notes.append(
                f"{r['case']}: the snapshots added {r['bytes_written']} bytes, its data directory holds "
                f"{r['bytes_on_disk_under_data']}"
            )
    notes.extend(f"{r['case']}: {r['skipped']}" for r in results if r.get("skipped"))
    failures.extend(f"{r['case']}: {r['error']}" for r in results if r.get("error"))
    if any(c in {r["case"] for r in results} for c in (CONVERT, CHAIN)):
        notes.append(NO_SPARK_CONVERSION)
    return failures, notes


def _ran(r: dict[str, Any] | None) -> bool:
    """Whether a case ran to its end (neither skipped nor failed)."""
    return r is not None and not r.get("skipped") and not r.get("error")


def _run(case: str, dataset: dict[str, Any], args: argparse.Namespace, stamp: str) -> dict[str, Any]:
    print(f"running {case} ...", flush=True)
    try:
        result: dict[str, Any] = MOR.run_case(case, dataset, args, stamp, 1, SCRIPT)
    except RuntimeError as error:  # a failed child: the run goes on, and exits 1 at its end
        print(f"  {case}: FAILED ({error}; its traceback is above)", flush=True)
        run_dir = os.path.join(os.path.abspath(args.out), "runs", f"{stamp}-{case}-1")
        return {"case": case, "error": str(error), "run_dir": run_dir}
    if result.get("skipped"):
        print(f"  {case}: {result['skipped']}", flush=True)
        return result
    _measure_written(result, dataset)
    print(
        f"  {case}: {result['seconds']:.1f} s (process {result['process_seconds']:.1f} s), "
        f"peak RSS {result['peak_rss_bytes'] / MiB:.0f} MiB, CPU {result['cpu_seconds']:.1f} s, "
        f"written {result['bytes_written'] / MiB:.2f} MiB in {result['files_added']} files, "
        f"load {_loads(result)}",
        flush=True,
    )
    return result


def _cases(text: str) -> list[str]:
    cases = [c.strip() for c in text.split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    return cases


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    cases = _cases(args.cases)
    dataset = MOR.ensure_dataset(args)
    limit = args.memory_limit * MiB
    keys_exceed = MOR._describe(dataset, limit)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        MOR.snapshot_code(out, stamp)
    report: dict[str, Any] = {
        **MOR.report_header(dataset),
        "settings": {
            "memory_limit_bytes": limit,
            "rss_target_bytes": limit + MOR.OVERHEAD_TARGET,
            "keys_exceed_memory_limit": keys_exceed,
            "target_file_size_bytes": MOR.TARGET_FILE_SIZE,
            "spark_driver_memory": args.spark_driver_memory,
        },
    }
    results = [_run(case, dataset, args, stamp) for case in cases]
    failures, notes = _verify(results, dataset, args, stamp)
    report["results"], report["failures"], report["notes"] = results, failures, notes
    table = render(report)
    with open(os.path.join(out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
        f.write(table + "\n" + "".join(f"\n- {n}" for n in notes) + "\n")
    print()
    print(table)
    for note in notes:
        print(f"NOTE: {note}")
    print(f"\nresults: {out}/results-{stamp}.json")
    CB.draw_charts(os.path.join(out, f"results-{stamp}.json"))
    if not args.keep:
        for r in results:
            shutil.rmtree(r["run_dir"], ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------- report


def _loads(r: dict[str, Any]) -> str:
    def fmt(loads: list[float]) -> str:
        return "/".join(f"{x:.1f}" for x in loads)

    return f"{fmt(r['load_before'])} → {fmt(r['load_after'])}"


def _labels(report: dict[str, Any]) -> dict[str, str]:
    limit_mib = report["settings"]["memory_limit_bytes"] // MiB
    driver = report["settings"]["spark_driver_memory"]
    return {
        CONVERT: f"iceberg-exec convert-equality-deletes ({limit_mib} MiB limit)",
        REWRITE_POSITIONS: f"iceberg-exec rewrite-position-deletes, rewrite-all ({limit_mib} MiB limit)",
        CHAIN: f"iceberg-exec convert, then rewrite-position-deletes ({limit_mib} MiB limit)",
        OURS_FULL: f"iceberg-exec compact, rewrite-all: full rewrite ({limit_mib} MiB limit)",
        SPARK_FULL: f"Spark rewrite_data_files, rewrite-all: full rewrite (driver {driver})",
        SPARK_POSITIONS: f"Spark rewrite_position_delete_files, rewrite-all (driver {driver})",
    }


def _against(r: dict[str, Any], base: dict[str, Any] | None, what: tuple[str, ...]) -> str:
    """``value / base's value`` for each figure in ``what``, ``-`` without a base."""
    if base is None or not _ran(base):
        return "-"
    return " / ".join(MOR._ratio(r.get(k), base.get(k)) for k in what)


def _rss(r: dict[str, Any], limit: int) -> str:
    text = f"{r['peak_rss_bytes'] / MiB:.0f}"
    if r["case"].startswith("spark"):
        return (
            text
            + f" (JVM {r['jvm_peak_rss_bytes'] / MiB:.0f} + Python {r['python_peak_rss_bytes'] / MiB:.0f})"
        )
    return text + (" **over limit + 350**" if _over_limit(r, limit) else " (ok)")


def _row(r: dict[str, Any], label: str, by: dict[str, dict[str, Any]], limit: int) -> str:
    if not _ran(r):
        what = "skipped (see the notes)" if r.get("skipped") else "**FAILED**"
        return f"| {label} | {what} " + "| " * 11 + "|"
    v = r.get("verify")
    check = "-" if v is None else ("match" if v["matches"] else "**MISMATCH**")
    left = "-" if v is None else (", ".join(f"{n} {k}" for k, n in v["delete_files"].items()) or "0")
    full = by.get(FULL_REWRITE_OF.get(r["case"], ""))
    nearest_case = SPARK_NEAREST.get(r["case"], "")
    nearest = by.get(nearest_case)
    versus = _against(r, nearest, ("seconds", "peak_rss_bytes", "bytes_written"))
    return (
        f"| {label} | {r['seconds']:.1f} | {r['process_seconds']:.1f} | {r['cpu_seconds']:.1f} "
        f"| {_rss(r, limit)} | {r['bytes_written'] / MiB:.2f} | {r['files_added']} "
        f"| {_against(r, full, ('seconds',))} | {_against(r, full, ('bytes_written',))} "
        f"| {versus}{f' ({nearest_case})' if versus != '-' else ''} | {check} | {left} | {_loads(r)} |"
    )


def render(report: dict[str, Any]) -> str:
    """The Markdown table of one run."""
    limit = report["settings"]["memory_limit_bytes"]
    labels = _labels(report)
    by = {r["case"]: r for r in report["results"]}
    lines = [
        "| case | time (s) | process wall (s) | CPU (s) | peak RSS (MiB) | bytes written (MiB) | files added "
        "| time vs full rewrite | bytes vs full rewrite | vs Spark's nearest: time / RSS / bytes "
        "| rows + checksum (Spark) | delete files left | load avg 1/5/15 start → end |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |",
    ]
    lines.extend(_row(by[case], labels[case], by, limit) for case in CASES if case in by)
    return "\n".join([*lines, "", *_headline(by)])


def _headline(by: dict[str, dict[str, Any]]) -> list[str]:
    """The acceptance figures in words: conversion against the full rewrites."""
    lines = []
    for case in (CONVERT, CHAIN):
        r = by.get(case)
        if not _ran(r):
            continue
        for full in (OURS_FULL, SPARK_FULL):
            base = by.get(full)
            if _ran(base):
                lines.append(
                    f"- {case} / {full}: time {_against(r, base, ('seconds',))}, "
                    f"bytes written {_against(r, base, ('bytes_written',))}, "
                    f"CPU {_against(r, base, ('cpu_seconds',))}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = MOR.build_parser(__doc__ or "", os.path.join(HERE, "out", "delete-maintenance"), CASES)
    args = parser.parse_args(argv)
    if args.action is None:
        return orchestrate(args)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
