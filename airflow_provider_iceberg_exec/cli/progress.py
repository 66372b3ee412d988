"""The terminal's progress display: the engine's progress as a ``rich`` bar while a long command runs.

Shown only when the output is a terminal and neither ``--json`` nor ``--quiet`` is given, so that piped
output and scripts see exactly the documents and summaries they saw before.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress as Bar
    from rich.progress import TaskID

    from airflow_provider_iceberg_exec.engine.progress import Progress

__all__ = ["ProgressBar", "progress_display", "wants_display"]


def wants_display(args: argparse.Namespace, out: IO[str]) -> bool:
    """Whether this command shows a progress display on ``out`` (a command that shows its own, such as
    ``demo``, sets ``progress=False``)."""
    if not getattr(args, "progress", True):
        return False
    if getattr(args, "json", False) or getattr(args, "quiet", False):
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def _bar(out: IO[str], redirect: bool) -> Bar:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress

    return RichProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[files]} files"),
        TextColumn("{task.fields[bytes]}"),
        TextColumn("{task.fields[rows]} rows"),
        TextColumn("spill {task.fields[spill]}"),
        TextColumn("RSS {task.fields[rss]}"),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(file=out),
        refresh_per_second=4,
        redirect_stdout=redirect,
        redirect_stderr=redirect,
    )


class ProgressBar:
    """A progress listener drawing one bar per tracked operation, from its first event to its ``done``."""

    def __init__(self, out: IO[str], *, redirect: bool = True, indent: str = "") -> None:
        """:param redirect: print what others write to stdout and stderr above the bars (rich's default).
        :param indent: put before each bar's name.
        """
        self._out = out
        self._redirect = redirect
        self._indent = indent
        self._lock = threading.Lock()
        self._bar: Bar | None = None
        self._rows: dict[tuple[str, str], TaskID] = {}

    def __call__(self, event: Progress) -> None:
        """Draw ``event`` (called on whichever thread advanced the operation)."""
        from airflow_provider_iceberg_exec.engine.progress import byte_size

        with self._lock:
            if self._bar is None:
                self._bar = _bar(self._out, self._redirect)
                self._bar.start()
            key = (event.operation, event.label)
            total = event.bytes_total or event.files_total or None
            if key not in self._rows or event.phase == "start":
                name = self._indent + f"{event.operation} {event.label}".strip()
                self._rows[key] = self._bar.add_task(name, total=total, **_fields(event, byte_size))
            completed = event.bytes_done if event.bytes_total else event.files_done
            self._bar.update(self._rows[key], completed=completed, total=total, **_fields(event, byte_size))
            if event.phase == "done":
                # The command's own output follows: leave this bar's last state above it.
                self._bar.stop()
                self._bar, self._rows = None, {}

    def close(self) -> None:
        """Leave the last state of every bar on the terminal."""
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


def _fields(event: Progress, byte_size: Any) -> dict[str, Any]:
    return {
        "files": f"{event.files_done}/{event.files_total}",
        "bytes": f"{byte_size(event.bytes_done)}/{byte_size(event.bytes_total)}",
        "rows": f"{event.rows:,}",
        "spill": byte_size(event.spilled_bytes),
        "rss": byte_size(event.rss_bytes),
    }


@contextmanager
def progress_display(args: argparse.Namespace, out: IO[str]) -> Iterator[None]:
    """Show the progress of the engine calls of this block on ``out`` when :func:`wants_display`."""
    if not wants_display(args, out):
        yield
        return
    from airflow_provider_iceberg_exec.engine.progress import listening

    bar = ProgressBar(out)
    try:
        with listening(bar):
            yield
    finally:
        bar.close()
