"""The operators' progress listener: the engine's progress as task log lines, at a bounded rate.

A user watching a long rewrite in the task log sees a line when it starts, then at most one every
``interval_seconds`` or each ``step`` (10 %) more of its bytes, whichever comes first, and one when it is
done: the files and bytes done of the plan's total, rows written, spill, RSS, rate and ETA.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_iceberg_exec.engine.progress import Progress

__all__ = ["ProgressLog", "logged_progress"]

#: at most one progress line this often ...
INTERVAL_SECONDS = 30.0
#: ... unless this much more of the bytes is done
STEP = 0.10


class ProgressLog:
    """A progress listener that logs ``start``, ``done``, and what lies between at a bounded rate."""

    def __init__(
        self,
        log: Any,
        *,
        interval_seconds: float = INTERVAL_SECONDS,
        step: float = STEP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._interval = interval_seconds
        self._step = step
        self._clock = clock
        self._lock = threading.Lock()
        self._last_time = clock()
        self._last_fraction = 0.0

    def __call__(self, event: Progress) -> None:
        """Log ``event`` when it starts or ends an operation, or when enough time or bytes went by."""
        with self._lock:
            now = self._clock()
            fraction = event.fraction
            due = (
                event.phase in ("start", "done")
                or now - self._last_time >= self._interval
                or fraction - self._last_fraction >= self._step
            )
            if not due:
                return
            self._last_time, self._last_fraction = now, fraction
        self._log.info("progress: %s", event.describe())


@contextmanager
def logged_progress(log: Any) -> Iterator[None]:
    """Log the progress of the engine calls made in this block through ``log`` (the task's logger)."""
    from airflow_provider_iceberg_exec.engine.progress import listening

    with listening(ProgressLog(log)):
        yield
