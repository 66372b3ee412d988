"""Progress of long operations: one callback hook that the CLI's bar and the operators' log lines share.

The engine reports; whoever runs it decides whether to listen. A listener is set for a block with
:func:`listening`; operations open a :func:`track`-ed block with the totals of their plan and advance it
file by file. Nobody listening costs nothing measurable: :func:`track` then yields :data:`NOT_TRACKED`,
whose methods return at once, and no resource is sampled for it.

Trackers are plain objects, safe to advance from the threads an operation reads and writes on (the
context variable holding the listener is read once, on the thread that opens the block). A block opened
inside another one (a group inside a whole compaction) advances the outer one, whose totals cover it.

>>> events = []
>>> with listening(events.append):
...     with track("compaction", files_total=2, bytes_total=300) as progress:
...         progress.advance(files=1, bytes_done=100, rows=10)
...         progress.advance(files=1, bytes_done=200, rows=20)
>>> [(e.phase, e.files_done, e.bytes_done, e.rows) for e in events]
[('start', 0, 0, 0), ('run', 1, 100, 10), ('run', 2, 300, 30), ('done', 2, 300, 30)]
>>> with track("compaction", files_total=2, bytes_total=300) as progress:  # nobody listens
...     progress is NOT_TRACKED
True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "NOT_TRACKED",
    "Listener",
    "Progress",
    "Tracker",
    "byte_size",
    "current",
    "duration",
    "listening",
    "track",
]


@dataclass(frozen=True)
class Progress:
    """Where one long operation stands: what its plan holds, what is done, what it costs right now."""

    #: the operation, e.g. ``compaction``, ``copy-on-write``, ``merge``
    operation: str
    #: what of it: a group or task id, empty for a whole operation
    label: str
    #: ``start``, ``run`` (some work done) or ``done``; an operation may name its own (``sort``)
    phase: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    #: rows streamed through so far (read from the targets, or written)
    rows: int
    #: the peak size of the spill files of the execution running now
    spilled_bytes: int
    #: the process's resident memory at the last sample (0 when no execution samples it)
    rss_bytes: int
    elapsed_seconds: float

    @property
    def fraction(self) -> float:
        """The share of the plan's bytes done (of its files when it has no bytes), 0.0 to 1.0."""
        if self.bytes_total > 0:
            return min(1.0, self.bytes_done / self.bytes_total)
        if self.files_total > 0:
            return min(1.0, self.files_done / self.files_total)
        return 1.0 if self.phase == "done" else 0.0

    @property
    def bytes_per_second(self) -> float:
        """The mean rate of bytes done since the operation started."""
        return self.bytes_done / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """The seconds left at the mean rate so far; ``None`` before anything is done."""
        fraction = self.fraction
        if fraction <= 0 or self.elapsed_seconds <= 0:
            return None
        return self.elapsed_seconds * (1 - fraction) / fraction

    def describe(self) -> str:
        """One line with every figure, as the operators log it.

        >>> event = Progress("compaction", "g-1", "run", 3, 12, 3 << 20, 12 << 20, 1500, 0, 200 << 20, 2.0)
        >>> print(event.describe().replace(", s", ",\\n s"))  # doctest: +NORMALIZE_WHITESPACE
        compaction g-1: 3/12 files, 3.0 MiB/12.0 MiB (25%), 1,500 rows,
        spilled 0 B, RSS 200.0 MiB, 1.5 MiB/s, ETA 6 s
        """
        name = f"{self.operation} {self.label}" if self.label else self.operation
        eta = self.eta_seconds
        return (
            f"{name}: {self.files_done}/{self.files_total} files, {byte_size(self.bytes_done)}/"
            f"{byte_size(self.bytes_total)} ({self.fraction:.0%}), {self.rows:,} rows, "
            f"spilled {byte_size(self.spilled_bytes)}, RSS {byte_size(self.rss_bytes)}, "
            f"{byte_size(int(self.bytes_per_second))}/s, ETA {'-' if eta is None else duration(eta)}"
        )


