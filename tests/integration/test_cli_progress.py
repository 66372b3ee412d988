"""The CLI's progress display: a bar on a terminal (a pseudo-terminal here), none off one, with
``--json`` or with ``--quiet``."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.cli import main
from airflow_provider_iceberg_exec.demo import make_fragmented_table
from tests.helpers import live_checksum

pytestmark = pytest.mark.integration

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """A catalog named ``it`` configured through PYICEBERG_CATALOG__IT__* (which the child inherits)."""
    uri, warehouse = f"sqlite:///{tmp_path}/cli.db", f"file://{tmp_path}/warehouse"
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__URI", uri)
    monkeypatch.setenv("PYICEBERG_CATALOG__IT__WAREHOUSE", warehouse)
    catalog = SqlCatalog("it", uri=uri, warehouse=warehouse)
    make_fragmented_table(catalog, "ns.events", num_files=6, rows_per_file=300)
    return catalog


def on_a_terminal(*argv: str) -> tuple[int, str]:
    """Run ``iceberg-exec argv`` in a child process whose stdout is a pseudo-terminal; return its output."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(_REPO), "COLUMNS": "220", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from airflow_provider_iceberg_exec.cli import main; raise SystemExit(main())",
            *argv,
        ],
        stdout=terminal,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(terminal)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    _, err = child.communicate(timeout=300)
    reader.join(timeout=30)
    os.close(controller)
    assert not err.strip() or b"Traceback" not in err, err.decode()
    return child.returncode, b"".join(chunks).decode(errors="replace")


def compact_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--catalog",
        "it",
        "compact",
        "ns.events",
        "--option",
        "min-input-files=2",
        "--spill-dir",
        str(tmp_path / "spill"),
        *extra,
    ]


def test_a_terminal_shows_the_progress_bar_then_the_summary(configured: SqlCatalog, tmp_path: Path) -> None:
    before = live_checksum(configured.load_table("ns.events"))
    code, out = on_a_terminal(*compact_args(tmp_path))
    assert code == 0, out
    bar = out[: out.index("rewritten_data_files_count")]
    assert "compaction" in bar
    assert "18/18 files" in bar  # 6 appends of 3 regions: the plan's total, all done
    assert "100%" in bar
    for figure in ("RSS ", "spill ", " rows", "ETA"):
        assert figure in bar
    assert "rewritten_data_files_count: 18" in out
    assert live_checksum(configured.load_table("ns.events")) == before


@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_json_and_quiet_show_no_bar_on_a_terminal(configured: SqlCatalog, tmp_path: Path, flag: str) -> None:
    code, out = on_a_terminal(*compact_args(tmp_path, flag))
    assert code == 0, out
    assert "RSS " not in out
    assert "\x1b[" not in out  # no terminal control at all
    if flag == "--json":
        assert json.loads(out.replace("\r\n", "\n"))["rewritten_data_files_count"] == 18


def test_no_terminal_no_bar(configured: SqlCatalog, tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(compact_args(tmp_path), out=out) == 0
    assert out.getvalue().startswith("rewritten_data_files_count: 18\n")
