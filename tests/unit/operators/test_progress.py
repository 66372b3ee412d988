"""The operators' progress log: start and done always, what lies between at most every 30 s or 10 %."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_iceberg_exec.engine.progress import Progress
from airflow_provider_iceberg_exec.operators._progress import ProgressLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(phase: str, bytes_done: int, elapsed: float = 1.0) -> Progress:
    return Progress("compaction", "g", phase, bytes_done // 10, 100, bytes_done, 1000, 5, 0, 1 << 20, elapsed)


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="test.progress")
    return caplog


def test_lines_come_at_most_every_step_of_the_bytes(logged: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    listener = ProgressLog(logging.getLogger("test.progress"), clock=clock)
    listener(event("start", 0))
    for done in range(10, 1000, 10):  # 99 events, 1 % each, no time passing
        listener(event("run", done))
    listener(event("done", 1000))
    lines = [r.getMessage() for r in logged.records]
    assert len(lines) == 1 + 9 + 1  # start, each 10 % (100, 200, ... 900), done
    assert lines[0].startswith("progress: compaction g: 0/100 files")
    assert "(10%)" in lines[1]
    assert "100/100 files, 1000 B/1000 B (100%)" in lines[-1]


def test_a_slow_operation_logs_every_interval(logged: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    listener = ProgressLog(logging.getLogger("test.progress"), interval_seconds=30, clock=clock)
    listener(event("start", 0))
    for second in range(1, 121):  # 0.1 % a second for two minutes
        clock.now = float(second)
        listener(event("run", second, elapsed=second))
    assert len(logged.records) == 1 + 4  # start, then at 30, 60, 90 and 120 s
    assert "rows, spilled 0 B, RSS 1.0 MiB" in logged.records[-1].getMessage()
