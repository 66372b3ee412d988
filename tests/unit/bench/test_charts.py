"""bench/charts.py draws real result documents of the bench scripts as readable PNG files."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")  # the project's `bench` extra
from PIL import Image

from tests.unit.bench.bench_scripts import BENCH, load

#: real runs, measured on the project's machine and kept with the charts drawn from them (docs/img/)
MANIFESTS = BENCH / "results" / "manifests-20261201-173714.json"
DELETE_MAINTENANCE = BENCH / "results" / "delete_maintenance-20261201-165850.json"


charts = load("charts")


def _doc(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _png(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()  # a truncated or corrupt file raises here
    with Image.open(path) as image:
        image.load()
        return image.size


def _drawn_labels(described: Any) -> set[str]:
    fig = charts.figure_bars(described)
    try:
        return {container.get_label() for ax in fig.axes for container in ax.containers}
    finally:
        charts._pyplot().close(fig)


def test_draws_bars_and_scale_of_a_real_run(tmp_path: Path) -> None:
    written = charts.draw(_doc(MANIFESTS), str(tmp_path), "manifests")

    assert [Path(p).name for p in written] == ["manifests-bars.png", "manifests-scale.png"]
    assert _png(tmp_path / "manifests-bars.png") == (1140, 560)  # two groups: 3.2 x 2 + 5 inches at 100 dpi
    assert _png(tmp_path / "manifests-scale.png") == (1100, 500)


def test_bars_carry_each_case_with_its_values_and_the_load() -> None:
    described = charts.describe(_doc(MANIFESTS))

    by = {(b.group, b.case): b for b in described.bars}
    ours = by[("100,000 entries", "ours")]
    assert ours.role == "ours"
    assert ours.seconds == pytest.approx(40.89, abs=0.01)
    assert ours.peak_rss_mib == pytest.approx(151175168 / 2**20)
    assert by[("1,000,000 entries", "spark")].role == "spark"
    assert "load average (1 min) 1.0-2.9 on 2 cores" in described.caption
    assert "python bench/manifests.py --entries 100000,1000000" in described.caption
    assert _drawn_labels(described) == {
        "iceberg-exec rewrite_manifests",
        "Spark rewrite_manifests",
        "floor: read + write every entry",
        "read only",
    }


def test_a_repeated_run_says_how_its_bars_sum_its_runs_and_spans_every_runs_load() -> None:
    # Three rounds of compact, floor and Spark (bench/small_files.py --repeat 3); the first run's load
    # before was 0.71, the highest of any run 1.9.
    described = charts.describe(_doc(BENCH / "results" / "small_files-20261208-002425.json"))

    assert "3 runs round robin: median times, highest peaks" in described.caption
    assert "load average (1 min) 0.7-1.9 on 2 cores" in described.caption
    assert {b.case: round(b.seconds, 1) for b in described.bars} == {
        "compact": 29.0,
        "floor": 19.6,
        "spark": 54.8,
    }


def test_a_run_without_spark_draws_without_its_bar(tmp_path: Path) -> None:
    doc = copy.deepcopy(_doc(MANIFESTS))
    for size in doc["sizes"]:
        size["results"] = [r for r in size["results"] if r["case"] != "spark"]

    described = charts.describe(doc)
    written = charts.draw(doc, str(tmp_path), "no-spark")

    assert all(b.role != "spark" for b in described.bars)
    assert "Spark rewrite_manifests" not in _drawn_labels(described)
    assert "iceberg-exec rewrite_manifests" in _drawn_labels(described)
    assert "not in this run: Spark" in charts._reference_note(described)
    assert "ratios: against floor: read + write every entry" in charts._reference_note(described)
    assert _png(Path(written[0])) == (1140, 560)


def test_a_failed_case_is_named_and_has_no_bar(tmp_path: Path) -> None:
    doc = _doc(DELETE_MAINTENANCE)  # Spark's full rewrite ran out of heap in this run

    described = charts.describe(doc)
    charts.draw(doc, str(tmp_path), "dm")

    failed = [b for b in described.bars if b.failed]
    assert [b.case for b in failed] == ["spark-full-rewrite"]
    assert failed[0].seconds is None
    assert failed[0].peak_rss_mib is None
    assert "Spark rewrite_data_files" not in _drawn_labels(described)
    assert "failed: Spark rewrite_data_files" in charts._reference_note(described)
    assert _png(tmp_path / "dm-bars.png") == (1100, 560)


def test_a_document_of_no_bench_is_refused() -> None:
    with pytest.raises(ValueError, match="not a result document of bench/"):
        charts.describe({"command": "python other.py", "results": [{"case": "x"}]})


def test_the_cli_redraws_saved_results(tmp_path: Path) -> None:
    out = tmp_path / "img"
    done = subprocess.run(
        [sys.executable, str(BENCH / "charts.py"), str(MANIFESTS), "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )

    assert sorted(p.name for p in out.iterdir()) == [
        "manifests-20261201-173714-bars.png",
        "manifests-20261201-173714-scale.png",
    ]
    assert done.stdout.split() == [str(out / n) for n in sorted(p.name for p in out.iterdir())]


@pytest.mark.parametrize("path", sorted((BENCH / "results").glob("*.json")), ids=lambda p: p.name)
def test_every_kept_result_describes_its_bench_and_peers(path: Path) -> None:
    described = charts.describe(_doc(path))

    assert path.name.startswith(f"{described.bench}-")
    assert any(b.role == "ours" and b.seconds and b.peak_rss_mib for b in described.bars)
    assert any(b.role != "ours" and b.peak_rss_mib for b in described.bars)
    assert "load average (1 min)" in described.caption
