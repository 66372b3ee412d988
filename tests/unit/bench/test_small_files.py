"""``bench/small_files.py --repeat``: every case runs round robin, each reports its median over its runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.unit.bench.bench_scripts import load

small_files = load("small_files")


def test_repeated_cases_run_round_robin_and_report_their_medians(tmp_path: Path) -> None:
    code = small_files.main(
        [
            "--files",
            "12",
            "--rows-per-file",
            "5",
            "--snapshots",
            "2",
            "--cases",
            "compact,floor",
            "--repeat",
            "2",
            "--no-snapshot",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (document,) = tmp_path.glob("results-*.json")
    (size,) = json.loads(document.read_text())["sizes"]
    runs = size["runs"]
    assert [(r["case"], r["repetition"]) for r in runs] == [
        ("compact", 1),
        ("floor", 1),
        ("compact", 2),
        ("floor", 2),
    ]
    assert all(r["verify"]["matches"] and r["verify"]["rows"] == 60 for r in runs)
    for summary in size["results"]:
        mine = [r for r in runs if r["case"] == summary["case"]]
        assert summary["repetitions"] == 2
        assert summary["seconds"] == statistics.median(r["seconds"] for r in mine)
        assert summary["peak_rss_bytes"] == max(r["peak_rss_bytes"] for r in mine)
    assert size["compact_vs_spark_by_round"] == []  # no Spark here: no round to pair


def test_each_round_pairs_compact_with_the_spark_run_beside_it() -> None:
    runs = [
        {"case": "compact", "repetition": 1, "seconds": 21.0},
        {"case": "spark", "repetition": 1, "seconds": 42.0},
        {"case": "floor", "repetition": 1, "seconds": 15.0},
        {"case": "compact", "repetition": 2, "seconds": 24.0},
        {"case": "spark", "repetition": 2, "seconds": 40.0},
    ]
    assert small_files.compact_vs_spark_by_round(runs) == [0.5, 0.6]
    size = {
        "files": 50_000,
        "results": [
            {"case": "compact", "seconds": 22.5, "peak_rss_bytes": 1},
            {"case": "spark", "seconds": 41.0, "peak_rss_bytes": 1},
        ],
        "compact_vs_spark_by_round": [0.5, 0.6],
    }
    (verdict,) = [t for t in small_files.targets({"sizes": [size]}) if "Spark" in t]
    assert verdict == (
        "50,000 files: compact / Spark 0.55x (medians; each round: 0.50x, 0.60x) <= 0.5x: MISSED"
    )


def test_a_repeat_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--repeat 0"):
        small_files.main(["--files", "12", "--repeat", "0", "--no-snapshot", "--out", str(tmp_path)])
