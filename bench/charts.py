"""Charts of the benchmarks' results, drawn from the result JSON each bench script writes.

Every bench script calls :func:`draw_next_to` on its ``results-<stamp>.json`` at the end, which writes
beside it

- ``<bench>-<stamp>-bars.png``: grouped bars of time (s) and peak RSS (MiB) per case, ours against
  PyIceberg, Spark and the floor, each bar with its ratio to the group's reference (PyIceberg if the
  group has it, else Spark, else the floor), the memory limit as a line, the load average in the caption;
- ``<bench>-<stamp>-scale.png`` when the run measured several table sizes (``compaction.py --scale``,
  ``manifests.py --entries``): peak RSS and seconds per GiB of input against the table size.

Redraw from saved results without rerunning anything::

    python bench/charts.py bench/out/results-*.json -o docs/img/

Needs the ``bench`` extra (matplotlib); drawn with the Agg backend, no display.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB
ROLES = ("ours", "pyiceberg", "spark", "floor", "other")
ROLE_NAMES = {"ours": "iceberg-exec", "pyiceberg": "PyIceberg", "spark": "Spark", "floor": "floor"}
#: the peer each group's ratios are taken against, first present wins
REFERENCE_ORDER = ("pyiceberg", "spark", "floor")
PALETTES = {
    "ours": ("#1f5fa8", "#5b9bd5", "#0b3d6e", "#9cc3e6", "#3a7dc9", "#6f8fb0"),
    "pyiceberg": ("#e8710a", "#f5a25d"),
    "spark": ("#c0392b", "#e57368"),
    "floor": ("#7f7f7f", "#b0b0b0"),
    "other": ("#2e9e4f", "#7cc68f", "#a0522d"),
}

# Per bench script: case -> (role, label). Cases not listed are drawn as "other" with their own name.
CASES: dict[str, dict[str, tuple[str, str]]] = {
    "compaction": {
        "binpack": ("ours", "iceberg-exec binpack"),
        "sort": ("ours", "iceberg-exec sort"),
        "zorder": ("ours", "iceberg-exec zorder"),
        "pyiceberg": ("pyiceberg", "PyIceberg scan + overwrite"),
        "pyiceberg-sort": ("pyiceberg", "PyIceberg scan + sort_by + overwrite"),
        "floor": ("floor", "floor: PyArrow read + write"),
        "datafusion": ("other", "DataFusion read + write"),
        "spark": ("spark", "Spark rewrite_data_files binpack"),
        "spark-sort": ("spark", "Spark rewrite_data_files sort"),
    },
    "cow": {
        "cow": ("ours", "iceberg-exec delete"),
        "pyiceberg": ("pyiceberg", "PyIceberg table.delete()"),
        "floor": ("floor", "floor: PyArrow read + filter + write"),
    },
    "mor": {
        "ours": ("ours", "iceberg-exec compact"),
        "spark": ("spark", "Spark rewrite_data_files"),
        "floor": ("floor", "floor: PyArrow read + write"),
    },
    "delete_maintenance": {
        "ours-convert": ("ours", "ours convert-equality-deletes"),
        "ours-rewrite-position-deletes": ("ours", "ours rewrite-position-deletes"),
        "ours-convert-then-rewrite-position-deletes": ("ours", "ours convert, then rewrite-position"),
        "ours-full-rewrite": ("ours", "ours full rewrite (compact)"),
        "spark-full-rewrite": ("spark", "Spark rewrite_data_files"),
        "spark-rewrite-position-deletes": ("spark", "Spark rewrite_position_delete_files"),
    },
    "manifests": {
        "ours": ("ours", "iceberg-exec rewrite_manifests"),
        "spark": ("spark", "Spark rewrite_manifests"),
        "floor": ("floor", "floor: read + write every entry"),
        "read": ("other", "read only"),
    },
    "small_files": {
        "plan": ("ours", "iceberg-exec plan"),
        "compact": ("ours", "iceberg-exec compact"),
        "spark": ("spark", "Spark rewrite_data_files"),
        "floor": ("floor", "floor: PyArrow read + write"),
    },
    "orphans": {
        "engine": ("ours", "iceberg-exec orphan scan"),
        "pyset": ("pyiceberg", "Python set via PyIceberg"),
        "pyset-lean": ("other", "leanest Python set"),
        "floor": ("floor", "listing only"),
    },
    "merge": {
        "ours-cow": ("ours", "iceberg-exec upsert, copy-on-write"),
        "ours-mor": ("ours", "iceberg-exec upsert, merge-on-read"),
        "ours-large": ("ours", "iceberg-exec upsert, 5x source, 64 MiB"),
        "pyiceberg": ("pyiceberg", "PyIceberg table.upsert()"),
        "spark-cow": ("spark", "Spark MERGE INTO, copy-on-write"),
        "spark-mor": ("spark", "Spark MERGE INTO, merge-on-read"),
        "floor-cow": ("floor", "floor: copy-on-write, PyArrow"),
        "floor-mor": ("floor", "floor: merge-on-read, PyArrow"),
    },
    "object_store": {
        "compact-file": ("ours", "iceberg-exec compact, local"),
        "compact-s3": ("ours", "iceberg-exec compact, S3"),
        "pyiceberg-s3": ("pyiceberg", "PyIceberg overwrite, S3"),
        "floor-s3": ("floor", "floor: PyArrow, S3"),
    },
}
TITLES = {
    "compaction": "Compaction (bench/compaction.py)",
    "cow": "Copy-on-write delete (bench/cow.py)",
    "mor": "Merge-on-read compaction (bench/mor.py)",
    "delete_maintenance": "Delete-file maintenance (bench/delete_maintenance.py)",
    "manifests": "Manifest rewrite (bench/manifests.py)",
    "orphans": "Orphan scan (bench/orphans.py)",
    "small_files": "Many small files (bench/small_files.py)",
    "merge": "MERGE / upsert (bench/merge.py)",
    "object_store": "Compaction on object storage (bench/object_store.py)",
}


@dataclass(frozen=True)
class Bar:
    """One case of one group: what the bar charts draw."""

    group: str
    case: str
    label: str
    role: str
    seconds: float | None
    peak_rss_mib: float | None
    failed: bool = False


@dataclass(frozen=True)
class Point:
    """One case at one table size: what the scale chart draws."""

    label: str
    role: str
    x: float
    x_label: str
    peak_rss_mib: float | None
    seconds_per_gib: float | None


@dataclass(frozen=True)
class Described:
    """A result document reduced to what the charts need."""

    bench: str
    title: str
    bars: list[Bar]
    points: list[Point]
    caption: str
    memory_limit_mib: float | None
    failed: list[str]


# ------------------------------------------------------------------------------------------ reading


def bench_of(doc: dict[str, Any]) -> str:
    """Which bench script wrote ``doc``: its ``bench`` key, else the script named in its command."""
    if isinstance(doc.get("bench"), str):
        return str(doc["bench"])
    found = re.search(r"bench/(\w+)\.py", str(doc.get("command", "")))
    if found and found.group(1) in CASES:
        return found.group(1)
    cases = {r.get("case") for r in doc.get("results", []) if isinstance(r, dict)}
    if cases and cases <= set(CASES["object_store"]):
        return "object_store"  # its JSON names no command
    raise ValueError("not a result document of bench/: no 'bench' key and no bench script in 'command'")


def _mib(value: Any) -> float | None:
    return float(value) / MiB if isinstance(value, (int, float)) and value > 0 else None


def _seconds(result: dict[str, Any]) -> float | None:
    value = result.get("seconds")
    if result.get("error") or result.get("failed") or not isinstance(value, (int, float)):
        return None
    return float(value)


def _rss_mib(result: dict[str, Any]) -> float | None:
    if result.get("error") or result.get("failed"):
        return None
    if "peak_rss_mib" in result:  # object_store.py writes MiB
        value = result["peak_rss_mib"]
        return float(value) if isinstance(value, (int, float)) else None
    return _mib(result.get("peak_rss_bytes"))


def _bar(bench: str, group: str, result: dict[str, Any]) -> Bar:
    case = str(result.get("case"))
    role, label = CASES[bench].get(case, ("other", case))
    failed = bool(result.get("error") or result.get("failed"))
    return Bar(group, case, label, role, _seconds(result), _rss_mib(result), failed)


def _rows_label(rows: Any, files: Any, size: Any = None) -> str:
    text = f"{rows / 1e6:g}M rows" if isinstance(rows, int) else ""
    if isinstance(files, int):
        text += f", {files} files"
    if isinstance(size, (int, float)):
        text += f", {size / MiB:,.0f} MiB"
    return text.strip(", ") or "run"


def _groups(bench: str, doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """(group label, results, dataset) per group of one document."""
    if bench == "manifests":
        return [(f"{s['entries']:,} entries", s["results"], s.get("dataset", {})) for s in doc["sizes"]]
    if bench == "small_files":
        return [(f"{s['files']:,} files", s["results"], s["dataset"]) for s in doc["sizes"]]
    if "scale" in doc:  # compaction.py --scale
        return [
            (f"{s['multiple']}x: " + _dataset_label(s["dataset"]), s["results"], s["dataset"])
            for s in doc["scale"]
        ]
    if bench == "cow":
        info = doc.get("dataset_info", {})
        names = list(dict.fromkeys(str(r["dataset"]) for r in doc["results"]))
        return [
            (
                _dataset_label(info.get(n, {})),
                [r for r in doc["results"] if r["dataset"] == n],
                info.get(n, {}),
            )
            for n in names
        ]
    dataset = doc.get("dataset") or doc.get("args") or {}
    return [(_dataset_label(dataset), doc["results"], dataset)]


def _dataset_label(dataset: dict[str, Any]) -> str:
    if "live_rows" in dataset:
        return (
            _rows_label(dataset.get("rows"), dataset.get("files")) + f", {dataset['live_rows'] / 1e6:g}M live"
        )
    if "orphans" in dataset:  # orphans.py: a table location of that many files
        return f"{dataset['files']:,} files, {dataset['orphans']:,} orphans"
    size = dataset.get("total_bytes") or dataset.get("data_bytes")
    return _rows_label(dataset.get("rows"), dataset.get("files"), size)


def _loads(results: Iterable[dict[str, Any]]) -> list[float]:
    """The 1-minute load averages recorded before and after each case (a float or a 1/5/15 triple)."""
    found = []
    for r in results:
        # A case repeated (``--repeat``) keeps every run's pair in ``load_all``, its first in the keys.
        pairs = r.get("load_all") or [(r.get("load_before"), r.get("load_after"))]
        for value in (v for pair in pairs for v in pair):
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, (int, float)):
                found.append(float(value))
    return found


def _caption(doc: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    parts = []
    if doc.get("date"):
        parts.append(str(doc["date"]).replace("T", " ").replace("+00:00", " UTC"))
    commit = (doc.get("versions") or {}).get("commit")
    if commit:
        parts.append(f"commit {commit}")
    loads = _loads(results)
    cores = (
        (doc.get("machine") or {}).get("nproc") or (doc.get("machine") or {}).get("cpus") or os.cpu_count()
    )
    if loads:
        parts.append(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f} on {cores} cores")
    else:
        parts.append("load average not recorded")
    repeated = max((int(r.get("repetitions") or 1) for r in results), default=1)
    if repeated > 1:
        parts.append(f"{repeated} runs round robin: median times, highest peaks")
    command = _short_command(str(doc.get("command", "")))
    return " · ".join(parts) + (f"\n{command}" if command else "")


def _short_command(command: str) -> str:
    """The command as typed from the repository: ``python bench/<script>.py ...``."""
    if not command:
        return ""
    words = shlex.split(command)
    if words and os.path.basename(words[0]).startswith("python"):
        words[0] = "python"
    words = [re.sub(r"^/\S*/(bench/\w+\.py)$", r"\1", w) for w in words]
    return shlex.join(words)


def _limit_mib(doc: dict[str, Any]) -> float | None:
    settings = doc.get("settings") or {}
    return _mib(settings.get("memory_limit_bytes") or doc.get("memory_limit_bytes"))


def describe(doc: dict[str, Any]) -> Described:
    """The bars, scale points, caption and limit of one result document of any bench script."""
    bench = bench_of(doc)
    groups = _groups(bench, doc)
    bars = [_bar(bench, label, r) for label, results, _ in groups for r in results]
    every = [r for _, results, _ in groups for r in results]
    failed = [
        f"{CASES[bench].get(str(r.get('case')), ('', str(r.get('case'))))[1]} ({label})"
        for label, results, _ in groups
        for r in results
        if r.get("error") or r.get("failed")
    ]
    points = _points(bench, groups) if len(groups) > 1 and (bench == "manifests" or "scale" in doc) else []
    return Described(bench, TITLES[bench], bars, points, _caption(doc, every), _limit_mib(doc), failed)


def _points(bench: str, groups: list[tuple[str, list[dict[str, Any]], dict[str, Any]]]) -> list[Point]:
    points = []
    base = None
    for _label, results, dataset in groups:
        size = dataset.get("entries") if bench == "manifests" else dataset.get("rows")
        input_bytes = dataset.get("manifest_bytes") if bench == "manifests" else dataset.get("total_bytes")
        if not isinstance(size, int):
            continue
        base = base or size
        x_label = f"{size / base:g}x\n" + (
            f"{size:,} entries" if bench == "manifests" else f"{size / 1e6:g}M rows"
        )
        if isinstance(input_bytes, int):
            x_label += f"\n{input_bytes / MiB:,.0f} MiB"
        for r in results:
            bar = _bar(bench, "", r)
            per_gib = (
                bar.seconds / (input_bytes / GiB) if bar.seconds and isinstance(input_bytes, int) else None
            )
            points.append(Point(bar.label, bar.role, float(size), x_label, bar.peak_rss_mib, per_gib))
    return points


# ------------------------------------------------------------------------------------------ drawing


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    return plt


def _colors(labels: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A color per case label: the role's palette, one shade per case of that role."""
    used: dict[str, int] = {}
    colors = {}
    for label, role in labels:
        if label in colors:
            continue
        palette = PALETTES.get(role, PALETTES["other"])
        colors[label] = palette[used.get(role, 0) % len(palette)]
        used[role] = used.get(role, 0) + 1
    return colors


