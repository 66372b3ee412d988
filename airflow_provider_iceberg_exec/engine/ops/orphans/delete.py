"""The delete step of orphan removal: delete the files of a scan's list, proving each one unreferenced.

The delete step never trusts the list: before each batch it refreshes the table and proves every candidate
unreferenced by the complete reference set of the current metadata (:mod:`.cleanup`), refuses paths outside
the table's locations, and re-applies the age fence to each file right before deleting it.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_iceberg_exec.engine.commit.cleanup import referenced_paths, table_roots, under_roots
from airflow_provider_iceberg_exec.engine.contracts import (
    ORPHAN_DELETE_RESULT,
    OrphanDeleteResult,
    OrphanRemoveResult,
)
from airflow_provider_iceberg_exec.engine.documents import check_orphan_scan_result
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import table_name
from airflow_provider_iceberg_exec.engine.meta.reachable import PathNormalizer, bulk_remover, filesystem_for
from airflow_provider_iceberg_exec.engine.ops.orphans.documents import SAMPLE_SIZE, read_lines
from airflow_provider_iceberg_exec.engine.ops.orphans.rules import (
    MIN_ORPHAN_AGE,
    check_gc_enabled,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.scan import scan_orphan_files

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table

__all__ = [
    "DEFAULT_DELETE_BATCH_SIZE",
    "DEFAULT_MAX_CONCURRENT_DELETES",
    "delete_orphan_files",
    "remove_orphan_files",
]

log = logging.getLogger(__name__)

#: Java's ``DELETE_GROUP_SIZE``: paths deleted per batch, between two checks of the metadata
DEFAULT_DELETE_BATCH_SIZE = 100_000
DEFAULT_MAX_CONCURRENT_DELETES = 8


def remove_orphan_files(
    table: Table,
    *,
    dry_run: bool = False,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    **scan_options: Any,
) -> OrphanRemoveResult:
    """Spark's ``remove_orphan_files``: scan, then delete the orphans unless ``dry_run``.

    Takes the options of :func:`scan_orphan_files`. The deletion is :func:`delete_orphan_files`, with its
    re-check of the metadata; its result is under ``"delete"``.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> stray = f"{workdir.name}/ns/t/data/stray.parquet"  # written by a task that died before its commit
    >>> open(stray, "wb").close()
    >>> os.utime(stray, (time.time() - 10 * 86400,) * 2)
    >>> remove_orphan_files(table, dry_run=True)["orphan_sample"] == [f"file://{stray}"]
    True
    >>> remove_orphan_files(table)["delete"]["deleted_file_count"], os.path.exists(stray)
    (1, False)
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    # A scan result is a remove result without its optional "delete" (mypy cannot widen it by itself).
    doc = cast("OrphanRemoveResult", scan_orphan_files(table, **scan_options))
    if dry_run:
        return doc
    doc["delete"] = delete_orphan_files(
        table, doc, max_concurrent_deletes=max_concurrent_deletes, force=bool(scan_options.get("force"))
    )
    doc["dry_run"] = False
    return doc