def byte_size(n: int) -> str:
    """``n`` bytes in binary units.

    >>> byte_size(0), byte_size(1536), byte_size(3 << 30)
    ('0 B', '1.5 KiB', '3.0 GiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def duration(seconds: float) -> str:
    """``seconds`` as ``42 s``, ``3 min 05 s`` or ``2 h 01 min``.

    >>> duration(42.4), duration(185), duration(7260)
    ('42 s', '3 min 05 s', '2 h 01 min')
    """
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    return f"{total // 3600} h {total % 3600 // 60:02d} min"


#: a progress callback; it runs on whichever thread advanced the operation, under the tracker's lock
Listener = Callable[[Progress], None]


class Resources(Protocol):
    """What :func:`~airflow_provider_iceberg_exec.engine.io.session.track_resources` samples."""

    rss_bytes: int
    spilled_bytes: int


log = logging.getLogger(__name__)


def _ignore(progress: Progress) -> None:
    return


_LISTENER: ContextVar[Listener | None] = ContextVar("iceberg_exec_progress_listener", default=None)
_CURRENT: ContextVar[Tracker | None] = ContextVar("iceberg_exec_progress_tracker", default=None)

#: a rows-only advance (one batch) is passed on at most this often; a file done always is
ROWS_INTERVAL_SECONDS = 0.2


class Tracker:
    """The progress of one operation, advanced by the operation and passed on to the listener."""

    def __init__(
        self,
        listener: Listener,
        operation: str,
        *,
        files_total: int,
        bytes_total: int,
        label: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listener = listener
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock()
        self._last = self._start
        self._resources: Resources | None = None
        self._spilled = 0
        self.operation = operation
        self.label = label
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.bytes_done = 0
        self.rows = 0
        self.phase = "start"

    def watch(self, resources: Resources | None) -> None:
        """Take RSS and spill from ``resources`` (the sampled stats of the execution running now)."""
        with self._lock:
            if self._resources is not None:
                self._spilled = max(self._spilled, self._resources.spilled_bytes)
            self._resources = resources

    def advance(self, *, files: int = 0, bytes_done: int = 0, rows: int = 0, phase: str = "run") -> None:
        """Count ``files`` more files (``bytes_done`` more bytes) done and ``rows`` more rows written."""
        with self._lock:
            self.files_done += files
            self.bytes_done += bytes_done
            self.rows += rows
            now = self._clock()
            rows_only = not files and not bytes_done and phase == self.phase
            if rows_only and now - self._last < ROWS_INTERVAL_SECONDS:
                return
            self.phase = phase
            self._emit(now)

    def finish(self) -> None:
        """Report the operation done (once its last file is)."""
        with self._lock:
            self.phase = "done"
            self._emit(self._clock())

    def snapshot(self) -> Progress:
        """Where the operation stands now."""
        with self._lock:
            return self._progress(self._clock())

    def _emit(self, now: float) -> None:
        self._last = now
        try:
            self._listener(self._progress(now))
        except Exception:
            # A display that breaks must not fail the maintenance run: it stops listening instead.
            log.warning(
                "progress listener %r failed; no more progress is reported", self._listener, exc_info=True
            )
            self._listener = _ignore

    def _progress(self, now: float) -> Progress:
        resources = self._resources
        spilled = max(self._spilled, resources.spilled_bytes if resources is not None else 0)
        return Progress(
            operation=self.operation,
            label=self.label,
            phase=self.phase,
            files_done=self.files_done,
            files_total=self.files_total,
            bytes_done=self.bytes_done,
            bytes_total=self.bytes_total,
            rows=self.rows,
            spilled_bytes=spilled,
            rss_bytes=resources.rss_bytes if resources is not None else 0,
            elapsed_seconds=now - self._start,
        )


class _NotTracked(Tracker):
    """The tracker when nobody listens: every method returns at once."""

    def __init__(self) -> None:
        pass

    def watch(self, resources: Resources | None) -> None:
        return

    def advance(self, *, files: int = 0, bytes_done: int = 0, rows: int = 0, phase: str = "run") -> None:
        return

    def finish(self) -> None:
        return


#: what :func:`track` and :func:`current` give when nobody listens
NOT_TRACKED: Tracker = _NotTracked()


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Pass the progress of every operation run in this block (on this thread) to ``listener``.

    Listeners add up: a listener set by an outer block (a demo's display around an Airflow task that logs
    its own progress) hears every event too, after this one.
    """
    outer = _LISTENER.get()
    if outer is not None:
        inner = listener

        def listener(event: Progress) -> None:
            inner(event)
            outer(event)

    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def current() -> Tracker:
    """The tracker of the operation running in this context, or :data:`NOT_TRACKED`."""
    return _CURRENT.get() or NOT_TRACKED


@contextmanager
def track(operation: str, *, files_total: int, bytes_total: int, label: str = "") -> Iterator[Tracker]:
    """Track one operation whose plan holds ``files_total`` files of ``bytes_total`` bytes.

    Inside another tracked operation, yields that one (its totals already count these files); with no
    listener, yields :data:`NOT_TRACKED`. The listener hears ``start`` on entry and ``done`` on a normal
    exit.
    """
    listener = _LISTENER.get()
    outer = _CURRENT.get()
    if listener is None or outer is not None:
        yield outer or NOT_TRACKED
        return
    tracker = Tracker(listener, operation, files_total=files_total, bytes_total=bytes_total, label=label)
    token = _CURRENT.set(tracker)
    try:
        with tracker._lock:
            tracker._emit(tracker._clock())
        yield tracker
        tracker.finish()
    finally:
        _CURRENT.reset(token)