def _reference(bars: Sequence[Bar], value: str) -> Bar | None:
    for role in REFERENCE_ORDER:
        for bar in bars:
            if bar.role == role and getattr(bar, value):
                return bar
    return None


def _panel(ax: Any, described: Described, value: str, unit: str, colors: dict[str, str]) -> None:
    """One panel of grouped bars: ``value`` ('seconds' or 'peak_rss_mib') per case, per group."""
    groups = list(dict.fromkeys(b.group for b in described.bars))
    width = min(0.8 / max(sum(1 for b in described.bars if b.group == g) for g in groups), 0.3)
    top = max((getattr(b, value) or 0 for b in described.bars), default=0) or 1
    for index, group in enumerate(groups):
        members = [b for b in described.bars if b.group == group]
        reference = _reference(members, value)
        start = index - width * (len(members) - 1) / 2
        for offset, bar in enumerate(members):
            amount = getattr(bar, value)
            x = start + offset * width
            if amount is None:  # failed or not measured: no bar, say so
                mark = "failed" if bar.failed else "n/a"
                ax.text(x, top * 0.02, mark, ha="center", va="bottom", fontsize=7, rotation=90)
                continue
            ax.bar(x, amount, width * 0.92, color=colors[bar.label], label=bar.label)
            text = f"{amount:,.0f}" if amount >= 100 else f"{amount:.1f}"
            if reference is not None and bar is not reference:
                text += f"\n{amount / getattr(reference, value):.2f}x"
            ax.text(x, amount + top * 0.01, text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_ylim(0, top * 1.22)
    ax.grid(axis="y", alpha=0.3)
    if value == "peak_rss_mib" and described.memory_limit_mib:
        ax.axhline(described.memory_limit_mib, color="black", linestyle="--", linewidth=0.8)


def _reference_note(described: Described) -> str:
    """Which case the ratios are against, which peers the bench has but this run lacks, what failed."""
    measured = [b for b in described.bars if b.seconds or b.peak_rss_mib]
    groups = list(dict.fromkeys(b.group for b in described.bars))
    by_value: dict[str, list[str]] = {"seconds": [], "peak_rss_mib": []}
    for value, references in by_value.items():
        for group in groups:
            reference = _reference([b for b in measured if b.group == group], value)
            if reference is not None and reference.label not in references:
                references.append(reference.label)
    # A peer with no time (killed at a timeout) is the memory reference only: say which is which.
    times, memory = (" / ".join(by_value[v]) for v in ("seconds", "peak_rss_mib"))
    if not memory:
        note = "no peer measured"
    elif times == memory:
        note = f"ratios: against {memory} of the same group"
    else:
        note = f"ratios: time against {times or 'none'}, peak RSS against {memory}, of the same group"
    known = {role for role, _ in CASES[described.bench].values()}
    roles = {b.role for b in measured}
    absent = [ROLE_NAMES[r] for r in REFERENCE_ORDER if r in known and r not in roles]
    if absent:
        note += f" · not in this run: {', '.join(absent)}"
    if described.failed:
        note += f" · failed: {'; '.join(described.failed)}"
    return note


def _frame(fig: Any, described: Described, lines: Sequence[str], legend: tuple[list[Any], list[str]]) -> None:
    """Title and caption lines on top (date, load, command, notes), the legend alone at the bottom."""
    handles, labels = legend
    fig.suptitle(described.title, fontsize=12, y=0.985)
    fig.text(0.5, 0.935, "\n".join(line for line in lines if line), ha="center", va="top", fontsize=8)
    columns = min(4, len(labels)) or 1
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    rows = (len(labels) + columns - 1) // columns
    fig.tight_layout(rect=(0, 0.02 + 0.04 * rows, 1, 0.935 - 0.03 * len([x for x in lines if x])))


def figure_bars(described: Described) -> Any:
    """The figure of grouped bars of time and peak RSS per case (the caller saves and closes it)."""
    plt = _pyplot()
    colors = _colors((b.label, b.role) for b in described.bars)
    groups = len({b.group for b in described.bars})
    fig, axes = plt.subplots(1, 2, figsize=(max(11.0, 3.2 * groups + 5), 5.6), dpi=100)
    _panel(axes[0], described, "seconds", "time (s)", colors)
    axes[0].set_title("time of the operation (s)", fontsize=10)
    _panel(axes[1], described, "peak_rss_mib", "peak RSS (MiB)", colors)
    limit = (
        f"; dashed: memory limit {described.memory_limit_mib:.0f} MiB" if described.memory_limit_mib else ""
    )
    axes[1].set_title(f"peak RSS of the whole process (MiB){limit}", fontsize=10)
    handles = {h.get_label(): h for ax in axes for h in ax.containers}
    names = [k for k in colors if k in handles]
    caption, _, command = described.caption.partition("\n")
    _frame(
        fig, described, [caption, command, _reference_note(described)], ([handles[k] for k in names], names)
    )
    return fig


def draw_bars(described: Described, path: str) -> str:
    """Grouped bars of time and peak RSS per case as a PNG; returns ``path``."""
    fig = figure_bars(described)
    fig.savefig(path)
    _pyplot().close(fig)
    return path


SCALE_PANELS = (
    ("peak_rss_mib", "peak RSS (MiB)", "peak RSS as the table grows (MiB)"),
    ("seconds_per_gib", "time per GiB of input (s/GiB)", "time per GiB as the table grows (s/GiB)"),
)


def _scale_panel(ax: Any, points: Sequence[Point], value: str, colors: dict[str, str]) -> None:
    """One line per case of ``value`` against the size; a value's label is left out where one sits."""
    span = max((getattr(p, value) or 0 for p in points), default=1) or 1
    taken: dict[float, list[float]] = {}
    for label, color in colors.items():
        mine = sorted(
            (p for p in points if p.label == label and getattr(p, value) is not None), key=lambda p: p.x
        )
        ys = [float(getattr(p, value)) for p in mine]
        ax.plot([p.x for p in mine], ys, marker="o", color=color, label=label)
        for point, y in zip(mine, ys, strict=True):
            if any(abs(y - other) < span * 0.05 for other in taken.setdefault(point.x, [])):
                continue
            taken[point.x].append(y)
            text = f"{y:,.0f}" if y >= 100 else f"{y:.1f}"
            ax.annotate(
                text, (point.x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7
            )
    ticks = {p.x: p.x_label for p in points}
    ax.set_xscale("log")
    ax.set_xticks(list(ticks), list(ticks.values()), fontsize=8)
    ax.minorticks_off()
    ax.set_ylim(0, span * 1.15)
    ax.grid(alpha=0.3)


def draw_scale(described: Described, path: str) -> str:
    """Peak RSS and seconds per GiB of input against the table size, a line per case; returns ``path``."""
    plt = _pyplot()
    colors = _colors((p.label, p.role) for p in described.points)
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 5.0), dpi=100)
    for ax, (value, unit, title) in zip(axes, SCALE_PANELS, strict=True):
        _scale_panel(ax, described.points, value, colors)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
    if described.memory_limit_mib:
        limit = described.memory_limit_mib
        axes[0].axhline(
            limit, color="black", linestyle="--", linewidth=0.8, label=f"memory limit {limit:.0f} MiB"
        )
    caption, _, command = described.caption.partition("\n")
    scaled = Described(described.bench, described.title + ": as the table grows", [], [], "", None, [])
    _frame(fig, scaled, [caption, command], axes[0].get_legend_handles_labels())
    fig.savefig(path)
    plt.close(fig)
    return path


