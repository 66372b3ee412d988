"""``bench/compaction.py --durable``: a case's time includes flushing its output to disk."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.unit.bench.bench_scripts import load

compaction = load("compaction")


@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_case_counts_its_sync_into_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    (tmp_path / "dataset.json").write_text(json.dumps({"data_dir": str(tmp_path)}))
    synced: list[bool] = []
    monkeypatch.setattr(compaction, "_run_worker_case", lambda case, dataset, run_dir: {"seconds": 2.0})
    monkeypatch.setattr(compaction.os, "sync", lambda: synced.append(True))
    args = argparse.Namespace(out=str(tmp_path), run_dir=str(tmp_path), action="floor", durable=durable)
    result = compaction.worker(args)
    if durable:
        assert synced == [True]
        assert result["seconds"] == pytest.approx(2.0 + result["sync_seconds"])
    else:
        assert synced == []
        assert "sync_seconds" not in result
        assert result["seconds"] == 2.0
