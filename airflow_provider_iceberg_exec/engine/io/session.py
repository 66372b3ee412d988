"""The one place a DataFusion SessionContext is built: :class:`ResourceLimits` in, a bounded session out.

DataFusion's memory pool governs only spillable operators (sort, aggregate, sort-merge join). So the
limit is split: most of it goes to the pool, the rest is left to what the pool does not see -- the file
reader in flight, the Parquet writer's row-group buffer and Python's own batches -- which the reader and
writer size themselves from :class:`ResourceLimits`.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine import progress
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    IcebergExecError,
    ResourceLimitError,
)

if TYPE_CHECKING:
    from datafusion import SessionContext

__all__ = [
    "ExecutionStats",
    "build_session",
    "datafusion_errors",
    "prepare_spill_dir",
    "release_memory",
    "resource_error",
    "small_pages",
    "track_resources",
]

log = logging.getLogger(__name__)

#: Share of the memory limit given to DataFusion's pool; the rest covers readers and writers.
POOL_SHARE = 0.5


def prepare_spill_dir(limits: ResourceLimits) -> str:
    """Create the spill directory and prove it is writable.

    :raises ConfigurationError: when it cannot be created or written.
    """
    path = limits.spill_dir
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as err:
        raise ConfigurationError(
            f"spill directory {path!r} is not writable ({err.strerror}); pick another"
        ) from err
    return path


def build_session(limits: ResourceLimits, spill_dir: str | None = None) -> SessionContext:
    """Build the bounded DataFusion session for one execution.

    :param limits: memory limit, spill directory, parallelism and batch size.
    :param spill_dir: a directory for this execution's spill files (default: ``limits.spill_dir``).
    :raises ConfigurationError: when the spill directory is not writable.

    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> ctx = build_session(ResourceLimits(memory_limit_bytes=64 * 1024 * 1024))
    >>> ctx.sql("select 1 as one").to_pydict()
    {'one': [1]}
    """
    from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext

    directory = spill_dir or prepare_spill_dir(limits)
    pool_bytes = int(limits.memory_limit_bytes * POOL_SHARE)
    config = (
        SessionConfig()
        .with_target_partitions(limits.target_partitions)
        .with_batch_size(limits.batch_size)
        # Keep Arrow types as PyIceberg expects them: no view types, binary stays binary.
        .set("datafusion.execution.parquet.schema_force_view_types", "false")
        .set("datafusion.execution.parquet.binary_as_string", "false")
        # The merge phase of a spilled sort needs reserved memory for each sorted run; reserve it up
        # front so the sort spills early enough to merge instead of failing with "Resources exhausted".
        .set("datafusion.execution.sort_spill_reservation_bytes", str(max(1 << 20, pool_bytes // 16)))
        .set("datafusion.execution.sort_in_place_threshold_bytes", str(1 << 20))
        .set("datafusion.execution.max_spill_file_size_bytes", str(64 << 20))
        # Nothing here prunes by statistics, and a table of many files had every footer fetched and
        # parsed at once (32 at a time) on registration: 160 MiB outside the pool for 73 staged parts.
        .set("datafusion.execution.collect_statistics", "false")
        .set("datafusion.execution.meta_fetch_concurrency", "1")
    )
    runtime = RuntimeEnvBuilder().with_fair_spill_pool(pool_bytes).with_disk_manager_specified(directory)
    return SessionContext(config, runtime)


@dataclass
class ExecutionStats:
    """Resources one execution used: peak RSS of the whole process and the peak size of its spill files."""

    peak_rss_bytes: int = 0
    spilled_bytes: int = 0
    elapsed_seconds: float = 0.0
    #: the RSS at the last sample, for progress reports
    rss_bytes: int = 0


def release_memory(*, arrow: bool = True) -> None:
    """Hand freed memory back to the system between the phases of an execution.

    PyArrow's allocator keeps freed pages for reuse, and so does the C library's malloc (NumPy's arrays;
    each thread gets an arena of its own): after a phase that worked on other threads (the equality
    matcher's key readers), the next phase would otherwise start with their high-water mark in its RSS.
    """
    import ctypes
    import ctypes.util

    import pyarrow as pa

    if arrow:
        pa.default_memory_pool().release_unused()
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to trim
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM: Any = None

#: prctl(2) options (Linux >= 3.15): the process's "no transparent huge pages" flag
_PR_SET_THP_DISABLE, _PR_GET_THP_DISABLE = 41, 42


def small_pages() -> bool:
    """Turn transparent huge pages off for this process (Linux); whether they are off now.

    PyArrow's and DataFusion's allocator (mimalloc 3) asks for huge pages on its arenas. A streaming
    execution frees and reallocates all the time: each 2 MiB page is zeroed whole when first touched and
    purged in 64 KiB pieces, so the process zeroes and holds far more than it uses. With 4 KiB pages the
    20M-row binpack took 5.0-5.1 s instead of 5.9-6.2 (system CPU 0.7-0.8 s instead of 2.1-2.4) at
    378-395 MiB instead of 429-450, and the sort 11.2 s instead of 11.6-12.0 at 443 MiB instead of 515-521
    (docs/benchmarks.md, "Issue 16: fresh pages"). The flag is the process's own (inherited by its
    children): an Airflow task runs in a process of its own.
    """
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)  # refused (an old kernel, a sandbox): nothing changes
    return bool(prctl(_PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1)


#: the spill directory is walked again after at least this many times its last walk took
_SPILL_WALK_PACE = 20


def _dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # a spill file removed while we looked
                continue
    return total


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextmanager
def track_resources(
    limits: ResourceLimits, interval_seconds: float = 0.1
) -> Iterator[tuple[str, ExecutionStats]]:
    """Give an execution its own spill directory, its process small pages (:func:`small_pages`), and
    measure RSS and spill while it runs.

    Yields ``(spill_dir, stats)``; ``stats`` is filled in when the block exits, and the spill directory is
    removed. The tracked operation running now (:func:`.progress.current`) reports these samples.
    """
    import shutil

    small_pages()
    base = prepare_spill_dir(limits)
    directory = os.path.join(base, f"run-{uuid.uuid4().hex[:12]}")
    os.makedirs(directory)
    stats = ExecutionStats()
    stop = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        walk_after = 0.0
        while not stop.is_set():
            stats.rss_bytes = _rss_bytes()
            stats.peak_rss_bytes = max(stats.peak_rss_bytes, stats.rss_bytes)
            now = time.monotonic()
            if now >= walk_after:
                stats.spilled_bytes = max(stats.spilled_bytes, _dir_size(directory))
                # Walking a spill of thousands of staged files took a fifth of a core at every sample
                # (py-spy on bench/mor.py at 200M rows): the walk waits at least 20 times its own time.
                walk_after = now + _SPILL_WALK_PACE * (time.monotonic() - now)
            stop.wait(interval_seconds)

    sampler = threading.Thread(target=sample, name="iceberg-exec-resources", daemon=True)
    sampler.start()
    progress.current().watch(stats)  # the operation's progress reports this execution's RSS and spill
    try:
        yield directory, stats
    finally:
        stop.set()
        sampler.join()
        stats.peak_rss_bytes = max(stats.peak_rss_bytes, _rss_bytes())
        stats.elapsed_seconds = time.monotonic() - start
        shutil.rmtree(directory, ignore_errors=True)


def resource_error(err: BaseException) -> BaseException:
    """The one mapping of DataFusion's and the OS's out-of-resource errors to :class:`ResourceLimitError`;
    any other error is returned as it is."""
    if isinstance(err, IcebergExecError):
        return err
    text = str(err)
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "No space left on device" in text:
        return ResourceLimitError(
            f"the spill disk is full: {text.splitlines()[0] if text else err}; free space or raise the limit"
        )
    if "Resources exhausted" in text:
        first = text.splitlines()[0]
        return ResourceLimitError(f"the memory limit is too small: {first}; raise --memory-limit")
    return err


@contextmanager
def datafusion_errors() -> Iterator[None]:
    """Raise DataFusion's and the OS's out-of-resource errors as :class:`ResourceLimitError`."""
    try:
        yield
    except Exception as err:
        mapped = resource_error(err)
        if mapped is err:
            raise
        raise mapped from err
