"""The engine's progress hook: nothing when nobody listens, one tracker per operation, nested blocks
counted once, rows-only advances rate-limited, a broken listener never failing the operation."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_iceberg_exec.engine import progress
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Progress, Tracker, listening, track


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_listener_yields_the_no_op_tracker_and_samples_nothing() -> None:
    with track("compaction", files_total=3, bytes_total=30) as tracker:
        assert tracker is NOT_TRACKED
        assert progress.current() is NOT_TRACKED
        tracker.advance(files=1, bytes_done=10, rows=5)
        tracker.watch(None)
        tracker.finish()
    assert not hasattr(NOT_TRACKED, "files_done")  # it keeps no state at all


def test_events_are_monotone_and_reach_the_totals() -> None:
    events: list[Progress] = []
    with listening(events.append), track("cow", files_total=2, bytes_total=50) as tracker:
        assert progress.current() is tracker
        tracker.advance(files=1, bytes_done=20, rows=7)
        tracker.advance(files=1, bytes_done=30, rows=3)
    assert [e.phase for e in events] == ["start", "run", "run", "done"]
    assert [e.bytes_done for e in events] == [0, 20, 50, 50]
    assert (events[-1].files_done, events[-1].rows, events[-1].fraction) == (2, 10, 1.0)
    assert progress.current() is NOT_TRACKED  # the block is closed


def test_a_nested_operation_advances_the_outer_one() -> None:
    events: list[Progress] = []
    with (
        listening(events.append),
        track("compaction", files_total=4, bytes_total=40) as outer,
        track("compaction", files_total=2, bytes_total=20) as inner,
    ):
        assert inner is outer
        inner.advance(files=2, bytes_done=20)
    assert [(e.phase, e.files_total, e.files_done) for e in events] == [
        ("start", 4, 0),
        ("run", 4, 2),
        ("done", 4, 2),
    ]


def test_rows_only_advances_are_passed_on_at_a_bounded_rate() -> None:
    events: list[Progress] = []
    clock = FakeClock()
    tracker = Tracker(events.append, "merge", files_total=1, bytes_total=10, clock=clock)
    for _ in range(100):
        tracker.advance(rows=10)  # a batch each, no time passing: only the first (start -> run) passed on
    assert [e.rows for e in events] == [10]
    clock.now += progress.ROWS_INTERVAL_SECONDS
    tracker.advance(rows=10)
    assert [e.rows for e in events] == [10, 1010]
    tracker.advance(files=1, bytes_done=10)  # a file done always is
    assert [e.files_done for e in events] == [0, 0, 1]
    assert events[-1].elapsed_seconds == pytest.approx(progress.ROWS_INTERVAL_SECONDS)


class Stats:
    def __init__(self, rss: int, spilled: int) -> None:
        self.rss_bytes = rss
        self.spilled_bytes = spilled


def test_resources_come_from_the_watched_stats_and_spill_keeps_its_peak() -> None:
    events: list[Progress] = []
    tracker = Tracker(events.append, "compaction", files_total=2, bytes_total=2)
    tracker.watch(Stats(rss=100, spilled=50))
    tracker.advance(files=1, bytes_done=1)
    tracker.watch(Stats(rss=80, spilled=10))  # the next group's execution
    tracker.advance(files=1, bytes_done=1)
    assert [(e.rss_bytes, e.spilled_bytes) for e in events] == [(100, 50), (80, 50)]


def test_a_failing_listener_is_dropped_and_the_operation_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def broken(event: Progress) -> None:
        calls.append(event)
        raise RuntimeError("terminal gone")

    with listening(broken), track("compaction", files_total=2, bytes_total=2) as tracker:
        tracker.advance(files=1, bytes_done=1)
        tracker.advance(files=1, bytes_done=1)
    assert len(calls) == 1
    assert "no more progress is reported" in caplog.text


def test_trackers_are_advanced_safely_from_many_threads() -> None:
    events: list[Progress] = []
    with listening(events.append), track("cow", files_total=400, bytes_total=400) as tracker:

        def work() -> None:
            for _ in range(100):
                tracker.advance(files=1, bytes_done=1, rows=2)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [e.files_done for e in events] == sorted(e.files_done for e in events)
    assert (events[-1].files_done, events[-1].bytes_done, events[-1].rows) == (400, 400, 800)


def test_listeners_of_nested_blocks_both_hear_each_event() -> None:
    outer: list[Progress] = []
    inner: list[Progress] = []
    with listening(outer.append):
        with listening(inner.append), track("merge", files_total=1, bytes_total=1, label="task-3") as tracker:
            tracker.advance(files=1, bytes_done=1)
        with track("merge", files_total=1, bytes_total=1):
            pass
    assert [e.phase for e in inner] == ["start", "run", "done"]
    assert [e.label for e in outer] == ["task-3"] * 3 + [""] * 2
