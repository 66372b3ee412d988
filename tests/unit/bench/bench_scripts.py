"""bench/'s scripts imported as modules for their tests (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load(script: str) -> Any:
    """``bench/<script>.py`` as a module of its own, ``bench_<script>_under_test``."""
    spec = importlib.util.spec_from_file_location(f"bench_{script}_under_test", BENCH / f"{script}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