def delete_orphan_files(
    table: Table,
    scan_result: Mapping[str, Any],
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_DELETE_BATCH_SIZE,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    force: bool = False,
    now: datetime.datetime | None = None,
) -> OrphanDeleteResult:
    """Delete the files of a scan's orphan list, proving each one unreferenced right before its batch.

    The list is a document like any other: it is never trusted to say what is safe to delete. Before each
    batch the table is refreshed and every candidate is checked against the complete reference set of
    the current metadata (:func:`~.cleanup.referenced_paths`: every snapshot's manifests, refs, the
    metadata log, statistics and partition statistics); a referenced one is kept and counted in
    ``skipped_referenced_count``. Every path must lie under the table's own current locations, or nothing
    is deleted. The age fence is re-applied to each file right before it is deleted: one modified at or
    after the cutoff is kept (``skipped_younger_count``); the cutoff is the scan's ``older_than``, but never
    less than 24 hours ago unless ``force``. A file that is gone is counted in ``missing_file_count``.

    :param scan_result: the scan's result document (:func:`read_orphan_scan_result` reads one).
    :param dry_run: check and count, delete nothing.
    :param batch_size: paths per batch (Java's 100,000).
    :param max_concurrent_deletes: parallel deletes (file systems without bulk delete).
    :param force: accept the scan's ``older_than`` even when it is less than 24 hours ago.
    :param now: the current time (for tests).
    :returns: ``iceberg-exec/orphan-delete-result@1`` with ``deleted_file_count`` and ``deleted_bytes_count``.
    :raises ConfigurationError: for ``gc.enabled=false``, a result of another table, or a listed path
        outside the table's locations.
    :raises DataFileCodecError: when ``scan_result`` is not a complete scan result.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> stray = f"{workdir.name}/ns/t/data/stray.parquet"  # written by a task that died before its commit
    >>> open(stray, "wb").close()
    >>> os.utime(stray, (time.time() - 10 * 86400,) * 2)
    >>> from airflow_provider_iceberg_exec.engine.ops.orphans.documents import read_orphan_scan_result
    >>> from airflow_provider_iceberg_exec.engine.ops.orphans.scan import scan_orphan_files
    >>> scanned = scan_orphan_files(table)  # e.g. one task; the delete is another, reading the result file
    >>> deleted = delete_orphan_files(table, read_orphan_scan_result(table.io, scanned["result_uri"]))
    >>> deleted["deleted_file_count"], os.path.exists(stray)
    (1, False)
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    doc = check_orphan_scan_result(scan_result)
    if batch_size < 1 or max_concurrent_deletes < 1:
        raise ConfigurationError("batch_size and max_concurrent_deletes must be >= 1")
    name = table_name(table)
    table.refresh()
    _check_same_table(table, doc, name)
    check_gc_enabled(table)
    normalizer = PathNormalizer.of(doc.get("equal_schemes"), doc.get("equal_authorities"))
    list_uri = str(doc["orphan_list_uri"])
    _check_under_locations(table, doc, normalizer, list_uri, name)
    cutoff_ms = _delete_cutoff_ms(doc, now, force, name)
    deleter = _Deleter(table.io, cutoff_ms, dry_run, max_concurrent_deletes)
    started = time.monotonic()
    counts = _delete_listed(table, list_uri, batch_size, deleter, normalizer)
    result: OrphanDeleteResult = {
        "schema": ORPHAN_DELETE_RESULT,
        "table": name,
        "orphan_list_uri": list_uri,
        "dry_run": dry_run,
        "candidate_file_count": counts.candidates,
        "deleted_file_count": counts.deleted,
        "deleted_bytes_count": counts.deleted_bytes,
        "skipped_referenced_count": counts.referenced,
        "skipped_referenced_sample": counts.referenced_sample,
        "skipped_younger_count": counts.younger,
        "missing_file_count": counts.missing,
        "failed_file_count": counts.failed,
        "failed_sample": counts.failed_sample,
        "batches": counts.batches,
        "elapsed_seconds": round(time.monotonic() - started, 3),
    }
    level = logging.WARNING if counts.failed or counts.referenced else logging.INFO
    log.log(
        level,
        "%s: %s %d of %d orphan file(s), %d bytes; kept %d the table references, %d younger; %d gone, "
        "%d failed",
        name,
        "would delete" if dry_run else "deleted",
        counts.deleted,
        counts.candidates,
        counts.deleted_bytes,
        counts.referenced,
        counts.younger,
        counts.missing,
        counts.failed,
    )
    return result


def _check_same_table(table: Table, doc: Mapping[str, Any], name: str) -> None:
    """Refuse a scan result of another table, or of an earlier table of the same name (dropped since)."""
    if doc["table"] != name:
        raise ConfigurationError(f"the scan result is for table {doc['table']!r}, not {name!r}")
    # ``table_uuid`` is optional in the document (check_orphan_scan_result): older results lack it.
    if doc.get("table_uuid") not in (None, str(table.metadata.table_uuid)):
        raise ConfigurationError(
            f"the scan result is for another table named {name!r} (uuid {doc['table_uuid']}, now "
            f"{table.metadata.table_uuid}): the table was dropped and created again; scan it again"
        )


def _check_under_locations(
    table: Table, doc: Mapping[str, Any], normalizer: PathNormalizer, list_uri: str, name: str
) -> None:
    """Refuse the whole list unless every path lies under the scan's locations (what was listed) and under
    the table's own current locations."""
    scanned = [normalizer.split(str(loc))[2].rstrip("/") + "/" for loc in doc["locations"]]
    roots = table_roots(table.metadata)
    for uri in read_lines(table.io, list_uri):
        if not (under_roots(uri, scanned) and under_roots(uri, roots)):
            raise ConfigurationError(
                f"{uri} in {list_uri} is outside the scanned locations {doc['locations']} or the locations "
                f"of {name}; nothing deleted"
            )


