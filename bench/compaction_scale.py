"""``bench/compaction.py --scale 1,5,10``: the same cases on the table at several sizes, one limit.

At each multiple ``k`` the table has ``k * --rows`` rows in ``k * --files`` files (the same file size), cached
under ``--out/scale-<rows>-<files>/`` like the single-size run's table; every case runs at every size with
the same 256 MiB memory limit. The report keeps, per size, the dataset and the case results
(``scale``), with the seconds per GiB of input; ``bench/charts.py`` draws peak RSS and time per GiB
against the size. Not a separate script: ``compaction.py`` calls :func:`orchestrate` with itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from typing import Any

GiB = 1024**3
DEFAULT_CASES = ("binpack", "pyiceberg", "floor")


def multiples(text: str) -> list[int]:
    """``"1,5,10"`` -> ``[1, 5, 10]``; one-line error for anything else."""
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"--scale takes whole multiples such as 1,5,10, not {text!r}") from None
    if not found or found[0] < 1:
        raise SystemExit(f"--scale takes whole multiples >= 1, not {text!r}")
    return found


def _one_size(cb: Any, args: argparse.Namespace, k: int, cases: list[str], stamp: str) -> dict[str, Any]:
    rows, files = args.rows * k, args.files * k
    sized = argparse.Namespace(**{**vars(args), "out": os.path.join(args.out, f"scale-{rows}-{files}")})
    os.makedirs(sized.out, exist_ok=True)
    dataset = cb.ensure_dataset(sized.out, rows, files, args.seed)
    results = []
    for case in cases:
        print(f"running {case} at {k}x ({rows} rows, {files} files) ...", flush=True)
        result = cb.run_case(case, dataset, sized, stamp)
        result = cb._summarize(case, [result])
        result["seconds_per_gib"] = result["seconds"] / (dataset["total_bytes"] / GiB)
        results.append(result)
        check = ""
        if "verify" in result:
            check = ", checksum " + ("matches" if result["verify"]["matches"] else "MISMATCH")
        print(
            f"  {case}: {result['seconds']:.1f} s ({result['seconds_per_gib']:.1f} s/GiB), "
            f"peak RSS {result['peak_rss_bytes'] / cb.MiB:.0f} MiB, "
            f"load {result['load_before']}->{result['load_after']}{check}",
            flush=True,
        )
    described = {key: value for key, value in dataset.items() if key != "files_on_disk"}
    return {"multiple": k, "dataset": described, "results": results}


def render(cb: Any, report: dict[str, Any]) -> str:
    """One Markdown table per size (compaction.py's), then peak RSS and s/GiB per case across sizes."""
    parts = []
    for size in report["scale"]:
        data = size["dataset"]
        parts.append(
            f"### {size['multiple']}x: {data['rows']:,} rows in {data['files']} files, "
            f"{data['total_bytes'] / cb.MiB:,.0f} MiB\n\n" + cb.render({"results": size["results"]})
        )
    lines = ["| case | " + " | ".join(f"{s['multiple']}x" for s in report["scale"]) + " |"]
    lines.append("| --- |" + " ---: |" * len(report["scale"]))
    for case in report["cases"]:
        cells = []
        for size in report["scale"]:
            r = next((x for x in size["results"] if x["case"] == case), None)
            cells.append(_size_cell(cb, r, size["dataset"]["total_bytes"]) if r else "-")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    parts.append(
        "### peak RSS, time per GiB of input and CPU per GiB (user + system), by size\n\n" + "\n".join(lines)
    )
    return "\n\n".join(parts)


def _size_cell(cb: Any, r: dict[str, Any], input_bytes: int) -> str:
    """Peak RSS, s/GiB and, where measured, user + system CPU-s per GiB: the engine's own work is its user
    CPU; the kernel's share grows with the machine's memory state (copies into fresh page-cache pages)."""
    cell = f"{r['peak_rss_bytes'] / cb.MiB:.0f} MiB, {r['seconds_per_gib']:.1f} s/GiB"
    if r.get("user_cpu_seconds") is not None and r.get("system_cpu_seconds") is not None:
        gib = input_bytes / GiB
        cell += f", CPU {r['user_cpu_seconds'] / gib:.1f} + {r['system_cpu_seconds'] / gib:.1f} s/GiB"
    return cell


def orchestrate(cb: Any, args: argparse.Namespace) -> int:
    """Every case at every multiple of ``--scale``; the report under ``--out/results-<stamp>.json``."""
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    sizes = multiples(args.scale)
    cases = [c.strip() for c in (args.cases or ",".join(DEFAULT_CASES)).split(",") if c.strip()]
    if unknown := [c for c in cases if c not in cb.CASES]:
        raise SystemExit(f"unknown cases {unknown}; choose from {', '.join(cb.CASES)}")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        cb.snapshot_code(args.out, stamp)
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": cb._machine(),
        "versions": cb._versions(),
        "settings": {
            "memory_limit_bytes": cb.MEMORY_LIMIT,
            "target_file_size_bytes": cb.TARGET_FILE_SIZE,
            "sort_order": cb.SORT_ORDER,
        },
        "cases": cases,
        "scale": [_one_size(cb, args, k, cases, stamp) for k in sizes],
    }
    path = os.path.join(args.out, f"results-{stamp}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    table = render(cb, report)
    with open(os.path.join(args.out, f"results-{stamp}.md"), "w") as f:
        f.write(table + "\n")
    print()
    print(table)
    print(f"\nresults: {path}")
    cb.draw_charts(path)
    bad = [r for s in report["scale"] for r in s["results"] if "verify" in r and not r["verify"]["matches"]]
    return 1 if bad else 0
