"""``bench/tiny_decode.py`` writes each codec's files and times every reader over all of their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.unit.bench.bench_scripts import load

tiny_decode = load("tiny_decode")


def test_each_codec_is_written_and_every_reader_reads_all_its_rows(tmp_path: Path) -> None:
    code = tiny_decode.main(
        [
            "--files",
            "3",
            "--rows-per-file",
            "5",
            "--codecs",
            "zstd,none",
            "--repeat",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    for codec, stored in (("zstd", "ZSTD"), ("none", "UNCOMPRESSED")):
        files = sorted((tmp_path / f"{codec}-3x5").glob("*.parquet"))
        assert len(files) == 3
        assert {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files} == {stored}
    (document,) = tmp_path.glob("results-*.json")
    results = json.loads(document.read_text())["results"]
    assert [(r["codec"], r["reader"]) for r in results] == [
        ("zstd", "pyarrow"),
        ("zstd", "datafusion"),
        ("none", "pyarrow"),
        ("none", "datafusion"),
    ]
    assert {r["rows"] for r in results} == {15}
    assert all(r["cpu_ms_per_file"] > 0 and r["wall_ms_per_file"] > 0 for r in results)
    assert "| zstd | pyarrow |" in next(tmp_path.glob("results-*.md")).read_text()


def test_an_unknown_codec_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown codec or reader"):
        tiny_decode.main(["--codecs", "lz5", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
