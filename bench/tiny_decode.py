"""What decoding one tiny Parquet file costs, by codec: the per-file floor of compacting many small files
(issue 16).

Run by hand, never as a test::

    /work/main/.venv/bin/python bench/tiny_decode.py [--files 3000] [--rows-per-file 20]
        [--codecs zstd,snappy,none] [--repeat 3] [--out bench/out/tiny-decode]

Writes ``--files`` files of ``--rows-per-file`` rows (bench/compaction.py's columns and rows, as
bench/small_files.py writes them) once per codec, cached under ``--out/<codec>-<files>x<rows>``, then
times on one thread, in this process, each reader over every file of a codec:

- ``pyarrow``: each file opened and every column decoded as the engine decodes a tiny file
  (``read._decode_tiny``: PyArrow's ``ParquetReader`` on the open file, no pre-buffering, no threads);
- ``datafusion``: the codec's directory read by DataFusion on one partition.

Reports CPU and wall milliseconds per file (the best of ``--repeat`` passes) and each codec's cost over
uncompressed files, with the load average; results go to ``--out/results-<stamp>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
CODECS = ("zstd", "snappy", "none")
READERS = ("pyarrow", "datafusion")


def _sibling(name: str) -> Any:
    """Another script of bench/ as a module (bench/ is not a package), as the other scripts load theirs."""
    if f"bench_{name}" in sys.modules:
        return sys.modules[f"bench_{name}"]
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(HERE, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load bench/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


def write_files(directory: str, files: int, rows: int, codec: str, seed: int = 16) -> list[str]:
    """``files`` Parquet files of ``rows`` rows compressed with ``codec`` (kept when already there)."""
    import pyarrow.parquet as pq

    sf = _sibling("small_files")
    schema = sf._field_id_schema()
    os.makedirs(directory, exist_ok=True)
    paths = []
    for number in range(files):
        path = os.path.join(directory, f"{number:07d}.parquet")
        if not os.path.exists(path):
            table = sf.CB.make_batch(number, number * rows, rows, seed).cast(schema)
            pq.write_table(table, path + ".part", compression=codec)
            os.replace(path + ".part", path)
        paths.append(path)
    return paths


def decode_pyarrow(paths: list[str]) -> int:
    """Every file decoded as ``read._decode_tiny`` decodes it; the rows read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 0
    for path in paths:
        with pa.OSFile(path) as source:
            reader = pq.ParquetReader()
            reader.open(source, pre_buffer=False, arrow_extensions_enabled=True)
            rows += reader.read_all(use_threads=False).num_rows
    return rows


def decode_datafusion(paths: list[str]) -> int:
    """The files' directory read by DataFusion on one partition; the rows read."""
    import datafusion

    ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    frame = ctx.read_parquet(os.path.dirname(paths[0]) + os.sep)
    return sum(batch.num_rows for batch in frame.collect())


def measure(decode: Callable[[list[str]], int], paths: list[str], repeat: int) -> dict[str, Any]:
    """The best of ``repeat`` passes, per file, with the load average before and after."""
    best: tuple[float, float] | None = None
    load_before = os.getloadavg()[0]
    rows = 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        rows = decode(paths)
        passed = (time.perf_counter() - wall, time.process_time() - cpu)
        best = passed if best is None or passed[1] < best[1] else best
    assert best is not None
    return {
        "files": len(paths),
        "rows": rows,
        "wall_ms_per_file": round(best[0] / len(paths) * 1e3, 4),
        "cpu_ms_per_file": round(best[1] / len(paths) * 1e3, 4),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "| codec | reader | CPU ms a file | wall ms a file | CPU over uncompressed | load before -> after |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    plain = {r["reader"]: r for r in report["results"] if r["codec"] == "none"}
    for r in report["results"]:
        base = plain.get(r["reader"])
        over = f"{r['cpu_ms_per_file'] - base['cpu_ms_per_file']:+.3f} ms" if base else "-"
        lines.append(
            f"| {r['codec']} | {r['reader']} | {r['cpu_ms_per_file']:.3f} | {r['wall_ms_per_file']:.3f} | "
            f"{over} | {r['load_before']} -> {r['load_after']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--rows-per-file", type=int, default=20)
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "out", "tiny-decode"))
    args = parser.parse_args(argv)
    codecs = [c for c in args.codecs.split(",") if c]
    readers = [r for r in args.readers.split(",") if r]
    unknown = sorted(set(codecs) - set(CODECS)) + sorted(set(readers) - set(READERS))
    if unknown:
        raise SystemExit(
            f"unknown codec or reader {unknown}; codecs: {', '.join(CODECS)}, readers: {', '.join(READERS)}"
        )
    out = os.path.abspath(args.out)
    decoders = {"pyarrow": decode_pyarrow, "datafusion": decode_datafusion}
    results = []
    for codec in codecs:
        directory = os.path.join(out, f"{codec}-{args.files}x{args.rows_per_file}")
        paths = write_files(directory, args.files, args.rows_per_file, codec)
        stray = set(glob.glob(os.path.join(directory, "*"))) - set(paths)
        if stray:
            raise SystemExit(f"{directory} holds other files ({sorted(stray)[:3]}); remove them")
        for reader in readers:
            found = measure(decoders[reader], paths, args.repeat)
            expected = args.files * args.rows_per_file
            if found["rows"] != expected:
                raise SystemExit(f"{reader} read {found['rows']} rows of {codec} files, not {expected}")
            results.append({"codec": codec, "reader": reader, **found})
            print(f"{codec} {reader}: {found['cpu_ms_per_file']:.3f} ms CPU a file", flush=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    report = {
        "bench": "tiny_decode",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": _sibling("small_files").CB._machine(),
        "versions": _sibling("small_files").CB._versions(),
        "settings": {"rows_per_file": args.rows_per_file, "repeat": args.repeat},
        "results": results,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2)
    text = render(report) + "\n"
    with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
        f.write(text)
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