def _delete_cutoff_ms(doc: Mapping[str, Any], now: datetime.datetime | None, force: bool, name: str) -> int:
    """The age fence re-applied to each file: the scan's ``older_than``, but never less than 24 hours ago
    unless ``force``."""
    now_ms = int((now or datetime.datetime.now(datetime.timezone.utc)).timestamp() * 1000)
    fence_ms = now_ms - int(MIN_ORPHAN_AGE.total_seconds() * 1000)
    cutoff_ms = int(doc["older_than_ms"]) if force else min(int(doc["older_than_ms"]), fence_ms)
    if cutoff_ms != int(doc["older_than_ms"]):
        log.warning(
            "%s: the scan's older_than is less than 24 hours ago; files modified in the last 24 hours are "
            "kept (pass force to accept it)",
            name,
        )
    return cutoff_ms


def _delete_listed(
    table: Table, list_uri: str, batch_size: int, deleter: _Deleter, normalizer: PathNormalizer
) -> _DeleteCounts:
    """Stream the list and delete it in batches of ``batch_size``, each proven against fresh metadata."""
    counts = _DeleteCounts()
    batch: list[str] = []
    for uri in read_lines(table.io, list_uri):
        batch.append(uri)
        if len(batch) >= batch_size:
            _delete_batch(table, batch, deleter, counts, normalizer)
            batch = []
    if batch:
        _delete_batch(table, batch, deleter, counts, normalizer)
    return counts


@dataclass
class _DeleteCounts:
    candidates: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    referenced: int = 0
    referenced_sample: list[str] = field(default_factory=list)
    younger: int = 0
    missing: int = 0
    failed: int = 0
    failed_sample: list[str] = field(default_factory=list)
    batches: int = 0


def _delete_batch(
    table: Table,
    batch: Sequence[str],
    deleter: _Deleter,
    counts: _DeleteCounts,
    normalizer: PathNormalizer,
) -> None:
    """Prove a batch unreferenced against the metadata of this moment, then delete it."""
    counts.batches += 1
    counts.candidates += len(batch)
    table.refresh()
    check_gc_enabled(table)
    referenced = referenced_paths(table.io, table.metadata, table.metadata_location, batch)
    by_path = {normalizer.split(uri)[2]: uri for uri in batch}
    for path in sorted(referenced & by_path.keys()):
        log.warning("keeping %s: the table references it", by_path[path])
        counts.referenced += 1
        if len(counts.referenced_sample) < SAMPLE_SIZE:
            counts.referenced_sample.append(by_path[path])
    todo = [uri for path, uri in by_path.items() if path not in referenced]
    for uri, outcome, size in deleter.delete(todo):
        if outcome == "deleted":
            counts.deleted += 1
            counts.deleted_bytes += size
        elif outcome == "younger":
            counts.younger += 1
        elif outcome == "missing":
            counts.missing += 1
        else:
            counts.failed += 1
            if len(counts.failed_sample) < SAMPLE_SIZE:
                counts.failed_sample.append(f"{uri}: {outcome}")


class _Deleter:
    """Deletes files after checking they still exist and are still older than the scan's cutoff."""

    def __init__(self, io: FileIO, older_than_ms: int, dry_run: bool, workers: int) -> None:
        self.io = io
        self.older_than_ms = older_than_ms
        self.dry_run = dry_run
        self.workers = workers

    def _check(self, uri: str) -> tuple[str, str, int]:
        import pyarrow.fs as pafs

        fs, path = filesystem_for(self.io, uri)
        try:
            info = fs.get_file_info(path)
        except OSError as err:
            return uri, f"cannot stat: {err}", 0
        if info.type == pafs.FileType.NotFound:
            return uri, "missing", 0
        mtime_ns = info.mtime_ns
        if mtime_ns is None or mtime_ns // 1_000_000 >= self.older_than_ms:
            return uri, "younger", 0
        return uri, "ok", int(info.size or 0)

    def _delete_one(self, uri: str) -> tuple[str, str, int]:
        uri, state, size = self._check(uri)
        if state != "ok":
            return uri, state, size
        if self.dry_run:
            return uri, "deleted", size
        fs, path = filesystem_for(self.io, uri)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            return uri, "missing", 0
        except OSError as err:
            return uri, f"{type(err).__name__}: {err}", 0
        return uri, "deleted", size

    def delete(self, uris: Sequence[str]) -> Iterator[tuple[str, str, int]]:
        if not uris:
            return
        bulk = bulk_remover(self.io)
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="iceberg-exec-delete") as pool:
            if bulk is None or self.dry_run:
                yield from pool.map(self._delete_one, uris)
                return
            checked = list(pool.map(self._check, uris))
        yield from (c for c in checked if c[1] != "ok")
        ready = [(uri, size) for uri, state, size in checked if state == "ok"]
        try:
            bulk([uri for uri, _ in ready])
        except OSError as err:
            log.warning("bulk delete failed (%s); deleting one by one", err)
            yield from (self._delete_one(uri) for uri, _ in ready)
            return
        yield from ((uri, "deleted", size) for uri, size in ready)
