"""``bench/compaction.py --durable``: a case's time includes flushing its output to disk."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _compaction() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_compaction_durable_under_test", BENCH / "compaction.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


compaction = _compaction()


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