def chart_stem(json_path: str, bench: str) -> str:
    """``<bench>-<stamp>`` from ``.../results-<stamp>.json`` (or the file's own stem)."""
    stem = os.path.splitext(os.path.basename(json_path))[0]
    found = re.search(r"\d{8}[-T]?\d{6}Z?", stem)
    return f"{bench}-{found.group(0) if found else stem}"


def draw(doc: dict[str, Any], out_dir: str, stem: str) -> list[str]:
    """Every chart of one result document under ``out_dir``; returns the paths written."""
    described = describe(doc)
    os.makedirs(out_dir, exist_ok=True)
    written = [draw_bars(described, os.path.join(out_dir, f"{stem}-bars.png"))]
    if described.points:
        written.append(draw_scale(described, os.path.join(out_dir, f"{stem}-scale.png")))
    return written


def draw_next_to(json_path: str) -> list[str]:
    """What a bench script calls at its end: the charts beside its result JSON; never fails the run."""
    try:
        with open(json_path) as f:
            doc = json.load(f)
        written = draw(doc, os.path.dirname(os.path.abspath(json_path)), chart_stem(json_path, bench_of(doc)))
    except ImportError:
        print("charts: skipped, matplotlib is not installed (the project's 'bench' extra)", flush=True)
        return []
    except (ValueError, KeyError, TypeError) as error:  # a chart must not cost the measured results
        print(f"charts: skipped, {type(error).__name__}: {error}", flush=True)
        return []
    for path in written:
        print(f"chart: {path}", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Redraw the charts of saved bench result JSON files.")
    parser.add_argument("results", nargs="+", help="result JSON files written by the bench scripts")
    parser.add_argument("-o", "--out", help="directory for the PNG files (default: beside each JSON)")
    args = parser.parse_args(argv)
    for json_path in args.results:
        with open(json_path) as f:
            doc = json.load(f)
        out = args.out or os.path.dirname(os.path.abspath(json_path))
        for path in draw(doc, out, chart_stem(json_path, bench_of(doc))):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
