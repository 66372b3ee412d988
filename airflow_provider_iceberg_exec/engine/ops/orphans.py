"""Orphan files: find the files under a table's location that no metadata references, then delete them.

Spark's ``remove_orphan_files`` split in two steps that exchange a small JSON document, so that millions
of paths never pass through an Airflow XCom:

``scan_orphan_files`` -> the orphan list (one path per line) in a staging location and a result document
(``iceberg-exec/orphan-scan-result@1``) -> ``delete_orphan_files`` -> ``iceberg-exec/orphan-delete-result@1``.

:func:`remove_orphan_files` runs both, like the Spark procedure (``dry_run`` scans only).

The scan, in bounded memory:

1. refuses a table with ``gc.enabled=false`` and, unless forced, an ``older_than`` less than 24 hours ago;
2. lists the table location (and ``write.data.path`` / ``write.metadata.path`` when they lie outside it)
   directory by directory through the table's file system, skipping hidden names as Java does, into a
   staged Parquet file;
3. then refreshes the table and stages every file its metadata references
   (:mod:`airflow_provider_iceberg_exec.engine.meta.reachable`) into another;
4. anti-joins the two in DataFusion with a sort-merge join, which spills under the memory limit;
5. aborts when a referenced file is missing from the listing (the listing is partial) or when a reference
   category comes back empty for a table with snapshots; applies ``prefix_mismatch_mode``;
6. streams the orphans into the list file.

The delete step never trusts the list: before each batch it refreshes the table and proves every candidate
unreferenced by the complete reference set of the current metadata (:mod:`.cleanup`), refuses paths outside
the table's locations, and re-applies the age fence to each file right before deleting it.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import referenced_paths, table_roots, under_roots
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    ORPHAN_DELETE_RESULT,
    ORPHAN_SCAN_RESULT,
    check_envelope,
    envelope,
)
from airflow_provider_iceberg_exec.engine.documents import check_orphan_scan_result
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    DataFileCodecError,
    IcebergExecError,
)
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR
from airflow_provider_iceberg_exec.engine.io.session import datafusion_errors, track_resources
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    ROWS_PER_ROW_GROUP,
    PathNormalizer,
    ReferenceStager,
    RefKind,
    bucket_count,
    bucket_filter,
    bulk_remover,
    filesystem_for,
    gc_enabled,
    parse_older_than,
    path_hash,
    stage_table_references,
    staged_session,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs
    from datafusion import SessionContext
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table

__all__ = [
    "DEFAULT_ORPHAN_AGE",
    "IncompleteListingError",
    "PrefixMismatchMode",
    "delete_orphan_files",
    "read_orphan_scan_result",
    "remove_orphan_files",
    "scan_orphan_files",
]

log = logging.getLogger(__name__)

#: Java's default ``older_than``: files younger than this are never orphans
DEFAULT_ORPHAN_AGE = datetime.timedelta(days=3)
#: the procedure's floor on ``older_than`` (``RemoveOrphanFilesProcedure.validateInterval``)
MIN_ORPHAN_AGE = datetime.timedelta(hours=24)
#: Java's ``DELETE_GROUP_SIZE``: paths deleted per batch, between two checks of the metadata
DEFAULT_DELETE_BATCH_SIZE = 100_000
DEFAULT_MAX_CONCURRENT_DELETES = 8
SAMPLE_SIZE = 20

_GC_MESSAGE = "Cannot delete orphan files: GC is disabled (deleting files may corrupt other tables)"
_INTERVAL_MESSAGE = (
    "Cannot remove orphan files with an interval less than 24 hours. Executing this procedure with a short "
    "interval may corrupt the table if other operations are happening at the same time. If you are "
    "absolutely confident that no concurrent operations will be affected by removing orphan files with such "
    "a short interval, pass force=True (--force)."
)
_CONFLICT_MESSAGE = (
    "Unable to determine whether certain files are orphan. Metadata references files that match "
    "listed/provided files except for authority/scheme. Please, inspect the conflicting authorities/schemes "
    "and provide which of them are equal by further configuring the action via equal_schemes and "
    "equal_authorities. Set the prefix mismatch mode to 'IGNORE' to ignore remaining locations with "
    "conflicting authorities/schemes or to 'DELETE' iff you are ABSOLUTELY confident that remaining "
    "conflicting authorities/schemes are different. It will be impossible to recover deleted files. "
    "Conflicting authorities/schemes: {conflicts}."
)
#: bytes one row of a join's build side takes in DataFusion's accounting (an 8-byte key, sometimes a short
#: scheme and authority; measured 140-250 bytes with the hash table and the build batches)
_BUILD_ROW_BYTES = 256
_NEVER_OLD_MS = 2**62
#: referenced files missing from the listing that are checked one by one before giving up
_MAX_MISSING_PROBES = 1000
#: keys of missing references looked up (hidden ones among them are skipped) before giving up
_MAX_MISSING_KEYS = 10_000


class IncompleteListingError(IcebergExecError):
    """Raised when the listing cannot be complete, so that deleting what it calls orphans is unsafe.

    A referenced file under the scanned locations is missing from the listing, or a category of references
    (data, manifests, manifest lists, metadata) is empty for a table with snapshots. Nothing is deleted; a
    retry may succeed when the listing was cut short by the store.
    """


class PrefixMismatchMode(str, enum.Enum):
    """What to do with a listed file whose path is referenced under another scheme or authority."""

    ERROR = "ERROR"
    IGNORE = "IGNORE"
    DELETE = "DELETE"

    @classmethod
    def parse(cls, value: str | PrefixMismatchMode) -> PrefixMismatchMode:
        """Parse a mode, case-insensitively.

        >>> PrefixMismatchMode.parse("delete")
        <PrefixMismatchMode.DELETE: 'DELETE'>
        """
        try:
            return cls(str(value.value if isinstance(value, PrefixMismatchMode) else value).strip().upper())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(f"invalid prefix_mismatch_mode {value!r}; use one of {valid}") from None


# -- scan -----------------------------------------------------------------------------------------------


def scan_orphan_files(
    table: Table,
    *,
    older_than: str | int | float | datetime.datetime | None = None,
    location: str | None = None,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
    prefix_mismatch_mode: str | PrefixMismatchMode = PrefixMismatchMode.ERROR,
    orphan_list_uri: str | None = None,
    force: bool = False,
    limits: ResourceLimits | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Find the orphan files of ``table`` and write their list; delete nothing (Spark's ``dry_run``).

    :param older_than: only files modified before this are orphans: a duration ago (``"3d"``), a
        timestamp, epoch milliseconds or a datetime; default 3 days ago.
    :param location: the location to list instead of the table's (Java's ``location``).
    :param equal_schemes: schemes to treat as equal, added to ``{"s3a,s3n": "s3"}``.
    :param equal_authorities: authorities to treat as equal.
    :param prefix_mismatch_mode: ``ERROR`` (default), ``IGNORE`` or ``DELETE``, as in Java.
    :param orphan_list_uri: where to write the orphan list (default:
        ``<table location>/metadata/iceberg-exec-staging/orphans-<uuid>.txt``); the result document is
        written beside it with the suffix ``.json``.
    :param force: allow ``older_than`` less than 24 hours ago.
    :param limits: the memory limit and spill directory of the anti-join.
    :param now: the current time (for tests).
    :returns: ``iceberg-exec/orphan-scan-result@1`` with ``orphan_file_count``, ``orphan_bytes_count``, an
        ``orphan_sample`` of at most 20 paths and ``orphan_list_uri``.
    :raises ConfigurationError: for ``gc.enabled=false``, a too recent ``older_than``, a bad mode, or a
        prefix mismatch under ``ERROR``.
    :raises IncompleteListingError: when the listing cannot be complete.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.

    >>> # scan_orphan_files(table, older_than="7d", limits=ResourceLimits(memory_limit_bytes=256 << 20))
    """
    limits = limits or ResourceLimits()
    now = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    mode = PrefixMismatchMode.parse(prefix_mismatch_mode)
    normalizer = PathNormalizer.of(equal_schemes, equal_authorities)
    table.refresh()
    if not gc_enabled(table.metadata.properties):
        raise ConfigurationError(_GC_MESSAGE)
    cutoff = parse_older_than(older_than, now) if older_than is not None else now - DEFAULT_ORPHAN_AGE
    if now - cutoff < MIN_ORPHAN_AGE and not force:
        raise ConfigurationError(_INTERVAL_MESSAGE)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    locations = _scan_locations(table, location, normalizer)
    name = _table_name(table)
    list_uri = orphan_list_uri or _default_list_uri(table.location())
    result_uri = _result_uri(list_uri)
    with track_resources(limits) as (spill_dir, stats):
        listing_started_ms = int(time.time() * 1000)
        hidden_prefixes = _hidden_partition_prefixes(table)
        listing = _stage_listing(
            table.io,
            locations,
            normalizer,
            hidden_prefixes,
            os.path.join(spill_dir, "listed.parquet"),
            cutoff_ms,
        )
        # References are read after the listing, so that a file committed meanwhile is referenced.
        table.refresh()
        if not gc_enabled(table.metadata.properties):
            raise ConfigurationError(_GC_MESSAGE)
        metadata = table.metadata
        refs_path = os.path.join(spill_dir, "referenced.parquet")
        with ReferenceStager(refs_path, normalizer) as stager:
            stage_table_references(stager, table.io, metadata, metadata_location=table.metadata_location)
        _check_categories(stager.counts, len(metadata.snapshots), name)
        buckets = bucket_count(max(listing.file_count, stager.total), _BUILD_ROW_BYTES, limits)
        with datafusion_errors():
            ctx = staged_session(limits, spill_dir, {"listed": listing.path, "refs": refs_path})
            _check_listing_complete(
                ctx, table.io, locations, hidden_prefixes, listing, listing_started_ms, name, buckets
            )
            mismatched = _prefix_mismatches(ctx, cutoff_ms, mode, buckets)
            with _OrphanListWriter(table.io, list_uri) as out:
                out.write(_stream(ctx, _bucketed(_ORPHANS_SQL, buckets, cutoff=cutoff_ms)))
                if mode is PrefixMismatchMode.DELETE:
                    out.write(_stream(ctx, _bucketed(_MISMATCHED_SQL, buckets, cutoff=cutoff_ms)))
    doc = envelope(
        ORPHAN_SCAN_RESULT,
        {
            "table": name,
            "table_uuid": str(metadata.table_uuid),
            "metadata_location": table.metadata_location,
            "snapshot_count": len(metadata.snapshots),
            "locations": [loc.uri for loc in locations],
            "older_than": cutoff.isoformat(),
            "older_than_ms": cutoff_ms,
            "prefix_mismatch_mode": mode.value,
            **normalizer.to_json(),
            "listed_file_count": listing.file_count,
            "candidate_file_count": listing.old_count,
            "referenced_file_count": stager.total,
            "prefix_mismatch_file_count": mismatched,
            "orphan_file_count": out.count,
            "orphan_bytes_count": out.bytes,
            "orphan_sample": out.sample,
            "orphan_list_uri": list_uri,
            "result_uri": result_uri,
            "dry_run": True,
            "peak_rss_bytes": stats.peak_rss_bytes,
            "spilled_bytes": stats.spilled_bytes,
            "elapsed_seconds": round(stats.elapsed_seconds, 3),
        },
    )
    _write_text(table.io, result_uri, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    log.info(
        "%s: %d orphan file(s), %d bytes, of %d listed under %s (older than %s); list at %s; peak RSS %d MiB",
        name,
        out.count,
        out.bytes,
        listing.file_count,
        ", ".join(doc["locations"]),
        doc["older_than"],
        list_uri,
        stats.peak_rss_bytes >> 20,
    )
    return doc


def remove_orphan_files(
    table: Table,
    *,
    dry_run: bool = False,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    **scan_options: Any,
) -> dict[str, Any]:
    """Spark's ``remove_orphan_files``: scan, then delete the orphans unless ``dry_run``.

    Takes the options of :func:`scan_orphan_files`. The deletion is :func:`delete_orphan_files`, with its
    re-check of the metadata; its result is under ``"delete"``.

    >>> # remove_orphan_files(table, older_than="7d", dry_run=True)
    """
    doc = scan_orphan_files(table, **scan_options)
    if dry_run:
        return doc
    doc["delete"] = delete_orphan_files(
        table, doc, max_concurrent_deletes=max_concurrent_deletes, force=bool(scan_options.get("force"))
    )
    doc["dry_run"] = False
    return doc


# -- delete ---------------------------------------------------------------------------------------------


def read_orphan_scan_result(io: FileIO, uri: str) -> dict[str, Any]:
    """Read a scan result document from its JSON file, or from its orphan list (the ``.json`` beside it).

    :raises ConfigurationError: when neither can be read.
    :raises DataFileCodecError: when the document is not a scan result.

    >>> # read_orphan_scan_result(table.io, "s3://b/t/metadata/iceberg-exec-staging/orphans-1.txt")
    """
    target = uri if uri.endswith(".json") else _result_uri(uri)
    try:
        with io.new_input(target).open() as stream:
            data = stream.read()
    except (FileNotFoundError, OSError) as err:
        raise ConfigurationError(
            f"cannot read the scan result {target}: {err}; pass the result JSON of orphan-scan"
        ) from err
    try:
        doc = json.loads(data)
    except ValueError as err:
        raise DataFileCodecError(f"{target} is not JSON: {err}") from err
    return dict(check_envelope(doc, ORPHAN_SCAN_RESULT))


def delete_orphan_files(
    table: Table,
    scan_result: Mapping[str, Any],
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_DELETE_BATCH_SIZE,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    force: bool = False,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
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

    >>> # delete_orphan_files(table, read_orphan_scan_result(table.io, uri), dry_run=True)
    """
    doc = check_orphan_scan_result(scan_result)
    if batch_size < 1 or max_concurrent_deletes < 1:
        raise ConfigurationError("batch_size and max_concurrent_deletes must be >= 1")
    name = _table_name(table)
    table.refresh()
    if doc["table"] != name:
        raise ConfigurationError(f"the scan result is for table {doc['table']!r}, not {name!r}")
    if doc.get("table_uuid") not in (None, str(table.metadata.table_uuid)):
        raise ConfigurationError(
            f"the scan result is for another table named {name!r} (uuid {doc['table_uuid']}, now "
            f"{table.metadata.table_uuid}): the table was dropped and created again; scan it again"
        )
    if not gc_enabled(table.metadata.properties):
        raise ConfigurationError(_GC_MESSAGE)
    normalizer = PathNormalizer.of(doc.get("equal_schemes"), doc.get("equal_authorities"))
    list_uri = str(doc["orphan_list_uri"])
    # Under the scan's locations (what was listed) and under the table's own current locations.
    scanned = [normalizer.split(str(loc))[2].rstrip("/") + "/" for loc in doc["locations"]]
    roots = table_roots(table.metadata)
    for uri in _read_lines(table.io, list_uri):
        if not (under_roots(uri, scanned) and under_roots(uri, roots)):
            raise ConfigurationError(
                f"{uri} in {list_uri} is outside the scanned locations {doc['locations']} or the locations "
                f"of {name}; nothing deleted"
            )
    now_ms = int((now or datetime.datetime.now(datetime.timezone.utc)).timestamp() * 1000)
    fence_ms = now_ms - int(MIN_ORPHAN_AGE.total_seconds() * 1000)
    cutoff_ms = int(doc["older_than_ms"]) if force else min(int(doc["older_than_ms"]), fence_ms)
    if cutoff_ms != int(doc["older_than_ms"]):
        log.warning(
            "%s: the scan's older_than is less than 24 hours ago; files modified in the last 24 hours are "
            "kept (pass force to accept it)",
            name,
        )
    deleter = _Deleter(table.io, cutoff_ms, dry_run, max_concurrent_deletes)
    counts = _DeleteCounts()
    started = time.monotonic()
    batch: list[str] = []
    for uri in _read_lines(table.io, list_uri):
        batch.append(uri)
        if len(batch) >= batch_size:
            _delete_batch(table, batch, deleter, counts, normalizer)
            batch = []
    if batch:
        _delete_batch(table, batch, deleter, counts, normalizer)
    result = envelope(
        ORPHAN_DELETE_RESULT,
        {
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
        },
    )
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
    if not gc_enabled(table.metadata.properties):
        raise ConfigurationError(_GC_MESSAGE)
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


# -- listing --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Location:
    uri: str  # as the user or the table wrote it, without a trailing slash
    path: str  # normalised path, without a trailing slash


def _scan_locations(table: Table, location: str | None, normalizer: PathNormalizer) -> list[_Location]:
    if location is not None and not location.strip():
        raise ConfigurationError("location must not be empty")
    if location:
        candidates = [location.strip()]
    else:
        properties = table.metadata.properties
        candidates = [table.location()]
        candidates += [properties[k] for k in ("write.data.path", "write.metadata.path") if properties.get(k)]
    chosen: list[tuple[tuple[str, str, str], _Location]] = []
    for uri in candidates:
        scheme, authority, path = normalizer.split(uri)
        path = path.rstrip("/")
        if not path:
            raise ConfigurationError(f"refusing to list the root of {uri!r}")
        chosen.append(((scheme, authority, path + "/"), _Location(uri.rstrip("/"), path)))
    # A location under another one (same scheme and authority) is listed with it; the order is kept.
    kept: list[_Location] = []
    for index, (key, loc) in enumerate(chosen):
        covered = any(
            key[:2] == other[:2] and key[2].startswith(other[2]) and (other[2] != key[2] or j < index)
            for j, (other, _) in enumerate(chosen)
            if j != index
        )
        if not covered:
            kept.append(loc)
    return kept


def _hidden_partition_prefixes(table: Table) -> tuple[str, ...]:
    """``field=`` of the partition fields named ``_...`` or ``.…`` (Java's partition-aware hidden filter)."""
    names = {f.name for spec in table.metadata.specs().values() for f in spec.fields}
    return tuple(sorted(f"{n}=" for n in names if n.startswith(("_", "."))))


def _is_hidden(name: str, partition_prefixes: tuple[str, ...]) -> bool:
    return name.startswith(("_", ".")) and not name.startswith(partition_prefixes)


class _ListingStager:
    """Stream listed files into a local Parquet file."""

    def __init__(self, path: str, cutoff_ms: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.cutoff_ms = cutoff_ms
        self.schema = pa.schema(
            [
                pa.field("uri", pa.string(), nullable=False),
                pa.field("scheme", pa.string(), nullable=False),
                pa.field("authority", pa.string(), nullable=False),
                pa.field("path", pa.string(), nullable=False),
                pa.field("h", pa.int64(), nullable=False),
                pa.field("size", pa.int64(), nullable=False),
                pa.field("mtime_ms", pa.int64(), nullable=False),
            ]
        )
        self.writer = pq.ParquetWriter(path, self.schema, compression="lz4")
        self.columns: dict[str, list[Any]] = {name: [] for name in self.schema.names}
        self.count = 0
        self.old = 0

    def add(self, uri: str, scheme: str, authority: str, path: str, size: int, mtime_ms: int) -> None:
        columns = self.columns
        columns["uri"].append(uri)
        columns["scheme"].append(scheme)
        columns["authority"].append(authority)
        columns["path"].append(path)
        columns["h"].append(path_hash(path))
        columns["size"].append(size)
        columns["mtime_ms"].append(mtime_ms)
        self.count += 1
        self.old += mtime_ms < self.cutoff_ms
        if len(columns["uri"]) >= ROWS_PER_ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.columns["uri"]:
            batch: pa.RecordBatch = pa.record_batch(
                [self.columns[n] for n in self.schema.names], schema=self.schema
            )
            self.writer.write_batch(batch)
            for values in self.columns.values():
                values.clear()

    def close(self) -> None:
        self.flush()
        self.writer.close()


@dataclass(frozen=True)
class _StagedListing:
    path: str
    file_count: int
    old_count: int


def _stage_listing(
    io: FileIO,
    locations: Sequence[_Location],
    normalizer: PathNormalizer,
    partition_prefixes: tuple[str, ...],
    path: str,
    cutoff_ms: int,
) -> _StagedListing:
    stager = _ListingStager(path, cutoff_ms)
    try:
        for location in locations:
            fs, base = filesystem_for(io, location.uri)
            base = base.rstrip("/") or "/"
            before = stager.count
            # Every listed file shares the location's scheme and authority; its path is the location's
            # (normalised) plus what the listing adds, which has no repeated slashes.
            scheme, authority, _path = normalizer.split(location.uri)
            start = len(base)
            for fs_path, size, mtime_ms in _walk(fs, base, partition_prefixes):
                rel = fs_path[start:]
                stager.add(location.uri + rel, scheme, authority, location.path + rel, size, mtime_ms)
            log.info("listed %d file(s) under %s", stager.count - before, location.uri)
    finally:
        stager.close()
    return _StagedListing(path, stager.count, stager.old)


def _walk(
    fs: pafs.FileSystem, base: str, partition_prefixes: tuple[str, ...]
) -> Iterator[tuple[str, int, int]]:
    """Yield ``(path, size, mtime_ms)`` of every visible file under ``base``, one directory at a time.

    On a local file system ``os.scandir`` streams each directory; elsewhere each directory is listed with
    one non-recursive ``get_file_info``, so memory follows the largest directory, not the tree. Hidden
    names are never entered.
    """
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        yield from _walk_local(base, partition_prefixes)
        return
    stack = [base]
    while stack:
        directory = stack.pop()
        selector = pafs.FileSelector(directory, recursive=False, allow_not_found=True)
        for info in fs.get_file_info(selector):
            if _is_hidden(info.base_name, partition_prefixes):
                continue
            if info.type == pafs.FileType.Directory:
                stack.append(info.path)
            elif info.type == pafs.FileType.File:
                mtime_ns = info.mtime_ns
                yield (
                    info.path,
                    int(info.size or 0),
                    _NEVER_OLD_MS if mtime_ns is None else mtime_ns // 1_000_000,
                )


def _walk_local(base: str, partition_prefixes: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    stack = [base]
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except FileNotFoundError:
            continue
        with entries:
            for entry in entries:
                if _is_hidden(entry.name, partition_prefixes):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file():
                        continue
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # removed while listed (a failed commit's cleanup, say): not an orphan
                yield entry.path, st.st_size, st.st_mtime_ns // 1_000_000


# -- the joins ------------------------------------------------------------------------------------------

# Every join matches on ``h``, the 8-byte hash of the normalised path, with the side holding only keys (and
# short schemes) as the hash join's build side, so memory follows the key count, not the paths. ``{bf}``
# selects one hash bucket (reachable.bucket_filter) when the keys of one query would not fit.
_OLD_LISTED = "SELECT h, uri, size, scheme, authority FROM listed WHERE mtime_ms < {cutoff} AND {bf}"
_ORPHANS_SQL = (
    "SELECT l.uri, l.size FROM (SELECT h FROM refs WHERE {bf}) r "
    "RIGHT ANTI JOIN (" + _OLD_LISTED + ") l ON r.h = l.h"
)
# Old listed files whose path is referenced, but only under another scheme or authority (reference §3.3).
_MISMATCHED = (
    "SELECT m.h, m.uri, m.size, m.scheme, m.authority "
    "FROM (SELECT h, scheme, authority FROM refs WHERE {bf}) r RIGHT ANTI JOIN ("
    "SELECT l.h, l.uri, l.size, l.scheme, l.authority FROM (SELECT h FROM refs WHERE {bf}) p "
    "RIGHT SEMI JOIN (" + _OLD_LISTED + ") l ON p.h = l.h) m ON r.h = m.h "
    "AND (r.scheme = '' OR r.scheme = m.scheme) AND (r.authority = '' OR r.authority = m.authority)"
)
_MISMATCHED_SQL = "SELECT uri, size FROM (" + _MISMATCHED + ")"
_CONFLICTS_SQL = (
    "SELECT DISTINCT r.scheme AS valid_scheme, x.scheme AS actual_scheme, r.authority AS valid_authority, "
    "x.authority AS actual_authority FROM (SELECT h, scheme, authority FROM refs WHERE {bf}) r "
    "JOIN (" + _MISMATCHED + ") x ON r.h = x.h LIMIT 100"
)
# Keys of referenced files under the scanned locations that the listing lacks; only keys cross the join.
_MISSING_SQL = (
    "SELECT DISTINCT r.h FROM (SELECT h FROM listed WHERE {bf}) l RIGHT ANTI JOIN "
    "(SELECT h FROM refs WHERE kind <> '" + RefKind.VERSION_HINT.value + "' AND ({under}) AND {bf}) r "
    "ON l.h = r.h"
)


def _bucketed(template: str, buckets: int, **values: Any) -> Iterator[str]:
    """``template`` once per hash bucket."""
    for bucket in range(buckets):
        yield template.format(bf=bucket_filter("h", bucket, buckets), **values)


def _stream(ctx: SessionContext, queries: Iterable[str]) -> Iterator[pa.RecordBatch]:
    for query in queries:
        for batch in ctx.sql(query).execute_stream():
            arrow: pa.RecordBatch = batch.to_pyarrow()
            if arrow.num_rows:
                yield arrow


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _check_categories(counts: Mapping[RefKind, int], snapshot_count: int, table: str) -> None:
    if snapshot_count == 0:
        return
    categories = {
        "data": counts[RefKind.DATA] + counts[RefKind.POSITION_DELETES] + counts[RefKind.EQUALITY_DELETES],
        "manifest": counts[RefKind.MANIFEST],
        "manifest-list": counts[RefKind.MANIFEST_LIST],
        "metadata": counts[RefKind.METADATA],
    }
    empty = [name for name, count in categories.items() if count == 0]
    if empty:
        raise IncompleteListingError(
            f"{table} has {snapshot_count} snapshot(s) but no {', '.join(empty)} reference(s) were read; "
            "the reference set looks incomplete, so no file is called an orphan"
        )


def _check_listing_complete(
    ctx: SessionContext,
    io: FileIO,
    locations: Sequence[_Location],
    partition_prefixes: tuple[str, ...],
    listing: _StagedListing,
    listing_started_ms: int,
    table: str,
    buckets: int,
) -> None:
    """Abort when a referenced file under the scanned locations is missing from the listing.

    A file written after the listing began (a concurrent commit) is expected to be missing; one that exists
    and is older means the listing was cut short. Files under hidden directories are never listed.
    """
    import pyarrow.fs as pafs

    under = " OR ".join(f"starts_with(path, {_sql_text(loc.path + '/')})" for loc in locations)
    keys: list[int] = []
    for arrow in _stream(ctx, _bucketed(_MISSING_SQL, buckets, under=under)):
        keys.extend(arrow.column(0).to_pylist()[: _MAX_MISSING_KEYS + 1 - len(keys)])
        if len(keys) > _MAX_MISSING_KEYS:
            break
    if not keys:
        return
    roots = sorted((loc.path + "/" for loc in locations), key=len, reverse=True)
    missing: list[str] = []
    probes = 0
    for start in range(0, min(len(keys), _MAX_MISSING_KEYS), 1000):
        chunk = ", ".join(str(k) for k in keys[start : start + 1000])
        for arrow in _stream(ctx, [f"SELECT DISTINCT uri, path FROM refs WHERE h IN ({chunk})"]):
            for uri, path in zip(arrow.column(0).to_pylist(), arrow.column(1).to_pylist(), strict=True):
                root = next((r for r in roots if path.startswith(r)), None)
                if root is None or any(
                    _is_hidden(part, partition_prefixes) for part in path[len(root) :].split("/")
                ):
                    continue  # another file with the same key, or one under a hidden directory
                probes += 1
                if probes > _MAX_MISSING_PROBES:
                    break
                fs, fs_path = filesystem_for(io, uri)
                info = fs.get_file_info(fs_path)
                if (
                    info.type != pafs.FileType.NotFound
                    and (info.mtime_ns or 0) // 1_000_000 >= listing_started_ms
                ):
                    continue  # written after the listing began
                missing.append(uri)
    if len(keys) > _MAX_MISSING_KEYS and not missing:
        raise IncompleteListingError(
            f"more than {_MAX_MISSING_KEYS} files that {table} references are missing from the listing of "
            f"{listing.file_count} file(s); the listing looks partial, so no file is called an orphan"
        )
    if missing:
        sample = ", ".join(missing[:5])
        more = "+" if probes > _MAX_MISSING_PROBES or len(keys) > _MAX_MISSING_KEYS else ""
        raise IncompleteListingError(
            f"{len(missing)}{more} file(s) that {table} references are "
            f"missing from the listing of {listing.file_count} file(s), e.g. {sample}; the listing looks "
            "partial (or the files are gone), so no file is called an orphan"
        )


def _prefix_mismatches(ctx: SessionContext, cutoff_ms: int, mode: PrefixMismatchMode, buckets: int) -> int:
    """Count listed files referenced only under another scheme or authority; raise under ERROR."""
    count = sum(int(b.num_rows) for b in _stream(ctx, _bucketed(_MISMATCHED_SQL, buckets, cutoff=cutoff_ms)))
    if count and mode is PrefixMismatchMode.ERROR:
        conflicts: set[tuple[str, str]] = set()
        for batch in _stream(ctx, _bucketed(_CONFLICTS_SQL, buckets, cutoff=cutoff_ms)):
            for row in batch.to_pylist():
                if row["valid_scheme"] and row["valid_scheme"] != row["actual_scheme"]:
                    conflicts.add((row["valid_scheme"], row["actual_scheme"]))
                if row["valid_authority"] and row["valid_authority"] != row["actual_authority"]:
                    conflicts.add((row["valid_authority"], row["actual_authority"]))
        text = ", ".join(f"({valid}, {actual})" for valid, actual in sorted(conflicts))
        raise ConfigurationError(_CONFLICT_MESSAGE.format(conflicts=f"[{text}]"))
    if count:
        log.warning(
            "%d listed file(s) are referenced under another scheme or authority; %s",
            count,
            "treated as orphans (DELETE)" if mode is PrefixMismatchMode.DELETE else "ignored (IGNORE)",
        )
    return count


# -- output ---------------------------------------------------------------------------------------------


class _OrphanListWriter:
    """Write orphan paths, one per line, through the table's FileIO; count them, their bytes and a sample."""

    def __init__(self, io: FileIO, uri: str) -> None:
        self.io = io
        self.uri = uri
        self.count = 0
        self.bytes = 0
        self.sample: list[str] = []
        self._stream: Any = None

    def __enter__(self) -> _OrphanListWriter:
        self._stream = self.io.new_output(self.uri).create(overwrite=True)
        return self

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        for arrow in batches:
            uris = arrow.column(0).to_pylist()
            self._stream.write(("\n".join(uris) + "\n").encode("utf-8"))
            self.count += len(uris)
            self.bytes += sum(arrow.column(1).to_pylist())
            if len(self.sample) < SAMPLE_SIZE:
                self.sample.extend(uris[: SAMPLE_SIZE - len(self.sample)])

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()
        if exc_type is not None:  # a partial list must not be mistaken for a result
            with contextlib.suppress(OSError):
                self.io.delete(self.uri)


def _default_list_uri(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/{STAGING_DIR}/orphans-{uuid.uuid4().hex}.txt"


def _result_uri(list_uri: str) -> str:
    """The result document's location beside an orphan list.

    >>> _result_uri("s3://b/t/metadata/iceberg-exec-staging/orphans-1.txt")
    's3://b/t/metadata/iceberg-exec-staging/orphans-1.json'
    >>> _result_uri("/tmp/orphans")
    '/tmp/orphans.json'
    """
    return (list_uri[: -len(".txt")] if list_uri.endswith(".txt") else list_uri) + ".json"


def _write_text(io: FileIO, uri: str, text: str) -> None:
    with io.new_output(uri).create(overwrite=True) as stream:
        stream.write(text.encode("utf-8"))


def _read_lines(io: FileIO, uri: str, chunk_bytes: int = 1 << 20) -> Iterator[str]:
    """Stream the non-empty lines of a text file."""
    try:
        stream = io.new_input(uri).open()
    except (FileNotFoundError, OSError) as err:
        raise ConfigurationError(f"cannot read the orphan list {uri}: {err}") from err
    with stream:
        rest = b""
        while True:
            chunk = stream.read(chunk_bytes)
            if not chunk:
                break
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.strip():
                    yield line.decode("utf-8").rstrip("\r")
        if rest.strip():
            yield rest.decode("utf-8").rstrip("\r")


def _table_name(table: Table) -> str:
    return ".".join(table.name())
